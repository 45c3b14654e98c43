/*
 * tree_check.c - a full check of the B+ tree's structure, for tests and
 * for an operator who suspects damage.
 *
 * Walks every page reachable from the root and checks: each page's
 * checksum and kind (as it is read; a compressed page is checked and
 * decompressed first, tree_pzcomp.c), keys in strictly increasing order
 * within the bounds its parent's separators set, every leaf at the same
 * depth, the item count, and the space accounting that copy-on-write
 * safety rests on: no page reachable twice, no reachable page (or page of
 * an overflow run) on the free list or waiting to be freed, nothing
 * outside the file.  Pages neither reachable nor free are leaks: counted,
 * not an error (a full disk during a checkpoint may leave some until a
 * rebuild), tests assert there are none.  Cost: a read of every page.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tree_int.h"
#include "kura/lockorder.h"

typedef struct chk {
    btree *bt;
    unsigned char *seen;        /* per page: 1 reachable, 2 free */
    uint64_t items;
    char *err;
    size_t errlen;
} chk;

static int mark(chk *c, uint64_t pg, uint64_t n, unsigned char how, const char *what)
{
    for (uint64_t i = 0; i < n; i++) {
        if (pg + i < 2 || pg + i >= c->bt->npages) {
            snprintf(c->err, c->errlen, "%s names page %llu, outside the file", what,
                     (unsigned long long)(pg + i));
            return KURA_ECORRUPT;
        }
        if (c->seen[pg + i]) {
            snprintf(c->err, c->errlen, "page %llu is %s and also %s", (unsigned long long)(pg + i),
                     c->seen[pg + i] == 1 ? "reachable" : "free", what);
            return KURA_ECORRUPT;
        }
        c->seen[pg + i] = how;
    }
    return KURA_OK;
}

static int visit(chk *c, uint64_t pgno, unsigned lvl, const char *lo, size_t lol,
                 const char *hi, size_t hil)
{
    btree *bt = c->bt;
    bt_page *p;
    int type = lvl + 1 == bt->height ? BT_LEAF : BT_BRANCH;
    int rc = mark(c, pgno, 1, 1, "reachable");
    if (rc)
        return rc;
    if ((rc = do_page_get(bt, pgno, type, &p))) {
        snprintf(c->err, c->errlen, "page %llu at level %u: %s", (unsigned long long)pgno, lvl,
                 kura_strerror(rc));
        return rc;
    }
    unsigned n = pg_n(p->data);
    /* the page is copied: visiting children may evict it */
    unsigned char *d = malloc(bt->psiz);
    if (!d) {
        do_page_unpin(bt, p);
        return KURA_ENOMEM;
    }
    memcpy(d, p->data, bt->psiz);
    do_page_unpin(bt, p);
    const char *prev = lo;
    size_t prevl = lol;
    for (unsigned i = 0; i < n && !rc; i++) {
        const char *k;
        size_t kl;
        pg_cell_key(pg_ccell(d, i), type, &k, &kl);
        bool first_ok = i == 0;     /* a separator may equal the first key */
        if (prev && (first_ok ? bt_keycmp(prev, prevl, k, kl) > 0
                              : bt_keycmp(prev, prevl, k, kl) >= 0)) {
            snprintf(c->err, c->errlen, "page %llu: key %u out of order", (unsigned long long)pgno,
                     i);
            rc = KURA_ECORRUPT;
        }
        if (hi && bt_keycmp(k, kl, hi, hil) >= 0) {
            snprintf(c->err, c->errlen, "page %llu: key %u not below its parent's bound",
                     (unsigned long long)pgno, i);
            rc = KURA_ECORRUPT;
        }
        if (!rc && type == BT_LEAF) {
            bt_cell cell;
            pg_leaf_decode(pg_ccell(d, i), &cell);
            c->items++;
            if (cell.ovf)
                rc = mark(c, cell.ovf_pgno, bt_ovf_pages(bt, cell.ovf_bytes), 1,
                          "an overflow page");
        }
        prev = k;
        prevl = kl;
    }
    if (!rc && type == BT_BRANCH) {
        for (unsigned i = 0; i <= n && !rc; i++) {
            const char *clo = lo, *chi = hi;
            size_t clol = lol, chil = hil;
            if (i > 0)
                pg_cell_key(pg_ccell(d, i - 1), BT_BRANCH, &clo, &clol);
            if (i < n)
                pg_cell_key(pg_ccell(d, i), BT_BRANCH, &chi, &chil);
            rc = visit(c, pg_child(d, i), lvl + 1, clo, clol, chi, chil);
        }
    }
    free(d);
    return rc;
}

int btree_debug_check(kura_store *s, uint64_t *leaked, char *err, size_t errlen)
{
    btree *bt = (btree *)s;
    chk c = { .bt = bt, .err = err, .errlen = errlen };
    int rc;
    bt_wrlock(bt);
    do_ckpt_wait(bt);           /* its free lists are in its hands until it ends */
    if (!(c.seen = calloc(bt->npages ? bt->npages : 1, 1))) {
        bt_unlock(bt);
        return KURA_ENOMEM;
    }
    snprintf(err, errlen, "ok");
    rc = visit(&c, bt->root, 0, NULL, 0, NULL, 0);
    if (!rc && c.items != bt->items) {
        snprintf(err, errlen, "%llu items in the leaves, %llu counted",
                 (unsigned long long)c.items, (unsigned long long)bt->items);
        rc = KURA_ECORRUPT;
    }
    const bt_vec *lists[3] = { &bt->freev, &bt->pend, &bt->flpages };
    const char *names[3] = { "free", "freed since the checkpoint", "a free-list page" };
    for (int l = 0; l < 3 && !rc; l++)
        for (size_t i = 0; i < lists[l]->n && !rc; i++)
            rc = mark(&c, lists[l]->v[i], 1, 2, names[l]);
    uint64_t leak = 0;
    for (uint64_t pg = 2; pg < bt->npages; pg++)
        leak += !c.seen[pg];
    if (leaked)
        *leaked = leak;
    free(c.seen);
    bt_unlock(bt);
    return rc;
}

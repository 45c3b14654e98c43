/*
 * tree_insert.c - putting a cell into the B+ tree, splitting full pages.
 *
 * The path is touched (copy-on-write) before anything changes, so every
 * page changed here is this checkpoint's own.  A cell that does not fit
 * splits its page: the cells and the new one are gathered in order (from a
 * copy of the page, scr[0]), a split point is chosen, the left part is
 * rebuilt in place and the right part in a new page, and a separator goes
 * into the parent, which may split in turn; a root that splits gets a new
 * root above it (a leaf split at the right edge, where the new cell alone
 * starts the new page, leaves the full page as it is).  The split point balances bytes, except at the tree's
 * right (left) edge, where a cell added past the last (before the first)
 * key starts a page of its own: keys inserted in order then fill pages
 * to the brim instead of to half, as Kyoto Cabinet and LMDB do.
 *
 * Every cell is at most a third of a page's room (tree.c keeps larger
 * values in overflow runs), so a split always leaves both halves fitting.
 */
#include <string.h>

#include "kura/testhooks.h"
#include "tree_int.h"

unsigned bt_split_point(const uint16_t *lens, unsigned n, size_t room, bool branch)
{
    size_t total = 0;
    for (unsigned j = 0; j < n; j++)
        total += lens[j] + 2u;
    unsigned lo = 1, hi = branch ? n - 2 : n - 1, best = lo;
    size_t best_worst = SIZE_MAX, left = 0;
    for (unsigned j = 0; j < lo; j++)
        left += lens[j] + 2u;
    for (unsigned m = lo; m <= hi; m++) {
        size_t right = total - left - (branch ? lens[m] + 2u : 0);
        size_t worst = left > right ? left : right;
        if (worst < best_worst && left <= room && right <= room) {
            best_worst = worst;
            best = m;
        }
        left += lens[m] + 2u;
    }
    return best;
}

/* A full leaf, away from the tree's edges, first shares its cells with a
 * sibling under the same parent that is at most SHARE_FILL full (the left
 * one first): the cells of both and the new one are balanced over the two
 * and the parent's separator replaced (which may split the parent).  Keys
 * inserted in random order then leave leaves about 80% full instead of
 * 70% (a B*-tree's redistribution).  A sibling that cannot be read is
 * passed over.  True if the cell went in so. */
#define SHARE_FILL 0.875

static bool share_insert(btree *bt, bt_path *path, int lvl, unsigned i,
                         const unsigned char *cell, size_t len)
{
    if (lvl == 0 || KURA_TEST_SWITCH(tree_no_share))
        return false;
    bt_page *p = path->pg[lvl], *parent = path->pg[lvl - 1];
    unsigned ci = (unsigned)path->idx[lvl - 1], pn = pg_n(parent->data);
    size_t room = bt->psiz - BT_HDR;
    for (int side = 0; side < 2; side++) {
        if (side == 0 ? ci == 0 : ci >= pn)
            continue;
        unsigned sib_i = side == 0 ? ci - 1 : ci + 1;
        bt_page *sib;
        if (do_page_get(bt, pg_child(parent->data, sib_i), BT_LEAF, &sib) != KURA_OK)
            continue;
        if ((double)(pg_used(sib->data, bt->psiz) - BT_HDR) > SHARE_FILL * (double)room) {
            do_page_unpin(bt, sib);
            continue;
        }
        bt_page *L = side == 0 ? sib : p, *R = side == 0 ? p : sib;
        memcpy(bt->scr[0], L->data, bt->psiz);
        memcpy(bt->scr[1], R->data, bt->psiz);
        /* L's cells, then R's, with the new one at its place in p */
        unsigned cnt = 0, at = (side == 0 ? pg_n(bt->scr[0]) : 0) + i;
        for (int h = 0; h < 2; h++) {
            for (unsigned j = 0; j < pg_n(bt->scr[h]); j++) {
                if (cnt == at) {
                    bt->cptr[cnt] = cell;
                    bt->clen[cnt++] = (uint16_t)len;
                }
                bt->cptr[cnt] = pg_ccell(bt->scr[h], j);
                bt->clen[cnt] = (uint16_t)pg_cell_len(BT_LEAF, bt->cptr[cnt]);
                cnt++;
            }
        }
        if (cnt == at) {
            bt->cptr[cnt] = cell;
            bt->clen[cnt++] = (uint16_t)len;
        }
        /* both halves must fit (large cells may not) */
        unsigned m = bt_split_point(bt->clen, cnt, room, false);
        size_t left = 0, right = 0;
        for (unsigned j = 0; j < cnt; j++)
            *(j < m ? &left : &right) += bt->clen[j] + 2u;
        if (left > room || right > room) {
            do_page_unpin(bt, sib);
            continue;
        }
        do_wpath_drop(bt);      /* the leaves' ranges move */
        pg_set_child(parent->data, sib_i, do_page_touch(bt, &sib));
        L = side == 0 ? sib : p;        /* (sib may be a copy now) */
        R = side == 0 ? p : sib;
        unsigned char sep[BT_BRANCH_FIXED + KURA_KEY_MAX];
        const char *k;
        size_t kl;
        pg_cell_key(bt->cptr[m], BT_LEAF, &k, &kl);
        size_t slen = pg_branch_encode(sep, k, kl, R->pgno);
        pg_build(R->data, bt->psiz, pg_link(bt->scr[1]), bt->cptr + m, bt->clen + m, cnt - m);
        pg_build(L->data, bt->psiz, pg_link(bt->scr[0]), bt->cptr, bt->clen, m);
        do_page_unpin(bt, sib);
        unsigned s = side == 0 ? ci - 1 : ci;
        pg_remove(parent->data, bt->psiz, s);
        atomic_store_explicit(&bt->shares, atomic_load_explicit(&bt->shares,
                              memory_order_relaxed) + 1, memory_order_relaxed);
        do_branch_insert(bt, path, lvl - 1, s, sep, slen);
        return true;
    }
    return false;
}

/* True when every branch above lvl took its last (first) child. */
static bool at_edge(const bt_path *path, int lvl, bool right)
{
    for (int l = 0; l < lvl; l++) {
        if (right ? path->idx[l] != (int)pg_n(path->pg[l]->data) : path->idx[l] != 0)
            return false;
    }
    return true;
}

static void split_insert(btree *bt, bt_path *path, int lvl, unsigned i,
                         const unsigned char *cell, size_t len)
{
    bt_page *p = path->pg[lvl];
    int type = pg_type(p->data);
    bool branch = type == BT_BRANCH;
    unsigned n = pg_n(p->data), cnt = n + 1;
    unsigned char *snap = bt->scr[0];
    size_t room = bt->psiz - BT_HDR;
    bool redge = i == n && at_edge(path, lvl, true) && !KURA_TEST_SWITCH(tree_even_split);
    bool ledge = i == 0 && n >= 1 && at_edge(path, lvl, false) && !KURA_TEST_SWITCH(tree_even_split);
    /* (before the gathering below: it uses the same scratch) */
    if (!branch && !redge && !ledge && share_insert(bt, path, lvl, i, cell, len))
        return;
    do_wpath_drop(bt);          /* a new page, and a new range */

    /* a leaf split at the right edge (keys in order) keeps p as it is:
     * the new cell alone starts the new page */
    bool keep = !branch && redge;
    unsigned m;
    if (keep) {
        bt->cptr[n] = cell;
        bt->clen[n] = (uint16_t)len;
    } else {
        memcpy(snap, p->data, bt->psiz);
        for (unsigned j = 0, k = 0; j < cnt; j++) {
            if (j == i) {
                bt->cptr[j] = cell;
                bt->clen[j] = (uint16_t)len;
            } else {
                bt->cptr[j] = pg_ccell(snap, k++);
                bt->clen[j] = (uint16_t)pg_cell_len(type, bt->cptr[j]);
            }
        }
    }
    if (!branch && redge)
        m = n;
    else if (!branch && ledge)
        m = 1;
    else if (branch && redge && n >= 2)
        m = n - 1;
    else
        m = bt_split_point(bt->clen, cnt, room, branch);

    /* the separator, copied out before the parent's split reuses scr[0] */
    unsigned char sep[BT_BRANCH_FIXED + KURA_KEY_MAX];
    const char *skey;
    size_t sklen;
    pg_cell_key(bt->cptr[m], type, &skey, &sklen);
    uint64_t rlink = branch ? pg_cell_child(bt->cptr[m]) : 0;
    unsigned rfrom = branch ? m + 1 : m;

    bt_page *q = do_page_new(bt, type);
    pg_build(q->data, bt->psiz, rlink, bt->cptr + rfrom, bt->clen + rfrom, cnt - rfrom);
    size_t slen = pg_branch_encode(sep, skey, sklen, q->pgno);
    if (!keep)
        pg_build(p->data, bt->psiz, pg_link(snap), bt->cptr, bt->clen, m);
    do_page_unpin(bt, q);
    atomic_store_explicit(&bt->splits, atomic_load_explicit(&bt->splits, memory_order_relaxed)
                          + 1, memory_order_relaxed);

    if (lvl == 0) {
        bt_page *r = do_page_new(bt, BT_BRANCH);
        const unsigned char *c[1] = { sep };
        uint16_t l[1] = { (uint16_t)slen };
        pg_build(r->data, bt->psiz, p->pgno, c, l, 1);
        bt->root = r->pgno;
        bt->height++;
        do_page_unpin(bt, r);
        return;
    }
    do_branch_insert(bt, path, lvl - 1, (unsigned)path->idx[lvl - 1], sep, slen);
}

void do_branch_insert(btree *bt, bt_path *path, int lvl, unsigned i, const unsigned char *cell,
                      size_t len)
{
    bt_page *p = path->pg[lvl];
    if (!pg_insert(p->data, bt->psiz, i, cell, len, bt->scr[1]))
        split_insert(bt, path, lvl, i, cell, len);
}

void do_leaf_put(btree *bt, bt_path *path, const unsigned char *cell, size_t len)
{
    int lvl = path->depth - 1;
    bt_page *p = path->pg[lvl];
    unsigned i = (unsigned)path->idx[lvl];
    if (path->found)
        pg_remove(p->data, bt->psiz, i);
    if (!pg_insert(p->data, bt->psiz, i, cell, len, bt->scr[1]))
        split_insert(bt, path, lvl, i, cell, len);
}

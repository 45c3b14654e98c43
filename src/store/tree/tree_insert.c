/*
 * tree_insert.c - putting a cell into the B+ tree, splitting full pages.
 *
 * The path is touched (copy-on-write) before anything changes, so every
 * page changed here is this checkpoint's own.  A cell that does not fit
 * splits its page: the cells and the new one are gathered in order (from a
 * copy of the page, scr[0]), a split point is chosen, the left part is
 * rebuilt in place and the right part in a new page, and a separator goes
 * into the parent, which may split in turn; a root that splits gets a new
 * root above it.  The split point balances bytes, except at the tree's
 * right (left) edge, where a cell added past the last (before the first)
 * key starts a page of its own: keys inserted in order then fill pages
 * to the brim instead of to half, as Kyoto Cabinet and LMDB do.
 *
 * Every cell is at most a third of a page's room (tree.c keeps larger
 * values in overflow runs), so a split always leaves both halves fitting.
 */
#include <string.h>

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
    unsigned m;
    if (!branch && i == n && at_edge(path, lvl, true))
        m = n;
    else if (!branch && i == 0 && n >= 1 && at_edge(path, lvl, false))
        m = 1;
    else if (branch && i == n && n >= 2 && at_edge(path, lvl, true))
        m = n - 1;
    else
        m = bt_split_point(bt->clen, cnt, room, branch);

    /* the separator, copied out before the parent's split reuses scr[0] */
    unsigned char sep[BT_BRANCH_FIXED + 256];
    const char *skey;
    size_t sklen;
    pg_cell_key(bt->cptr[m], type, &skey, &sklen);
    uint64_t rlink = branch ? bt_get64(bt->cptr[m] + 1) : 0;
    unsigned rfrom = branch ? m + 1 : m;

    bt_page *q = do_page_new(bt, type);
    pg_build(q->data, bt->psiz, rlink, bt->cptr + rfrom, bt->clen + rfrom, cnt - rfrom);
    size_t slen = pg_branch_encode(sep, skey, sklen, q->pgno);
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

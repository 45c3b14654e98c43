/*
 * tree_delete.c - taking a cell out of the B+ tree, merging and
 * rebalancing pages that fall under a quarter full.
 *
 * After a removal, a page (other than the root) whose cells fill less than
 * a quarter of its room is joined with a sibling under the same parent
 * (the left one if there is one): when the cells of both fit in one page
 * they are merged into the left page, the right one is freed and the
 * separator between them leaves the parent, which is then looked at in
 * turn; otherwise the cells are shared out again between the two and the
 * parent's separator is replaced (which may split the parent).  A root
 * branch left with a single child gives way to that child.
 *
 * Rebalancing runs after the change is in the log (tree.c), so it must not
 * fail: a sibling that cannot be read (I/O error, damage) leaves the page
 * under-full, which is allowed (counted in tree_skipped_rebalances).
 */
#include <string.h>

#include "tree_int.h"

static void count(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static void rebalance(btree *bt, bt_path *path, int lvl)
{
    size_t room = bt->psiz - BT_HDR;
    for (;;) {
        bt_page *p = path->pg[lvl];
        unsigned char *d = p->data;
        int type = pg_type(d);
        bool branch = type == BT_BRANCH;
        unsigned n = pg_n(d);
        if (lvl == 0) {
            if (branch && n == 0 && bt->height > 1) {
                do_wpath_drop(bt);
                bt->root = pg_link(d);
                bt->height--;
                do_page_free(bt, p);
                path->pg[0] = NULL;
            }
            return;
        }
        if (n > 0 && pg_used(d, bt->psiz) - BT_HDR >= room / 4)
            return;
        bt_page *parent = path->pg[lvl - 1];
        unsigned ci = (unsigned)path->idx[lvl - 1], pn = pg_n(parent->data);
        if (pn == 0)
            return;
        unsigned sib_i = ci > 0 ? ci - 1 : ci + 1, s = ci > 0 ? ci - 1 : ci;
        bt_page *sib;
        if (do_page_get(bt, pg_child(parent->data, sib_i), type, &sib) != KURA_OK) {
            count(&bt->skipped_rebalances);
            return;
        }
        do_wpath_drop(bt);      /* a merge or a new separator follows */
        pg_set_child(parent->data, sib_i, do_page_touch(bt, &sib));
        bt_page *L = ci > 0 ? sib : p, *R = ci > 0 ? p : sib;

        /* gather L's cells, the separator (branches), R's cells */
        memcpy(bt->scr[0], L->data, bt->psiz);
        memcpy(bt->scr[1], R->data, bt->psiz);
        unsigned cnt = 0;
        for (unsigned j = 0; j < pg_n(bt->scr[0]); j++, cnt++) {
            bt->cptr[cnt] = pg_ccell(bt->scr[0], j);
            bt->clen[cnt] = (uint16_t)pg_cell_len(type, bt->cptr[cnt]);
        }
        unsigned char sepc[BT_BRANCH_FIXED + KURA_KEY_MAX];
        if (branch) {
            const char *k;
            size_t kl;
            pg_cell_key(pg_ccell(parent->data, s), BT_BRANCH, &k, &kl);
            bt->cptr[cnt] = sepc;
            bt->clen[cnt++] = (uint16_t)pg_branch_encode(sepc, k, kl, pg_link(bt->scr[1]));
        }
        for (unsigned j = 0; j < pg_n(bt->scr[1]); j++, cnt++) {
            bt->cptr[cnt] = pg_ccell(bt->scr[1], j);
            bt->clen[cnt] = (uint16_t)pg_cell_len(type, bt->cptr[cnt]);
        }
        size_t total = 0;
        for (unsigned j = 0; j < cnt; j++)
            total += bt->clen[j] + 2u;

        if (total <= room) {
            pg_build(L->data, bt->psiz, pg_link(bt->scr[0]), bt->cptr, bt->clen, cnt);
            if (R == p) {
                do_page_unpin(bt, sib);
                path->pg[lvl] = NULL;   /* freed below: the path's pin goes with it */
            }
            do_page_free(bt, R);
            pg_remove(parent->data, bt->psiz, s);
            count(&bt->merges);
            lvl--;
            continue;
        }
        unsigned m = bt_split_point(bt->clen, cnt, room, branch);
        unsigned char sep[BT_BRANCH_FIXED + KURA_KEY_MAX];
        const char *k;
        size_t kl;
        pg_cell_key(bt->cptr[m], type, &k, &kl);
        size_t slen = pg_branch_encode(sep, k, kl, R->pgno);
        unsigned rfrom = branch ? m + 1 : m;
        uint64_t rlink = branch ? pg_cell_child(bt->cptr[m]) : 0;
        pg_build(R->data, bt->psiz, rlink, bt->cptr + rfrom, bt->clen + rfrom, cnt - rfrom);
        pg_build(L->data, bt->psiz, pg_link(bt->scr[0]), bt->cptr, bt->clen, m);
        do_page_unpin(bt, sib);
        pg_remove(parent->data, bt->psiz, s);
        do_branch_insert(bt, path, lvl - 1, s, sep, slen);
        count(&bt->redistributions);
        return;
    }
}

void do_leaf_remove(btree *bt, bt_path *path)
{
    int lvl = path->depth - 1;
    pg_remove(path->pg[lvl]->data, bt->psiz, (unsigned)path->idx[lvl]);
    rebalance(bt, path, lvl);
}

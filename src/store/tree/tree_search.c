/*
 * tree_search.c - the way down the B+ tree, and along its leaves.
 *
 * A path holds every page from the root to a leaf, pinned, with the child
 * taken at each branch and the lower bound of the key in the leaf.  The
 * tree keeps no sibling links (a copy-on-write tree cannot: moving a leaf
 * would change its neighbours too), so the next leaf is found through the
 * path: up to the first branch with a child to the right, then down its
 * leftmost side.  Every page is fetched with the type its level calls
 * for, so a pointer into the wrong kind of page is reported as damage.
 * Descent and the cursor run with the tree lock shared (readers) or
 * exclusive (changes, which then touch the path).
 */
#include "tree_int.h"

void do_path_release(btree *bt, bt_path *path)
{
    if (path->depth > 0)
        do_pages_unpin(bt, path->pg, path->depth);
    path->depth = 0;
}

static int level_type(const btree *bt, int lvl)
{
    return lvl == (int)bt->height - 1 ? BT_LEAF : BT_BRANCH;
}

/* Descends from path level lvl's page `pgno` to the leaf, along the child
 * chosen for key (NULL: the leftmost). */
static int do_down(btree *bt, uint64_t pgno, int lvl, const char *key, size_t klen,
                   bt_path *path)
{
    for (;; lvl++) {
        bt_page *p;
        if (lvl >= BT_MAX_DEPTH) {
            bt_count_error(bt, KURA_ECORRUPT, pgno, "a tree deeper than possible");
            return KURA_ECORRUPT;
        }
        int rc = do_page_get(bt, pgno, level_type(bt, lvl), &p);
        if (rc)
            return rc;
        path->pg[lvl] = p;
        path->depth = lvl + 1;
        bool found = false;
        unsigned i = key ? pg_search(p->data, key, klen, &found) : 0;
        if (pg_type(p->data) == BT_LEAF) {
            path->idx[lvl] = (int)i;
            path->found = found;
            return KURA_OK;
        }
        if (found)
            i++;
        path->idx[lvl] = (int)i;
        pgno = pg_child(p->data, i);
    }
}

int do_descend(btree *bt, const char *key, size_t klen, bt_path *path)
{
    path->depth = 0;
    path->found = false;
    int rc = do_down(bt, bt->root, 0, key, klen, path);
    if (rc)
        do_path_release(bt, path);
    return rc;
}

int do_next_leaf(btree *bt, bt_path *path)
{
    int d = path->depth;
    for (int l = d - 2; l >= 0; l--) {
        const unsigned char *pd = path->pg[l]->data;
        if (path->idx[l] < (int)pg_n(pd)) {
            path->idx[l]++;
            do_pages_unpin(bt, path->pg + l + 1, d - l - 1);
            path->depth = l + 1;
            int rc = do_down(bt, pg_child(pd, (unsigned)path->idx[l]), l + 1, NULL, 0, path);
            if (rc)
                do_path_release(bt, path);
            return rc;
        }
    }
    return 1;
}

int do_touch_path(btree *bt, bt_path *path)
{
    for (int l = 0; l < path->depth; l++) {
        uint64_t no = do_page_touch(bt, &path->pg[l]);
        if (l == 0)
            bt->root = no;
        else
            pg_set_child(path->pg[l - 1]->data, (unsigned)path->idx[l - 1], no);
    }
    return KURA_OK;
}

/*
 * tree_search.c - the way down the B+ tree, and along its leaves.
 *
 * A path holds every page from the root to a leaf, pinned, with the child
 * taken at each branch and the lower bound of the key in the leaf.  The
 * tree keeps no sibling links (a copy-on-write tree cannot: moving a leaf
 * would change its neighbours too), so the next leaf is found through the
 * path: up to the first branch with a child to the right, then down its
 * leftmost side; the previous leaf the same way to the left, then down
 * the rightmost side (a walk backward).  Every page is fetched with the type its level calls
 * for, so a pointer into the wrong kind of page is reported as damage.
 * Descent and the cursor run with the tree lock shared (readers) or
 * exclusive (changes, which then touch the path).  A change starts from
 * the last put's path while the leaf's range holds its key (bt->wpath;
 * docs/design.md, "A put's path").
 */
#include <assert.h>

#include "kura/testhooks.h"
#include "tree_int.h"

void do_path_release(btree *bt, bt_path *path)
{
    if (path->depth > 0 && !path->unpinned)
        do_pages_unpin(bt, path->pg, path->depth);
    path->depth = 0;
    path->unpinned = false;
}

void do_path_release_held(btree *bt, bt_path *path)
{
    (void)bt;
    for (int l = 0; l < path->depth; l++)
        if (path->pg[l] && path->pg[l]->pins)
            path->pg[l]->pins--;
    path->depth = 0;
    path->unpinned = false;
}

static int level_type(const btree *bt, int lvl)
{
    return lvl == (int)bt->height - 1 ? BT_LEAF : BT_BRANCH;
}

enum { DOWN_PIN, DOWN_HOLD, DOWN_GET, DOWN_LAST };

/* Descends from path level lvl's page `pgno` to the leaf, along the child
 * chosen for key (NULL: the leftmost; DOWN_LAST, a pinned descent with
 * key NULL: the rightmost, the leaf's idx then its cell count).  DOWN_HOLD: a change's descent,
 * with the tree lock exclusive, so no reader waits on cmu while it is
 * held across the levels' searches (only a checkpoint's pins and
 * unpins); it is let go for a miss, which reads the file.  DOWN_GET: a
 * get's, shared, no page pinned (path->unpinned; tree_cache.c). */
static int do_down(btree *bt, uint64_t pgno, int lvl, const char *key, size_t klen,
                   bt_path *path, int mode)
{
    bool hold = mode == DOWN_HOLD;
    bool held = false;
    for (;; lvl++) {
        bt_page *p;
        if (lvl >= BT_MAX_DEPTH) {
            if (held)
                pthread_mutex_unlock(&bt->cmu);
            bt_count_error(bt, KURA_ECORRUPT, pgno, "a tree deeper than possible");
            return KURA_ECORRUPT;
        }
        int rc = 1;
        if (hold) {
            if (!held)
                pthread_mutex_lock(&bt->cmu);
            held = true;
            if ((rc = do_page_pin_locked(bt, pgno, level_type(bt, lvl), &p))) {
                pthread_mutex_unlock(&bt->cmu);
                held = false;
            }
        }
        if (rc && mode == DOWN_GET)
            rc = do_page_get_unpinned(bt, pgno, level_type(bt, lvl), &p);
        else if (rc)
            rc = do_page_get(bt, pgno, level_type(bt, lvl), &p);
        if (rc)
            return rc;
        path->pg[lvl] = p;
        path->depth = lvl + 1;
        bool found = false;
        unsigned i = key ? pg_search(p->data, key, klen, &found)
                         : mode == DOWN_LAST ? pg_n(p->data) : 0;
        if (pg_type(p->data) == BT_LEAF) {
            if (held)
                pthread_mutex_unlock(&bt->cmu);
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

static int descend(btree *bt, const char *key, size_t klen, bt_path *path, int mode)
{
    path->depth = 0;
    path->found = false;
    path->unpinned = mode == DOWN_GET;
    int rc = do_down(bt, bt->root, 0, key, klen, path, mode);
    if (rc)
        do_path_release(bt, path);
    return rc;
}

int do_descend(btree *bt, const char *key, size_t klen, bt_path *path)
{
    return descend(bt, key, klen, path, DOWN_PIN);
}

/* branch cell i's key against key, as bt_keycmp */
static int branch_key_cmp(const unsigned char *d, unsigned i, const char *key, size_t klen)
{
    const char *k;
    size_t kl;
    pg_cell_key(pg_ccell(d, i), BT_BRANCH, &k, &kl);
    return bt_keycmp(k, kl, key, klen);
}

/* Whether the kept path's leaf is key's: a branch routes the keys from its
 * cell i-1's up to (not with) its cell i's to child i, so the leaf holds
 * the range between the nearest separators above it on either side (none:
 * the tree's edge).  From the leaf's parent up, until both are met. */
static bool wpath_holds(const bt_wpath *w, const char *key, size_t klen)
{
    bool low = false, high = false;
    for (int l = w->depth - 2; l >= 0 && !(low && high); l--) {
        const unsigned char *d = w->pg[l]->data;
        unsigned i = (unsigned)w->idx[l], n = pg_n(d);
        if (!low && i > 0) {
            if (branch_key_cmp(d, i - 1, key, klen) > 0)
                return false;
            low = true;
        }
        if (!high && i < n) {
            if (branch_key_cmp(d, i, key, klen) <= 0)
                return false;
            high = true;
        }
    }
    return true;
}

/* The descent from the kept path, if it holds for key: its pages pinned
 * (rw exclusive: no reader is in the cache) and the leaf searched. */
static bool wpath_take(btree *bt, const char *key, size_t klen, bt_path *path)
{
    const bt_wpath *w = &bt->wpath;
    if (!w->depth || w->txn != bt->txn || w->shape != bt->wshape ||
        w->depth != (int)bt->height || w->pg[0]->pgno != bt->root)
        return false;
    if (!KURA_TEST_SWITCH(tree_wpath_unchecked) && !wpath_holds(w, key, klen))
        return false;
    int lvl = w->depth - 1;
    for (int l = 0; l < lvl; l++) {
        path->pg[l] = w->pg[l];
        path->idx[l] = w->idx[l];
        w->pg[l]->pins++;
    }
    bt_page *p = w->pg[lvl];
    p->pins++;
    path->pg[lvl] = p;
    path->depth = w->depth;
    path->found = false;
    path->unpinned = false;
    path->idx[lvl] = (int)pg_search(p->data, key, klen, &path->found);
    return true;
}

int do_descend_write(btree *bt, const char *key, size_t klen, bt_path *path)
{
    if (wpath_take(bt, key, klen, path))
        return KURA_OK;
    return descend(bt, key, klen, path, DOWN_HOLD);
}

void do_wpath_keep(btree *bt, const bt_path *path, uint64_t shape)
{
    bt_wpath *w = &bt->wpath;
    int d = path->depth;
    if (w->depth == d && d > 0 && w->txn == bt->txn && w->shape == shape &&
        shape == bt->wshape && w->pg[d - 1] == path->pg[d - 1])
        return;                 /* the kept one's leaf (and so its path) */
    w->depth = 0;
    if (shape != bt->wshape || path->depth != (int)bt->height)
        return;
    for (int l = 0; l < path->depth; l++) {
        const bt_page *p = path->pg[l];
        if (!p || p->txn != bt->txn || !p->dirty || p->writing)
            return;
        w->pg[l] = path->pg[l];
        w->idx[l] = path->idx[l];
    }
    w->txn = bt->txn;
    w->shape = shape;
    w->depth = path->depth;
}

/* A thread's last leaf, for gets in key order: a key between the first
 * and the last key of a leaf of the tree can only be in that leaf (a
 * branch routes a range to each child), so the descent is skipped while
 * the tree is the one the leaf was found in (bt->gen: every change takes
 * the lock exclusive, which moves it) and the page is still cached.
 * Per thread, as readers share the lock; the page is looked up as the
 * descent's are (unpinned, do_page_peek). */
static _Thread_local struct {
    const btree *bt;
    uint64_t gen, pgno;
    unsigned idx;               /* the cell found last: the next key is often the next cell */
} last_leaf;

/* leaf cell i's key against key, as bt_keycmp */
static int leaf_key_cmp(const unsigned char *d, unsigned i, const char *key, size_t klen)
{
    const char *k;
    size_t kl;
    pg_cell_key(pg_ccell(d, i), BT_LEAF, &k, &kl);
    return bt_keycmp(k, kl, key, klen);
}

static bool leaf_holds(const unsigned char *d, const char *key, size_t klen)
{
    unsigned n = pg_n(d);
    return n > 0 && leaf_key_cmp(d, 0, key, klen) <= 0 && leaf_key_cmp(d, n - 1, key, klen) >= 0;
}

/* The get's leaf found: the test hook that parks it there. */
static int got_leaf(const bt_path *path)
{
    KURA_TEST_CALL(tree_get_parked, path->pg[path->depth - 1]->data);
    return KURA_OK;
}

int do_descend_get(btree *bt, const char *key, size_t klen, bt_path *path)
{
    bt_page *p;
    /* unpinned only under bt_rdlock_get, whose slot holds evicted objects
     * back (tree_cache.c, reclaim); a reader that holds the lock
     * exclusive (the kura_test.tree_read_exclusive check) would reuse its
     * own evictions at once, so it pins */
    bool unpinned = bt_reader_slot(bt) >= -1;
    if (!unpinned)
        path->unpinned = false;
    if (unpinned && last_leaf.bt == bt && last_leaf.gen == bt->gen &&
        do_page_peek(bt, last_leaf.pgno, BT_LEAF, &p) == KURA_OK) {
        if (KURA_TEST_SWITCH(tree_last_leaf_unchecked) || leaf_holds(p->data, key, klen)) {
            int lvl = (int)bt->height - 1;
            for (int l = 0; l < lvl; l++) {
                path->pg[l] = NULL;
                path->idx[l] = 0;
            }
            path->pg[lvl] = p;
            path->depth = lvl + 1;
            unsigned i = last_leaf.idx + 1;
            if (i < pg_n(p->data) && leaf_key_cmp(p->data, i, key, klen) == 0)
                path->found = true;
            else
                i = pg_search(p->data, key, klen, &path->found);
            path->idx[lvl] = (int)i;
            path->unpinned = true;
            last_leaf.idx = i;
            return got_leaf(path);
        }
    }
    int rc = descend(bt, key, klen, path, unpinned ? DOWN_GET : DOWN_PIN);
    if (rc == KURA_OK) {
        last_leaf.bt = bt;
        last_leaf.gen = bt->gen;
        last_leaf.pgno = path->pg[path->depth - 1]->pgno;
        last_leaf.idx = (unsigned)path->idx[path->depth - 1];
        return got_leaf(path);
    }
    return rc;
}

uint64_t bt_gen_base(void)
{
    static _Atomic uint64_t opens;
    return (atomic_fetch_add(&opens, 1) + 1) << 40;
}

int do_next_leaf(btree *bt, bt_path *path)
{
    int d = path->depth;
    for (int l = d - 2; l >= 0; l--) {
        const unsigned char *pd = path->pg[l]->data;
        if (path->idx[l] < (int)pg_n(pd)) {
            path->idx[l]++;
            if (!path->unpinned)
                do_pages_unpin(bt, path->pg + l + 1, d - l - 1);
            path->depth = l + 1;
            int rc = do_down(bt, pg_child(pd, (unsigned)path->idx[l]), l + 1, NULL, 0, path,
                             path->unpinned ? DOWN_GET : DOWN_PIN);
            if (rc)
                do_path_release(bt, path);
            return rc;
        }
    }
    return 1;
}

int do_prev_leaf(btree *bt, bt_path *path)
{
    assert(!path->unpinned);
    int d = path->depth;
    for (int l = d - 2; l >= 0; l--) {
        const unsigned char *pd = path->pg[l]->data;
        if (path->idx[l] > 0) {
            path->idx[l]--;
            do_pages_unpin(bt, path->pg + l + 1, d - l - 1);
            path->depth = l + 1;
            int rc = do_down(bt, pg_child(pd, (unsigned)path->idx[l]), l + 1, NULL, 0, path,
                             DOWN_LAST);
            if (rc)
                do_path_release(bt, path);
            return rc;
        }
    }
    return 1;
}

int do_descend_last(btree *bt, bt_path *path)
{
    return descend(bt, NULL, 0, path, DOWN_LAST);
}

int do_touch_path(btree *bt, bt_path *path)
{
    for (int l = 0; l < path->depth; l++) {
        const bt_page *p = path->pg[l];
        if (p->txn == bt->txn && p->dirty)
            continue;           /* this checkpoint's already: at its number */
        uint64_t no = do_page_touch(bt, &path->pg[l]);
        if (l == 0)
            bt->root = no;
        else
            pg_set_child(path->pg[l - 1]->data, (unsigned)path->idx[l - 1], no);
    }
    return KURA_OK;
}

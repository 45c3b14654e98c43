/*
 * tree_pack.c - giving the B+ tree file's free pages back at a close.
 *
 * Copy-on-write leaves a checkpoint's changed pages at new numbers and
 * their old numbers free only once the next meta page is durable, so a
 * load that changes most of the tree between two checkpoints (keys in
 * random order) ends with its pages spread over about twice the live
 * size, the free half scattered among them.  Allocation takes the lowest
 * free page and a checkpoint cuts free pages off the file's end
 * (tree_cache.c, tree_commit.c), but only the end: the live pages near it
 * stay.  At a close, when at least PACK_MIN of the file is free, the
 * pages at or past the place the live ones would end (T) are moved to the
 * lowest free numbers: each one's path is touched (copy-on-write moves a
 * page of an earlier checkpoint to the lowest free number, its parents
 * first), checkpoints make that durable, and the last checkpoint of the
 * close cuts the file's now free end.  Leaves below T are not read; every
 * branch is (a few in a hundred pages).  Overflow runs are not moved: the
 * file's end stops at the highest one.
 *
 * Crash safety is the checkpoints': nothing is written but by them, and a
 * page freed by a move is reused only after the meta page that stops
 * reaching it is durable.  Bounded: a pass stops when the changed pages
 * reach half of the cache, a checkpoint writes them, and the next pass
 * starts over (moved pages are below T and skipped), at most PACK_PASSES
 * passes.
 */
#include "tree_int.h"

#define PACK_MIN    8           /* pack when at least 1/8 of the file is free */
#define PACK_PASSES 64

typedef struct pack_walk {
    uint64_t below;             /* T: pages at or past it move */
    size_t moved;
    bool full;                  /* the pass stopped at the dirty bound */
} pack_walk;

static bool should_move(btree *bt, const pack_walk *w, uint64_t pgno)
{
    return pgno >= w->below && do_free_lowest(bt) < pgno;
}

/* Walks the subtree of path->pg[lvl] (a branch), moving pages past T. */
static void walk(btree *bt, bt_path *path, int lvl, pack_walk *w)
{
    bool leaves = lvl + 2 == (int)bt->height;
    for (unsigned c = 0; c <= pg_n(path->pg[lvl]->data); c++) {
        if (bt->ndirty >= bt->cap / 2) {
            w->full = true;
            return;
        }
        uint64_t ch = pg_child(path->pg[lvl]->data, c);
        bool move = should_move(bt, w, ch);
        if (leaves && !move)
            continue;
        bt_page *q;
        if (do_page_get(bt, ch, leaves ? BT_LEAF : BT_BRANCH, &q) != KURA_OK)
            continue;           /* counted; the page stays where it is */
        path->idx[lvl] = (int)c;
        path->pg[lvl + 1] = q;
        path->depth = lvl + 2;
        if (move) {
            do_touch_path(bt, path);
            w->moved++;
        }
        if (!leaves)
            walk(bt, path, lvl + 1, w);
        do_page_unpin(bt, path->pg[lvl + 1]);   /* (q, or its copy: do_page_touch) */
        path->depth = lvl + 1;
        if (w->full)
            return;
    }
}

int do_pack(btree *bt)
{
    int rc = do_checkpoint(bt);
    if (rc)
        return rc;
    uint64_t nfree = bt->freev.n;
    if (nfree < 16 || nfree < bt->npages / PACK_MIN)
        return KURA_OK;
    uint64_t live = bt->npages - 2 - nfree - bt->flpages.n;
    pack_walk w = { .below = 2 + live + live / 256 + 8 };
    size_t total = 0;
    for (int pass = 0; pass < PACK_PASSES; pass++) {
        w.moved = 0;
        w.full = false;
        bt_path path = { 0 };
        if (do_reserve(bt, 2 * (size_t)bt->height + 8))
            break;
        if (do_page_get(bt, bt->root, bt->height == 1 ? BT_LEAF : BT_BRANCH,
                        &path.pg[0]) != KURA_OK)
            break;
        path.depth = 1;
        if (should_move(bt, &w, bt->root)) {
            do_touch_path(bt, &path);
            w.moved++;
        }
        if (bt->height > 1)
            walk(bt, &path, 0, &w);
        do_path_release(bt, &path);
        total += w.moved;
        if ((rc = do_checkpoint(bt)))
            return rc;
        if (!w.full)
            break;
    }
    if (total)
        bt_log(bt, KURA_LOG_INFO, "close: %zu pages moved toward the file's start", total);
    atomic_fetch_add_explicit(&bt->packed_pages, total, memory_order_relaxed);
    /* the moved pages' old numbers are free now: this one cuts them off */
    return do_checkpoint(bt);
}

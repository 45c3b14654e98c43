/*
 * tree.c - the B+ tree backend ("data.kb", also ".tcb" and ".kct"): the
 * store operations, the background threads, open and close.
 *
 * Every change follows one order, so that a failure at any step leaves
 * the tree as it was and the log without a record of it:
 *   1. descend to the leaf (reads may fail: nothing changed yet);
 *   2. write a large value's overflow run (may fail: the run is freed);
 *   3. reserve the page objects the change may need (may fail: ENOMEM);
 *   4. append the record to the log (may fail: the run is freed); a
 *      value written to a run in 2 is not logged again: the record names
 *      the run (a RUN record, tree_wal.c), and the log's syncs sync the
 *      tree file first;
 *   5. change the pages in memory, which cannot fail (a rebalance that
 *      cannot read a sibling is skipped; tree_delete.c).
 * The log record is what makes the change durable (-sync always waits for
 * its group commit, interval's thread syncs the log once a second); the
 * pages reach the file at the next checkpoint (tree_commit.c).
 *
 * Concurrency (tree_int.h; docs/design.md, "Tree reads in parallel"):
 * reads (get, iterate, usage, stats) hold the tree lock (tree_lock.c) shared and
 * run side by side; changes, the sweep, checkpoints and close hold it
 * exclusive.  A get that meets a dead item lets the shared lock go and
 * takes it exclusive to reclaim the item, looked up again.  Waits for the
 * group commit are made outside the lock; checkpoints hold it exclusive
 * to take the tree's state and let it go for their writes and syncs
 * (tree_commit.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "kura/backends.h"
#include "kura/dbfile.h"
#include "kura/storedebug.h"
#include "kura/testhooks.h"
#include "kura/codec.h"
#include "kura/crc32c.h"
#include "tree_int.h"
#include "kura/lockorder.h"
#include "kura/tlbuf.h"

static inline btree *B(kura_store *s) { return (btree *)s; }

/* bt_log's sink, and the tree's log's hook (bt as its arg). */
void bt_log_line(void *arg, int level, const char *line)
{
    btree *bt = arg;
    if (bt->cfg.log)
        bt->cfg.log(level, line);
    else if (!KURA_TEST_SWITCH(quiet_stores))
        fprintf(stderr, "kura tree: %s\n", line);
}

uint64_t bt_item_bytes(size_t klen, size_t vlen, uint32_t flags)
{
    return kura_item_wire_total(klen, vlen, flags);
}

static inline void stat_inc(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* ---- the tree lock (tree_lock.c) --------------------------------------- */

/* Waits (rw let go) until *flag is false. */
static void wait_flag(btree *bt, const bool *flag)
{
    while (*flag) {
        bt_unlock(bt);
        pthread_mutex_lock(&bt->ckpt_mu);
        while (*flag)
            pthread_cond_wait(&bt->ckpt_cv, &bt->ckpt_mu);
        pthread_mutex_unlock(&bt->ckpt_mu);
        bt_wrlock(bt);
    }
}

void do_ckpt_wait(btree *bt)
{
    wait_flag(bt, &bt->ckpt_busy);
}

void do_ckpt_write_wait(btree *bt)
{
    wait_flag(bt, &bt->ckpt_writing);
}

void do_ckpt_flag(btree *bt, bool *flag, bool on)
{
    pthread_mutex_lock(&bt->ckpt_mu);
    *flag = on;
    if (!on)
        pthread_cond_broadcast(&bt->ckpt_cv);
    pthread_mutex_unlock(&bt->ckpt_mu);
}

/* ---- applying changes ------------------------------------------------- */

static bool inline_value(btree *bt, size_t klen, size_t vlen)
{
    size_t max = bt->cell_max < BT_INLINE_MAX ? bt->cell_max : BT_INLINE_MAX;
    return BT_LEAF_HDR_MAX + klen + vlen <= max;
}

int do_apply_put(btree *bt, bt_path *path, const char *key, size_t klen, uint32_t flags,
                 int64_t exptime, uint64_t cas, const void *v0, size_t l0, const void *v1,
                 size_t l1, const bt_ovf *ovf)
{
    size_t vlen = l0 + l1;
    bt_ovf run;
    if (!inline_value(bt, klen, vlen) && !ovf) {
        int rc = do_ovf_write(bt, v0, l0, v1, l1, &run);
        if (rc)
            return rc;
        ovf = &run;
    }
    /* the cell first: v0 may point into the leaf about to change */
    unsigned char cell[BT_CELL_MAX];
    if ((klen > 255 || klen == 0) && bt->version < BT_VERSION_LONGKEYS)
        bt->version = BT_VERSION_LONGKEYS;      /* older kurads refuse the file from now on */
    size_t len = pg_leaf_encode(cell, key, klen, flags, exptime, cas, (uint32_t)vlen, v0,
                                ovf ? 0 : l0, v1, ovf ? 0 : l1, ovf);
    do_touch_path(bt, path);
    int lvl = path->depth - 1;
    if (path->found) {
        bt_cell old;
        pg_leaf_decode(pg_ccell(path->pg[lvl]->data, (unsigned)path->idx[lvl]), &old);
        if (old.ovf && (!ovf || old.ovf_pgno != ovf->pgno))
            do_free_run(bt, old.ovf_pgno, old.ovf_bytes);
        bt->items--;
        bt->bytes -= bt_item_bytes(old.klen, old.vlen, old.flags);
    }
    do_leaf_put(bt, path, cell, len);
    bt->items++;
    bt->bytes += bt_item_bytes(klen, vlen, flags);
    if (cas > bt->max_cas_seen)
        __atomic_store_n(&bt->max_cas_seen, cas, __ATOMIC_RELAXED);
    return KURA_OK;
}

/* Counts the dead cell c, about to go, as reclaimed, and as flushed when
 * under clk's watermark (kura_store_usage's flushed_gone).  Write lock
 * held. */
static void do_count_reclaim(btree *bt, const bt_cell *c, const kura_clock *clk)
{
    bt->reclaimed++;
    if (c->cas < clk->oldest_cas) {
        bt->flushed_gone++;
        bt->flushed_gone_bytes += bt_item_bytes(c->klen, c->vlen, c->flags);
    }
}

/* Removes the cell the path found (its record already logged). */
static void do_apply_del(btree *bt, bt_path *path)
{
    bt_cell c;
    int lvl = path->depth - 1;
    pg_leaf_decode(pg_ccell(path->pg[lvl]->data, (unsigned)path->idx[lvl]), &c);
    do_touch_path(bt, path);
    if (c.ovf)
        do_free_run(bt, c.ovf_pgno, c.ovf_bytes);
    bt->items--;
    bt->bytes -= bt_item_bytes(c.klen, c.vlen, c.flags);
    do_leaf_remove(bt, path);
}

/* Before a change: a checkpoint if dirty pages near the cache's bound (the
 * background thread normally keeps them far below), and page objects
 * reserved.  A change is refused only when the cache is full of dirty
 * pages that cannot be written. */
static int do_write_begin(btree *bt)
{
    if (bt->cfg.read_only)
        return KURA_EREADONLY;
    int rc = sl_failed(&bt->log);
    if (rc)
        return rc;
    /* the pages a checkpoint is writing are pinned: while they hold the
     * cache past its bound, changes wait for the writes (not the syncs) */
    if (bt->ckpt_writing && bt->ncached > bt->cap)
        do_ckpt_write_wait(bt);
    if (bt->ndirty >= bt->cap * 3 / 4) {
        double now = kura_mono();
        if (now >= bt->inline_retry_at || bt->ndirty >= bt->cap) {
            rc = do_checkpoint(bt);
            bt->inline_retry_at = rc ? now + 1.0 : 0;
            if (rc && bt->ndirty >= bt->cap)
                return rc;
        }
    }
    /* new pages (splits), and copies of pages a checkpoint is writing
     * meanwhile (a path's and a sibling's: do_page_touch) */
    return do_reserve(bt, 3 * (size_t)bt->height + 10);
}

/* A put's or update's new version: overflow run, log record, tree. */
static int do_write_put(btree *bt, bt_path *path, const char *key, size_t klen, uint32_t flags,
                        int64_t exptime, uint64_t cas, const void *v0, size_t l0,
                        const void *v1, size_t l1, const bt_ovf *keep_ovf, uint64_t *lsn)
{
    const bt_ovf *ovf = keep_ovf;
    bt_ovf run;
    int rc;
    bool fresh = false;
    if (!ovf && !inline_value(bt, klen, l0 + l1)) {
        if ((rc = do_ovf_write(bt, v0, l0, v1, l1, &run)))
            return rc;
        ovf = &run;
        fresh = true;
    }
    rc = do_wal_put(bt, key, klen, v0, l0, v1, l1, flags, exptime, cas, fresh ? &run : keep_ovf,
                    !fresh, lsn);
    if (rc) {
        if (fresh)
            do_free_pgno(bt, run.pgno, bt_ovf_pages(bt, run.bytes), true);
        return rc;
    }
    /* kept for the gets that follow (they read no run); before the leaf
     * changes, which v0 may point into (an append to an inline value) */
    if (fresh && !KURA_TEST_SWITCH(tree_vcache_off))
        do_vc_keep(bt, &run, cas, v0, l0, v1, l1);
    return do_apply_put(bt, path, key, klen, flags, exptime, cas, v0, l0, v1, l1, ovf);
}

static int do_write_del(btree *bt, bt_path *path, const char *key, size_t klen, uint64_t *lsn)
{
    int rc = do_wal_append(bt, BT_REC_DEL, key, klen, NULL, 0, NULL, 0, 0, 0, 0, lsn);
    if (rc == KURA_OK)
        do_apply_del(bt, path);
    return rc;
}

static int finish_write(btree *bt, int rc, bool wrote, uint64_t lsn)
{
    if (wrote && bt->cfg.sync_mode == KURA_SYNC_ALWAYS && !bt->cfg.deferred_commit) {
        int c = sl_commit(&bt->log, lsn);
        if (c)
            return c;
    }
    return rc;
}

static void fill_item(kura_item *it, const bt_cell *c, const unsigned char *val)
{
    it->key = c->key;
    it->klen = c->klen;
    it->val = val;
    it->vlen = c->vlen;
    it->flags = c->flags;
    it->exptime = c->exptime;
    it->cas = c->cas;
    it->vref = NULL;
}

/* The leaf cell the path found, with its value (an overflow run is read). */
static int do_read_cell(btree *bt, bt_path *path, bt_cell *c, const unsigned char **val)
{
    int lvl = path->depth - 1;
    pg_leaf_decode(pg_ccell(path->pg[lvl]->data, (unsigned)path->idx[lvl]), c);
    if (!c->ovf) {
        *val = c->val;
        return KURA_OK;
    }
    return do_ovf_read(bt, c, val);
}

/* A value read from an overflow run stays in the thread's buffer until
 * the operation ends; a buffer grown past 1 MiB (a large value) is given
 * back then, so each thread keeps about a megabyte at most. */
void bt_read_bufs_trim(void)
{
    tlbuf_trim(TLB_TREE_OVF, 1u << 20);
    tlbuf_trim(TLB_TREE_ZRAW, 1u << 20);
}

/* ---- the store operations --------------------------------------------- */

/* True if the path's cell still names the run `was` read (same page, bytes
 * and cas).  A run is freed only when its cell changes (a put with a new
 * cas, a delete), so a cell that still names it proves the run was
 * neither freed nor rewritten meanwhile. */
static bool same_run(const bt_path *path, const bt_cell *was)
{
    if (!path->found)
        return false;
    bt_cell c;
    pg_leaf_decode(pg_ccell(path->pg[path->depth - 1]->data,
                            (unsigned)path->idx[path->depth - 1]), &c);
    return c.ovf && c.ovf_pgno == was->ovf_pgno && c.ovf_bytes == was->ovf_bytes &&
           c.ovf_codec == was->ovf_codec && c.vlen == was->vlen && c.cas == was->cas;
}

#define OVF_TRIES 3     /* unlocked reads of a key's run before one under the lock */

/* A get whose live cell c (at the path, shared lock held) has its value in
 * an overflow run: answered from the cache of large values if the run's
 * value is there (tree_vcache.c: same run, same cas), with the lock held
 * throughout.  Else the run is read with the lock let go (a 1 GiB value
 * holds up no writer), then, under the lock again, the key is looked up
 * and must still name the same run (same_run); if so the value read is
 * kept in the cache; if it changed meanwhile, the get answers from the
 * new cell (tried OVF_TRIES times, then read under the lock).  The
 * callback runs under the lock, as for any get.  Returns with the shared
 * lock held and the path released. */
static int get_ovf(btree *bt, bt_path *path, bt_cell *c, const char *key, size_t klen,
                   const kura_clock *clk, kura_item_fn fn, void *arg)
{
    const unsigned char *val;
    bt_vent *e = NULL;          /* the cache's entry val lies in, referenced */
    int rc;
    for (int tries = 0;; tries++) {
        if (c->ovf && !KURA_TEST_SWITCH(tree_vcache_off) && (val = bt_vc_get(bt, c, &e))) {
            rc = KURA_OK;
            break;
        }
        if (!c->ovf || tries == OVF_TRIES) {
            rc = do_read_cell(bt, path, c, &val);  /* inline, or under the lock */
            break;
        }
        bt_cell was = *c;
        uint64_t npages = bt->npages;
        do_path_release(bt, path);
        bt_unlock(bt);
        KURA_TEST_CALL(tree_ovf_unlocked);
        rc = bt_ovf_read_quiet(bt, bt->fd, npages, &was, &val,
                               KURA_TEST_SWITCH(tree_vcache_off) ? NULL : &e);
        bt_rdlock(bt);
        int d = do_descend(bt, key, klen, path);
        if (d) {
            bt_vc_release(bt, e);
            return d;
        }
        if (KURA_TEST_SWITCH(tree_ovf_no_recheck) && path->found) {
            /* (the negative check: the old cell's fields, the bytes read) */
            *c = was;
            c->key = key;
            if (rc)
                bt_count_error(bt, rc, was.ovf_pgno, "an overflow run");
            break;
        }
        if (!path->found) {
            rc = KURA_NOTFOUND;             /* deleted meanwhile */
            break;
        }
        bool same = same_run(path, &was);
        pg_leaf_decode(pg_ccell(path->pg[path->depth - 1]->data,
                                (unsigned)path->idx[path->depth - 1]), c);
        int lv = kura_item_liveness(c->exptime, c->cas, clk);
        if (lv != KURA_LIVE) {              /* (a touch may have expired it) */
            rc = lv == KURA_DEAD_EXPIRED ? KURA_EXPIRED : KURA_FLUSHED;
            break;
        }
        if (same) {
            if (rc)
                bt_count_error(bt, rc, was.ovf_pgno, "an overflow run");
            else if (e)
                bt_vc_insert(bt, e);        /* verified, and still the key's */
            break;
        }
        bt_vc_release(bt, e);               /* another run's bytes: not kept */
        e = NULL;
    }
    if (rc == KURA_OK) {
        kura_item it;
        fill_item(&it, c, val);
        kura_vref ref = { &bt_vref_ops, bt, e };
        if (e && val == e->val)
            it.vref = &ref;             /* the caller may keep it (tree_vref.c) */
        rc = fn ? fn(arg, &it) : KURA_OK;
    }
    bt_vc_release(bt, e);
    do_path_release(bt, path);
    return rc;
}

static int bt_get_op(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                     kura_item_fn fn, void *arg)
{
    btree *bt = B(s);
    bt_path path;
    if (!kura_key_ok(key, klen))
        return KURA_NOTFOUND;
    bt_rdlock_get(bt);          /* (its pages unpinned: tree_cache.c) */
    int rc = do_descend_get(bt, key, klen, &path);
    if (rc)
        goto out;
    if (!path.found) {
        rc = KURA_NOTFOUND;
        goto release;
    }
    bt_cell c;
    const unsigned char *val;
    pg_leaf_decode(pg_ccell(path.pg[path.depth - 1]->data,
                            (unsigned)path.idx[path.depth - 1]), &c);
    int lv = kura_item_liveness(c.exptime, c.cas, clk);
    if (lv != KURA_LIVE) {
        rc = lv == KURA_DEAD_EXPIRED ? KURA_EXPIRED : KURA_FLUSHED;
        /* as memcached does, a read that meets a dead item reclaims it,
         * with the lock taken exclusive: looked up again, as the lock was
         * let go (and do_write_begin may let it go: a checkpoint) */
        do_path_release(bt, &path);
        if (bt->cfg.read_only)
            goto out;
        bt_unlock(bt);
        bt_wrlock(bt);
        if (do_write_begin(bt) == KURA_OK &&
            do_descend(bt, key, klen, &path) == KURA_OK) {
            if (path.found) {
                pg_leaf_decode(pg_ccell(path.pg[path.depth - 1]->data,
                                        (unsigned)path.idx[path.depth - 1]), &c);
                if (kura_item_liveness(c.exptime, c.cas, clk) != KURA_LIVE &&
                    do_write_del(bt, &path, key, klen, NULL) == KURA_OK)
                    do_count_reclaim(bt, &c, clk);     /* c's sizes and cas stay valid */
            }
            do_path_release(bt, &path);
        }
        goto out;
    }
    if (c.ovf) {
        rc = get_ovf(bt, &path, &c, key, klen, clk, fn, arg);
        bt_read_bufs_trim();
        goto out;
    }
    val = c.val;                        /* inline (decoded above) */
    kura_item it;
    fill_item(&it, &c, val);
    rc = fn ? fn(arg, &it) : KURA_OK;
release:
    /* (an inline value or none: no read buffer grew, nothing to trim) */
    do_path_release(bt, &path);
out:
    bt_unlock(bt);
    return rc;
}

/* rmw (store.h): under the tree lock taken exclusive, the key's leaf
 * found (from the path the last put kept, when it holds the key) and its
 * cell shown to the decision: with its value (an overflow run read), or
 * its metadata alone for a meta decision.  TOUCH keeps an overflow run as
 * it is.  A dead cell met is reclaimed when the decision writes over it
 * or removes (cur NULL). */
static int bt_rmw_op(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                     const kura_rmw_hint *hint, kura_update_fn fn, void *arg)
{
    btree *bt = B(s);
    bt_path path;
    uint64_t lsn = 0;
    bool wrote = false, read = false;
    int rc = KURA_OK, src = KURA_OK;
    bt_wrlock(bt);
    if (!bt->cfg.read_only)
        src = do_write_begin(bt);
    if (src == KURA_OK)
        src = do_descend_write(bt, key, klen, &path);
    if (src) {
        bt_unlock(bt);
        return src;
    }
    uint64_t shape = bt->wshape;
    bt_cell c;
    kura_item cur;
    const unsigned char *val = NULL;
    int lv = -1;
    if (path.found) {
        pg_leaf_decode(pg_ccell(path.pg[path.depth - 1]->data,
                                (unsigned)path.idx[path.depth - 1]), &c);
        lv = kura_item_liveness(c.exptime, c.cas, clk);
        if (lv == KURA_LIVE && hint->meta) {
            fill_item(&cur, &c, NULL);
        } else if (lv == KURA_LIVE) {
            read = true;
            if ((src = do_read_cell(bt, &path, &c, &val)))
                goto out;
            fill_item(&cur, &c, val);
        }
    }
    kura_update up;
    memset(&up, 0, sizeof(up));
    rc = fn(arg, lv == KURA_LIVE ? &cur : NULL, &up);
    switch (up.action) {
    case KURA_UPDATE_REPLACE:
    case KURA_UPDATE_TOUCH: {
        const void *v0 = up.part[0].base, *v1 = up.part[1].base;
        size_t l0 = up.part[0].len, l1 = up.part[1].len;
        uint32_t flags = up.flags;
        uint64_t cas = up.cas;
        bt_ovf keep_run, *keep = NULL;
        if (up.action == KURA_UPDATE_TOUCH) {
            if (!val)
                break;
            v0 = cur.val;
            l0 = cur.vlen;
            v1 = NULL;
            l1 = 0;
            flags = cur.flags;
            cas = cur.cas;
            if (c.ovf) {                /* the value's run stays as it is */
                keep_run = (bt_ovf){ c.ovf_pgno, c.ovf_bytes, c.ovf_codec,
                                     crc32c_update(0, cur.val, cur.vlen) };
                keep = &keep_run;
            }
        }
        if (path.found && lv != KURA_LIVE)
            do_count_reclaim(bt, &c, clk);
        src = do_write_put(bt, &path, key, klen, flags, up.exptime, cas, v0, l0, v1, l1, keep,
                           &lsn);
        wrote = src == KURA_OK;
        if (wrote)
            do_wpath_keep(bt, &path, shape);
        break;
    }
    case KURA_UPDATE_REMOVE:
        if (!path.found)
            break;
        if (lv != KURA_LIVE) {
            if (do_write_del(bt, &path, key, klen, NULL) == KURA_OK)
                do_count_reclaim(bt, &c, clk);
            break;
        }
        src = do_write_del(bt, &path, key, klen, &lsn);
        wrote = src == KURA_OK;
        break;
    default:
        break;
    }
out:
    do_path_release_held(bt, &path);
    if (read)
        bt_read_bufs_trim();
    bt_unlock(bt);
    src = finish_write(bt, src, wrote, lsn);
    return src ? src : rc;
}

/* A walk's state between leaves: the last key it saw (where the next
 * descent resumes), and the first damaged cell's error. */
typedef struct bt_walker {
    const kura_clock *clk;
    bool keys_only;
    kura_item_fn fn;
    void *arg;
    char last[KURA_KEY_MAX];
    size_t llen;
    bool have_last;
    int bad;
} bt_walker;

/* Hands cell i of the path's leaf to w->fn if live (rw shared): fn's
 * result, or KURA_OK. */
static int do_walk_cell(btree *bt, bt_path *path, unsigned i, bt_walker *w)
{
    bt_page *leaf = path->pg[path->depth - 1];
    bt_cell c;
    const unsigned char *val = NULL;
    pg_leaf_decode(pg_ccell(leaf->data, i), &c);
    memcpy(w->last, c.key, c.klen);
    w->llen = c.klen;
    w->have_last = true;
    if (w->clk && kura_item_liveness(c.exptime, c.cas, w->clk) != KURA_LIVE)
        return KURA_OK;
    path->idx[path->depth - 1] = (int)i;
    int r = w->keys_only ? KURA_OK : do_read_cell(bt, path, &c, &val);
    if (r) {
        w->bad = r;
        return KURA_OK;
    }
    kura_item it;
    fill_item(&it, &c, val);
    return w->fn(w->arg, &it);
}

/* Calls fn for every live item from key (inclusive; NULL: the first) in
 * key order, a leaf at a time: the lock is let go between leaves, so
 * writers go on; the walk resumes after the last key it saw.  keys_only:
 * no value is read (val NULL), for listings. */
static int bt_walk(btree *bt, const char *from, size_t flen, bt_walker *w)
{
    int rc = KURA_OK;
    for (;;) {
        bt_path path;
        bt_rdlock(bt);
        rc = do_descend(bt, w->have_last ? w->last : from,
                        w->have_last ? w->llen : (from ? flen : 0), &path);
        if (rc) {
            bt_unlock(bt);
            return rc;
        }
        bt_page *leaf = path.pg[path.depth - 1];
        unsigned i = (unsigned)path.idx[path.depth - 1];
        if (w->have_last && path.found)
            i++;
        /* past the leaf's end: the next leaf */
        while (i >= pg_n(leaf->data)) {
            int r = do_next_leaf(bt, &path);
            if (r) {
                bt_unlock(bt);
                return r < 0 ? r : w->bad;
            }
            leaf = path.pg[path.depth - 1];
            i = 0;
        }
        for (; i < pg_n(leaf->data) && rc == KURA_OK; i++)
            rc = do_walk_cell(bt, &path, i, w);
        do_path_release(bt, &path);
        bt_read_bufs_trim();
        bt_unlock(bt);
        if (rc)
            return rc;
    }
}

/* bt_walk backward: every live item at or before key (NULL: from the
 * last) in descending key order, a leaf at a time, each descent resuming
 * before the last key seen.  The tree has no back links: the previous
 * leaf is found through the path (do_prev_leaf). */
static int bt_walk_back(btree *bt, const char *from, size_t flen, bt_walker *w)
{
    int rc = KURA_OK;
    for (;;) {
        bt_path path;
        bt_rdlock(bt);
        if (w->have_last || from)
            rc = do_descend(bt, w->have_last ? w->last : from, w->have_last ? w->llen : flen,
                            &path);
        else
            rc = do_descend_last(bt, &path);
        if (rc) {
            bt_unlock(bt);
            return rc;
        }
        bt_page *leaf = path.pg[path.depth - 1];
        /* the lower bound: the key itself if found and not yet seen, else
         * the cell before it */
        int i = path.idx[path.depth - 1];
        if (w->have_last || !path.found)
            i--;
        while (i < 0) {
            int r = do_prev_leaf(bt, &path);
            if (r) {
                bt_unlock(bt);
                return r < 0 ? r : w->bad;
            }
            leaf = path.pg[path.depth - 1];
            i = (int)pg_n(leaf->data) - 1;
        }
        for (; i >= 0 && rc == KURA_OK; i--)
            rc = do_walk_cell(bt, &path, (unsigned)i, w);
        do_path_release(bt, &path);
        bt_read_bufs_trim();
        bt_unlock(bt);
        if (rc)
            return rc;
    }
}

/* iterate (store.h: kura_iter_spec): one part, in key order, a leaf at a
 * time (bt_walk; KURA_ITER_BACK: bt_walk_back). */
static int bt_iterate_op(kura_store *s, const kura_iter_spec *spec, const kura_clock *clk,
                         kura_item_fn fn, void *arg)
{
    const char *from = NULL;
    size_t flen = 0;
    switch (spec->scope) {
    case KURA_ITER_ALL:
        break;
    case KURA_ITER_PART:
        if (spec->part != 0)
            return KURA_EINVAL;
        break;
    case KURA_ITER_FROM:
    case KURA_ITER_BACK:
        if (spec->from && spec->flen > KURA_KEY_MAX)
            return KURA_EINVAL;
        from = spec->from;
        flen = spec->flen;
        break;
    default:
        return KURA_EINVAL;
    }
    bt_walker w = { .clk = clk, .keys_only = spec->keys_only, .fn = fn, .arg = arg };
    if (spec->scope == KURA_ITER_BACK)
        return bt_walk_back(B(s), from, flen, &w);
    return bt_walk(B(s), from, flen, &w);
}

/* The sweep: looks at up to `budget` cells from where it stopped, and
 * deletes the dead ones it saw (up to 64 a call). */
typedef struct sweep_arg {
    btree *bt;
    const kura_clock *clk;
    size_t left;
    char keys[64][KURA_KEY_MAX];
    uint16_t klen[64];
    int n;
    bool end;
} sweep_arg;

static long bt_sweep_op(kura_store *s, const kura_clock *clk, size_t budget)
{
    btree *bt = B(s);
    if (bt->cfg.read_only)
        return 0;
    sweep_arg *sa = calloc(1, sizeof(*sa));
    if (!sa)
        return 0;
    long done = 0;
    bt_wrlock(bt);
    bt_path path;
    int rc = do_descend(bt, bt->sweep_klen ? (const char *)bt->sweep_key : NULL,
                        bt->sweep_klen, &path);
    if (rc == KURA_OK) {
        bt_page *leaf = path.pg[path.depth - 1];
        unsigned i = bt->sweep_klen ? (unsigned)path.idx[path.depth - 1] : 0;
        size_t seen = 0;
        while (seen < budget && sa->n < 64) {
            if (i >= pg_n(leaf->data)) {
                if (do_next_leaf(bt, &path) != 0) {
                    sa->end = true;
                    break;
                }
                leaf = path.pg[path.depth - 1];
                i = 0;
                continue;
            }
            bt_cell c;
            pg_leaf_decode(pg_ccell(leaf->data, i), &c);
            if (kura_item_liveness(c.exptime, c.cas, clk) != KURA_LIVE) {
                memcpy(sa->keys[sa->n], c.key, c.klen);
                sa->klen[sa->n++] = (uint16_t)c.klen;
            }
            memcpy(bt->sweep_key, c.key, c.klen);
            bt->sweep_klen = c.klen;
            seen++;
            i++;
        }
        if (sa->end)
            bt->sweep_klen = 0;
        do_path_release(bt, &path);
    }
    for (int k = 0; k < sa->n; k++) {
        if (do_write_begin(bt) != KURA_OK ||
            do_descend(bt, sa->keys[k], sa->klen[k], &path) != KURA_OK)
            break;
        if (path.found) {
            bt_cell c;
            pg_leaf_decode(pg_ccell(path.pg[path.depth - 1]->data,
                                    (unsigned)path.idx[path.depth - 1]), &c);
            if (kura_item_liveness(c.exptime, c.cas, clk) != KURA_LIVE &&
                do_write_del(bt, &path, sa->keys[k], sa->klen[k], NULL) == KURA_OK) {
                done++;
                do_count_reclaim(bt, &c, clk);
            }
        }
        do_path_release(bt, &path);
    }
    bt_unlock(bt);
    free(sa);
    return done;
}

static int bt_sync_op(kura_store *s)
{
    btree *bt = B(s);
    return bt->cfg.read_only ? KURA_OK : sl_sync_now(&bt->log);
}

static void bt_usage_op(kura_store *s, kura_store_usage *u)
{
    btree *bt = B(s);
    memset(u, 0, sizeof(*u));
    bt_rdlock(bt);
    u->curr_items = bt->items;
    u->bytes = bt->bytes;
    u->reclaimed = bt->reclaimed;
    u->flushed_gone = bt->flushed_gone;
    u->flushed_gone_bytes = bt->flushed_gone_bytes;
    bt_unlock(bt);
}

#define LOAD(x) atomic_load_explicit(&bt->x, memory_order_relaxed)

static void bt_stats_op(kura_store *s, kura_stat_fn emit, void *arg)
{
    btree *bt = B(s);
    bt_rdlock(bt);
    uint64_t pages = bt->npages, nfree = bt->freev.n + bt->pend.n, cached = bt->ncached,
             dirty = bt->ndirty, height = bt->height;
    bt_unlock(bt);
    kura_emit_u64(emit, arg, "tree_page_size", bt->psiz);
    kura_emit_u64(emit, arg, "tree_file_bytes", pages * bt->psiz);
    kura_emit_u64(emit, arg, "tree_pages", pages);
    kura_emit_u64(emit, arg, "tree_free_pages", nfree);
    kura_emit_u64(emit, arg, "tree_height", height);
    kura_emit_u64(emit, arg, "tree_cache_pages", cached);
    kura_emit_u64(emit, arg, "tree_cache_limit_pages", bt->cap);
    kura_emit_u64(emit, arg, "tree_dirty_pages", dirty);
    kura_emit_u64(emit, arg, "tree_cache_hits", LOAD(cache_hits) + bt_reader_hits(bt));
    kura_emit_u64(emit, arg, "tree_cache_limbo_pages", bc_limbo_pages(bt));
    kura_emit_u64(emit, arg, "tree_cache_misses", LOAD(cache_misses));
    kura_emit_u64(emit, arg, "tree_value_cache_bytes", bt_vc_bytes(bt));
    kura_emit_u64(emit, arg, "tree_value_cache_limit_bytes", bt->vcap);
    kura_emit_u64(emit, arg, "tree_value_cache_hits", LOAD(vc_hits));
    kura_emit_u64(emit, arg, "tree_value_cache_misses", LOAD(vc_misses));
    kura_emit_u64(emit, arg, "tree_value_cache_held_bytes", LOAD(vc_held_bytes));
    kura_emit_u64(emit, arg, "tree_checkpoints", LOAD(checkpoints));
    kura_emit_u64(emit, arg, "tree_checkpoint_errors", LOAD(ckpt_errors));
    kura_emit_u64(emit, arg, "tree_splits", LOAD(splits));
    kura_emit_u64(emit, arg, "tree_merges", LOAD(merges));
    kura_emit_u64(emit, arg, "tree_redistributions", LOAD(redistributions));
    kura_emit_u64(emit, arg, "tree_shares", LOAD(shares));
    kura_emit_u64(emit, arg, "tree_trimmed_pages", LOAD(trimmed_pages));
    kura_emit_u64(emit, arg, "tree_packed_pages", LOAD(packed_pages));
    kura_emit_u64(emit, arg, "tree_skipped_rebalances", LOAD(skipped_rebalances));
    kura_emit_u64(emit, arg, "tree_corrupt_reads", LOAD(corrupt_reads));
    kura_emit_u64(emit, arg, "tree_read_errors", LOAD(read_errors));
    kura_emit_u64(emit, arg, "tree_recovered_records", LOAD(recovered_records));
    kura_emit_u64(emit, arg, "tree_writebehind_bytes", LOAD(wb_hinted));
    kura_emit_u64(emit, arg, "tree_zcomp_runs", LOAD(zcomp_runs));
    kura_emit_u64(emit, arg, "tree_zcomp_saved_bytes", LOAD(zcomp_saved));
    kura_emit_u64(emit, arg, "tree_zcomp_pages", LOAD(zcomp_pages));
    kura_emit_u64(emit, arg, "tree_zcomp_page_saved_bytes", LOAD(zcomp_page_saved));
    kura_emit_u64(emit, arg, "tree_zcomp_punch_errors", LOAD(punch_errors));
    kura_emit_u64(emit, arg, "tree_run_records", LOAD(run_records));
    sl_stats ls;
    sl_get_stats(&bt->log, &ls);
    kura_emit_u64(emit, arg, "tree_syncs", ls.syncs);
    kura_emit_u64(emit, arg, "tree_write_errors", ls.write_errors);
    kura_emit_u64(emit, arg, "tree_sync_errors", ls.sync_errors);
    kura_emit_u64(emit, arg, "tree_writes_stopped", sl_failed(&bt->log) != KURA_OK);
}

static int bt_load_state_op(kura_store *s, kura_store_state *st)
{
    btree *bt = B(s);
    lockorder_lock(&bt->state_mu, LOCK_RANK_STORE_STATE);
    *st = bt->state;
    lockorder_unlock(&bt->state_mu, LOCK_RANK_STORE_STATE);
    uint64_t seen = __atomic_load_n(&bt->max_cas_seen, __ATOMIC_RELAXED);
    if (seen > st->max_cas)
        st->max_cas = seen;
    return KURA_OK;
}

static int bt_save_state_op(kura_store *s, const kura_store_state *st)
{
    btree *bt = B(s);
    unsigned char v[32];
    uint64_t lsn = 0;
    if (bt->cfg.read_only)
        return KURA_EREADONLY;
    bt_put64(v, st->max_cas);
    bt_put64(v + 8, st->oldest_cas);
    bt_put64(v + 16, (uint64_t)st->flush_at);
    bt_put64(v + 24, st->ulog_ts);
    /* state_mu: the record and the state change together, so a checkpoint
     * (which takes its log position and the state under state_mu) has both
     * or neither */
    lockorder_lock(&bt->state_mu, LOCK_RANK_STORE_STATE);
    int rc = do_wal_append(bt, BT_REC_STATE, NULL, 0, v, sizeof(v), NULL, 0, 0, 0, 0, &lsn);
    if (rc == KURA_OK)
        bt->state = *st;
    lockorder_unlock(&bt->state_mu, LOCK_RANK_STORE_STATE);
    if (rc)
        return rc;
    return bt->cfg.sync_mode == KURA_SYNC_NONE ? KURA_OK : sl_commit(&bt->log, lsn);
}

/* ---- background: checkpoints, the interval sync ----------------------- */

/* -sync interval, once a second (kura_bg). */
static void bg_sync(void *arg)
{
    btree *bt = arg;
    sl_sync_now(&bt->log);
}

/* Write-behind of the tree file, as seglog's sl_writebehind does for the
 * log: once `wbehind` bytes of overflow runs have been written since the
 * last hint, starts the writeback of the file's dirty pages
 * (sync_file_range, which does not wait for the disk).  Large values then
 * go to the disk while the sets go on, instead of all at the next sync
 * (a checkpoint, the presync of a log sync, a clean stop), and the disk is
 * busy from the first set on.  A hint to the kernel, not a write: it
 * bypasses bt->io (errors show at the next sync, which goes through it).
 * The file's other dirty pages are the checkpoint's, which syncs them
 * itself soon after writing them. */
static void bg_writebehind(btree *bt)
{
    uint64_t w = atomic_load_explicit(&bt->run_bytes, memory_order_relaxed);
    if (!bt->wbehind || w - atomic_load_explicit(&bt->wb_hinted, memory_order_relaxed) <
                            bt->wbehind)
        return;
    atomic_store_explicit(&bt->wb_hinted, w, memory_order_relaxed);
    (void)sync_file_range(bt->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

/* Every 100 ms (kura_bg): the write-behind of the log and of the tree
 * file; a checkpoint when dirty pages pass half the cache, when the log
 * since the last one passes `ckpt` bytes (replay at open stays bounded),
 * or every 5 s while anything changed.  One that failed is tried again
 * only after kura_backoff_next's pause. */
static void bg_work(void *arg)
{
    btree *bt = arg;
    double now = kura_mono();
    if (now < bt->bg_retry_at || sl_failed(&bt->log))
        return;
    sl_writebehind(&bt->log);
    bg_writebehind(bt);
    bt_wrlock(bt);
    uint64_t since = sl_lsn(&bt->log) - bt->ckpt_lsn;
    bool want = bt->ndirty >= bt->cap / 2 || since >= bt->ckpt_bytes ||
                (now - bt->bg_last_ckpt >= 5.0 && (bt->ndirty || since || bt->pend.n));
    int rc = want ? do_checkpoint(bt) : KURA_OK;
    bt_unlock(bt);
    if (want)
        bt->bg_last_ckpt = now;
    if (rc) {
        bt->bg_backoff = kura_backoff_next(bt->bg_backoff);
        bt->bg_retry_at = kura_mono() + bt->bg_backoff;
    } else {
        bt->bg_backoff = 0;
    }
}

#ifdef KURA_TEST_HOOKS
/* For tests (storedebug.h; test builds only). */
int btree_debug_checkpoint(kura_store *s)
{
    btree *bt = B(s);
    bt_wrlock(bt);
    int rc = do_checkpoint(bt);
    bt_unlock(bt);
    return rc;
}
#endif

/* ---- open and close --------------------------------------------------- */

static void destroy(btree *bt)
{
    kura_bg_stop(&bt->bg);
    sl_destroy(&bt->log);
    bc_free(bt);
    if (bt->fd >= 0)
        bt->io->close(bt->io, bt->fd);
    if (bt->lockfd >= 0)
        bt->io->close(bt->io, bt->lockfd);
    if (bt->dirfd >= 0)
        bt->io->close(bt->io, bt->dirfd);
    free(bt->freev.v);
    free(bt->pend.v);
    free(bt->flpages.v);
    free(bt->replay_runs.v);
    if (bt->salvage_fd >= 0)
        bt->io->close(bt->io, bt->salvage_fd);
    free(bt->scr[0]);
    free(bt->scr[1]);
    free(bt->cptr);
    free(bt->clen);
    free(bt->pz_out);
    bt_vc_free(bt);
    bt_lock_destroy(bt);
    pthread_mutex_destroy(&bt->cmu);     /* (vmu: tree_vref.c, with bt) */
    pthread_mutex_destroy(&bt->state_mu);
    pthread_mutex_destroy(&bt->ckpt_mu);
    pthread_cond_destroy(&bt->ckpt_cv);
    kura_bg_destroy(&bt->bg);
    free(bt->dir);
    bt_vref_closed(bt);                 /* frees bt, now or at the last release */
}

static void bt_close_op(kura_store *s)
{
    btree *bt = B(s);
    kura_bg_stop(&bt->bg);
    if (!bt->cfg.read_only) {
        bt_wrlock(bt);
        bt->closing = true;
        int rc = do_pack(bt);
        bt_unlock(bt);
        sl_unmap_active(&bt->log);
        if (rc == KURA_OK)
            rc = sl_sync_now(&bt->log);
        if (rc)
            bt_log(bt, KURA_LOG_ERROR, "close: data may not be on disk: %s",
                   kura_strerror(rc));
    }
    destroy(bt);
}

static uint64_t bt_write_seq_op(kura_store *s)
{
    return sl_lsn(&B(s)->log);
}

static int bt_commit_op(kura_store *s, uint64_t seq)
{
    return sl_commit(&B(s)->log, seq);
}

static const kura_store_ops btree_ops = {
    .name = "tree",
    .get = bt_get_op,
    .rmw = bt_rmw_op,
    .parts = 1,
    .ordered = true,
    .iterate = bt_iterate_op,
    .sweep = bt_sweep_op,
    .sync = bt_sync_op,
    .usage = bt_usage_op,
    .stats = bt_stats_op,
    .load_state = bt_load_state_op,
    .save_state = bt_save_state_op,
    .close = bt_close_op,
    .write_seq = bt_write_seq_op,
    .commit = bt_commit_op,
};

/* Tokyo and Kyoto parameters that have no meaning here: an error that
 * says why, rather than "unknown". */
static int reject_foreign(kura_params *params, char *err, size_t errlen)
{
    static const struct { const char *name, *why; } foreign[] = {
        { "lmemb", "pages are filled by bytes (psiz), not by a count of records" },
        { "nmemb", "pages are filled by bytes (psiz), not by a count of records" },
        { "bnum", "the B+ tree has no bucket array" },
        { "apow", "records are not aligned in the file" },
        { "fpow", "free pages are kept in a list of their own" },
        { "opts", "large files and checksums are always on" },
        { "msiz", "pages are read into the cache (pccap), not mapped" },
        { "dfunit", "free pages are reused as they are freed; no defragmentation" },
        { "rcomp", "keys are compared as bytes" },
    };
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++) {
        if (kura_param_take(params, foreign[i].name)) {
            snprintf(err, errlen, "B+ tree parameter '%s' is not supported: %s",
                     foreign[i].name, foreign[i].why);
            return KURA_EINVAL;
        }
    }
    return KURA_OK;
}

/* btree_open's parameters, parsed. */
typedef struct open_params {
    uint64_t pccap, psiz, ckpt, segsiz, mapwrite, lcnum, ncnum, wbehind, vcache;
    bool psiz_given;
    kura_codec zcomp;
} open_params;

/* Takes the B+ tree's parameters from `params` into *p, defaults for the
 * rest; any parameter left over is refused. */
static int parse_params(const char *path, kura_params *params, const kura_store_config *cfg,
                        open_params *p, char *err, size_t errlen)
{
    uint64_t pccap = 64ULL << 20, psiz = 8192, ckpt = 64ULL << 20, segsiz = 64ULL << 20,
             mapwrite = 1, lcnum = 0, ncnum = 0, wbehind = 4ULL << 20;
    /* large values kept once verified (tree_vcache.c): as much as the
     * memory limit kurad's -m gives a cache, unless vcache= says */
    uint64_t vcache = cfg->mem_limit ? cfg->mem_limit : 64ULL << 20;
    int rc;

    bool psiz_given = kura_param_take(params, "psiz") != NULL;
    /* zcomp: the codec of new overflow runs (tree_zcomp.c); a file may
     * hold runs of any codec, so it can change from one open to the next */
    const char *zname = kura_param_take(params, "zcomp");
    kura_codec zcomp = KURA_CODEC_NONE;
    if (zname && codec_by_name(zname, &zcomp) != KURA_OK) {
        snprintf(err, errlen, "B+ tree parameter zcomp=%s: expected lzo, zlib, bz2 or none",
                 zname);
        return KURA_EINVAL;
    }
    if ((rc = kura_param_size(params, "B+ tree", "pccap", &pccap, 1 << 20, 1ULL << 44, err, errlen)) ||
        (rc = kura_param_size(params, "B+ tree", "psiz", &psiz, 4096, 32768, err, errlen)) ||
        (rc = kura_param_size(params, "B+ tree", "ckpt", &ckpt, 1 << 16, 1ULL << 40, err, errlen)) ||
        (rc = kura_param_size(params, "B+ tree", "segsiz", &segsiz, 1 << 16, 1ULL << 31, err, errlen)) ||
        (rc = kura_param_size(params, "B+ tree", "mapwrite", &mapwrite, 0, 1, err, errlen)) ||
        (rc = kura_param_size(params, "B+ tree", "wbehind", &wbehind, 0, 1ULL << 40, err, errlen)) ||
        (rc = kura_param_size(params, "B+ tree", "lcnum", &lcnum, 1, 1ULL << 32, err, errlen)) ||
        (rc = kura_param_size(params, "B+ tree", "ncnum", &ncnum, 1, 1ULL << 32, err, errlen)) ||
        (rc = kura_param_size(params, "B+ tree", "vcache", &vcache, 0, 1ULL << 44, err, errlen)) ||
        (rc = reject_foreign(params, err, errlen)))
        return rc;
    /* with zcomp, a new file's pages default to 16 KiB: a page must free a
     * whole 4 KiB block to be stored compressed, and at 8 KiB text that
     * compresses 4:1 saves no more than text at 2:1 (half); at 16 KiB it
     * keeps one block of four.  32 KiB would save a little more with lzo
     * and doubles again what a cache miss reads and decompresses
     * (formats.md, "Compression", has the figures) */
    if (!psiz_given && zcomp != KURA_CODEC_NONE)
        psiz = 16384;
    if (psiz & (psiz - 1)) {
        snprintf(err, errlen, "B+ tree parameter psiz=%llu: expected a power of two",
                 (unsigned long long)psiz);
        return KURA_EINVAL;
    }
    /* Tokyo's lcnum/ncnum (leaf and branch pages cached), when pccap is
     * not given: the cache holds as many pages of either kind */
    if ((lcnum || ncnum) && !kura_param_take(params, "pccap"))
        pccap = (lcnum + ncnum) * psiz < (1 << 20) ? 1 << 20 : (lcnum + ncnum) * psiz;
    *p = (open_params){ .pccap = pccap, .psiz = psiz, .ckpt = ckpt, .segsiz = segsiz,
                        .mapwrite = mapwrite, .lcnum = lcnum, .ncnum = ncnum,
                        .wbehind = wbehind, .vcache = vcache, .psiz_given = psiz_given,
                        .zcomp = zcomp };
    return kura_params_reject_unused(params, path, err, errlen);
}

/* A new btree object for `path`, its locks made, nothing opened yet. */
static btree *bt_new(const char *path, const kura_store_config *cfg, const open_params *p)
{
    btree *bt = calloc(1, sizeof(*bt));
    if (!bt || !(bt->dir = strdup(path))) {
        free(bt);
        return NULL;
    }
    bt->base.ops = &btree_ops;
    bt->cfg = *cfg;
    bt->zcomp = (int)p->zcomp;
    bt->wbehind = cfg->read_only ? 0 : p->wbehind;
    bt->io = kio_or_default(cfg->io);
    if (!bt->cfg.item_size_max)
        bt->cfg.item_size_max = KURA_ITEM_SIZE_MAX_DEFAULT;
    bt->dirfd = bt->lockfd = bt->fd = bt->salvage_fd = -1;
    bt->psiz = p->psiz;
    bt->psiz_given = p->psiz_given;
    bt->ckpt_bytes = p->ckpt;
    bt->wal_roll_min = (p->ckpt < p->segsiz ? p->ckpt : p->segsiz) / 4;
    /* writers first (tree_lock.c): a steady stream of readers must not
     * hold a change (or a checkpoint) off for ever */
    if (bt_lock_init(bt)) {
        free(bt->dir);
        free(bt);
        return NULL;
    }
    bt->gen = bt_gen_base();
    pthread_mutex_init(&bt->cmu, NULL);
    pthread_mutex_init(&bt->vmu, NULL);
    pthread_mutex_init(&bt->state_mu, NULL);
    pthread_mutex_init(&bt->ckpt_mu, NULL);
    pthread_cond_init(&bt->ckpt_cv, NULL);
    kura_bg_init(&bt->bg);
    return bt;
}

/* Opens the tree's file (made if new and writable) and reads its meta
 * page; sets *salvage when a salvage is under way. */
static int open_tree_file(btree *bt, const char *path, const open_params *p, bool *salvage,
                          char *err, size_t errlen)
{
    const kura_store_config *cfg = &bt->cfg;
    int rc;
    if ((rc = kura_db_dir_open(bt->io, path, cfg->read_only, "B+ tree", &bt->dirfd,
                               &bt->lockfd, err, errlen)))
        return rc;
    sl_config lc = { .dir = bt->dir, .dirfd = bt->dirfd, .io = bt->io,
                     .version = BT_WAL_VERSION,
                     .versions = (1u << BT_WAL_VERSION) | (1u << BT_WAL_VERSION_RUNS) |
                                 (1u << BT_WAL_VERSION_MIN),
                     .segsiz = p->segsiz, .msiz = 0, .wbehind = p->wbehind,
                     .mapwrite = p->mapwrite != 0, .read_only = cfg->read_only,
                     .check = bt_wal_check, .log = bt_log_line, .log_arg = bt,
                     .lock_rank = LOCK_RANK_STORE_LOG,
                     .presync = bt_wal_presync, .presync_arg = bt };
    memcpy(lc.magic, BT_WAL_MAGIC, sizeof(lc.magic));
    if ((rc = sl_init(&bt->log, &lc))) {
        snprintf(err, errlen, "out of memory");
        return rc;
    }
    if ((rc = bt_salvage_begin(bt, salvage, err, errlen)))
        return rc;
    int oflags = (cfg->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    bt->fd = bt->io->open(bt->io, bt->dirfd, "tree", oflags, 0);
    if (bt->fd < 0 && errno == ENOENT && !cfg->read_only) {
        if ((rc = bt_create_file(bt, err, errlen)))
            return rc;
        bt->fd = bt->io->open(bt->io, bt->dirfd, "tree", oflags, 0);
    }
    if (bt->fd < 0) {
        snprintf(err, errlen, "%s/tree: %s", path, strerror(errno));
        return sl_errno_status(errno);
    }
    return bt_meta_read(bt, err, errlen);
}

/* The buffers and caches sized by the file's page size. */
static int alloc_page_buffers(btree *bt, const open_params *p, char *err, size_t errlen)
{
    bt->cell_max = (bt->psiz - BT_HDR) / 3 - 2;
    if (bt->cell_max > BT_CELL_MAX)
        bt->cell_max = BT_CELL_MAX;
    bt->base.key_max = bt_key_max(bt->psiz);
    bt->ccap = 2 * (bt->psiz / 8) + 4;
    /* a compressed page must free at least one of the file system's
     * blocks (tree_pzcomp.c); a size that is no power of two is taken as
     * the usual 4 KiB */
    struct stat fst;
    bt->blksize = fstat(bt->fd, &fst) == 0 ? (size_t)fst.st_blksize : 4096;
    if (bt->blksize < 512 || (bt->blksize & (bt->blksize - 1)))
        bt->blksize = 4096;
    if (!(bt->scr[0] = malloc(bt->psiz)) || !(bt->scr[1] = malloc(bt->psiz)) ||
        (bt->zcomp && !(bt->pz_out = malloc(bt_pz_out_size(bt)))) ||
        !(bt->cptr = malloc(bt->ccap * sizeof(*bt->cptr))) ||
        !(bt->clen = malloc(bt->ccap * sizeof(*bt->clen))) || bc_init(bt, p->pccap) ||
        bt_vc_init(bt, p->vcache)) {
        snprintf(err, errlen, "out of memory");
        return KURA_ENOMEM;
    }
    return KURA_OK;
}

/* Brings the tree to its last durable state: a salvage's pages loaded,
 * the log replayed, and what that replayed checkpointed. */
static int recover_tree(btree *bt, const char *path, bool salvage, char *err, size_t errlen)
{
    bt_wrlock(bt);
    int rc = salvage ? do_salvage_load(bt, err, errlen) : KURA_OK;
    if (rc == KURA_OK)
        rc = bt_wal_open(bt, err, errlen);
    uint64_t replayed = atomic_load(&bt->recovered_records);
    if (rc == KURA_OK && (replayed || bt->pend.n) && !bt->cfg.read_only) {
        rc = do_checkpoint(bt);
        if (rc)
            snprintf(err, errlen, "%s: cannot write a checkpoint after replay: %s", path,
                     kura_strerror(rc));
    }
    bt_unlock(bt);
    if (rc == KURA_OK && salvage && (rc = bt_salvage_end(bt)))
        snprintf(err, errlen, "%s: cannot finish the salvage: %s", path, kura_strerror(rc));
    if (rc)
        return rc;
    if (replayed || bt->wal_cut)
        bt_log(bt, KURA_LOG_INFO, "opened: %llu items, replayed %llu log records, cut %llu "
               "torn bytes", (unsigned long long)bt->items, (unsigned long long)replayed,
               (unsigned long long)bt->wal_cut);
    return KURA_OK;
}

int btree_open(const char *path, kura_params *params, const kura_store_config *cfg,
               kura_store **out, char *err, size_t errlen)
{
    open_params p = { 0 };      /* gcc -O1 (make test-tsan) cannot see parse_params set it */
    bool salvage = false;
    int rc;

    *out = NULL;
    if ((rc = parse_params(path, params, cfg, &p, err, errlen)))
        return rc;
    btree *bt = bt_new(path, cfg, &p);
    if (!bt) {
        snprintf(err, errlen, "out of memory");
        return KURA_ENOMEM;
    }
    if ((rc = open_tree_file(bt, path, &p, &salvage, err, errlen)) ||
        (rc = alloc_page_buffers(bt, &p, err, errlen)) ||
        (rc = recover_tree(bt, path, salvage, err, errlen)))
        goto fail;
    if (!cfg->read_only) {
        bt->bg_last_ckpt = kura_mono();
        if ((rc = kura_bg_start(&bt->bg, bg_work, cfg->sync_mode == KURA_SYNC_INTERVAL ? bg_sync : NULL,
                                bt, "B+ tree", err, errlen)))
            goto fail;
    }
    *out = &bt->base;
    return KURA_OK;
fail:
    destroy(bt);
    return rc;
}

/*
 * tree_commit.c - checkpoints: the B+ tree's pages and a meta page made
 * durable, in that order; and reading the meta pages at open.
 *
 * A checkpoint takes the tree as of one log position P (under bt->rw
 * exclusive: the page list, the free list and the meta page's fields),
 * freezes it (its pages belong to a finished checkpoint from then on), and
 * lets the lock go for every step below, so reads and changes go on while
 * it writes and syncs: a frozen page's bytes do not change (a change goes
 * to a copy of it, do_page_touch) and it is pinned until written.  Then:
 *   0. syncs the log up to P (without it, after a power loss under -sync
 *      none or interval the log could end before P, and records appended
 *      after the next open would sit behind the position replay starts at);
 *   1. writes the free list: every page free now or freed since the last
 *      checkpoint, into pages taken from the free ones (never from those
 *      freed since the last checkpoint: the durable meta page still reaches
 *      them);
 *   2. writes every dirty page at its own number (pages made since the
 *      last checkpoint, at numbers no durable root reaches);
 *   3. fdatasync;
 *   4. writes the meta page (root, height, page count, free list, P, the
 *      engine's state) into the slot the previous meta page is not in;
 *   5. fdatasync.
 * A crash before 5 completes leaves the previous meta page, and every page
 * it reaches, intact: open takes the newest meta page whose checksum holds
 * and replays the log from its P.  Only after 5 do the pages freed since
 * the previous checkpoint become reusable, and the log before P go.
 * A failed write leaves the tree as it was (the pages not written are
 * dirty again, the next checkpoint tries again); a failed sync is sticky (sl_fail), as it
 * is for the log: the kernel may have dropped the pages it could not write.
 *
 * The two meta pages are at offsets 0 and 4096 (so that finding them needs
 * no page size); pages 0 and 1 are reserved for them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kura/crc32c.h"
#include "tree_int.h"
#include "kura/lockorder.h"
#include "kura/testhooks.h"

#define META_LEN 512

typedef struct bt_meta {
    uint32_t version, psiz;
    uint64_t txn, root, npages, fl_head, nfree;
    uint32_t wal_seg, height;
    uint64_t wal_off;
    kura_store_state state;
    uint64_t items, bytes, max_cas_seen;
} bt_meta;

static void meta_encode(unsigned char *b, const bt_meta *m)
{
    memset(b, 0, META_LEN);
    b[4] = BT_META;
    memcpy(b + 8, BT_META_MAGIC, 8);
    bt_put32(b + 16, m->version);
    bt_put32(b + 20, m->psiz);
    bt_put64(b + 24, m->txn);
    bt_put64(b + 32, m->root);
    bt_put64(b + 40, m->npages);
    bt_put64(b + 48, m->fl_head);
    bt_put64(b + 56, m->nfree);
    bt_put32(b + 64, m->wal_seg);
    bt_put32(b + 68, m->height);
    bt_put64(b + 72, m->wal_off);
    bt_put64(b + 80, m->state.max_cas);
    bt_put64(b + 88, m->state.oldest_cas);
    bt_put64(b + 96, (uint64_t)m->state.flush_at);
    bt_put64(b + 104, m->items);
    bt_put64(b + 112, m->bytes);
    bt_put64(b + 120, m->max_cas_seen);
    bt_put64(b + 128, m->state.ulog_ts);
    bt_put32(b, crc32c_update(0, b + 4, META_LEN - 4));
}

/* 0, or KURA_ECORRUPT (why in *why) */
static int meta_decode(const unsigned char *b, bt_meta *m, const char **why)
{
    if (bt_get32(b) != crc32c_update(0, b + 4, META_LEN - 4) || b[4] != BT_META ||
        memcmp(b + 8, BT_META_MAGIC, 8) != 0) {
        *why = "bad checksum or magic";
        return KURA_ECORRUPT;
    }
    if (bt_get32(b + 16) < BT_VERSION_MIN || bt_get32(b + 16) > BT_VERSION) {
        *why = "unknown format version";
        return KURA_ECORRUPT;
    }
    m->version = bt_get32(b + 16);
    m->psiz = bt_get32(b + 20);
    m->txn = bt_get64(b + 24);
    m->root = bt_get64(b + 32);
    m->npages = bt_get64(b + 40);
    m->fl_head = bt_get64(b + 48);
    m->nfree = bt_get64(b + 56);
    m->wal_seg = bt_get32(b + 64);
    m->height = bt_get32(b + 68);
    m->wal_off = bt_get64(b + 72);
    m->state.max_cas = bt_get64(b + 80);
    m->state.oldest_cas = bt_get64(b + 88);
    m->state.flush_at = (int64_t)bt_get64(b + 96);
    m->items = bt_get64(b + 104);
    m->bytes = bt_get64(b + 112);
    m->max_cas_seen = bt_get64(b + 120);
    m->state.ulog_ts = bt_get64(b + 128);
    if (m->psiz < 4096 || m->psiz > 32768 || (m->psiz & (m->psiz - 1)) ||
        m->root < 2 || m->root >= m->npages || m->height < 1 || m->height > BT_MAX_DEPTH ||
        (m->fl_head && (m->fl_head < 2 || m->fl_head >= m->npages))) {
        *why = "fields out of range";
        return KURA_ECORRUPT;
    }
    return KURA_OK;
}

static void fill_meta(btree *bt, bt_meta *m, uint64_t fl_head, uint64_t nfree,
                      const kura_store_state *state, uint32_t wal_seg, uint64_t wal_off)
{
    memset(m, 0, sizeof(*m));
    m->version = bt->version;
    m->psiz = (uint32_t)bt->psiz;
    m->txn = bt->txn;
    m->root = bt->root;
    m->npages = bt->npages;
    m->fl_head = fl_head;
    m->nfree = nfree;
    m->wal_seg = wal_seg;
    m->height = bt->height;
    m->wal_off = wal_off;
    m->state = *state;
    m->items = bt->items;
    m->bytes = bt->bytes;
    m->max_cas_seen = bt->max_cas_seen;
}

static int cmp_page(const void *a, const void *b)
{
    uint64_t x = (*(bt_page *const *)a)->pgno, y = (*(bt_page *const *)b)->pgno;
    return x < y ? -1 : x > y;
}

/* Writes the pages (sorted by number, sealed), runs of neighbours in one
 * pwritev, with the tree lock let go: the pages are only read (a change
 * goes to a copy: do_page_touch), *zipped set if one was compressed.
 * With zcomp, a leaf or branch page that compresses enough is written
 * compressed (tree_pzcomp.c) and ends its run: the rest of its slot is
 * punched out, so the next page's bytes do not follow its own. */
static int write_pages(btree *bt, bt_page **pages, size_t n, bool *zipped)
{
    struct iovec iov[64];
    size_t i = 0;
    while (i < n) {
        int k = 0;
        uint64_t first = pages[i]->pgno;
        size_t zlen = 0;
        while (!zlen && i < n && k < 64 && pages[i]->pgno == first + (uint64_t)k) {
            const unsigned char *z = NULL;
            zlen = bt_pz_pack(bt, pages[i]->data, &z);
            iov[k++] = zlen ? (struct iovec){ (void *)z, zlen }
                            : (struct iovec){ pages[i]->data, bt->psiz };
            i++;
        }
        /* where the file ended before: a compressed page's slot at or past
         * it was never written, and the rest of it is a hole already */
        struct stat st;
        off_t end = zlen && fstat(bt->fd, &st) == 0 ? st.st_size : -1;
        if (bt_pwritev_all(bt, iov, k, (off_t)(first * bt->psiz)) != 0)
            return -1;
        if (zlen) {
            *zipped = true;
            bt_pz_written(bt, pages[i - 1]->pgno, zlen, end);
        }
    }
    return 0;
}

/* Steps 1 and 2 of a checkpoint, with the tree lock let go: the tree's
 * pages (*written once they are), then the free list (all) into its pages
 * (chain).  0, or the write's error (logged and counted). */
static int write_tree(btree *bt, bt_page **pages, size_t nd, const bt_vec *chain,
                      const bt_vec *all, unsigned char *fl, uint64_t txn, bool *zipped,
                      bool *written)
{
    size_t per = (bt->psiz - BT_HDR) / 8;
    if (write_pages(bt, pages, nd, zipped) != 0)
        goto err;
    *written = true;
    for (size_t j = 0; j < chain->n; j++) {
        size_t from = j * per, cnt = all->n > from ? all->n - from : 0;
        if (cnt > per)
            cnt = per;
        pg_init(fl, bt->psiz, BT_FREELIST, chain->v[j], txn);
        memset(fl + BT_HDR, 0, bt->psiz - BT_HDR);
        bt_put16(fl + 6, (uint16_t)cnt);
        pg_set_link(fl, j + 1 < chain->n ? chain->v[j + 1] : 0);
        for (size_t e = 0; e < cnt; e++)
            bt_put64(fl + BT_HDR + 8 * e, all->v[from + e]);
        pg_seal(fl, bt->psiz);
        if (kio_pwrite_all(bt->io, bt->fd, fl, bt->psiz, (off_t)(chain->v[j] * bt->psiz)) != 0)
            goto err;
    }
    return KURA_OK;
err:;
    int e = errno;
    bt_log(bt, KURA_LOG_ERROR, "%s/tree: checkpoint not written: %s", bt->dir, strerror(e));
    atomic_fetch_add_explicit(&bt->ckpt_errors, 1, memory_order_relaxed);
    return sl_errno_status(e);
}

typedef struct tail_arg {
    sl_tail t;
} tail_arg;

static void get_tail(void *arg, const sl_tail *t)
{
    ((tail_arg *)arg)->t = *t;
}

/* Appends v's entries to *to (a failed push leaks the page: never unsafe). */
static void vec_append(bt_vec *to, const bt_vec *v)
{
    for (size_t j = 0; j < v->n; j++)
        (void)bt_vec_push(to, v->v[j]);
}

/* Seals the log's active segment before P is taken, when it holds at
 * least wal_roll_min bytes (at a close: any record), so that P falls at
 * the start of a new segment and the whole of the old one goes once this
 * checkpoint is durable: the log on disk stays within about a checkpoint's
 * worth of records instead of growing a segment to segsiz.  A failed roll
 * (a full disk) only keeps the log longer; a failed sync is sticky and
 * fails the checkpoint below. */
static void roll_log(btree *bt)
{
    if (bt->replaying || !bt->wal_started || KURA_TEST_SWITCH(tree_keep_wal))
        return;
    tail_arg ta;
    sl_locked(&bt->log, get_tail, &ta);
    uint64_t held = ta.t.off > SL_SEG_HDR ? ta.t.off - SL_SEG_HDR : 0;
    if (held && (bt->closing || held >= bt->wal_roll_min))
        (void)sl_roll(&bt->log, bt->closing ? SL_SEG_HDR : 0);
}

/* True when the file ends in free pages a checkpoint would cut off. */
static bool tail_free(btree *bt)
{
    if (KURA_TEST_SWITCH(tree_keep_tail))
        return false;
    for (size_t j = 0; j < bt->freev.n; j++)
        if (bt->freev.v[j] == bt->npages - 1 && bt->npages > 3)
            return true;
    return false;
}

/* A checkpoint that cut `trimmed` pages off the file's end (from
 * np_before) failed: the pages not taken from the end since go back to the
 * free ones (those taken are in use; they were free in the durable meta
 * page). */
static void untrim(btree *bt, uint64_t np_before, uint64_t trimmed)
{
    if (!trimmed || bt->npages >= np_before)
        return;
    do_free_pgno(bt, bt->npages, np_before - bt->npages, true);
    bt->npages = np_before;
}

/* After a durable meta page that names a shorter file: the file is cut to
 * the used part (pages taken from the end since, an overflow run written
 * there included, lie below bt->npages).  A failure only costs the space;
 * a cut that does not reach the disk leaves pages past the meta page's
 * count, which nothing reads and the next pages taken from the end
 * overwrite. */
static void cut_file(btree *bt)
{
    struct stat st;
    off_t used = (off_t)(bt->npages * bt->psiz);
    if (fstat(bt->fd, &st) == 0 && st.st_size > used &&
        bt->io->ftruncate(bt->io, bt->fd, used) != 0)
        bt_log(bt, KURA_LOG_ERROR, "%s/tree: cannot cut the file's free end: %s", bt->dir,
               strerror(errno));
}

/* What one checkpoint holds from its start to its end. */
typedef struct ckpt_work {
    tail_arg ta;                /* P: the log's tail the meta page says replay starts from */
    kura_store_state state;     /* the store's state as of P */
    uint64_t np_before;         /* the file's pages before its free end was cut */
    uint64_t trimmed;           /* pages cut off the file's end */
    size_t k;                   /* pages the free list takes */
    bt_vec chain;               /* those pages */
    bt_vec all;                 /* the list's entries */
    bt_vec pend;                /* the pages freed up to P, waiting for this meta page */
    bt_page **pages;            /* the dirty pages, in file order */
    size_t nd;
    unsigned char *fl;          /* a free-list page being written */
    bool stopped;               /* a sync failed: writes stopped for good */
} ckpt_work;

static void ckpt_work_free(ckpt_work *w)
{
    free(w->pend.v);
    free(w->chain.v);
    free(w->all.v);
    free(w->pages);
    free(w->fl);
}

/* Takes P (the log's tail, with the store's state beside it) with the lock
 * held.  False when nothing changed since the last checkpoint. */
static bool do_ckpt_take_p(btree *bt, ckpt_work *w)
{
    roll_log(bt);
    lockorder_lock(&bt->state_mu, LOCK_RANK_STORE_STATE);     /* P and the state together */
    if (bt->replaying) {
        memset(&w->ta, 0, sizeof(w->ta));
        w->ta.t.seg = bt->wal_at_seg;
        w->ta.t.off = bt->wal_at_off;
    } else {
        sl_locked(&bt->log, get_tail, &w->ta);
    }
    w->state = bt->state;
    lockorder_unlock(&bt->state_mu, LOCK_RANK_STORE_STATE);
    return bt->ndirty || bt->pend.n || w->ta.t.seg != bt->ckpt_seg ||
           w->ta.t.off != bt->ckpt_off || tail_free(bt);
}

/* Steps 1a and 1, with the lock held: cuts the free end and builds the
 * free list (its pages taken, its entries gathered).  KURA_ENOMEM leaves
 * what it took in w for the caller's undo. */
static int do_ckpt_freelist(btree *bt, ckpt_work *w)
{
    /* 1a. free pages that end the file leave it: the meta page names the
     * shorter file, which is cut once that is durable (their numbers are
     * free in the durable meta page too, so a page taken from the end
     * meanwhile may reuse them) */
    w->np_before = bt->npages;
    w->trimmed = KURA_TEST_SWITCH(tree_keep_tail) ? 0 : do_free_trim_tail(bt);

    /* 1. the free list: what is free now and what becomes free with this
     * meta page (freed since the last one, and the old list's pages) */
    size_t per = (bt->psiz - BT_HDR) / 8;
    size_t m = bt->freev.n + bt->pend.n + bt->flpages.n;
    w->k = (m + per - 1) / per;
    for (size_t j = 0; j < w->k; j++)
        if (bt_vec_push(&w->chain, do_alloc_run(bt, 1)))
            return KURA_ENOMEM;
    for (size_t j = 0; j < bt->freev.n; j++)
        if (bt_vec_push(&w->all, bt->freev.v[j]))
            return KURA_ENOMEM;
    for (size_t j = 0; j < bt->pend.n; j++)
        if (bt_vec_push(&w->all, bt->pend.v[j]))
            return KURA_ENOMEM;
    for (size_t j = 0; j < bt->flpages.n; j++)
        if (bt_vec_push(&w->all, bt->flpages.v[j]))
            return KURA_ENOMEM;
    if (!(w->pages = malloc((bt->ndirty + 1) * sizeof(*w->pages))) ||
        !(w->fl = calloc(1, bt->psiz)))
        return KURA_ENOMEM;
    return KURA_OK;
}

/* Step 2's start, with the lock held, which it lets go: the dirty pages
 * made ready to write and frozen, and the meta page filled. */
static void do_ckpt_freeze(btree *bt, ckpt_work *w, bt_meta *mt)
{
    /* 2. the dirty pages, in file order, made ready to write (a
     * compressible page's gap zeroed, every page sealed) */
    size_t nd = 0;
    bt_page **pages = w->pages;
    for (bt_page *p = bt->dirty.next; p != &bt->dirty; p = p->next)
        pages[nd++] = p;
    qsort(pages, nd, sizeof(*pages), cmp_page);
    for (size_t j = 0; j < nd; j++) {
        bt_pz_prep(bt, pages[j]->data);
        pg_seal(pages[j]->data, bt->psiz);
    }
    w->nd = nd;

    /* The tree as of P is what these pages and the meta page say.  Freeze
     * it: its pages become clean and belong to a finished checkpoint, so a
     * change from now on copies them to new numbers instead of writing
     * them in place (and, while this checkpoint writes them, to a copy of
     * the object too: do_page_touch); pinned, so no eviction frees them;
     * the pages freed up to now wait in a list of their own for this meta
     * page.  Then the writes and the syncs run with the lock let go, so
     * reads and changes go on meanwhile. */
    fill_meta(bt, mt, w->k ? w->chain.v[0] : 0, w->all.n, &w->state, w->ta.t.seg, w->ta.t.off);
    for (size_t j = 0; j < nd; j++) {
        bt_page *p = pages[j];
        p->prev->next = p->next;
        p->next->prev = p->prev;
        p->dirty = false;
        p->writing = true;
        p->pins++;
        p->next = bt->lru.next;
        p->prev = &bt->lru;
        bt->lru.next->prev = p;
        bt->lru.next = p;
    }
    bt->ndirty = 0;
    bt->txn++;
    w->pend = bt->pend;
    memset(&bt->pend, 0, sizeof(bt->pend));
    do_ckpt_flag(bt, &bt->ckpt_busy, true);
    do_ckpt_flag(bt, &bt->ckpt_writing, true);
    bt_unlock(bt);
}

/* Step 2's writes, without the lock (which it takes for a moment after
 * them): the pages, then the free list's. */
static int ckpt_write_pages(btree *bt, ckpt_work *w, bt_meta *mt)
{
    bool zipped = false, written = false;
    int rc = write_tree(bt, w->pages, w->nd, &w->chain, &w->all, w->fl, mt->txn, &zipped,
                        &written);
    /* the meta page written after compressed pages names them: from it on,
     * an older kurad must refuse the file */
    if (zipped && mt->version < BT_VERSION_ZPAGES)
        mt->version = BT_VERSION_ZPAGES;
    /* the pages are done with: unpinned for the syncs (evictable, as clean
     * pages in the file), or, if not written, dirty again in this
     * checkpoint (their numbers are in no durable meta page); those changed
     * or freed meanwhile were left to this checkpoint, and go now */
    bt_wrlock(bt);
    do_ckpt_pages_done(bt, w->pages, w->nd, written);
    if (zipped && bt->version < BT_VERSION_ZPAGES)
        bt->version = BT_VERSION_ZPAGES;        /* the file holds compressed pages */
    do_ckpt_flag(bt, &bt->ckpt_writing, false);
    bt_unlock(bt);
    return rc;
}

/* Steps 0 and 3 to 5, without the lock, after the writes (rc: theirs):
 * the log up to P and the pages durable, then the meta page into the slot
 * given and durable.  Sets w->stopped when a sync failed. */
static int ckpt_write_meta(btree *bt, ckpt_work *w, const bt_meta *mt, int slot, int rc)
{
    /* 0. the log up to P durable: the meta page says "replay from P", so a
     * log cut short of P by a power loss (-sync none, interval) would
     * leave the records appended after the next open behind P;
     * 3. the pages durable before the meta page names them */
    if (rc) {
        /* not written: no sync, no meta page */
    } else if (!bt->replaying && (rc = sl_commit(&bt->log, w->ta.t.lsn))) {
        w->stopped = true;
    } else if (bt->io->fdatasync(bt->io, bt->fd) != 0) {
        sl_fail(&bt->log, "the tree file's checkpoint sync", errno);
        rc = KURA_EFAILED;
        w->stopped = true;
    }
    /* 4, 5. the meta page, into the other slot */
    unsigned char mb[META_LEN];
    meta_encode(mb, mt);
    if (!rc && kio_pwrite_all(bt->io, bt->fd, mb, META_LEN, (off_t)slot * 4096) != 0) {
        rc = sl_errno_status(errno);
        bt_log(bt, KURA_LOG_ERROR, "%s/tree: meta page not written: %s", bt->dir,
               strerror(errno));
        atomic_fetch_add_explicit(&bt->ckpt_errors, 1, memory_order_relaxed);
    } else if (!rc && bt->io->fdatasync(bt->io, bt->fd) != 0) {
        /* the meta page may be on the disk or not: nothing is written
         * after a failed sync, so the pages it names stay as they are */
        sl_fail(&bt->log, "the tree file's meta page sync", errno);
        rc = KURA_EFAILED;
        w->stopped = true;
    }
    return rc;
}

/* The new meta page in `slot` is durable (the lock held): the old root's
 * pages may go, the log before P too, and the file's free end. */
static void do_ckpt_done(btree *bt, ckpt_work *w, int slot)
{
    bt->meta_slot = slot;
    vec_append(&bt->freev, &w->pend);
    vec_append(&bt->freev, &bt->flpages);
    bt->free_sorted = false;
    free(bt->flpages.v);
    bt->flpages = w->chain;
    memset(&w->chain, 0, sizeof(w->chain));
    bt->ckpt_seg = w->ta.t.seg;
    bt->ckpt_off = w->ta.t.off;
    bt->ckpt_lsn = w->ta.t.lsn;
    atomic_fetch_add_explicit(&bt->checkpoints, 1, memory_order_relaxed);
    ckpt_work_free(w);
    do_evict(bt);
    do_wal_trim(bt);
    if (w->trimmed) {
        atomic_fetch_add_explicit(&bt->trimmed_pages, w->trimmed, memory_order_relaxed);
        cut_file(bt);
    }
}

int do_checkpoint(btree *bt)
{
    int rc;
    /* one at a time: another may be in its syncs, with the lock let go */
    do_ckpt_wait(bt);
    if ((rc = sl_failed(&bt->log)))
        return rc;
    ckpt_work w;
    memset(&w, 0, sizeof(w));
    if (!do_ckpt_take_p(bt, &w))
        return KURA_OK;
    if ((rc = do_ckpt_freelist(bt, &w))) {
        /* the list's pages go back; nothing else changed */
        for (size_t j = 0; j < w.chain.n; j++)
            do_free_pgno(bt, w.chain.v[j], 1, true);
        untrim(bt, w.np_before, w.trimmed);
        ckpt_work_free(&w);
        return rc;
    }
    bt_meta mt;
    do_ckpt_freeze(bt, &w, &mt);

    KURA_TEST_CALL(tree_ckpt_writing);

    int slot = bt->meta_slot ^ 1;
    rc = ckpt_write_pages(bt, &w, &mt);
    rc = ckpt_write_meta(bt, &w, &mt, slot, rc);
    bt_wrlock(bt);
    do_ckpt_flag(bt, &bt->ckpt_busy, false);
    if (rc) {
        /* the previous meta page is the durable one: the pages freed wait
         * for the next, and so do the list's pages (a meta page that may
         * name them could be on the disk).  The frozen pages stay as they
         * are in the file (synced, unless writes stopped for good). */
        vec_append(&bt->pend, &w.pend);
        if (!w.stopped)
            vec_append(&bt->pend, &w.chain);
        untrim(bt, w.np_before, w.trimmed);
        ckpt_work_free(&w);
        return rc;
    }
    do_ckpt_done(bt, &w, slot);
    return KURA_OK;
}

/* Loads the free list the meta page names. */
static int load_freelist(btree *bt, uint64_t head, uint64_t nfree, char *err, size_t errlen)
{
    unsigned char *b = malloc(bt->psiz);
    uint64_t seen = 0, pg = head, hops = 0;
    int rc = KURA_OK;
    if (!b)
        return KURA_ENOMEM;
    while (pg) {
        ssize_t r = bt->io->pread(bt->io, bt->fd, b, bt->psiz, (off_t)(pg * bt->psiz));
        if (r != (ssize_t)bt->psiz || pg_verify(b, bt->psiz, pg, BT_FREELIST) ||
            pg_n(b) > (bt->psiz - BT_HDR) / 8 || ++hops > bt->npages) {
            snprintf(err, errlen, "%s/tree: the free list's page %llu (offset %llu) fails its "
                     "checks", bt->dir, (unsigned long long)pg,
                     (unsigned long long)(pg * bt->psiz));
            rc = KURA_ECORRUPT;
            break;
        }
        if ((rc = bt_vec_push(&bt->flpages, pg)))
            break;
        for (unsigned e = 0; e < pg_n(b); e++) {
            uint64_t x = bt_get64(b + BT_HDR + 8 * e);
            if (x < 2 || x >= bt->npages) {
                snprintf(err, errlen, "%s/tree: the free list names page %llu, outside the "
                         "file", bt->dir, (unsigned long long)x);
                rc = KURA_ECORRUPT;
                goto out;
            }
            if ((rc = bt_vec_push(&bt->freev, x)))
                goto out;
            seen++;
        }
        pg = pg_link(b);
    }
    if (!rc && seen != nfree) {
        snprintf(err, errlen, "%s/tree: the free list holds %llu pages, the meta page says "
                 "%llu", bt->dir, (unsigned long long)seen, (unsigned long long)nfree);
        rc = KURA_ECORRUPT;
    }
out:
    free(b);
    return rc;
}

int bt_meta_read(btree *bt, char *err, size_t errlen)
{
    unsigned char b[2][META_LEN];
    bt_meta m[2];
    const char *why[2] = { "cannot be read", "cannot be read" };
    int ok[2];
    for (int s = 0; s < 2; s++) {
        ssize_t r = bt->io->pread(bt->io, bt->fd, b[s], META_LEN, (off_t)s * 4096);
        ok[s] = r == META_LEN && meta_decode(b[s], &m[s], &why[s]) == KURA_OK;
    }
    if (!ok[0] && !ok[1]) {
        snprintf(err, errlen, "%s/tree: no valid meta page (page 0: %s; page 1: %s)",
                 bt->dir, why[0], why[1]);
        return KURA_ECORRUPT;
    }
    int s = ok[0] && ok[1] ? (m[1].txn > m[0].txn) : ok[1];
    bool blank = true;          /* a slot never written (a new file) is no news */
    for (size_t i = 0; i < META_LEN && blank; i++)
        blank = b[s ^ 1][i] == 0;
    if (!ok[s ^ 1] && !blank)
        bt_log(bt, KURA_LOG_INFO, "%s/tree: meta page %d %s (the other one is used)", bt->dir,
               s ^ 1, why[s ^ 1]);
    const bt_meta *mt = &m[s];
    if (bt->psiz_given && bt->psiz != mt->psiz)
        bt_log(bt, KURA_LOG_INFO, "%s: page size %u from the file (psiz=%zu ignored)",
               bt->dir, mt->psiz, bt->psiz);
    bt->psiz = mt->psiz;
    /* a version 1 file is written as 2 (overflow runs may be compressed
     * from now on); 3 stays 3 (compressed pages may remain), 4 stays 4 */
    bt->version = mt->version < BT_VERSION_RUNS ? BT_VERSION_RUNS : mt->version;
    bt->meta_slot = s;
    bt->txn = mt->txn + 1;
    bt->root = mt->root;
    bt->height = mt->height;
    bt->npages = mt->npages;
    bt->ckpt_seg = mt->wal_seg;
    bt->ckpt_off = mt->wal_off;
    bt->state = mt->state;
    bt->items = mt->items;
    bt->bytes = mt->bytes;
    bt->max_cas_seen = mt->max_cas_seen;
    return load_freelist(bt, mt->fl_head, mt->nfree, err, errlen);
}

int bt_create_file(btree *bt, char *err, size_t errlen)
{
    unsigned char *pg = calloc(1, bt->psiz);
    unsigned char mb[META_LEN];
    int fd = -1, rc = KURA_ENOMEM;
    const kura_io *io = bt->io;
    if (!pg)
        goto out;
    (void)io->unlinkat(io, bt->dirfd, "tree.tmp", 0);
    fd = io->open(io, bt->dirfd, "tree.tmp", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        goto syserr;
    pg_init(pg, bt->psiz, BT_LEAF, 2, 1);
    pg_seal(pg, bt->psiz);
    bt_meta m = { .version = BT_VERSION_RUNS, .psiz = (uint32_t)bt->psiz, .txn = 1, .root = 2, .npages = 3, .height = 1,
                  .wal_seg = 1, .wal_off = SL_SEG_HDR };
    meta_encode(mb, &m);
    if (kio_pwrite_all(io, fd, mb, META_LEN, 0) != 0 ||
        kio_pwrite_all(io, fd, pg, bt->psiz, (off_t)(2 * bt->psiz)) != 0 ||
        io->fdatasync(io, fd) != 0)
        goto syserr;
    io->close(io, fd);
    fd = -1;
    if (io->renameat(io, bt->dirfd, "tree.tmp", bt->dirfd, "tree") != 0 ||
        io->fsync(io, bt->dirfd) != 0)
        goto syserr;
    rc = KURA_OK;
    goto out;
syserr:
    snprintf(err, errlen, "%s: cannot create the tree file: %s", bt->dir, strerror(errno));
    rc = sl_errno_status(errno);
out:
    if (fd >= 0)
        io->close(io, fd);
    free(pg);
    return rc;
}

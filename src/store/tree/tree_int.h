/*
 * tree_int.h - private to the B+ tree backend (src/store/tree/tree*.c).
 *
 * The tree (docs/formats.md, "The B+ tree") is a database directory
 * "x.kb" holding:
 *   - `tree`: fixed-size pages.  Pages 0 and 1 are the two meta pages,
 *     written alternately, each naming a root, the free-page list and the
 *     log position the tree is complete up to; every other page is a branch,
 *     a leaf, the first page of an overflow run (a large value) or a page of
 *     the free list.  Pages are copy-on-write: a page reachable from a meta
 *     page on disk is never written again until a later meta page has been
 *     made durable without it.
 *   - a write-ahead log of records (src/log/ seglog, the same module the
 *     hash file appends to): every change is appended there before it is
 *     applied to the tree in memory, so group commit, -sync always and
 *     kill -9 are served by the log; the tree's pages reach the file only
 *     at a checkpoint (tree_commit.c), which then lets the log before it go.
 *   - LOCK: flock'ed while open.
 *
 * Files, one job each: tree_page.c the page format (cells, slots, build),
 * tree_cache.c the page cache (bounded by pccap) and page allocation,
 * tree_search.c descent and the cursor, tree_insert.c insert with splits,
 * tree_delete.c delete with merges and redistribution, tree_commit.c
 * checkpoints and meta pages, tree_wal.c the log's records and replay,
 * tree_zcomp.c compressed overflow runs, tree_pzcomp.c compressed leaf and
 * branch pages and reading a page, tree_check.c the structure check,
 * tree_salvage.c -recover, tree_pack.c moving pages off the file's end at
 * a close, tree_lock.c the tree lock, tree.c the store operations, threads
 * and open/close.
 *
 * Concurrency (docs/design.md, "Tree reads in parallel"): the tree lock
 * (tree_lock.c: bt_rdlock, bt_wrlock, bt_unlock) is a reader-writer lock
 * whose readers each take a slot of their own.  Reads (get, iterate,
 * stats) hold it shared and never wait for one another; every change, a
 * checkpoint, the sweep and close hold it exclusive.  Readers share only
 * the page cache, which has a short mutex of its own (bt->cmu: changes to
 * the hash, the lists, pins, the spare and limbo page objects; a page is
 * read from the file without it; a get's hits take no lock at all and pin
 * nothing: tree_cache.c), the cache of large values (bt->vmu) and
 * per-thread scratch (tlbuf: an overflow value, a decompressed one, a
 * compressed page).  A page's bytes change only under the exclusive lock,
 * so a reader reads a pinned page, or a get an unpinned one, with no lock
 * but the shared one.  The
 * log's group commit waits happen outside the lock, and so do a
 * checkpoint's writes and syncs (it lets the lock go for them: whoever
 * calls do_checkpoint, or do_write_begin, must hold no path across the
 * call; a page it writes is pinned and changed only through a copy).
 * Functions named do_* run with bt->rw held: exclusive, unless they say
 * "shared" (do_descend, do_descend_last, do_next_leaf, do_prev_leaf,
 * do_page_get, do_page_unpin, do_path_release, do_ovf_read, bt_page_load may run shared).
 */
#ifndef KURA_TREE_INT_H
#define KURA_TREE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "kura/bytes.h"
#include "kura/dbfile.h"
#include "kura/logf.h"
#include "kura/seglog.h"
#include "kura/store.h"

#define BT_HDR          40              /* bytes of a page header */
#define BT_META_MAGIC   "KURATREE"
#define BT_WAL_MAGIC    "KURATWAL"
#define BT_VERSION      4               /* of the tree file: 2 added compressed
                                           overflow runs (leaf cells of kind 2),
                                           3 compressed leaf and branch pages,
                                           4 keys over 255 bytes (a cell's klen
                                           goes on in spare bits: tree_page.c);
                                           version 1 files open and are written
                                           as 2 from their next checkpoint, as
                                           3 once a page is compressed, as 4
                                           once a key over 255 bytes is stored */
#define BT_VERSION_RUNS 2
#define BT_VERSION_ZPAGES 3
#define BT_VERSION_LONGKEYS 4
#define BT_VERSION_MIN  1
#define BT_WAL_VERSION  3               /* of the log's records: 2 added RUN
                                           records (a large value named by
                                           its run, not carried), 3 keys over
                                           255 bytes (the type byte's top 5
                                           bits hold klen's bits 8..12);
                                           segments of versions 1 and 2 are read */
#define BT_WAL_VERSION_RUNS 2
#define BT_WAL_VERSION_MIN 1
#define BT_RUN_DESC     24              /* a RUN record's body after the key */
#define BT_MAX_DEPTH    40
#define BT_REC_HDR      32              /* bytes of a log record's head */
#define BT_REC_MAGIC    0x744b          /* "Kt" little-endian */
#define BT_LEAF_MIN     7               /* leaf cell head: klen, hlen, kind, four varints */
#define BT_LEAF_HDR_MAX 33              /* ... at most (3 + 5 + 5 + 10 + 10) */
#define BT_BRANCH_FIXED 9               /* branch cell bytes before the key */
#define BT_INLINE_MAX   (BT_LEAF_HDR_MAX + 250 + 2048)  /* the largest cell holding
                                                           its value inline */
#define BT_CELL_MAX     (BT_LEAF_HDR_MAX + KURA_KEY_MAX + 2048) /* a cell buffer's size */
#define BT_OVF_REF_MAX  13              /* a leaf cell's bytes naming an overflow run */
#define BT_CHILD_MASK   0x00ffffffffffffffull   /* a branch cell's child: the top
                                                   byte holds klen's bits 8..15 */

enum bt_type { BT_META = 1, BT_BRANCH = 2, BT_LEAF = 3, BT_OVERFLOW = 4, BT_FREELIST = 5 };
enum bt_rec_type { BT_REC_PUT = 1, BT_REC_DEL = 2, BT_REC_STATE = 3, BT_REC_RUN = 4 };

/* A page in the cache.  Header fields of the page live in data (see
 * tree_page.c); pgno and txn are copies kept for the cache's use. */
typedef struct bt_page {
    uint64_t pgno;
    uint64_t txn;               /* the checkpoint it belongs to: == bt->txn
                                   means it was made since the last one and
                                   may be changed in place */
    _Atomic(struct bt_page *) hnext; /* hash chain (gets walk it without cmu) */
    struct bt_page *prev, *next;/* the LRU list (clean) or the dirty list;
                                   next: the spares, the limbo */
    unsigned pins;
    bool dirty;
    _Atomic bool ref;           /* used since eviction last passed it (set
                                   by gets without cmu: relaxed) */
    bool writing;               /* a checkpoint writes it with rw let go: its
                                   bytes and number do not change (a change
                                   goes to a copy: do_page_touch) */
    bool orphan;                /* writing, and out of the cache since (touched
                                   or freed): the checkpoint frees it */
    uint64_t retired;           /* evicted at this epoch (the limbo) */
    unsigned char data[];       /* psiz bytes */
} bt_page;

/* A growable array of page numbers. */
typedef struct bt_vec {
    uint64_t *v;
    size_t n, cap;
} bt_vec;

/* The way from the root to a leaf. */
typedef struct bt_path {
    int depth;
    bt_page *pg[BT_MAX_DEPTH];
    int idx[BT_MAX_DEPTH];      /* branch: child taken; leaf: lower bound */
    bool found;                 /* the leaf's cell idx holds the key */
    bool unpinned;              /* a get's: no page pinned (tree_cache.c) */
} bt_path;

/* The path of the last put (tree_search.c, do_descend_write): the next
 * change whose key the leaf's range holds starts from it instead of a
 * descent.  Its pages are this checkpoint's and dirty, so no eviction
 * frees them; it holds while the checkpoint (txn) and the tree's shape
 * (bt->wshape: every split, share and removal moves it) stay as they were
 * when it was kept. */
typedef struct bt_wpath {
    uint64_t txn, shape;
    int depth;                  /* 0: none kept */
    bt_page *pg[BT_MAX_DEPTH];
    int idx[BT_MAX_DEPTH];      /* the child taken at each branch */
} bt_wpath;

/* A reader's slot in the tree lock (tree_lock.c): two cache lines of its
 * own (x86 fetches lines in pairs).  state: 0 idle, else the epoch the
 * reader entered at << 1 | 1; hits: the page cache hits of gets in the
 * slot (only its reader writes). */
#define BT_RSLOTS 64
typedef struct bt_rslot {
    _Alignas(128) _Atomic uint64_t state;
    _Atomic uint64_t hits;
} bt_rslot;

/* A decoded leaf cell. */
typedef struct bt_cell {
    const char *key;
    size_t klen;
    uint32_t flags;
    int64_t exptime;
    uint64_t cas;
    uint32_t vlen;
    bool ovf;                   /* the value is in an overflow run */
    uint64_t ovf_pgno;
    uint32_t ovf_bytes;         /* the run's stored bytes (vlen if not compressed) */
    uint8_t ovf_codec;          /* kura_codec: 0 none (kind 1), else kind 2 */
    const unsigned char *val;   /* inline value */
} bt_cell;

/* Where a value lives that is not inline: its overflow run. */
typedef struct bt_ovf {
    uint64_t pgno;
    uint32_t bytes;             /* stored: compressed, or the value's length */
    uint8_t codec;              /* kura_codec */
    uint32_t vcrc;              /* CRC-32C of the value (as given, before
                                   compression): set by do_ovf_write, named
                                   by a RUN record */
} bt_ovf;

/* A large value kept once read and verified (tree_vcache.c): named by its
 * run's first page, with the identity of the cell that named the run. */
typedef struct bt_vent {
    uint64_t pgno, cas;
    uint32_t bytes, vlen;
    uint8_t codec;
    bool ref;                   /* used since eviction last passed it */
    bool listed;                /* in the table and on the list */
    unsigned refs;              /* gets using it (and the reader that made it) */
    size_t size;                /* bytes charged to the bound */
    struct bt_vent *hnext, *prev, *next;
    const unsigned char *val;   /* the value, in buf */
    unsigned char *buf;         /* the bytes read: just past the struct */
} bt_vent;

/* A decoded log record. */
typedef struct bt_rec {
    uint8_t type;
    uint16_t klen;
    uint32_t vlen;
    uint32_t flags;
    int64_t exptime;
    uint64_t cas;
    const char *key;
    const unsigned char *val;   /* RUN: the run's descriptor (BT_RUN_DESC) */
} bt_rec;

typedef struct btree {
    kura_store base;
    kura_store_config cfg;
    const kura_io *io;
    char *dir;
    int dirfd, lockfd, fd;
    size_t psiz;
    bool psiz_given;            /* psiz= named (a file keeps its own) */
    size_t cell_max;            /* largest leaf cell (a third of a page's room):
                                   inline values up to BT_INLINE_MAX */
    size_t blksize;             /* the file system's block (st_blksize): a
                                   compressed page must free at least one */
    uint32_t version;           /* the format version the next meta page says */

    /* the tree lock (tree_lock.c): everything below (shared by readers,
     * exclusive by changes) */
    bt_rslot *rslot;            /* BT_RSLOTS readers' slots */
    _Atomic unsigned rslot_hi;  /* the slots ever taken are below it */
    _Atomic uint64_t rover, rover_get; /* readers inside that found no slot
                                   free (by bt_rdlock, by bt_rdlock_get) */
    _Atomic bool wflag;         /* a writer holds or waits for the lock */
    pthread_mutex_t wmu;        /* writers' (readers wait on it for one) */
    _Atomic uint64_t epoch;     /* moved at each eviction (tree_cache.c) */
    pthread_mutex_t cmu;        /* the cache's hash changes, lists, pins,
                                   spare and limbo objects while readers
                                   share the lock */

    /* the cache (tree_cache.c) */
    _Atomic(bt_page *) *htab;  /* written under cmu, read by gets without */
    size_t hmask;
    size_t ncached, cap;        /* pages held; the bound from pccap */
    bt_page lru;                /* sentinel: clean pages, most recent first */
    bt_page dirty;              /* sentinel: dirty pages */
    size_t ndirty;
    bt_page *spare;             /* page objects kept for reuse (via next) */
    size_t nspare;
    bt_page *limbo, *limbo_tail;/* evicted while a get may still read them
                                   (via next, oldest first) */
    size_t nlimbo;

    /* the cache of large values (tree_vcache.c), under vmu */
    pthread_mutex_t vmu;
    bt_vent **vtab;             /* NULL: no cache (vcache=0) */
    size_t vmask;
    bt_vent vhead;              /* sentinel: most recent first */
    size_t vbytes, vcap, nvent; /* bytes held; the bound; entries */

    /* the tree */
    uint64_t root;
    unsigned height;            /* levels: 1 = the root is a leaf */
    uint64_t gen;               /* changes at every exclusive bt_wrlock (from
                                   a number no other open used): a thread's
                                   last leaf (tree_search.c) holds while it
                                   stays the same */
    uint64_t txn;               /* the checkpoint being built */
    uint64_t wshape;            /* moves at every change to the leaves'
                                   ranges or the pages' places in the tree
                                   (splits, shares, removals): a kept
                                   path (wpath) holds while it stays */
    bt_wpath wpath;
    uint64_t npages;            /* pages in the file's used part */
    uint64_t items, bytes;      /* usage, as memcached counts bytes */
    int meta_slot;              /* the slot of the newest meta page */

    /* free space */
    bt_vec freev;               /* free pages that may be reused now */
    bool free_sorted;
    bt_vec pend;                /* freed since the last checkpoint: reusable
                                   once the next meta page is durable */
    bt_vec flpages;             /* pages of the free list the meta names */

    /* the engine's state, under state_mu (not mu: the engine saves it from
     * its change feed, which a put calls with mu held); lock order mu ->
     * state_mu -> the log's locks.  The highest cas stored: written under
     * mu, read relaxed by load_state. */
    pthread_mutex_t state_mu;
    kura_store_state state;
    uint64_t max_cas_seen;

    /* the log */
    sl_log log;
    uint32_t ckpt_seg;          /* where the meta page's tree is complete up to */
    uint64_t ckpt_off;
    uint64_t ckpt_lsn;          /* sl_lsn at the last checkpoint */
    uint64_t wal_roll_min;      /* a checkpoint seals a segment holding this much */
    bool closing;               /* the close's checkpoint: it seals any records */
    bool ckpt_busy;             /* a checkpoint is in its syncs, rw let go
                                   (written under rw exclusive and ckpt_mu) */
    bool ckpt_writing;          /* ... and in its writes, its pages pinned
                                   (written as ckpt_busy) */
    pthread_mutex_t ckpt_mu;    /* for ckpt_cv */
    pthread_cond_t ckpt_cv;     /* ckpt_busy or ckpt_writing went false */
    bool wal_started;           /* sl_start done: appends and trims allowed */
    bool wal_runs;              /* the active segment is of BT_WAL_VERSION:
                                   RUN records may go into it */
    /* Large values are written once, into their run, and the log's RUN
     * record names the run (tree_wal.c): the log's sync is preceded by the
     * tree file's (bt_wal_presync) whenever a run was written since the
     * last.  run_writes counts runs written (after the write returned),
     * run_synced the count a sync of the tree file covered. */
    _Atomic uint64_t run_writes, run_synced;
    /* write-behind (bg_writebehind in tree.c): run_bytes counts the bytes
     * of runs written; once wbehind more than wb_hinted have been, the
     * background thread starts their writeback (the log's own is seglog's) */
    _Atomic uint64_t run_bytes, wb_hinted;  /* wb_hinted: written by the
                                               background thread, read by stats */
    uint64_t wbehind;
    /* replay: the runs RUN records from the meta page's log position name
     * (pairs of first page, pages), taken out of the free pages before
     * replay, in log order; replay_run_next: the next one replay reaches */
    bt_vec replay_runs;
    size_t replay_run_next;
    int salvage_fd;             /* -recover's replay: the damaged file, whose
                                   pages RUN records name (-1: none) */
    uint64_t salvage_npages;
    bool replaying;             /* open: a checkpoint is as of wal_at */
    uint32_t wal_at_seg;
    uint64_t wal_at_off;

    /* scratch of changes (rw exclusive); a read's is its thread's (tlbuf:
     * TLB_TREE_OVF, TLB_TREE_ZRAW, TLB_TREE_PAGE) */
    unsigned char *scr[2];      /* two pages */
    const unsigned char **cptr; /* cells gathered for a split or a merge */
    uint16_t *clen;
    size_t ccap;
    unsigned char *pz_out;      /* a page compressed (bt_pz_out_size) */
    unsigned char sweep_key[KURA_KEY_MAX];
    size_t sweep_klen;

    /* parameters */
    uint64_t ckpt_bytes;
    int zcomp;                  /* kura_codec for new overflow runs and pages (#zcomp) */
    bool punch_off;             /* the file system refused to punch a hole */
    double inline_retry_at;     /* a writer's checkpoint failed: not before */
    uint64_t reclaimed;         /* dead items removed (usage) */
    uint64_t flushed_gone;      /* of those, under the flush watermark (store.h) */
    uint64_t flushed_gone_bytes;

    /* background thread; and the interval syncer (-sync interval only) */
    kura_bg bg;
    double bg_last_ckpt, bg_retry_at, bg_backoff;  /* the background thread's own */

    /* statistics (atomic: readers count too; read relaxed) */
    _Atomic uint64_t checkpoints, splits, merges, redistributions, cache_hits,
                     cache_misses, corrupt_reads, read_errors, skipped_rebalances,
                     recovered_records, ckpt_errors, shares, trimmed_pages, packed_pages,
                     zcomp_runs, zcomp_saved,   /* compressed runs written, bytes saved */
                     zcomp_pages, zcomp_page_saved, /* ... pages, bytes punched out */
                     punch_errors, run_records,
                     vc_hits, vc_misses;        /* large values from tree_vcache.c */
    uint64_t wal_cut;

    /* values held beyond a get (tree_vref.c): holds, plus BT_VREF_CLOSED
     * once destroy() is done (the last of both frees bt); their bytes */
    _Atomic size_t vc_pins;
    _Atomic uint64_t vc_held_bytes;
} btree;

/* ---- the tree lock (tree.c) ---------------------------------------------- */

int bt_lock_init(btree *bt);
void bt_lock_destroy(btree *bt);
/* Shared, reading only pages it pins (a walk, stats, an overflow's recheck):
 * holds no evicted page object back, however long it stays inside. */
void bt_rdlock(btree *bt);
/* Shared, for a get, which may read pages unpinned (do_descend_get): no
 * object evicted after it entered is reused until it leaves, so it holds
 * the lock for one lookup and its callback only. */
void bt_rdlock_get(btree *bt);
void bt_wrlock(btree *bt);
void bt_unlock(btree *bt);
/* The calling thread's slot in the lock it holds on bt by bt_rdlock_get:
 * >= 0 its slot, -1 counted in rover_get; -2 otherwise (bt_rdlock,
 * exclusive, not held): then it must pin what it reads. */
int bt_reader_slot(const btree *bt);
/* The lowest epoch a get inside entered at (0: one in rover_get;
 * above any epoch: none inside).  Sequentially consistent loads. */
uint64_t bt_reader_min_epoch(btree *bt);
/* the cache hits counted in the readers' slots */
uint64_t bt_reader_hits(btree *bt);
/* Exclusive: returns once no checkpoint is in its syncs (rw let go while
 * it waits, so the tree may change meanwhile). */
void do_ckpt_wait(btree *bt);
/* The same until no checkpoint is in its writes. */
void do_ckpt_write_wait(btree *bt);
/* Sets a flag of the checkpoint's (ckpt_busy, ckpt_writing): rw exclusive;
 * false wakes its waiters. */
void do_ckpt_flag(btree *bt, bool *flag, bool on);
/* Gives back a thread's read buffers grown past 1 MiB by a large value. */
void bt_read_bufs_trim(void);

/* ---- tree_page.c ------------------------------------------------------- */

/* inline: a descent reads a child number per level, a split writes them
 * by the hundred.  On a little-endian host the file's order is the
 * host's: one load or store each.  bytes.h's byte-wise stores are not
 * always merged into one (a log record's head took 60 instructions of
 * byte shuffling in wal_append); elsewhere they are bytes.h's. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline uint16_t bt_get16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline void bt_put16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }
static inline uint32_t bt_get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline void bt_put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static inline uint64_t bt_get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void bt_put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
#else
static inline uint16_t bt_get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline void bt_put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static inline uint32_t bt_get32(const unsigned char *p) { return get32(p); }
static inline void bt_put32(unsigned char *p, uint32_t v) { put32(p, v); }
static inline uint64_t bt_get64(const unsigned char *p) { return get64(p); }
static inline void bt_put64(unsigned char *p, uint64_t v) { put64(p, v); }
#endif

static inline int pg_type(const unsigned char *d) { return d[4]; }
static inline unsigned pg_n(const unsigned char *d) { return bt_get16(d + 6); }
static inline uint64_t pg_link(const unsigned char *d) { return bt_get64(d + 24); }
static inline void pg_set_link(unsigned char *d, uint64_t v) { bt_put64(d + 24, v); }
static inline unsigned char *pg_cell(unsigned char *d, unsigned i)
{
    return d + bt_get16(d + BT_HDR + 2 * i);
}
static inline const unsigned char *pg_ccell(const unsigned char *d, unsigned i)
{
    return d + bt_get16(d + BT_HDR + 2 * i);
}
void pg_init(unsigned char *d, size_t psiz, int type, uint64_t pgno, uint64_t txn);
size_t pg_cell_len(int type, const unsigned char *c);
size_t pg_free(const unsigned char *d, size_t psiz);
size_t pg_used(const unsigned char *d, size_t psiz);
void pg_cell_key(const unsigned char *c, int type, const char **key, size_t *klen);
/* memcmp's order, 8 bytes at a time (as big-endian words) without a call:
 * the binary search of a page spends its time here */
static inline int bt_keycmp(const char *a, size_t al, const char *b, size_t bl)
{
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    size_t n = al < bl ? al : bl;
    for (; n >= 8; n -= 8, x += 8, y += 8) {
        uint64_t u, v;
        memcpy(&u, x, 8);
        memcpy(&v, y, 8);
        if (u != v) {
            u = __builtin_bswap64(u);
            v = __builtin_bswap64(v);
            return u < v ? -1 : 1;
        }
    }
    for (; n; n--, x++, y++)
        if (*x != *y)
            return *x < *y ? -1 : 1;
    return al < bl ? -1 : al > bl;
}
/* lower bound of key in the page's cells; *found if equal */
unsigned pg_search(const unsigned char *d, const char *key, size_t klen, bool *found);
uint64_t pg_child(const unsigned char *d, unsigned i);     /* branch: child i (0..n) */
/* The longest key a tree of pages of psiz bytes holds: its leaf cell,
 * naming its value's overflow run, within cell_max (a third of a page), so
 * that a split always finds room; KURA_KEY_MAX at most (4096: 1304 bytes,
 * 8192: 2669, 16384 and more: KURA_KEY_MAX). */
static inline size_t bt_key_max(size_t psiz)
{
    size_t k = (psiz - BT_HDR) / 3 - 2 - BT_LEAF_HDR_MAX - BT_OVF_REF_MAX;
    return k < KURA_KEY_MAX ? k : KURA_KEY_MAX;
}

/* A branch cell's child (its top byte is the key length's: BT_CHILD_MASK). */
static inline uint64_t pg_cell_child(const unsigned char *c)
{
    return bt_get64(c + 1) & BT_CHILD_MASK;
}
void pg_set_child(unsigned char *d, unsigned i, uint64_t pgno);
bool pg_insert(unsigned char *d, size_t psiz, unsigned i, const void *cell, size_t len,
               unsigned char *scratch);
void pg_remove(unsigned char *d, size_t psiz, unsigned i);
void pg_build(unsigned char *d, size_t psiz, uint64_t link, const unsigned char *const *cells,
              const uint16_t *lens, unsigned n);
void pg_leaf_decode(const unsigned char *c, bt_cell *out);
/* ovf NULL: the value (v0 ++ v1) inline; else a reference to its run */
size_t pg_leaf_encode(unsigned char *c, const char *key, size_t klen, uint32_t flags,
                      int64_t exptime, uint64_t cas, uint32_t vlen, const void *v0, size_t l0,
                      const void *v1, size_t l1, const bt_ovf *ovf);
size_t pg_branch_encode(unsigned char *c, const char *key, size_t klen, uint64_t child);
/* checks a page read from pgno: checksum, type (0: any), number, and that
 * its slots and cells lie inside it.  KURA_OK or KURA_ECORRUPT. */
int pg_verify(const unsigned char *d, size_t psiz, uint64_t pgno, int type);
/* the same without the checksum: for a page decompressed from bytes whose
 * own checksum held (tree_pzcomp.c) */
int pg_verify_shape(const unsigned char *d, size_t psiz, uint64_t pgno, int type);
void pg_seal(unsigned char *d, size_t psiz);   /* computes the checksum */

/* ---- tree_cache.c -------------------------------------------------------- */

int bc_init(btree *bt, uint64_t cap_bytes);
void bc_free(btree *bt);
/* the page pgno, pinned, read and checked if not cached (type 0: any) */
int do_page_get(btree *bt, uint64_t pgno, int type, bt_page **out);
/* the same with cmu held by the caller, and 1 for a page of another type
 * too (do_page_get then reports it) */
int do_page_pin_locked(btree *bt, uint64_t pgno, int type, bt_page **out);
/* Shared, for a get: the page pgno, looked up without cmu and not pinned
 * (read and checked if not cached): it stays intact until the caller lets
 * the tree lock go, even if evicted meanwhile (the limbo: tree_cache.c). */
int do_page_get_unpinned(btree *bt, uint64_t pgno, int type, bt_page **out);
/* the same for a cached page only: 1 if not cached (nothing counted) */
int do_page_peek(btree *bt, uint64_t pgno, int type, bt_page **out);
/* rw exclusive (no reader inside): the limbo's objects are reusable */
void bc_quiesce(btree *bt);
size_t bc_limbo_pages(btree *bt);     /* objects in the limbo now */
void do_page_unpin(btree *bt, bt_page *p);
void do_pages_unpin(btree *bt, bt_page *const *pg, int n);    /* one cmu for all */
/* a new page of type, pinned and dirty, its number allocated */
bt_page *do_page_new(btree *bt, int type);
/* makes *pp changeable in this checkpoint: at a new number if it is an
 * older one's (the old number freed); returns its (maybe new) number.  A
 * page a checkpoint is writing is left to it, and *pp becomes a copy
 * (holding the caller's pin). */
uint64_t do_page_touch(btree *bt, bt_page **pp);
/* The checkpoint's pages after their write (rw exclusive again): orphans
 * freed, the others unpinned, and, if they were not written, dirty again
 * (in this checkpoint: their numbers are in no durable meta page). */
void do_ckpt_pages_done(btree *bt, bt_page **pages, size_t n, bool written);
/* frees the page: out of the cache, its number freed */
void do_page_free(btree *bt, bt_page *p);
void do_free_pgno(btree *bt, uint64_t pgno, uint64_t n, bool reusable_now);
/* frees an item's overflow run (its bytes stored): reusable once the next
 * meta page is durable, as a RUN record before it may name the run */
void do_free_run(btree *bt, uint64_t pgno, uint32_t bytes);
uint64_t do_alloc_run(btree *bt, uint64_t n);
/* Takes the free pages that end the file out of freev and the file's
 * used part (never pages 0 to 2); returns how many.  A checkpoint calls it
 * before its free list, so that the meta page names the shorter file. */
uint64_t do_free_trim_tail(btree *bt);
/* The lowest page free now (UINT64_MAX: none). */
uint64_t do_free_lowest(btree *bt);
/* page objects reserved so that a change can complete without malloc */
int do_reserve(btree *bt, size_t n);
void do_evict(btree *bt);
int bt_vec_push(bt_vec *v, uint64_t x);
/* overflow runs (values larger than a cell): written at once, read whole */
size_t bt_ovf_pages(btree *bt, size_t vlen);
/* writes v0 ++ v1 as a run, compressed with bt->zcomp when that saves a
 * page (tree_zcomp.c decides); *out says where and how */
int do_ovf_write(btree *bt, const void *v0, size_t l0, const void *v1, size_t l1, bt_ovf *out);
/* the value of a cell whose value is in a run (decompressed) */
int do_ovf_read(btree *bt, const bt_cell *c, const unsigned char **val);
/* the same from another file of npages pages (a salvage's damaged one) */
int do_ovf_read_fd(btree *bt, int fd, uint64_t npages, const bt_cell *c,
                   const unsigned char **val);
/* the same, neither counted nor logged: for a read made with the tree
 * lock let go, which may meet a run freed and rewritten meanwhile (the
 * caller finds out under the lock whether it was; tree.c).  keep NULL: the
 * value in the thread's scratch; else, if the value is one to keep
 * (bt_vc_wants), read into a new entry of tree_vcache.c, *keep (else NULL) */
int bt_ovf_read_quiet(btree *bt, int fd, uint64_t npages, const bt_cell *c,
                      const unsigned char **val, bt_vent **keep);
void bt_count_error(btree *bt, int rc, uint64_t pgno, const char *what);
/* pwritev of every byte to the tree file (short writes continued);
 * 0 or -1 with errno */
int bt_pwritev_all(btree *bt, struct iovec *iov, int n, off_t off);

/* ---- tree_vcache.c: large values kept once verified ------------------- */

int bt_vc_init(btree *bt, uint64_t cap_bytes);     /* 0: no cache */
void bt_vc_free(btree *bt);
/* Whether the value of cell c (in a run) is one to keep: a cache, and the
 * run no larger than an eighth of its bound. */
bool bt_vc_wants(const btree *bt, const bt_cell *c);
/* Shared: the value of c if kept (its entry referenced in *e: released by
 * bt_vc_release), else NULL. */
const unsigned char *bt_vc_get(btree *bt, const bt_cell *c, bt_vent **e);
void bt_vc_release(btree *bt, bt_vent *e);
/* A new entry (referenced, not listed) for c's value with n bytes of
 * buffer (buf; val set to it), or NULL. */
bt_vent *bt_vc_new(const bt_cell *c, size_t n);
/* Shared, once the cell was found to still name e's run: e kept (unless
 * another reader's copy is); the caller still releases its reference. */
void bt_vc_insert(btree *bt, bt_vent *e);
/* rw exclusive: a put wrote the value v0 ++ v1 to the run (its cell has
 * cas): kept, as a get would keep it once read. */
void do_vc_keep(btree *bt, const bt_ovf *run, uint64_t cas, const void *v0, size_t l0,
                const void *v1, size_t l1);
/* rw exclusive: the run at pgno is freed; its entry goes. */
void do_vc_drop(btree *bt, uint64_t pgno);
size_t bt_vc_bytes(btree *bt);
/* One more reference on e (a get's, which it already holds: e stays). */
void bt_vc_hold(btree *bt, bt_vent *e);

/* ---- tree_vref.c: large values held beyond a get (item.h's kura_vref) -- */

/* owner: the tree, obj: an entry the get holds (its value is the item's) */
extern const kura_vref_ops bt_vref_ops;
/* destroy()'s last step: bt (its cmu) is freed now, or by the last release
 * of a value still held. */
void bt_vref_closed(btree *bt);

/* ---- tree_zcomp.c: compressed overflow runs (#zcomp) ------------------- */

/* The codec (kura_codec) v0 ++ v1 is to be stored with, and the stored
 * bytes in *out (malloc'ed, *outlen long; the caller frees), or 0 (store
 * the value as it is: no zcomp, or compression would not save a page). */
int bt_zcomp_pack(btree *bt, const void *v0, size_t l0, const void *v1, size_t l1, void **out,
                  size_t *outlen);
/* Decompresses a run's bytes into the thread's TLB_TREE_ZRAW buffer:
 * exactly rawlen bytes or KURA_ECORRUPT.  Shared. */
int bt_zcomp_unpack(btree *bt, int codec, const unsigned char *in, size_t inlen, size_t rawlen,
                    const unsigned char **val);

/* ---- tree_pzcomp.c: compressed leaf and branch pages (#zcomp) ---------- */

/* The bytes bt->pz_out needs (0 without zcomp). */
size_t bt_pz_out_size(btree *bt);
/* At a checkpoint, under the lock, before the page is sealed: zeroes the
 * unused gap of a page that may be stored compressed (zeros compress). */
void bt_pz_prep(btree *bt, unsigned char *d);
/* Then, with the lock let go (the page is only read): the page d
 * compressed into bt->pz_out (*out), header included, and the bytes to
 * write, or 0 (write it as it is: no zcomp, not a leaf or branch, or no
 * block would be freed). */
size_t bt_pz_pack(btree *bt, const unsigned char *d, const unsigned char **out);
/* After pgno was written compressed (written bytes): counts it and punches
 * the rest of its slot (a failure only costs the space), unless the slot
 * lay past file_end, where the file ended before the write (-1: unknown). */
void bt_pz_written(btree *bt, uint64_t pgno, size_t written, off_t file_end);
/* Page pgno of the file fd into d (psiz bytes), decompressed if it was
 * stored compressed, and checked (pg_verify, type 0: any): KURA_OK,
 * KURA_ECORRUPT or KURA_EIO.  Shared (the thread's TLB_TREE_PAGE). */
int bt_page_load(btree *bt, int fd, uint64_t pgno, int type, unsigned char *d);

/* ---- tree_salvage.c: -recover ------------------------------------------- */

/* Before the tree file is opened.  With cfg.recover: sets `tree` aside as
 * `tree.damaged` (or drops the partial tree of a salvage cut short), sets
 * bt->psiz to the damaged file's, and *salvage.  Without: refuses while a
 * salvage is unfinished. */
int bt_salvage_begin(btree *bt, bool *salvage, char *err, size_t errlen);
/* mu held, the fresh tree open, before the log's replay: every intact leaf
 * cell of the damaged file (the larger cas wins), then a checkpoint. */
int do_salvage_load(btree *bt, char *err, size_t errlen);
/* once the result is durable: `tree.damaged` becomes `tree.salvaged` */
int bt_salvage_end(btree *bt);

/* ---- tree_search.c ------------------------------------------------------- */

int do_descend(btree *bt, const char *key, size_t klen, bt_path *path);
/* do_descend for a change (tree lock exclusive): from the kept path of
 * the last put (bt->wpath) when its leaf's range holds the key (a load
 * in key order descends once a leaf), else with cmu taken once for the
 * cached part of the path instead of once a level */
int do_descend_write(btree *bt, const char *key, size_t klen, bt_path *path);
/* After a put (rw exclusive): its path kept for the next change, if the
 * tree's shape is still the `shape` it had after the descent and every
 * page of the path is this checkpoint's and dirty. */
void do_wpath_keep(btree *bt, const bt_path *path, uint64_t shape);
/* Every change to the leaves' ranges or the path to a page calls it: a
 * kept path no longer holds. */
static inline void do_wpath_drop(btree *bt) { bt->wshape++; }
/* do_descend for a lookup (shared lock): the thread's last leaf when it
 * holds the key's range, the rest of the path then NULL */
int do_descend_get(btree *bt, const char *key, size_t klen, bt_path *path);
/* a number for bt->gen no other open tree has used */
uint64_t bt_gen_base(void);
void do_path_release(btree *bt, bt_path *path);
/* The same with rw exclusive: no reader is in the cache (nor, with rw let
 * go, a checkpoint: it pins and unpins under rw), so the pins go without
 * taking cmu */
void do_path_release_held(btree *bt, bt_path *path);
/* moves path to the next leaf's first cell: 0, 1 at the end, or an error */
int do_next_leaf(btree *bt, bt_path *path);
/* moves a pinned path to the previous leaf, its idx past the leaf's last
 * cell: 0, 1 at the start, or an error (shared) */
int do_prev_leaf(btree *bt, bt_path *path);
/* do_descend to the last leaf, its idx past the leaf's last cell (shared) */
int do_descend_last(btree *bt, bt_path *path);
int do_touch_path(btree *bt, bt_path *path);

/* ---- tree_insert.c / tree_delete.c --------------------------------------- */

/* Puts the leaf cell at the path's place (replacing the cell there if
 * path->found).  The path is touched; page objects reserved. */
void do_leaf_put(btree *bt, bt_path *path, const unsigned char *cell, size_t len);
/* Inserts a branch cell into level lvl at index i, splitting upward. */
void do_branch_insert(btree *bt, bt_path *path, int lvl, unsigned i, const unsigned char *cell,
                      size_t len);
void do_leaf_remove(btree *bt, bt_path *path);
/* gathers cells for a split; splits cells into page p (kept) and a new one */
unsigned bt_split_point(const uint16_t *lens, unsigned n, size_t room, bool branch);

/* ---- tree_commit.c ------------------------------------------------------- */

int do_checkpoint(btree *bt);
int bt_meta_read(btree *bt, char *err, size_t errlen);
int bt_create_file(btree *bt, char *err, size_t errlen);

/* ---- tree_pack.c --------------------------------------------------------- */

/* At a close: a checkpoint; then, if much of the file is free, the pages
 * near its end moved to the lowest free numbers, and checkpoints that
 * make that durable and cut the file's free end. */
int do_pack(btree *bt);

/* ---- tree_wal.c ---------------------------------------------------------- */

int do_wal_append(btree *bt, int type, const char *key, size_t klen, const void *v0, size_t l0,
                  const void *v1, size_t l1, uint32_t flags, int64_t exptime, uint64_t cas,
                  uint64_t *lsn);
/* A put's record: with run (a run do_ovf_write just wrote for this put,
 * or, kept, the item's run a touch keeps, its vcrc set), a RUN record
 * naming it, if the active segment takes them; otherwise a PUT record
 * carrying the value. */
int do_wal_put(btree *bt, const char *key, size_t klen, const void *v0, size_t l0,
               const void *v1, size_t l1, uint32_t flags, int64_t exptime, uint64_t cas,
               const bt_ovf *run, bool kept, uint64_t *lsn);
/* The log's presync (seglog.h): the tree file's fdatasync when a run was
 * written since the last one.  0 or an errno. */
int bt_wal_presync(void *arg);
int bt_wal_open(btree *bt, char *err, size_t errlen);
int bt_wal_replay(btree *bt, char *err, size_t errlen);
void do_wal_trim(btree *bt);
long long bt_wal_check(void *arg, const unsigned char *p, size_t avail, uint32_t version,
                       size_t *need);

/* ---- tree.c: applying changes (used by replay too) ----------------------- */

/* Stores the item (no log record): 0 or KURA_E*. */
int do_apply_put(btree *bt, bt_path *path, const char *key, size_t klen, uint32_t flags,
                 int64_t exptime, uint64_t cas, const void *v0, size_t l0, const void *v1,
                 size_t l1, const bt_ovf *ovf);
void bt_log_line(void *arg, int level, const char *line);
#define bt_log(bt, level, ...) kura_logf(bt_log_line, bt, level, __VA_ARGS__)
uint64_t bt_item_bytes(size_t klen, size_t vlen, uint32_t flags);

#endif

/*
 * store.h - the storage interface every backend implements.
 *
 * A store maps keys to items (item.h) and knows nothing of the protocol:
 * the engine (engine.h) implements memcached's semantics once, on top of
 * these operations, so every backend behaves the same.  A backend fills in a
 * kura_store_ops table and embeds struct kura_store as its first member.
 *
 * A backend does not interpret changes: it offers one read-modify-write
 * primitive (ops->rmw: under the key's lock, the current item or none is
 * shown to a decision, which says store this, touch it, delete it or leave
 * it), and the conditional put, the delete and the update every caller
 * uses (kura_store_put, kura_store_del, kura_store_update) are interpreted
 * once over it, in src/store/update.c: conditions, cas comparisons, the
 * key and size checks, read-only refusals and the change feed's calls.
 *
 * Contract for every operation:
 *  - thread-safe: any number of worker threads call in at once;
 *  - atomic per key: a put, delete or update is seen whole or not at all;
 *  - liveness: a dead item (kura_item_liveness() != KURA_LIVE under the
 *    clock passed in) is treated exactly as an absent one; a store may
 *    reclaim it when it meets it;
 *  - callbacks (kura_item_fn, kura_update_fn) run with the key's lock held:
 *    they must be short and must not call back into the store;
 *  - keys are 0 to KURA_KEY_MAX bytes (kura_key_ok); other keys are
 *    refused before any lock (KURA_EINVAL, KURA_NOTFOUND for get and del);
 *    a new key past the store's own key_max is KURA_ETOOBIG;
 *  - return KURA_OK (0), a positive outcome (KURA_NOTFOUND, KURA_EXISTS,
 *    KURA_DEAD_*) or a negative error (KURA_E*), see kura_strerror().
 */
#ifndef KURA_STORE_H
#define KURA_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/item.h"
#include "kura/kio.h"
#include "kura/status.h"


/* How a put is conditioned on what is there now. */
enum kura_put_cond {
    KURA_PUT_ANY = 0,           /* set: store whatever is there */
    KURA_PUT_ABSENT,            /* add: only if no live item; else KURA_EXISTS */
    KURA_PUT_PRESENT,           /* replace: only if a live item; else KURA_NOTFOUND */
    KURA_PUT_CAS,               /* cas: only if a live item has this cas;
                                   KURA_NOTFOUND if none, KURA_EXISTS if it differs */
};

/* What an update callback decides to do with the item it was shown. */
enum kura_update_action {
    KURA_UPDATE_KEEP = 0,       /* change nothing */
    KURA_UPDATE_REPLACE,        /* write a new version: flags, exptime, cas, value */
    KURA_UPDATE_TOUCH,          /* change exptime only (flags, cas and value stay) */
    KURA_UPDATE_REMOVE,         /* delete the item (none shown: drop a dead one met) */
};

/* The new version an update callback asks for.  The value is the
 * concatenation of part[0] and part[1]; either may point into the current
 * item (the store copies before it frees anything). */
typedef struct kura_update {
    int action;                 /* enum kura_update_action */
    uint32_t flags;
    int64_t exptime;
    uint64_t cas;
    struct { const void *base; size_t len; } part[2];
} kura_update;

/* Called with a live item.  Its return value is passed through. */
typedef int (*kura_item_fn)(void *arg, const kura_item *it);
/* Called with the live item, or NULL if there is none; fills *out and
 * returns a status that the update operation returns (unless the store
 * then fails to apply *out, when the store's error is returned instead). */
typedef int (*kura_update_fn)(void *arg, const kura_item *cur, kura_update *out);
/* Emits one "stats" line: name and value. */
typedef void (*kura_stat_fn)(void *arg, const char *name, const char *value);

/* Counters every store reports, with memcached's meaning. */
typedef struct kura_store_usage {
    uint64_t curr_items;        /* items stored, dead ones not yet reclaimed included */
    uint64_t bytes;             /* bytes those items use, as memcached counts them */
    uint64_t limit_maxbytes;    /* memory limit (cache) or 0 */
    uint64_t evictions;         /* live items removed to make room */
    uint64_t reclaimed;         /* dead items whose space was reused */
    /* Of the dead items removed so far (reclaimed, swept, dropped), those
     * whose cas was under the flush watermark of the clock they were
     * removed under, and their bytes as `bytes` counted them: with the
     * counters read at a flush, what a flush left is known without a walk
     * (src/engine/count.c). */
    uint64_t flushed_gone, flushed_gone_bytes;
    uint64_t expired_unfetched; /* reclaimed expired items never read */
    uint64_t evicted_unfetched; /* evicted items never read */
    /* The cache's memory as memcached's slab pages would show it (0 in
     * the other stores): its segments in use (page_size bytes each: the
     * pages of `stats slabs`) and all it holds, the index included. */
    uint64_t pages, page_size, mem_used;
} kura_store_usage;

/* The engine's own durable state, kept by the store (a no-op for the cache). */
typedef struct kura_store_state {
    uint64_t max_cas;           /* no cas at or below this has been or will be handed out again */
    uint64_t oldest_cas;        /* flush_all watermark (item.h) */
    int64_t flush_at;           /* pending delayed flush_all: Unix time, 0 = none */
    uint64_t ulog_ts;           /* every update-log row up to this timestamp is in the
                                   store (engine.c replays the rows after it at open) */
} kura_store_state;

typedef struct kura_store kura_store;

/*
 * The read-modify-write primitive (ops->rmw), the one thing a backend does
 * for every change:
 *
 *   rmw(s, key, klen, clk, hint, fn, arg): takes the key's lock, looks the
 *   key up and calls fn(arg, cur, &out) once, with cur the live item under
 *   clk or NULL (none, or a dead one: the store may reclaim a dead one it
 *   meets); out comes zeroed (KURA_UPDATE_KEEP).  A store that fails
 *   before (the item cannot be read, no memory for a new slot) returns its
 *   error without calling fn, so nothing was fed.  Then, still
 *   under the lock, it does what out says:
 *     KEEP     nothing;
 *     REPLACE  stores key with out's flags, exptime, cas and value
 *              (part[0] then part[1], which may point into cur);
 *     TOUCH    cur (live) gets out.exptime; its value, flags and cas stay
 *              (the store may keep the value as stored: compressed, in
 *              its overflow run, in place);
 *     REMOVE   deletes cur; with cur NULL, drops the dead item met, if any
 *              (a reclaim, not a change: no feed call is made for it).
 *   It lets the lock go and, with -sync always and no deferred commit,
 *   waits until the write is durable.  It returns fn's status, or the
 *   store's error (KURA_EIO, KURA_ENOMEM, KURA_ENOSPC, ...) when what out
 *   asks for could not be done (nothing was done then).
 *
 * fn has been checked by the interpreter (update.c) before the store acts:
 * the key's length, the new version's size, a read-only store, a TOUCH or
 * a REMOVE with nothing to act on.  The store checks only what its storage
 * limits (the cache's memory).  fn calls the change feed itself.
 *
 * The hint says what the decision needs and what it may write, so that a
 * store can skip or move work; a store may ignore it.
 */
typedef struct kura_rmw_hint {
    /* A put: the item it may store.  A REPLACE decision then writes exactly
     * its value (part[0] = put->val, put->vlen; part[1] empty), so the
     * store may copy, compress or checksum it before taking the lock. */
    const kura_item *put;
    /* fn reads only cur's presence, cas and exptime: the store may show
     * cur with val NULL and flags inexact (as a keys_only walk does), and
     * fn asks for REPLACE, REMOVE or KEEP only. */
    bool meta;
    /* fn's decision does not depend on cur: the store may call it before
     * its lookup, with cur NULL, and look the key up after writing. */
    bool blind;
} kura_rmw_hint;

/* The put, delete and read-modify-write every caller uses: the one
 * interpreter of conditions and update actions (update.c) over ops->rmw.
 *
 * kura_store_put stores it (key, value, flags, exptime as given; the cas
 * the feed hands out, or it->cas without a feed) under cond; cmp_cas is
 * the cas to compare for KURA_PUT_CAS.  KURA_EINVAL for a bad key,
 * KURA_ETOOBIG past the item size limit, KURA_EREADONLY.
 * kura_store_del deletes a live item; if cmp_cas is not 0 only when its
 * cas matches (KURA_EXISTS otherwise).  KURA_NOTFOUND when there is none
 * (or the key is bad).
 * kura_store_update: fn's decision (kura_update_fn), checked: a REPLACE
 * too large is KURA_ETOOBIG, a change in a read-only store KURA_EREADONLY,
 * both with nothing done; a TOUCH without a live item does nothing. */
int kura_store_put(kura_store *s, const kura_item *it, int cond, uint64_t cmp_cas,
                   const kura_clock *clk);
int kura_store_del(kura_store *s, const char *key, size_t klen, uint64_t cmp_cas,
                   const kura_clock *clk);
int kura_store_update(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                      kura_update_fn fn, void *arg);

/*
 * The change feed: how a store tells its owner (the engine) of a put or a
 * delete it has decided to make, under the key's lock, before it writes
 * anything.  put() gives the item its cas (it->cas is replaced) and records
 * the change (the update log); delete() records a delete.  Both get the
 * feed_ctx of the clock the store call was given (item.h): the caller's
 * record of this one change, where the feed finds what kind of change it
 * is and leaves what it did.  A non-zero return (a negative KURA_E*)
 * cancels the change, and the store returns that error.  Because the feed
 * runs under the key's lock, a key's changes reach it in the order the
 * store applies them.  The interpreter (update.c) calls it from
 * kura_store_put's and kura_store_del's decisions; kura_store_update's
 * callbacks (the engine's) feed themselves.  NULL feed (a store used
 * without an engine, in tests): the cas given is kept and nothing is
 * recorded.
 */
typedef struct kura_feed {
    int (*put)(void *arg, void *change, kura_item *it);
    int (*del)(void *arg, void *change, const char *key, size_t klen);
    void *arg;
} kura_feed;

/*
 * Which items an iterate call shows, and how.  For every scope: only live
 * items under the clock given (the B+ tree also takes a NULL clock, and
 * then shows dead items too: kuractl check counts them); fn's first
 * non-zero return stops the walk and is returned; an item the store cannot
 * read (a record or a page that fails its checksum) is skipped, and its
 * error returned at the end if fn did not stop the walk.  A walk is
 * fuzzy: the store lets its lock go between batches, so a change made
 * meanwhile may or may not be seen, but no key is shown twice.
 *
 *  - KURA_ITER_ALL: every live item.  The cache and the hash file walk
 *    their parts in turn, each under its stripe's lock, in no particular
 *    order; the B+ tree walks in key order, a leaf under its lock at a
 *    time, resuming after the last key it showed.
 *  - KURA_ITER_PART: part `part` alone (0 <= part < ops->parts, else
 *    KURA_EINVAL), under one lock held throughout: a caller that must not
 *    hold a lock while it works on the items (a snapshot, a replica's copy:
 *    engine_walk; a listing: list.c) copies one part out at a time.  A
 *    store of one part (the B+ tree) walks it as KURA_ITER_ALL does.
 *  - KURA_ITER_FROM: ordered stores only (else KURA_EINVAL): the keys at
 *    or after `from` (NULL: from the first key; else 1 to KURA_KEY_MAX
 *    bytes), in key order (bytes as memcmp compares them, a prefix before
 *    its extensions), locked as KURA_ITER_ALL.
 *  - KURA_ITER_BACK: KURA_ITER_FROM backward: the keys at or before
 *    `from` (NULL: from the last key), in descending key order.
 *
 * keys_only, for listings, which need keys and metadata only: the store
 * may leave val NULL where reading the value costs (the hash file reads no
 * record, only its index; the B+ tree no overflow run).  In an item whose
 * val is NULL, vlen, exptime and cas are right, and flags is exact in the
 * B+ tree but only says 0 (0) or not (1) in the hash file.  The cache
 * shows values whatever keys_only says.
 */
enum kura_iter_scope {
    KURA_ITER_ALL = 0,
    KURA_ITER_PART,
    KURA_ITER_FROM,
    KURA_ITER_BACK,
};

typedef struct kura_iter_spec {
    int scope;                  /* enum kura_iter_scope */
    unsigned part;              /* KURA_ITER_PART */
    const char *from;           /* KURA_ITER_FROM, KURA_ITER_BACK */
    size_t flen;
    bool keys_only;
} kura_iter_spec;

typedef struct kura_store_ops {
    const char *name;           /* "cache", "hash", ... */

    /* Looks key up; if live, calls fn(arg, item) under the key's lock and
     * returns KURA_OK.  Otherwise KURA_NOTFOUND, KURA_EXPIRED or KURA_FLUSHED.
     * A hit counts as a use for LRU purposes. */
    int (*get)(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
               kura_item_fn fn, void *arg);

    /* The read-modify-write primitive (see kura_rmw_hint): every change
     * goes through it, from kura_store_put, _del and _update.  key is
     * valid (kura_key_ok), hint and fn are not NULL. */
    int (*rmw)(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
               const kura_rmw_hint *hint, kura_update_fn fn, void *arg);

    /* How the store's keys can be walked (see kura_iter_spec): `parts`
     * parts (at least 1), and `ordered` when a walk from a key is possible
     * (KURA_ITER_FROM and KURA_ITER_BACK).
     * Constants of the backend. */
    unsigned parts;
    bool ordered;

    /* Calls fn for the live items spec names (kura_iter_spec says which
     * and how) until fn returns non-zero, which is returned. */
    int (*iterate)(kura_store *s, const kura_iter_spec *spec, const kura_clock *clk,
                   kura_item_fn fn, void *arg);

    /* Reclaims dead items, doing at most about `budget` units of work;
     * returns the number reclaimed.  Called periodically by the engine. */
    long (*sweep)(kura_store *s, const kura_clock *clk, size_t budget);

    /* Makes every completed change durable (no-op for the cache). */
    int (*sync)(kura_store *s);

    void (*usage)(kura_store *s, kura_store_usage *u);
    /* Backend-specific "stats" lines (file size, fragmentation, ...). */
    void (*stats)(kura_store *s, kura_stat_fn emit, void *arg);

    int (*load_state)(kura_store *s, kura_store_state *st);
    int (*save_state)(kura_store *s, const kura_store_state *st);

    /* Syncs and frees everything; s is invalid afterwards. */
    void (*close)(kura_store *s);

    /* Group commit driven by the server, for -sync always (both NULL in a
     * store with nothing to make durable).  write_seq() returns a number
     * covering every change completed so far; commit(seq) returns once every
     * change up to seq is on stable storage, one sync serving every caller
     * waiting.  With cfg->deferred_commit set, changes return as soon as
     * they are written and the server calls commit before it replies. */
    uint64_t (*write_seq)(kura_store *s);
    int (*commit)(kura_store *s, uint64_t seq);
    /* Optional: a number covering every change the calling thread has made
     * (at most write_seq()).  A caller that notes it before a batch of
     * requests and finds it unchanged after knows the batch itself changed
     * nothing (kurad: writes refused after a failed sync are answered, not
     * closed).  NULL: the caller uses write_seq(). */
    uint64_t (*thread_seq)(kura_store *s);
} kura_store_ops;

struct kura_store {
    const kura_store_ops *ops;
    const kura_feed *feed;      /* set by the engine; see kura_feed */
    /* The limits the interpreter checks, set by kura_store_open from the
     * config: -I (kura_item_wire_total of a new version, flags not counted,
     * at most this; 0: none) and a store opened read-only.  key_max, set by
     * a backend that holds less than KURA_KEY_MAX (the B+ tree: its page
     * size bounds a key): a longer key is KURA_ETOOBIG (0: KURA_KEY_MAX). */
    size_t item_max;
    size_t key_max;
    bool read_only;
};

/* Settings from the command line that backends need. */
typedef struct kura_store_config {
    uint64_t mem_limit;         /* cache: -m in bytes */
    size_t item_size_max;       /* -I */
    int sync_mode;              /* enum kura_sync_mode */
    bool recover;               /* open a damaged file by salvaging what is intact */
    bool read_only;
    bool deferred_commit;       /* -sync always: the caller commits (see commit) */
    /* Where a backend reports what it did (recovery, damage, disk errors):
     * the server's log, at a level of enum kura_log_level.  NULL: stderr. */
    void (*log)(int level, const char *line);
    /* The store's file I/O (kio.h); NULL: the system's calls.  Every call
     * the table has an entry for goes through it, reads included: opens,
     * preads, writes, syncs, preallocation, truncation, renames, unlinks,
     * directory syncs, mappings.  What it has no entry for goes to the
     * system: fstat/fstatat/stat (sizes, existence), lseek(SEEK_DATA) and
     * the listing of a log's directory; they see what the store wrote,
     * since a replacement passes every change on to the real files.  A
     * shared writable mapping (the hash file's mapwrite) writes behind the
     * table's back; kio.h says how a replacement refuses one.  Tests put a
     * fault injector or a recorder here. */
    const kura_io *io;
    /* cache: -e, the file its segments are mapped from, kept across a
     * graceful stop (src/store/cache/seg_warm.c); NULL: memory only. */
    const char *memory_file;
} kura_store_config;


enum kura_sync_mode {
    KURA_SYNC_NONE = 0,         /* the OS decides when data reaches the disk */
    KURA_SYNC_INTERVAL,         /* synced about once a second, by the store itself
                                   (on its own thread: the server does not call sync) */
    KURA_SYNC_ALWAYS,           /* a change is on stable storage before it is acknowledged */
};

/* One "#name=value" tuning parameter of a database name. */
typedef struct kura_param {
    char name[32];
    char value[96];
    bool used;                  /* set by the backend that understood it */
} kura_param;

#define KURA_PARAMS_MAX 16

typedef struct kura_params {
    int count;
    kura_param p[KURA_PARAMS_MAX];
} kura_params;

/* Opens the database named like ttserver does: "*" or ":" (cache),
 * "path.kh#bnum=...": the suffix picks the backend, parameters tune it.
 * NULL or "" means the cache.  On error returns a negative status and writes
 * a message naming the problem into err.  The backends' constructors it
 * calls are declared in backends.h. */
int kura_store_open(const char *dbname, const kura_store_config *cfg,
                    kura_store **out, char *err, size_t errlen);
/* True if the name opens the in-memory cache ("*", ":", with or without
 * parameters; NULL or "").  Only the name is looked at. */
bool kura_dbname_is_cache(const char *dbname);

/* Helpers for backends parsing their parameters: take each one you know
 * (NULL if absent), then call kura_params_reject_unused() before creating
 * or changing anything, so a typo never leaves a file behind. */
const char *kura_param_take(kura_params *params, const char *name);
int kura_params_reject_unused(const kura_params *params, const char *path,
                              char *err, size_t errlen);
int kura_parse_size(const char *s, uint64_t *out);  /* "64m", "1g", "4096", "2k" */

static inline void kura_store_close(kura_store *s) { s->ops->close(s); }

#endif

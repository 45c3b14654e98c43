/*
 * engine.h - memcached's semantics, implemented once over any store.
 *
 * The engine turns protocol-level requests (set, add, cas, append, incr,
 * touch, flush_all, ...) into store operations, so that every backend behaves
 * exactly like memcached.  It owns the clock (seconds, refreshed by
 * engine_tick()), the cas counter (unique and increasing across restarts:
 * the store keeps a high-water mark), the flush_all state, and the counters
 * that "stats" reports.  It knows nothing of sockets: tests and tools call it
 * directly.
 *
 * Counters are kept per worker thread in a kura_thread_stats that only its
 * thread writes (relaxed atomics, so readers on other threads are safe and
 * the hot path takes no lock); "stats" sums them.
 */
#ifndef KURA_ENGINE_H
#define KURA_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/item.h"
#include "kura/journal.h"
#include "kura/store.h"
#include "kura/ulog.h"

#define KURA_REALTIME_MAXDELTA (60 * 60 * 24 * 30)   /* exptime above this is absolute */

/* Per-thread counters, named as memcached's "stats" names them. */
#define KURA_THREAD_STATS(X) \
    X(cmd_get) X(cmd_set) X(cmd_flush) X(cmd_touch) X(get_hits) X(get_misses) \
    X(get_expired) X(get_flushed) X(delete_misses) X(delete_hits) \
    X(incr_misses) X(incr_hits) X(decr_misses) X(decr_hits) \
    X(cas_misses) X(cas_hits) X(cas_badval) X(touch_hits) X(touch_misses) \
    X(store_too_large) X(store_no_memory) X(store_errors) X(total_items) \
    X(bytes_read) X(bytes_written) X(client_errors) X(unknown_commands) \
    X(protocol_closes) X(conn_yields) X(listing_runs) X(digest_runs) \
    X(auth_cmds) X(auth_errors)

typedef struct kura_thread_stats {
#define KURA_STAT_FIELD(name) _Atomic uint64_t name;
    KURA_THREAD_STATS(KURA_STAT_FIELD)
#undef KURA_STAT_FIELD
} kura_thread_stats;

/* Only the owning thread adds; a plain load and store is enough and costs
 * no locked instruction. */
#define KURA_STAT_ADD(st, field, n) atomic_store_explicit(&(st)->field, \
    atomic_load_explicit(&(st)->field, memory_order_relaxed) + (n), memory_order_relaxed)
#define KURA_STAT_INC(st, field) KURA_STAT_ADD(st, field, 1)

/* A plain snapshot (sum of all threads). */
typedef struct kura_stats_totals {
#define KURA_STAT_PLAIN(name) uint64_t name;
    KURA_THREAD_STATS(KURA_STAT_PLAIN)
#undef KURA_STAT_PLAIN
} kura_stats_totals;

void kura_stats_accumulate(kura_stats_totals *sum, const kura_thread_stats *ts);

/* Storage commands of the text protocol. */
enum kura_store_cmd {
    KURA_CMD_SET = 0, KURA_CMD_ADD, KURA_CMD_REPLACE, KURA_CMD_APPEND,
    KURA_CMD_PREPEND, KURA_CMD_CAS,
};

/* Outcomes of engine_store (besides negative store errors). */
enum kura_store_result {
    KURA_STORED = 0, KURA_NOT_STORED, KURA_STORE_EXISTS, KURA_STORE_NOT_FOUND,
};

/* Outcome of engine_arith besides KURA_OK / KURA_NOTFOUND / errors. */
#define KURA_NON_NUMERIC 10
#define KURA_INCR_MAX_LEN 24      /* room for a 64-bit decimal and NUL */

typedef struct kura_engine_config {
    size_t item_size_max;       /* -I, bytes (memcached's item total, see item.h) */
    size_t marks_sets;          /* the access marks' table, in sets of 4 (0: the
                                   default, 1.5 MiB); an engine made per fuzz input
                                   takes a small one */
} kura_engine_config;

typedef struct kura_engine kura_engine;

/* Takes ownership of store (closed by engine_close).  Loads the persisted
 * cas high-water mark and flush state. */
int engine_open(kura_engine **out, kura_store *store, const kura_engine_config *cfg);
void engine_close(kura_engine *e);
kura_store *engine_store_of(kura_engine *e);    /* before serving, or in tests */

/* Refreshes the clock; turns a due delayed flush into a watermark; persists
 * the cas high-water mark when it nears what was saved.  Call about once a
 * second (the server's main loop does) and before serving. */
void engine_tick(kura_engine *e);
/* Clock used for liveness now. */
kura_clock engine_clock(kura_engine *e);
int64_t engine_now(kura_engine *e);
int64_t engine_started(kura_engine *e);
/* When a change was last refused for a full disk (KURA_ENOSPC), Unix time;
 * 0 if never. */
int64_t engine_disk_full_at(kura_engine *e);
/* Converts a client exptime (0, relative up to 30 days, absolute beyond,
 * negative = already expired) to absolute Unix time as memcached does. */
int64_t engine_abs_exptime(kura_engine *e, int64_t exptime);
/* True when an item of this size is within -I (memcached's accounting). */
bool engine_item_fits(const kura_engine *e, size_t klen, uint64_t vlen, uint32_t flags);
size_t engine_item_size_max(const kura_engine *e);

/* ---- the rules: one call per operation, for every protocol ----------------- *
 *
 * Each takes options (NULL: the text protocol's command, as memcached
 * defines it) for what the meta and binary protocols add: a cas to match
 * on any change, creating the item on a miss (vivify), the invalidation of
 * md/ms I, the recache token.  An info out-parameter (may be NULL) reports
 * what a meta or binary reply shows: the item's new cas after a change,
 * its exptime, whether it had been read (h), its last access (l), the
 * invalidation and recache token state (X, W, Z).  Those marks are kept by
 * the engine in memory (src/engine/marks.c), the same for every backend.
 * A change on a replica is refused with KURA_EREPLICA. */

/* The access state of an item as a request found it. */
typedef struct engine_item_info {
    bool fetched;               /* read since it was stored (before this request) */
    int64_t last_access;        /* Unix time of the last read, or of the store */
    bool stale;                 /* invalidated (md I, ms I with an older cas) */
    bool token_sent;            /* a client already won the recache token */
    bool won;                   /* this request won the recache token */
    bool created;               /* this request created the item (vivify) */
    int64_t old_exptime;        /* absolute, before this request; 0 = never */
    int64_t exptime;            /* absolute, after this request */
    uint64_t cas;               /* after this request */
    bool key_binary;            /* stored with a base64 key (ms b), as far as the
                                   access marks remember (lost with them) */
} engine_item_info;

typedef struct engine_get_opts {
    bool touch;                 /* gat / mg T: set a new exptime (client form) */
    int64_t exptime;
    bool vivify;                /* mg N: create an empty item on a miss, and win */
    int64_t vivify_exptime;     /* its exptime (client form) */
    bool recache;               /* mg R: win if the remaining TTL is below */
    int64_t recache_exptime;    /* (client form) */
    bool recache_after_touch;   /* R compares with the exptime T set (T came first) */
    bool no_bump;               /* mg u: the read is not an access (h, l unchanged) */
} engine_get_opts;

/* get/gets, gat/gats (touch), mg, the binary gets.  Calls fn (may be NULL)
 * with the live item as the request leaves it; info is filled before fn is
 * called, so fn can report it.  Counted as a get, or with touch as a
 * touch.  KURA_OK (hit, or created), KURA_NOTFOUND, or an error. */
int engine_get(kura_engine *e, kura_thread_stats *ts, const char *key, size_t klen,
               const engine_get_opts *o, kura_item_fn fn, void *arg, engine_item_info *info);

/* The text protocol's touch: a gat that shows nothing, leaves the access
 * marks as they were, and counts a store error as neither a miss nor a
 * store error.  KURA_OK (touched), KURA_NOTFOUND, or an error. */
int engine_touch(kura_engine *e, kura_thread_stats *ts, const char *key, size_t klen,
                 int64_t exptime);

typedef struct engine_store_opts {
    uint64_t cas_in;            /* compare: 0 = none.  set/replace/cas: a cas; add:
                                   ignored; append/prepend: must match if not 0 */
    bool invalidate;            /* ms I: a cas_in below the item's stores, marked stale */
    bool key_binary;            /* ms b: the key came base64 (an access mark, set by a
                                   set, add, replace or cas; engine_item_info) */
} engine_store_opts;

/* set/add/replace/append/prepend/cas.  it->exptime is a client exptime.
 * Returns enum kura_store_result or a negative store error (KURA_ENOMEM,
 * KURA_ENOSPC, KURA_EIO, ...); *cas_out (may be NULL) gets the new cas.
 * The caller checks engine_item_fits() first. */
int engine_store(kura_engine *e, kura_thread_stats *ts, int cmd, const kura_item *it,
                 const engine_store_opts *o, uint64_t *cas_out);

typedef struct engine_delete_opts {
    uint64_t cas_in;            /* 0 = any; KURA_EXISTS if it differs */
    bool invalidate;            /* md I: keep the item, marked stale, with a new cas */
    bool touch;                 /* ... and this exptime (client form) */
    int64_t exptime;
    bool unlink;                /* a refused set clearing the key: not a client's
                                   delete, not counted, a miss is KURA_OK */
} engine_delete_opts;

/* delete: KURA_OK (deleted), KURA_NOTFOUND, KURA_EXISTS, or an error. */
int engine_delete(kura_engine *e, kura_thread_stats *ts, const char *key, size_t klen,
                  const engine_delete_opts *o);

typedef struct engine_arith_opts {
    uint64_t cas_in;            /* 0 = any; KURA_EXISTS if it differs */
    bool vivify;                /* a miss creates the item with value `initial` */
    uint64_t initial;
    int64_t vivify_exptime;     /* exptime of a created item (client form) */
    bool touch;                 /* set the exptime of an existing item */
    int64_t exptime;            /* (client form) */
} engine_arith_opts;

/* incr/decr: on KURA_OK writes the new value as decimal into out; info
 * gets the new cas, the exptimes before and after, and whether the item
 * was created (the access marks are not reported).  KURA_OK,
 * KURA_NOTFOUND, KURA_EXISTS, KURA_NON_NUMERIC, or an error. */
int engine_arith(kura_engine *e, kura_thread_stats *ts, const char *key, size_t klen,
                 bool incr, uint64_t delta, const engine_arith_opts *o,
                 char out[KURA_INCR_MAX_LEN], engine_item_info *info);

/* A read-modify-write of one key's value, atomic on every backend: the
 * one way a protocol changes a value from what it holds (incr/decr, Tokyo
 * Tyrant's putcat, putshl, addint, adddouble).  fn is called under the
 * key's lock, with the live item or NULL; it fills *out with the new
 * version (its value as up to two parts, which may point into cur or into
 * fn's own memory and stay valid until engine_modify returns; its flags
 * and absolute exptime) and returns KURA_OK to store it, or any other
 * status to leave the item as it is (that status is returned).  fn must be
 * short and must not call into the engine or the store.  Usually once;
 * twice when a racing change used up the reserved cas values (the change
 * is then made again, engine.c's make_again), so fn computes from cur and
 * arg alone and does not leak what a first call allocated.  No retry
 * under contention, so no failure: concurrent modifies of a key are
 * serialised by its lock.  KURA_OK (stored; *cas_out, may be NULL, the new cas), fn's
 * status, KURA_ETOOBIG (the new version past -I, its flags counted:
 * nothing stored), KURA_EREPLICA or a store error.  Counts nothing: the
 * caller counts its command. */
typedef struct engine_mod {
    struct { const void *base; size_t len; } part[2];
    uint32_t flags;
    int64_t exptime;            /* absolute (engine_abs_exptime); 0 = never */
} engine_mod;
typedef int (*engine_modify_fn)(void *arg, const kura_item *cur, engine_mod *out);
int engine_modify(kura_engine *e, const char *key, size_t klen, engine_modify_fn fn, void *arg,
                  uint64_t *cas_out);

/* flush_all [delay]: delay <= 0 flushes now. */
int engine_flush_all(kura_engine *e, kura_thread_stats *ts, int64_t delay);

/* Reclaims dead items, a bounded amount at a time. */
long engine_sweep(kura_engine *e, size_t budget);

/* Makes every change so far durable. */
int engine_sync(kura_engine *e);

/* The store's counters, "stats" lines and backend name ("hash", "cache"). */
void engine_usage(kura_engine *e, kura_store_usage *u);
/* engine_usage with curr_items and bytes counting live items only, exact
 * at once after a flush_all, a delete or an add (src/engine/count.c; a
 * walk of the keys while the store still counts flushed items).  Items
 * expired and not yet reclaimed stay counted. */
void engine_usage_exact(kura_engine *e, kura_store_usage *u);
void engine_backend_stats(kura_engine *e, kura_stat_fn emit, void *arg);
const char *engine_backend(kura_engine *e);

/* A replica's store can be replaced by a full copy (engine_swap_store):
 * call before serving.  Every call into the store then takes a shared
 * lock, which the swap takes exclusively. */
void engine_enable_swap(kura_engine *e);
/* With every other call into the engine held back, swap(arg, old, &now)
 * puts the copy in place of the old store: it returns 0 with *now the
 * copy, or an error with *now the store to go on with (the old one, or
 * the old one reopened; NULL if there is none: the caller must stop the
 * server).  The copy's items are taken as they are: the flush state is
 * cleared, its cas values observed, and the state saved with every row of
 * the update log so far counted as applied (they are older than it). */
int engine_swap_store(kura_engine *e,
                      int (*swap)(void *arg, kura_store *old, kura_store **now), void *arg);

/* ---- the update log and replicas (src/engine/durable.c) -------------------- */

/* The journal below the engine (journal.h): its watermark
 * (journal_applied_ts), history and the replicas' wait. */
kura_journal *engine_journal(kura_engine *e);
/* From here on every change is also a row of log (which must stay open
 * until engine_close).  First applies again the rows after the store's
 * watermark (those a crash may have kept from the store), counted in
 * *redone.  sync_mode: the server's -sync (interval: the log is synced
 * once a second by the journal's thread).  logfn as the store's. */
int engine_attach_log(kura_engine *e, ul_log *log, int sync_mode,
                      void (*logfn)(int level, const char *line), uint64_t *redone);
/* Applies a row received from a master (PUT, DEL, FLUSH; others ignored):
 * the item with its cas, logged here with its origin's sid and origin_ts.
 * Allowed on a replica. */
int engine_apply_row(kura_engine *e, const ul_row *row);
/* What the server's group commit syncs and waits for (set *out): the
 * update log when there is one (journal_commit_source: its rows make the
 * store's changes durable, with the replicas' wait when set); else the
 * store, found under the swap gate when the store can be swapped.  false:
 * nothing to commit. */
bool engine_commit_source(kura_engine *e, kura_commit *out);

/* Calls fn for every live item (the store's iterate, fuzzy: each stripe
 * is seen at its own moment). */
int engine_iterate(kura_engine *e, kura_item_fn fn, void *arg);
/* Every live item, in batches copied out of the store, fn called with no
 * store lock held (src/engine/walk.c): for work that writes or sends what
 * it is given.  Fuzzy as engine_iterate is; in key order on an ordered
 * store.  fn's non-zero value stops the walk and is returned. */
typedef int (*engine_walk_fn)(void *arg, const kura_item *items, size_t n);
int engine_walk(kura_engine *e, engine_walk_fn fn, void *arg);
/* The same walk as engine_iterate, taken a bounded step at a time (for a
 * command that must not hold its worker: digest).  A step calls fn, under
 * the store's lock as engine_iterate does, for one part of a store without
 * order, or for up to `budget` items of an ordered one, resuming after the
 * last key it showed.  Zero the cursor before the first step; c->done is
 * set once every part was walked.  Returns KURA_OK, fn's non-zero value
 * (the walk stopped: do not step again) or the store's error. */
typedef struct kura_walk_cursor {
    uint32_t part;
    bool done, have_last;
    uint8_t llen;
    char last[KURA_KEY_MAX];
} kura_walk_cursor;
int engine_walk_step(kura_engine *e, kura_walk_cursor *c, size_t budget, kura_item_fn fn,
                     void *arg);
/* No cas at or below this is handed out from now on (items loaded into
 * the store behind the engine's back: a snapshot into the cache). */
void engine_observe_cas(kura_engine *e, uint64_t cas);
/* Dual master (after engine_attach_log, before serving): cas values are
 * read from the update log's clock, so the cas of an item orders it among
 * the changes of both masters, and rows applied with engine_apply_row()
 * win only when they are newer than what is there (the latest timestamp
 * wins, then the higher server id: the low 4 bits of each cas are sid's;
 * a delete is remembered for a while so an older set arriving later does
 * not bring the key back).  KURA_EINVAL without an update log. */
int engine_set_dual(kura_engine *e, uint32_t sid);
/* Local changes refused with KURA_EREPLICA while set (a read-only slave). */
void engine_set_replica(kura_engine *e, bool replica);
/* A check before every local change (automatic failover's lease, the
 * server's fencing: include/kura/replrole.h): while gate(arg) returns
 * false, local changes are refused with KURA_EREPLICA as on a replica.
 * Called on the worker's thread with no engine lock held; it must be
 * cheap and must not block.  Set once (the server's role module,
 * src/server/replrole.c, owns it), before or while serving: a change
 * already past the check completes. */
void engine_set_write_gate(kura_engine *e, bool (*gate)(void *arg), void *arg);

#endif

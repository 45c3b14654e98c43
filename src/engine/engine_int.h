/*
 * engine_int.h - the engine's private state, shared by engine.c (memcached's
 * semantics) and feed.c (the change feed: cas under the key's lock, the
 * update log, its recovery and the rows a replica applies).
 */
#ifndef KURA_ENGINE_INT_H
#define KURA_ENGINE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "kura/engine.h"
#include "kura/ulog.h"

/* Threads that may be inside a change at once, each with a slot of its own
 * (feed.c); a thread beyond them waits for the one overflow slot. */
#define ENGINE_SLOTS 256

typedef struct engine_slot {
    _Atomic uint64_t ts;                /* 0, or a bound below the row in flight */
    char pad[56];
} engine_slot;

struct kura_engine {
    kura_store *store;
    size_t item_size_max;
    int64_t started;
    kura_feed feed;                     /* store->feed points here */

    _Atomic uint64_t next_cas;          /* the next cas to hand out */
    _Atomic uint64_t cas_reserved;      /* persisted: no cas above this was handed out */
    _Atomic uint64_t oldest_cas;        /* flush watermark (item.h) */
    _Atomic int64_t flush_at;           /* pending delayed flush, 0 = none */
    _Atomic bool replica;               /* local changes refused (KURA_EREPLICA) */
    hlc *cas_clock;                     /* dual master: cas values from the clock; else NULL */
    uint32_t cas_tag;                   /* ... ending in these bits of the server id */
    uint64_t cas_block;                 /* cas values reserved per state save */
    struct tombs *tombs;                /* dual master: recent deletes (feed.c) */

    pthread_mutex_t state_lock;         /* serializes changes to the persisted state */
    struct kura_marks *marks;           /* access marks for the meta protocol (marks.h) */
    bool gated;                         /* store swaps possible: calls take gate */
    pthread_rwlock_t gate;              /* read: a call uses the store; write: a swap */

    /* the update log (feed.c); NULL: none */
    ul_log *ulog;
    int ulog_sync;                      /* enum kura_sync_mode */
    void (*log)(int level, const char *line);
    uint64_t saved_ulog_ts;             /* state_lock: the watermark last saved */
    _Atomic uint64_t pinned;            /* a row the store failed to apply: the
                                           watermark stays below it (0: none) */
    engine_slot slots[ENGINE_SLOTS + 1];
    pthread_mutex_t overflow_lock;      /* held across a change in the last slot */
    kura_store commit_source;           /* the update log as a group-commit store */
    int (*commit_wait)(void *arg, uint64_t ts);     /* -syncrepl: replicas have ts */
    void *commit_wait_arg;
    pthread_t feed_thread;              /* saves the watermark, syncs (interval) */
    pthread_mutex_t feed_lock;
    pthread_cond_t feed_wake;
    bool feed_stop, feed_running;
};

/* engine.c */
int engine_save_state_locked(kura_engine *e);   /* state_lock held */
void engine_gate_in(kura_engine *e);            /* see gate_in in engine.c */
void engine_gate_out(kura_engine *e);
uint64_t engine_next_cas(kura_engine *e);

/* feed.c */
void feed_init(kura_engine *e);
void feed_stop(kura_engine *e);         /* the thread; before the last state save */
void feed_destroy(kura_engine *e);
/* Around every store call that may change something: begin before it,
 * end after with the store's result. */
int feed_begin(kura_engine *e);
void feed_end(kura_engine *e, int slot, int rc);
/* For update callbacks (under the key's lock): stamps and logs the item
 * about to be written (REPLACE/TOUCH) or the removal. */
int feed_update(kura_engine *e, const kura_item *cur, kura_update *up);
/* The same for a callback that creates the item (shown none): the key is
 * given.  feed_update is feed_update_key with the item's key. */
int feed_update_key(kura_engine *e, const char *key, size_t klen, const kura_item *cur,
                    kura_update *up);
/* The cas the feed gave the calling thread's last put (a store's put does
 * not return it; engine_store reports it). */
uint64_t feed_last_cas(void);
int feed_dual(kura_engine *e);          /* the recent deletes' table */
/* flush_all: logs it (state_lock held). */
int feed_flush(kura_engine *e, uint64_t oldest_cas, int64_t flush_at);
/* The watermark to persist with the state (state_lock held). */
uint64_t feed_watermark(kura_engine *e);
void feed_tick(kura_engine *e);

#endif

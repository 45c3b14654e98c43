/*
 * engine_int.h - the engine's private state, shared by engine.c (memcached's
 * semantics and cas assignment) and the journal (src/journal/: the change
 * feed, the update log, its recovery and the rows a replica applies), which
 * the engine calls through the feed_* functions below.
 */
#ifndef KURA_ENGINE_INT_H
#define KURA_ENGINE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "kura/engine.h"
#include "kura/lockorder.h"
#include "kura/ulog.h"

struct kura_engine {
    kura_store *store;
    size_t item_size_max;
    int64_t started;

    _Atomic uint64_t next_cas;          /* the next cas to hand out */
    _Atomic uint64_t cas_reserved;      /* persisted: no cas above this was handed out */
    _Atomic uint64_t oldest_cas;        /* flush watermark (item.h) */
    _Atomic int64_t flush_at;           /* pending delayed flush, 0 = none */
    _Atomic bool replica;               /* local changes refused (KURA_EREPLICA) */
    _Atomic int64_t disk_full_at;       /* last change refused with KURA_ENOSPC; 0 = never */
    hlc *cas_clock;                     /* dual master: cas values from the clock; else NULL */
    uint32_t cas_tag;                   /* ... ending in these bits of the server id */
    uint64_t cas_block;                 /* cas values reserved per state save */
    pthread_mutex_t state_lock;         /* serializes changes to the persisted state */
    struct kura_marks *marks;           /* access marks for the meta protocol (marks.h) */
    bool gated;                         /* store swaps possible: calls take gate */
    pthread_rwlock_t gate;              /* read: a call uses the store; write: a swap */

    uint64_t saved_ulog_ts;             /* state_lock: the watermark last saved */
    struct kura_journal *journal;       /* the update log's side (src/journal/) */
    _Atomic uint64_t count_clean;       /* count.c: oldest_cas + 1 under which the store's
                                           counters were shown to hold no dead item; 0 none */
};

/* state_lock, with its rank (lockorder.h): taken under a stripe or the
 * tree lock, and the store's and the update log's locks under it. */
static inline void engine_state_lock(kura_engine *e)
{
    lockorder_lock(&e->state_lock, LOCK_RANK_ENGINE_STATE);
}
static inline void engine_state_unlock(kura_engine *e)
{
    lockorder_unlock(&e->state_lock, LOCK_RANK_ENGINE_STATE);
}

/* engine.c */
int engine_save_state_locked(kura_engine *e);   /* state_lock held */
void engine_gate_in(kura_engine *e);            /* see gate_in in engine.c */
void engine_gate_out(kura_engine *e);
/* A cas unique into *cas: 0, or the error of saving its reservation (the
 * change that asked must fail). */
int engine_next_cas(kura_engine *e, uint64_t *cas);

/* src/journal/ */
/* KURA_OK or KURA_ENOMEM; feed_destroy either way.  The store's changes
 * reach the feed once feed_hook() is called. */
int feed_init(kura_engine *e);
void feed_stop(kura_engine *e);         /* the thread; before the last state save */
void feed_destroy(kura_engine *e);
/* The update log attached (journal_attach), NULL if none. */
ul_log *feed_log(kura_engine *e);
/* A store swapped in: its changes go through the feed, and a row the old
 * store failed to apply no longer holds the watermark down. */
void feed_hook(kura_engine *e, kura_store *s);
void feed_unpin(kura_engine *e);
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

/*
 * engine_int.h - the engine's private state, shared by the files of
 * src/engine/: engine.c (memcached's semantics and cas assignment),
 * durable.c (the update log attached, rows applied, the commit source),
 * count.c, list.c and walk.c.  The journal below (journal.h) never sees
 * it.
 */
#ifndef KURA_ENGINE_INT_H
#define KURA_ENGINE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "kura/engine.h"
#include "kura/journal.h"
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
    /* engine_set_write_gate: set once (the server's role module) */
    bool (*_Atomic write_gate)(void *arg);
    void *_Atomic write_gate_arg;
    _Atomic int64_t disk_full_at;       /* last change refused with KURA_ENOSPC; 0 = never */
    hlc *cas_clock;                     /* dual master: cas values from the clock; else NULL */
    uint32_t cas_tag;                   /* ... ending in these bits of the server id */
    uint64_t cas_block;                 /* cas values reserved per state save */
    pthread_mutex_t state_lock;         /* serializes changes to the persisted state */
    struct kura_marks *marks;           /* access marks for the meta protocol (marks.h) */
    bool gated;                         /* store swaps possible: calls take gate */
    pthread_rwlock_t gate;              /* read: a call uses the store; write: a swap */

    uint64_t saved_ulog_ts;             /* state_lock: the watermark last saved (the
                                           journal is told: journal_set_saved) */
    kura_journal *journal;              /* the layer below: the update log's side */
    _Atomic uint64_t count_clean;       /* count.c: oldest_cas + 1 under which the store's
                                           counters were shown to hold no dead item; 0 none */
};

/* state_lock, with its rank (lockorder.h): ranked above a stripe or the
 * tree lock (though no change takes it under one: a cas reservation is
 * saved before or after the store call, never inside it), and the store's
 * and the update log's locks under it. */
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
/* state_lock held: e->saved_ulog_ts, and the journal told. */
void engine_set_saved(kura_engine *e, uint64_t ulog_ts);

#endif

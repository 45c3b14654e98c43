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
    size_t key_max;             /* -kmax (engine_key_max) */
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
    /* count.c: what the flush watermark leaves in the store's counters:
     * the items and bytes it had covered when last noted, and the
     * store's flushed_gone counters then, for watermark change number
     * count_noted (count_epoch: the last change's number).  Written by
     * one writer at a time (count_busy) as a seqlock (count_seq odd
     * while written); count_known false until noted (at open under a
     * watermark, after a delayed flush: until a walk has counted). */
    _Atomic uint64_t count_epoch, count_noted;
    atomic_flag count_busy;
    _Atomic uint64_t count_seq;
    _Atomic bool count_known;
    _Atomic uint64_t count_items, count_bytes, count_gone, count_gone_bytes;
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
/* count.c.  epoch, state_lock held: the flush watermark changes; its
 * number, for the calls below.  note, with no lock held but the gate
 * (the store's counters are read): the change `epoch` raised the
 * watermark over every item the store holds (flushed) or reset it to 0 (a
 * new store, nothing flushed); a note of an earlier change than the last
 * noted is dropped.  forget: the same, not noted (the next count walks). */
uint64_t engine_count_epoch(kura_engine *e);
void engine_count_note(kura_engine *e, uint64_t epoch, bool flushed);
void engine_count_forget(kura_engine *e, uint64_t epoch);
/* state_lock held: e->saved_ulog_ts, and the journal told. */
void engine_set_saved(kura_engine *e, uint64_t ulog_ts);

#endif

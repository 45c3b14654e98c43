/*
 * watermark.c - which rows of the update log the store already holds.
 *
 * At open the engine applies again the rows after a watermark kept in the
 * store's state (kura_store_state.ulog_ts): "every row up to here is in the
 * store".  Each thread inside a change holds a slot with a number no
 * larger than the timestamp its row will get (the clock's last value plus
 * one, written before the row is stamped).  The watermark is the clock's
 * last value, read first, lowered below every occupied slot: a row at or
 * under it was applied already, or its thread's slot would have held it
 * down.  A row the store then failed to write (a disk error after the row
 * was logged) pins the watermark below it for good, so the next start
 * applies it: the log, not the store, is the truth.
 *
 * A thread takes a slot of its own at its first change and gives it back
 * when it exits, so journal_begin costs one atomic store; threads beyond
 * JOURNAL_SLOTS share the last slot under a mutex.
 */
#include <stdio.h>

#include "journal_int.h"

static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
static pthread_key_t slot_key;
static _Atomic bool slot_taken[JOURNAL_SLOTS];
static _Thread_local int tl_slot = -1;

static void slot_release(void *p)
{
    atomic_store(&slot_taken[(intptr_t)p - 1], false);
}

static void slot_key_init(void)
{
    (void)pthread_key_create(&slot_key, slot_release);
}

static int my_slot(void)
{
    if (tl_slot >= 0)
        return tl_slot;
    pthread_once(&slot_once, slot_key_init);
    for (int i = 0; i < JOURNAL_SLOTS; i++) {
        bool f = false;
        if (atomic_compare_exchange_strong(&slot_taken[i], &f, true)) {
            tl_slot = i;
            (void)pthread_setspecific(slot_key, (void *)(intptr_t)(i + 1));
            return i;
        }
    }
    return JOURNAL_SLOTS;               /* the shared overflow slot */
}

void journal_begin(struct kura_journal *j, journal_change *ch)
{
    ch->logged_ts = 0;
    ch->slot = -1;
    if (!j->ulog)
        return;
    int i = my_slot();
    if (i == JOURNAL_SLOTS)
        pthread_mutex_lock(&j->overflow_lock);
    atomic_store(&j->slots[i].ts, hlc_last(ul_clock(j->ulog)) + 1);
    ch->slot = i;
}

void journal_end(struct kura_journal *j, journal_change *ch, int rc)
{
    int slot = ch->slot;
    if (slot < 0)
        return;
    if (rc < 0 && ch->logged_ts) {
        /* logged, then not applied: the next start applies it */
        uint64_t want = ch->logged_ts - 1, cur = atomic_load(&j->pinned);
        while ((cur == 0 || want < cur) &&
               !atomic_compare_exchange_weak(&j->pinned, &cur, want))
            ;
        if (j->log) {
            char line[200];
            snprintf(line, sizeof(line), "a change is in the update log but the store "
                     "failed to write it (%s): it is applied at the next start",
                     kura_strerror(rc));
            j->log(KURA_LOG_ERROR, line);
        }
    }
    atomic_store(&j->slots[slot].ts, 0);
    if (slot == JOURNAL_SLOTS)
        pthread_mutex_unlock(&j->overflow_lock);
}

uint64_t journal_applied_ts(struct kura_journal *j)
{
    if (!j->ulog)
        return UINT64_MAX;              /* nothing to apply again: see journal_attach */
    uint64_t w = hlc_last(ul_clock(j->ulog));
    for (int i = 0; i <= JOURNAL_SLOTS; i++) {
        uint64_t s = atomic_load(&j->slots[i].ts);
        if (s && s - 1 < w)
            w = s - 1;
    }
    uint64_t p = atomic_load(&j->pinned);
    if (p && p < w)
        w = p;
    /* never back: a lower value saved after a higher one would only make
     * the next start apply more rows, but the watermark means "applied" */
    uint64_t saved = atomic_load(&j->saved);
    return w > saved ? w : saved;
}

void journal_set_saved(struct kura_journal *j, uint64_t ts)
{
    atomic_store(&j->saved, ts);
}

void journal_unpin(struct kura_journal *j)
{
    atomic_store(&j->pinned, 0);
}

void watermark_init(struct kura_journal *j)
{
    pthread_mutex_init(&j->overflow_lock, NULL);
}

void watermark_destroy(struct kura_journal *j)
{
    pthread_mutex_destroy(&j->overflow_lock);
}

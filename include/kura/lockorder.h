/*
 * lockorder.h - the cross-module lock order, checked in debug builds.
 *
 * Every lock that one module may hold while another module's lock is
 * taken has a rank; a thread takes locks only in increasing rank
 * (docs/design.md, "Threads and locks", says why each pair is ordered so).
 * With KURA_LOCK_ORDER_CHECK defined (make test-asan, make test-tsan) each
 * thread keeps a small stack of the ranks it holds and aborts, naming both,
 * when it is about to take a rank not above every one it holds: the
 * inversion shows on the first run that takes the path, not only on the
 * run that deadlocks.  Without it the calls compile to nothing.
 *
 * Locks of one rank are never nested, but for the stripe rank across two
 * stores: a store's iterate callback may write into another store (kuractl
 * copying a damaged database into a new one), always from the one read to
 * the one written, so the two cannot wait for each other.  Within one
 * store the hash file takes one stripe at a time and the tree has one lock.
 * Locks a module takes only inside itself (a store's arena, the segment
 * table) carry no rank.
 */
#ifndef KURA_LOCKORDER_H
#define KURA_LOCKORDER_H

#include <pthread.h>

enum lock_rank {
    LOCK_RANK_NONE = 0,                 /* not checked */
    LOCK_RANK_STRIPE,                   /* a hash file's stripe (write), the tree lock */
    LOCK_RANK_ENGINE_STATE,             /* the engine's state_lock */
    LOCK_RANK_STORE_STATE,              /* the tree's state_mu */
    LOCK_RANK_STORE_LOG,                /* a store's log: its append lock (seglog mu) */
    LOCK_RANK_ULOG,                     /* the update log's lock */
    LOCK_RANK_ULOG_SEG,                 /* the update log's segment log (seglog mu) */
    LOCK_RANK_REPL,                     /* the replication master's lock */
    LOCK_RANK_COUNT
};

/* The checks themselves, always built (the unit test calls them in any
 * build): abort on an inversion; release forgets the rank's last entry. */
void lockorder_check_acquire(int rank);
void lockorder_check_release(int rank);
/* The rank's name ("engine state"). */
const char *lockorder_name(int rank);

#ifdef KURA_LOCK_ORDER_CHECK
#define lockorder_acquire(rank) lockorder_check_acquire(rank)
#define lockorder_release(rank) lockorder_check_release(rank)
#else
#define lockorder_acquire(rank) ((void)(rank))
#define lockorder_release(rank) ((void)(rank))
#endif

/* A mutex taken and released with its rank: checked before it is taken
 * (where an inversion would block). */
static inline void lockorder_lock(pthread_mutex_t *m, int rank)
{
    lockorder_acquire(rank);
    pthread_mutex_lock(m);
}

static inline void lockorder_unlock(pthread_mutex_t *m, int rank)
{
    pthread_mutex_unlock(m);
    lockorder_release(rank);
}

#endif

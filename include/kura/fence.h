/*
 * fence.h - a write fence: a deadline on the monotonic clock past which a
 * server neither takes nor acknowledges a change.  Automatic failover
 * (src/ha/) keeps it a margin short of the leader's etcd lease, so a leader
 * that cannot renew the lease, or a process paused (SIGSTOP, a VM frozen)
 * past it, is read-only before etcd can let another server lead; the check
 * comes before every change (the engine) and before every acknowledgement
 * that waited for durability (the group committer).
 *
 * The check is one atomic load and one vDSO clock read.  A NULL fence is
 * always open (no failover: the role alone decides).  until_ns 0 is closed.
 */
#ifndef KURA_FENCE_H
#define KURA_FENCE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

typedef struct kura_fence {
    _Atomic int64_t until_ns;           /* CLOCK_MONOTONIC nanoseconds; 0: closed */
} kura_fence;

static inline int64_t kura_fence_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Whether a change may be taken or acknowledged now. */
static inline bool kura_fence_open(const kura_fence *f)
{
    if (!f)
        return true;
    int64_t until = atomic_load_explicit(&((kura_fence *)f)->until_ns, memory_order_acquire);
    return until > 0 && kura_fence_now() < until;
}

/* Opens it until the deadline (CLOCK_MONOTONIC ns), or closes it (0). */
static inline void kura_fence_set(kura_fence *f, int64_t until_ns)
{
    atomic_store_explicit(&f->until_ns, until_ns, memory_order_release);
}

#endif

/*
 * hlc.c - the hybrid logical clock (include/kura/hlc.h says what it is and
 * why its timestamps are laid out as microseconds << 12 | counter).
 *
 * Lock-free: one atomic word holds the last timestamp, and both a new
 * timestamp and an observed one are a compare-and-swap loop raising it.
 * The wall clock is read before the loop, once per call: a retry after a
 * lost race only needs last + 1, which the loop recomputes.
 */
#include <time.h>

#include "kura/hlc.h"

uint64_t hlc_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void hlc_init(hlc *c, hlc_clock_fn clock)
{
    atomic_init(&c->last, 0);
    c->clock = clock ? clock : hlc_wall_us;
}

uint64_t hlc_now(hlc *c)
{
    return hlc_now_tagged(c, 0, 0);
}

uint64_t hlc_now_tagged(hlc *c, uint32_t tag, int bits)
{
    uint64_t mask = ((uint64_t)1 << bits) - 1;
    uint64_t wall = hlc_make(c->clock(), 0);
    uint64_t last = atomic_load_explicit(&c->last, memory_order_relaxed);
    for (;;) {
        uint64_t next = wall > last ? wall : last + 1;
        next = ((next + mask) & ~mask) | (tag & mask);      /* the next one ending in tag */
        /* relaxed is enough: the word orders only itself; what a caller
         * stamps with it is ordered by the caller's own locks */
        if (atomic_compare_exchange_weak_explicit(&c->last, &last, next, memory_order_relaxed,
                                                  memory_order_relaxed))
            return next;
    }
}

void hlc_observe(hlc *c, uint64_t ts)
{
    uint64_t last = atomic_load_explicit(&c->last, memory_order_relaxed);
    while (ts > last && !atomic_compare_exchange_weak_explicit(&c->last, &last, ts,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed))
        ;
}

uint64_t hlc_last(hlc *c)
{
    return atomic_load_explicit(&c->last, memory_order_relaxed);
}

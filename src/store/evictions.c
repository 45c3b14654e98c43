/*
 * evictions.c - the slot through which a store tells an observer above it
 * of the items it evicts (include/kura/evictions.h).  Filled by the engine
 * (engine_observe) while someone wants evictions; a function pointer
 * swapped whole, so that a store reads it with one relaxed load.
 */
#include "kura/evictions.h"

_Atomic(kura_evicted_fn) kura_evictions_observer;

void kura_evicted(const char *key, size_t klen, bool fetched, long long ttl, long long la,
                  uint64_t size)
{
    kura_evicted_fn fn = atomic_load_explicit(&kura_evictions_observer, memory_order_relaxed);
    if (fn)
        fn(key, klen, fetched, ttl, la, size);
}

void kura_evictions_observe(kura_evicted_fn fn)
{
    atomic_store_explicit(&kura_evictions_observer, fn, memory_order_relaxed);
}

/*
 * evictions.h - the stores' one event an observer above them may want: an
 * item evicted to make room (the cache's LRU; memcached's "watch
 * evictions").  The store layer cannot know who listens (its observer is
 * above it: the engine's, observer.h), so it offers one process-wide slot
 * that the engine fills while someone wants evictions
 * (src/store/evictions.c).
 *
 * While nobody observes, the slot is NULL and an eviction costs its store
 * one relaxed load (kura_evictions_observed).
 */
#ifndef KURA_EVICTIONS_H
#define KURA_EVICTIONS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An evicted item (no store lock held): ttl is the seconds it had left
 * (-1: never expires), la the seconds since its last access, fetched
 * whether it was read since it was stored, size its value's bytes. */
typedef void (*kura_evicted_fn)(const char *key, size_t klen, bool fetched, long long ttl,
                                long long la, uint64_t size);

extern _Atomic(kura_evicted_fn) kura_evictions_observer;

static inline bool kura_evictions_observed(void)
{
    return atomic_load_explicit(&kura_evictions_observer, memory_order_relaxed) != NULL;
}

/* Tells the observer, if there still is one, of an evicted item. */
void kura_evicted(const char *key, size_t klen, bool fetched, long long ttl, long long la,
                  uint64_t size);

/* Sets the observer (NULL: none); the engine's (engine_observe). */
void kura_evictions_observe(kura_evicted_fn fn);

#endif

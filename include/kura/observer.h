/*
 * observer.h - the engine's events for one observer above it: the gets,
 * stores and evictions that memcached 1.6's log stream ("watch fetchers
 * mutations evictions") shows.  The watch module (src/watch/) is the
 * observer; it registers its callbacks here and says which events it wants
 * (engine_observe), and the engine calls it, so that nothing below the
 * engine knows a stream exists.  Evictions happen in a store, below the
 * engine: engine_observe passes the observer's eviction callback on to the
 * stores' slot (evictions.h).
 *
 * While nothing is wanted the mask is 0 and an event costs the engine one
 * relaxed load (engine_observing).  The session tells the engine which
 * connection the thread is serving (engine_observe_conn) before each call
 * into a protocol; the callbacks get it as conn (memcached's cfd; -1 on a
 * thread that serves no connection, a replica applying rows).
 */
#ifndef KURA_OBSERVER_H
#define KURA_OBSERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/evictions.h"

enum {
    KURA_OBSERVE_FETCHERS = 1u << 0,    /* item_get: get, touch, delete, incr/decr */
    KURA_OBSERVE_MUTATIONS = 1u << 1,   /* item_store */
    KURA_OBSERVE_EVICTIONS = 1u << 2,   /* eviction */
};

typedef struct kura_observer {
    /* found: the key was there; size: its value's bytes (0 if unknown). */
    void (*item_get)(int conn, const char *key, size_t klen, bool found, uint64_t size);
    /* status: stored, exists, not_found, not_stored, no_memory, error;
     * cmd: set, add, replace, append, prepend, cas; ttl: seconds left, 0
     * never; size: the value's bytes. */
    void (*item_store)(int conn, const char *key, size_t klen, const char *status,
                       const char *cmd, long long ttl, uint64_t size);
    kura_evicted_fn eviction;
} kura_observer;

/* The events wanted now (KURA_OBSERVE_* bits; 0: none). */
extern atomic_uint engine_observed;
/* The connection this thread serves, for the callbacks (-1: none). */
extern _Thread_local int engine_observer_conn;

static inline bool engine_observing(unsigned what)
{
    return atomic_load_explicit(&engine_observed, memory_order_relaxed) & what;
}

static inline void engine_observe_conn(int conn)
{
    engine_observer_conn = conn;
}

/* Registers o (static, it stays) and the events it wants now; called
 * again whenever they change (what 0: none).  One observer per process. */
void engine_observe(const kura_observer *o, unsigned what);

/* For the engine: an event, to the observer if it still wants it. */
void engine_observed_get(const char *key, size_t klen, bool found, uint64_t size);
void engine_observed_store(const char *key, size_t klen, const char *status, const char *cmd,
                           long long ttl, uint64_t size);

#endif

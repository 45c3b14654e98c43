/*
 * observe.c - the engine's one observer (include/kura/observer.h): the
 * watch stream's callbacks, and the mask of the events it wants, which
 * the engine's entry points read before doing any work for it.
 *
 * The observer is set once (a static table) and never freed, so a thread
 * that read the mask a moment before it changed may still call it: the
 * observer itself drops what it no longer wants (watch.c only copies a
 * line to the watchers that asked for it).
 */
#include "kura/observer.h"

atomic_uint engine_observed;
_Thread_local int engine_observer_conn = -1;
static _Atomic(const kura_observer *) observer;

void engine_observe(const kura_observer *o, unsigned what)
{
    atomic_store_explicit(&observer, o, memory_order_release);
    kura_evictions_observe(o && (what & KURA_OBSERVE_EVICTIONS) ? o->eviction : NULL);
    atomic_store_explicit(&engine_observed, o ? what : 0, memory_order_release);
}

void engine_observed_get(const char *key, size_t klen, bool found, uint64_t size)
{
    const kura_observer *o = atomic_load_explicit(&observer, memory_order_acquire);
    if (o && o->item_get)
        o->item_get(engine_observer_conn, key, klen, found, size);
}

void engine_observed_store(const char *key, size_t klen, const char *status, const char *cmd,
                           long long ttl, uint64_t size)
{
    const kura_observer *o = atomic_load_explicit(&observer, memory_order_acquire);
    if (o && o->item_store)
        o->item_store(engine_observer_conn, key, klen, status, cmd, ttl, size);
}

/*
 * watch.h - memcached 1.6's log stream ("watch fetchers mutations
 * evictions connevents"): the events, as memcached 1.6.18's logger writes
 * them, for the connections that asked (src/util/watch.c).
 *
 * An event's producer checks kura_watching(flag) first: one relaxed load
 * of a word that is 0 while nobody watches, so the stream costs nothing
 * then.  Only when someone watches is the line formatted and copied into
 * each watcher's bounded buffer (a full one skips the line and counts it).
 */
#ifndef KURA_WATCH_H
#define KURA_WATCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum {
    KURA_WATCH_FETCHERS = 1u << 0,      /* item_get */
    KURA_WATCH_MUTATIONS = 1u << 1,     /* item_store */
    KURA_WATCH_EVICTIONS = 1u << 2,     /* eviction */
    KURA_WATCH_CONNEVENTS = 1u << 3,    /* conn_new, conn_close */
    KURA_WATCH_SILENT = 1u << 4,        /* words memcached takes and kura has no events for */
};

/* The union of every watcher's flags (0: nobody watches). */
extern atomic_uint kura_watch_flags;

static inline bool kura_watching(unsigned flag)
{
    return atomic_load_explicit(&kura_watch_flags, memory_order_relaxed) & flag;
}

/* The descriptor of the connection this thread is serving (memcached's
 * cfd), set by the session before each call into a protocol; -1 on a
 * thread that serves no connection (a replica applying rows). */
extern _Thread_local int kura_watch_cfd;

/* The events (call only when kura_watching(their flag)).  status: found
 * or not_found for a get; stored, exists, not_found, not_stored,
 * too_large, no_memory for a store.  ttl: seconds left, 0 = never (item_
 * store) or -1 = never (eviction), as memcached prints them.  la: seconds
 * since the item's last access. */
void kura_watch_item_get(const char *key, size_t klen, bool found, uint64_t size);
void kura_watch_item_store(const char *key, size_t klen, const char *status, const char *cmd,
                           long long ttl, uint64_t size);
void kura_watch_eviction(const char *key, size_t klen, bool fetched, long long ttl,
                         long long la, uint64_t size);
/* reason NULL: a new connection (conn_new); else conn_close's reason
 * (normal, error, idle_timeout, shutdown). */
void kura_watch_conn(int fd, const char *reason);

/* "watch <words>": the flags its words ask for (none: fetchers, as
 * memcached), or -1 for a word memcached does not take (ERROR). */
int kura_watch_parse(const char *const *words, const size_t *lens, int n);

/* Streams to fd (which it then owns) what flags ask for, after "OK\r\n"
 * unless quiet.  gone(ctx) is called once fd is closed.  0; -1 when 20
 * connections watch already (memcached's limit: "WATCHER_TOO_MANY log
 * watcher limit reached" is written and fd closed) or the stream's thread
 * cannot start (fd closed). */
int kura_watch_add(int fd, unsigned flags, bool quiet, void (*gone)(void *ctx), void *ctx);

/* Ends every stream and the thread (at exit). */
void kura_watch_stop(void);

#endif

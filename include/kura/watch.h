/*
 * watch.h - memcached 1.6's log stream ("watch fetchers mutations
 * evictions connevents"): the events, as memcached 1.6.18's logger writes
 * them, for the connections that asked (src/watch/watch.c).  The watch
 * module sits above the engine: it takes the engine's gets, stores and
 * evictions as the engine's observer (observer.h), connection events from
 * the server (kura_watch_conn).
 *
 * The server checks kura_watching(flag) first: one relaxed load of a word
 * that is 0 while nobody watches, so the stream costs nothing then.  Only when someone watches is the line formatted and copied into
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

/* A connection event (call only when kura_watching(KURA_WATCH_CONNEVENTS)):
 * reason NULL: a new connection (conn_new); else conn_close's reason
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

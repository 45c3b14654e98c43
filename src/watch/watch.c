/*
 * watch.c - memcached 1.6's log stream (include/kura/watch.h): the lines
 * memcached 1.6.18's logger writes for "watch", and the thread that sends
 * them to the connections watching.  A module of its own above the engine
 * (tools/layers.txt): the engine calls it as its observer
 * (include/kura/observer.h: gets, stores, and the stores' evictions passed
 * on), the server for connection events (kura_watch_conn); nothing below
 * the engine knows it exists.
 *
 * As memcached's logger: a watcher's connection leaves its worker (the
 * "watch" command hands its socket over) for one thread of this module,
 * which answers "OK" and then only sends; what the client sends is read
 * and dropped, and its close ends the stream.  At most WATCH_MAX (20, as
 * memcached) connections watch at once.
 *
 * Bounded, so a slow watcher never slows anything else: an event is
 * formatted once, on the thread it happens on, then copied under one
 * mutex into each interested watcher's ring of WATCH_RING bytes; a line
 * that does not fit is dropped and counted, and before the next line that
 * fits the watcher gets memcached's "skipped=N" line.  Nothing waits for a
 * watcher: the mutex covers a memcpy, never a send.  The thread moves at
 * most WATCH_CHUNK bytes a watcher at a time out of its ring and sends
 * them without blocking; the socket's send buffer is WATCH_SNDBUF (fixed,
 * so the kernel does not grow it to megabytes for a watcher that does not
 * read).  A watcher thus holds at most WATCH_RING + WATCH_CHUNK bytes here
 * and WATCH_SNDBUF in the kernel.
 *
 * While nobody watches, kura_watch_flags and the engine's observed mask
 * are 0 and an event costs its producer one relaxed load (kura_watching,
 * engine_observing).
 *
 * The layout of each line is memcached 1.6.18's (logger.c): "ts=" with
 * the microseconds unpadded as memcached prints them, a global event
 * number (gid), keys escaped as memcached's uriencode does (every byte but
 * letters, digits and "-._~" as %XX).  What cannot mean the same in kura
 * is documented in docs/protocol.md ("watch"): clsid is 0 (kura has no
 * slab classes), a store logs item_store alone (memcached logs its lookup
 * of the old item as an item_get first).
 */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kura/item.h"
#include "kura/observer.h"
#include "kura/uriencode.h"
#include "kura/watch.h"

#define WATCH_MAX 20                    /* memcached's LOGGER_MAX_WATCHERS */
#define WATCH_RING (256u << 10)         /* memcached's LOGGER_WATCHER_BUF_SIZE */
#define WATCH_CHUNK (64u << 10)
#define WATCH_SNDBUF (64 << 10)
/* A line: memcached's LOGGER_ENTRY_MAX_SIZE (2048) holds its keys (250
 * bytes, 3 * 250 encoded); Tokyo Tyrant's and Kyoto Tycoon's go up to
 * KURA_KEY_MAX, and a line carries them whole. */
#define WATCH_KEY_ENC (3 * KURA_KEY_MAX + 1)
#define WATCH_LINE_MAX (WATCH_KEY_ENC + 256)

atomic_uint kura_watch_flags;

/* The engine's events are the watch's own flags (observer.h). */
_Static_assert((unsigned)KURA_OBSERVE_FETCHERS == (unsigned)KURA_WATCH_FETCHERS &&
               (unsigned)KURA_OBSERVE_MUTATIONS == (unsigned)KURA_WATCH_MUTATIONS &&
               (unsigned)KURA_OBSERVE_EVICTIONS == (unsigned)KURA_WATCH_EVICTIONS,
               "observer.h's bits");

typedef struct watcher {
    bool used;                          /* false: the slot is free */
    int fd;
    unsigned flags;
    void (*gone)(void *ctx);
    void *ctx;
    /* under mu: */
    char *ring;
    size_t head, len;                   /* ring[head .. head+len) mod WATCH_RING */
    uint64_t skipped;
    /* the thread's: taken from the ring, not yet sent */
    char *out;
    size_t out_off, out_len;
} watcher;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static watcher ws[WATCH_MAX];
static atomic_ullong gid;
static int wake_fd = -1;                /* eventfd: a ring was empty and is not */
static pthread_t thread;
static bool running, stopping;

/* ---- lines ------------------------------------------------------------------ */

/* "ts=<sec>.<usec> gid=<n> " as memcached's logger starts every line. */
static int head(char *b, size_t cap)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    unsigned long long g = atomic_fetch_add_explicit(&gid, 1, memory_order_relaxed) + 1;
    return snprintf(b, cap, "ts=%lld.%d gid=%llu ", (long long)t.tv_sec,
                    (int)(t.tv_nsec / 1000), g);
}

/* Wakes the thread (mu held, so that the eventfd is not closed meanwhile):
 * a ring that was empty is not, or a watcher came.  Only then, not at every
 * line: the thread sends while the socket takes more. */
static void do_wake(void)
{
    uint64_t one = 1;
    ssize_t r = write(wake_fd, &one, sizeof(one));
    (void)r;                            /* a full counter wakes the thread as well */
}

/* Copies [p, p+n) into w's ring (which has room). */
static void do_ring_put(watcher *w, const char *p, size_t n)
{
    size_t tail = (w->head + w->len) % WATCH_RING;
    size_t first = n < WATCH_RING - tail ? n : WATCH_RING - tail;
    memcpy(w->ring + tail, p, first);
    memcpy(w->ring, p + first, n - first);
    w->len += n;
}

/* Gives the line to every watcher whose flags have flag. */
static void emit(unsigned flag, const char *line, size_t n)
{
    bool wake = false;
    if (n >= WATCH_LINE_MAX)
        return;                         /* not reached: a key is encoded into at most
                                           3 * KURA_KEY_MAX bytes (uriencode.h) */
    pthread_mutex_lock(&mu);
    for (int i = 0; i < WATCH_MAX; i++) {
        watcher *w = &ws[i];
        if (!w->used || !(w->flags & flag))
            continue;
        char sk[40];
        int skn = w->skipped ? snprintf(sk, sizeof(sk), "skipped=%llu\n",
                                        (unsigned long long)w->skipped) : 0;
        if (w->len + (size_t)skn + n > WATCH_RING) {
            w->skipped++;
            continue;
        }
        wake |= w->len == 0;
        if (skn)
            do_ring_put(w, sk, (size_t)skn);
        w->skipped = 0;
        do_ring_put(w, line, n);
    }
    if (wake)
        do_wake();
    pthread_mutex_unlock(&mu);
}

/* ---- the engine's observer (observer.h) ------------------------------------- */

static void item_get(int cfd, const char *key, size_t klen, bool found, uint64_t size)
{
    char line[WATCH_LINE_MAX], k[WATCH_KEY_ENC];
    kura_uriencode(key, klen, k, sizeof(k));
    int n = head(line, sizeof(line));
    n += snprintf(line + n, sizeof(line) - (size_t)n,
                  "type=item_get key=%s status=%s clsid=0 cfd=%d size=%llu\n", k,
                  found ? "found" : "not_found", cfd,
                  found ? (unsigned long long)size : 0ULL);
    emit(KURA_WATCH_FETCHERS, line, (size_t)n);
}

static void item_store(int cfd, const char *key, size_t klen, const char *status,
                       const char *cmd, long long ttl, uint64_t size)
{
    char line[WATCH_LINE_MAX], k[WATCH_KEY_ENC];
    kura_uriencode(key, klen, k, sizeof(k));
    int n = head(line, sizeof(line));
    n += snprintf(line + n, sizeof(line) - (size_t)n,
                  "type=item_store key=%s status=%s cmd=%s ttl=%lld clsid=0 cfd=%d size=%llu\n",
                  k, status, cmd, ttl, cfd, (unsigned long long)size);
    emit(KURA_WATCH_MUTATIONS, line, (size_t)n);
}

static void eviction(const char *key, size_t klen, bool fetched, long long ttl, long long la,
                     uint64_t size)
{
    char line[WATCH_LINE_MAX], k[WATCH_KEY_ENC];
    kura_uriencode(key, klen, k, sizeof(k));
    int n = head(line, sizeof(line));
    n += snprintf(line + n, sizeof(line) - (size_t)n,
                  "type=eviction key=%s fetch=%s ttl=%lld la=%lld clsid=0 size=%llu\n", k,
                  fetched ? "yes" : "no", ttl, la, (unsigned long long)size);
    emit(KURA_WATCH_EVICTIONS, line, (size_t)n);
}

static const kura_observer watch_observer = { item_get, item_store, eviction };

void kura_watch_conn(int fd, const char *reason)
{
    struct sockaddr_storage a;
    socklen_t al = sizeof(a);
    char rip[INET6_ADDRSTRLEN] = "unix", line[WATCH_LINE_MAX];
    unsigned port = 0;
    const char *transport = "local";
    memset(&a, 0, sizeof(a));
    if (getpeername(fd, (struct sockaddr *)&a, &al) == 0 && a.ss_family != AF_UNIX) {
        transport = "tcp";
        if (a.ss_family == AF_INET) {
            const struct sockaddr_in *s4 = (const struct sockaddr_in *)&a;
            inet_ntop(AF_INET, &s4->sin_addr, rip, sizeof(rip));
            port = ntohs(s4->sin_port);
        } else if (a.ss_family == AF_INET6) {
            const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&a;
            inet_ntop(AF_INET6, &s6->sin6_addr, rip, sizeof(rip));
            port = ntohs(s6->sin6_port);
        }
    }
    int n = head(line, sizeof(line));
    if (reason)
        n += snprintf(line + n, sizeof(line) - (size_t)n,
                      "type=conn_close rip=%s rport=%u transport=%s reason=%s cfd=%d\n", rip,
                      port, transport, reason, fd);
    else
        n += snprintf(line + n, sizeof(line) - (size_t)n,
                      "type=conn_new rip=%s rport=%u transport=%s cfd=%d\n", rip, port,
                      transport, fd);
    emit(KURA_WATCH_CONNEVENTS, line, (size_t)n);
}

int kura_watch_parse(const char *const *words, const size_t *lens, int n)
{
    static const struct { const char *word; unsigned flag; } known[] = {
        { "fetchers", KURA_WATCH_FETCHERS }, { "mutations", KURA_WATCH_MUTATIONS },
        { "evictions", KURA_WATCH_EVICTIONS }, { "connevents", KURA_WATCH_CONNEVENTS },
        { "rawcmds", KURA_WATCH_SILENT }, { "sysevents", KURA_WATCH_SILENT },
        { "proxyreqs", KURA_WATCH_SILENT }, { "proxyevents", KURA_WATCH_SILENT },
        { "proxyuser", KURA_WATCH_SILENT },
    };
    unsigned flags = 0;
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        while (k < sizeof(known) / sizeof(known[0]) &&
               !(strlen(known[k].word) == lens[i] && memcmp(known[k].word, words[i],
                                                             lens[i]) == 0))
            k++;
        if (k == sizeof(known) / sizeof(known[0]))
            return -1;
        flags |= known[k].flag;
    }
    return (int)(n ? flags : KURA_WATCH_FETCHERS);
}

/* ---- the thread ------------------------------------------------------------- */

static void do_recompute_flags(void)
{
    unsigned f = 0;
    for (int i = 0; i < WATCH_MAX; i++)
        if (ws[i].used)
            f |= ws[i].flags;
    atomic_store_explicit(&kura_watch_flags, f, memory_order_relaxed);
    engine_observe(&watch_observer, f & (KURA_WATCH_FETCHERS | KURA_WATCH_MUTATIONS |
                                         KURA_WATCH_EVICTIONS));
}

/* Ends slot i's stream (the thread's, or at stop).  The slot is emptied
 * under mu, so a "watch" may take it again at once. */
static void drop(int i)
{
    watcher *w = &ws[i];
    pthread_mutex_lock(&mu);
    watcher was = *w;
    *w = (watcher){ .used = false };
    do_recompute_flags();
    pthread_mutex_unlock(&mu);
    free(was.ring);
    free(was.out);
    close(was.fd);
    if (was.gone)
        was.gone(was.ctx);
}

/* Sends what slot i has; false when the watcher is gone. */
static bool pump(int i)
{
    watcher *w = &ws[i];
    for (;;) {
        if (w->out_off == w->out_len) {
            pthread_mutex_lock(&mu);
            size_t n = w->len < WATCH_CHUNK ? w->len : WATCH_CHUNK;
            size_t first = n < WATCH_RING - w->head ? n : WATCH_RING - w->head;
            memcpy(w->out, w->ring + w->head, first);
            memcpy(w->out + first, w->ring, n - first);
            w->head = (w->head + n) % WATCH_RING;
            w->len -= n;
            pthread_mutex_unlock(&mu);
            w->out_off = 0;
            w->out_len = n;
            if (n == 0)
                return true;
        }
        ssize_t s = send(w->fd, w->out + w->out_off, w->out_len - w->out_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (s > 0) {
            w->out_off += (size_t)s;
            continue;
        }
        return s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    }
}

/* Reads and drops what the watcher sent; false once it closed. */
static bool drain_input(int fd)
{
    char junk[4096];
    ssize_t r = recv(fd, junk, sizeof(junk), MSG_DONTWAIT);
    return r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

static void *watch_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[WATCH_MAX + 1];
        int slot[WATCH_MAX + 1], n = 1;
        p[0] = (struct pollfd){ .fd = wake_fd, .events = POLLIN };
        pthread_mutex_lock(&mu);
        bool stop = stopping;
        for (int i = 0; i < WATCH_MAX; i++) {
            if (!ws[i].used)
                continue;
            bool more = ws[i].len > 0 || ws[i].out_off < ws[i].out_len;
            p[n] = (struct pollfd){ .fd = ws[i].fd, .events = POLLIN | (more ? POLLOUT : 0) };
            slot[n++] = i;
        }
        pthread_mutex_unlock(&mu);
        if (stop)
            break;
        if (poll(p, (nfds_t)n, -1) < 0 && errno != EINTR)
            break;
        if (p[0].revents) {
            uint64_t v;
            ssize_t r = read(wake_fd, &v, sizeof(v));
            (void)r;
        }
        for (int k = 1; k < n; k++) {
            int i = slot[k];
            bool ok = !(p[k].revents & (POLLERR | POLLHUP | POLLNVAL));
            if (ok && (p[k].revents & POLLIN))
                ok = drain_input(ws[i].fd);
            if (ok)
                ok = pump(i);
            if (!ok)
                drop(i);
        }
    }
    return NULL;
}

int kura_watch_add(int fd, unsigned flags, bool quiet, void (*gone)(void *ctx), void *ctx)
{
    static const char too_many[] = "WATCHER_TOO_MANY log watcher limit reached\r\n";
    int sndbuf = WATCH_SNDBUF;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    char *ring = malloc(WATCH_RING), *out = malloc(WATCH_CHUNK);
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < WATCH_MAX && ws[i].used)
        i++;
    bool started = running;
    if (!started && ring && out && !stopping) {
        wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        running = wake_fd >= 0 && pthread_create(&thread, NULL, watch_main, NULL) == 0;
        if (!running && wake_fd >= 0) {
            close(wake_fd);
            wake_fd = -1;
        }
    }
    if (i == WATCH_MAX || !running || !ring || !out) {
        pthread_mutex_unlock(&mu);
        free(ring);
        free(out);
        if (i == WATCH_MAX) {
            ssize_t r = send(fd, too_many, sizeof(too_many) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
            (void)r;
        }
        close(fd);
        if (gone)
            gone(ctx);
        return -1;
    }
    ws[i] = (watcher){ .used = true, .fd = fd, .flags = flags, .gone = gone, .ctx = ctx, .ring = ring,
                       .out = out };
    if (!quiet)
        do_ring_put(&ws[i], "OK\r\n", 4);
    do_recompute_flags();
    do_wake();                          /* poll the new socket too */
    pthread_mutex_unlock(&mu);
    return 0;
}

void kura_watch_stop(void)
{
    pthread_mutex_lock(&mu);
    bool was = running;
    stopping = true;
    pthread_mutex_unlock(&mu);
    if (!was)
        return;
    pthread_mutex_lock(&mu);
    do_wake();
    pthread_mutex_unlock(&mu);
    pthread_join(thread, NULL);
    for (int i = 0; i < WATCH_MAX; i++)
        if (ws[i].used)
            drop(i);
    pthread_mutex_lock(&mu);
    close(wake_fd);
    wake_fd = -1;
    running = false;
    pthread_mutex_unlock(&mu);
}

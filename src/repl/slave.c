/*
 * slave.c - a replica following its master (include/kura/repl.h has the
 * protocol; docs/replication.md the operator's view).
 *
 * One thread: connect, send "repl <position> <sid>", apply every row that
 * comes, in order, through journal_apply_row() (which logs it in this
 * server's own update log, when it has one, with its origin's sid and
 * timestamp, so replicas can chain); ack what is applied; keep the position
 * in the rts file.  On a cut connection, a master that restarts or goes
 * silent (no heartbeat for 10 s), or a stream that does not decode, it
 * closes and connects again after a backoff that doubles from 100 ms to
 * 30 s and starts again at 100 ms once a stream worked.
 *
 * The position (the master's timestamp of the last row applied) is written
 * to the rts file at most once a second and when a stream ends, and only
 * after engine_sync() has made the applied rows durable here: after a crash
 * the file is at or behind what the store holds, and the rows between are
 * applied again, which does no harm (rows are results).
 *
 * Rows whose origin is this server (a dual master's own changes coming
 * back) are skipped.  A full copy (BOOT) is applied over what the replica
 * holds; the keys it held that the copy does not bring are deleted when
 * COPY_DONE arrives (keys changed meanwhile come again in the rows after
 * the copy's start).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kura/journal.h"
#include "kura/repl.h"
#include "kura/thread.h"
#include "keyset.h"

#define CONNECT_TIMEOUT_MS 5000
#define SILENCE_MS 10000                /* no byte from the master this long: reconnect */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 30000
#define RTS_EVERY_MS 1000

struct repl_slave {
    repl_config cfg;
    char host[256];
    int port;
    char rts_path[4096];
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;                          /* lock */
    int fd;                             /* lock: the current socket, -1 */

    _Atomic uint64_t pos;               /* the master's ts of the last row applied */
    _Atomic uint64_t master_last;       /* the master's last ts, from rows and heartbeats */
    _Atomic uint64_t applied, skipped, copies, connects, rts_errors;
    _Atomic bool connected, copying;
    uint64_t rts_saved;
    uint64_t rts_at_ms;
};

#define logf_(x, level, ...) repl_log((x)->cfg.log, level, __VA_ARGS__)

static uint64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* ---- the rts file ------------------------------------------------------------ */

static uint64_t rts_read(repl_slave *s)
{
    FILE *f = fopen(s->rts_path, "r");
    unsigned long long v = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%llu", &v) != 1) {
        logf_(s, KURA_LOG_ERROR, "replica: %s does not hold a position; starting from a "
              "full copy", s->rts_path);
        v = 0;
    }
    fclose(f);
    return v;
}

/* Makes what was applied durable, then writes the position beside the
 * file, syncs it and renames it into place. */
static void rts_write(repl_slave *s, uint64_t pos)
{
    if (pos == s->rts_saved)
        return;
    s->rts_at_ms = mono_ms();
    int rc = engine_sync(s->cfg.engine);
    if (rc) {
        atomic_fetch_add(&s->rts_errors, 1);
        logf_(s, KURA_LOG_ERROR, "replica: cannot sync what it applied (%s): the position "
              "stays at %" PRIu64, kura_strerror(rc), s->rts_saved);
        return;
    }
    char tmp[4200], dir[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", s->rts_path);
    snprintf(dir, sizeof(dir), "%s", s->rts_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        strcpy(dir, ".");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    char b[32];
    int n = snprintf(b, sizeof(b), "%" PRIu64 "\n", pos);
    bool ok = fd >= 0 && write(fd, b, (size_t)n) == n && fsync(fd) == 0;
    if (fd >= 0)
        close(fd);
    ok = ok && rename(tmp, s->rts_path) == 0;
    if (ok) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ok = dfd >= 0 && fsync(dfd) == 0;
        if (dfd >= 0)
            close(dfd);
    }
    if (!ok) {
        atomic_fetch_add(&s->rts_errors, 1);
        logf_(s, KURA_LOG_ERROR, "replica: cannot write %s: %s", s->rts_path, strerror(errno));
        return;
    }
    s->rts_saved = pos;
}

/* ---- connecting -------------------------------------------------------------- */

static bool connected_to_itself(int fd)
{
    struct sockaddr_storage a, b;
    socklen_t al = sizeof(a), bl = sizeof(b);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    return getsockname(fd, (struct sockaddr *)&a, &al) == 0 &&
           getpeername(fd, (struct sockaddr *)&b, &bl) == 0 && al == bl &&
           memcmp(&a, &b, al) == 0;
}

static int connect_master(repl_slave *s, char *why, size_t whylen)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res, *ai;
    char port[16];
    snprintf(port, sizeof(port), "%d", s->port);
    int e = getaddrinfo(s->host, port, &hints, &res);
    if (e) {
        snprintf(why, whylen, "%s", gai_strerror(e));
        return -1;
    }
    int fd = -1;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            struct pollfd pf = { .fd = fd, .events = POLLOUT };
            int err = 0;
            socklen_t el = sizeof(err);
            if (poll(&pf, 1, CONNECT_TIMEOUT_MS) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
                break;
            errno = err ? err : ETIMEDOUT;
        }
        snprintf(why, whylen, "%s", strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0 && connected_to_itself(fd)) {
        /* a master on this host, down, whose port is in the range the
         * kernel picks local ports from: TCP's simultaneous open connected
         * the socket to itself, and it would hold the master's port */
        close(fd);
        snprintf(why, whylen, "%s", strerror(ECONNREFUSED));
        return -1;
    }
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

/* ---- a stream ------------------------------------------------------------------ */

typedef struct session {
    repl_slave *s;
    int fd;
    unsigned char *buf;
    size_t len, cap;
    keyset *stale;                      /* while a copy arrives over the store: keys it
                                           has not brought */
    kura_store *shadow;                 /* while a copy arrives into a store of its own */
    bool copying;
    uint64_t copy_start, copy_items;
    bool progressed;
} session;

/* Reads more into the buffer: 1 when bytes came, 0 on silence, -1 closed. */
static int fill(session *ss, size_t want)
{
    if (want > ss->cap) {
        size_t ncap = ss->cap ? ss->cap : 256 * 1024;
        while (ncap < want)
            ncap *= 2;
        unsigned char *nb = realloc(ss->buf, ncap);
        if (!nb)
            return -1;
        ss->buf = nb;
        ss->cap = ncap;
    }
    if (ss->len == ss->cap)
        return 1;
    struct pollfd pf = { .fd = ss->fd, .events = POLLIN };
    int r = poll(&pf, 1, SILENCE_MS);
    if (r == 0)
        return 0;
    if (r < 0)
        return errno == EINTR ? 1 : -1;
    ssize_t n = recv(ss->fd, ss->buf + ss->len, ss->cap - ss->len, 0);
    if (n == 0)
        return -1;
    if (n < 0)
        return errno == EINTR || errno == EAGAIN ? 1 : -1;
    ss->len += (size_t)n;
    return 1;
}

static int add_stale(void *arg, const kura_item *it)
{
    return keyset_add(arg, it->key, it->klen) ? 0 : KURA_ENOMEM;
}

static int del_stale(void *arg, const char *key, size_t klen)
{
    session *ss = arg;
    ul_row del = { .type = UL_DEL, .key = key, .klen = klen, .sid = ss->s->cfg.sid,
                   .origin_ts = 0 };
    int rc = journal_apply_row(ss->s->cfg.engine, &del);
    return rc < 0 ? rc : 0;
}

/* The copy is complete: into the shadow store, swapped in whole; or over
 * the store, the keys it did not bring deleted (a read-only replica). */
static int copy_done(session *ss)
{
    repl_slave *s = ss->s;
    int rc = KURA_OK;
    if (ss->shadow) {
        kura_store *shadow = ss->shadow;
        ss->shadow = NULL;              /* the swap owns it now */
        if ((rc = s->cfg.swap_in(s->cfg.shadow_arg, shadow)) != KURA_OK) {
            logf_(s, KURA_LOG_ERROR, "replica: cannot put the copy in place (%s); the store "
                  "stays as it was", kura_strerror(rc));
            return rc;
        }
        /* this server's own log does not hold what came with the copy: its
         * replicas get a copy from it in turn */
        if (s->cfg.ulog && (rc = ul_set_complete(s->cfg.ulog, false)) != KURA_OK)
            return rc;
        logf_(s, KURA_LOG_INFO, "replica: copy of %" PRIu64 " items as of %" PRIu64 " in "
              "place", ss->copy_items, ss->copy_start);
    } else {
        size_t n = ss->stale ? keyset_count(ss->stale) : 0;
        if (ss->stale)
            rc = keyset_each(ss->stale, del_stale, ss);
        keyset_free(ss->stale);
        ss->stale = NULL;
        if (rc < 0)
            return rc;
        logf_(s, KURA_LOG_INFO, "replica: copy of %" PRIu64 " items complete at %" PRIu64
              " (%zu keys it did not hold deleted)", ss->copy_items, ss->copy_start, n);
    }
    ss->copying = false;
    atomic_store(&s->pos, ss->copy_start);
    atomic_store(&s->copying, false);
    rts_write(s, ss->copy_start);
    return KURA_OK;
}

/* Applies one row; KURA_OK or an error that ends the stream. */
static int handle(session *ss, const ul_row *row)
{
    repl_slave *s = ss->s;
    if (row->type == UL_MARK) {
        if (row->ts > atomic_load(&s->master_last))
            atomic_store(&s->master_last, row->ts);
        if (row->prev_ts == REPL_MARK_COPY_DONE && ss->copying)
            return copy_done(ss);
        return KURA_OK;
    }
    if (ss->copying) {                  /* an item of the copy */
        ss->copy_items++;
        if (ss->shadow) {
            kura_item it = {
                .key = row->key, .klen = row->klen, .val = row->val, .vlen = row->vlen,
                .flags = row->flags, .exptime = row->exptime, .cas = row->cas,
            };
            kura_clock clk = { .now = (int64_t)time(NULL) };
            return ss->shadow->ops->put(ss->shadow, &it, KURA_PUT_ANY, 0, &clk);
        }
        if (ss->stale)
            keyset_remove(ss->stale, row->key, row->klen);
        return journal_apply_row(s->cfg.engine, row);
    }
    if (row->ts <= atomic_load(&s->pos))
        return KURA_OK;                 /* had it (a master's log read from before) */
    int rc = KURA_OK;
    if (row->sid == s->cfg.sid)
        atomic_fetch_add(&s->skipped, 1);   /* our own change, back from a dual master */
    else if ((rc = journal_apply_row(s->cfg.engine, row)) == KURA_OK)
        atomic_fetch_add(&s->applied, 1);
    if (rc < 0)
        return rc;
    atomic_store(&s->pos, row->ts);
    if (row->ts > atomic_load(&s->master_last))
        atomic_store(&s->master_last, row->ts);
    return KURA_OK;
}

static int send_ack(session *ss)
{
    repl_slave *s = ss->s;
    uint64_t pos = atomic_load(&s->pos);
    if (s->cfg.sync_mode == KURA_SYNC_ALWAYS) {
        kura_commit src;
        if (journal_commit_source(s->cfg.engine, &src) &&
            src.commit(src.ctx, src.write_seq(src.ctx)) < 0)
            return -1;
    }
    char line[64];
    int n = snprintf(line, sizeof(line), "ACK %" PRIu64 "\r\n", pos);
    return repl_send_all(ss->fd, line, (size_t)n, 10000);
}

/* Reads the master's first line; returns its length, or -1. */
static int read_line(session *ss, char *line, size_t max)
{
    for (;;) {
        unsigned char *nl = ss->len ? memchr(ss->buf, '\n', ss->len) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - ss->buf) + 1;
            if (n >= max)
                return -1;
            memcpy(line, ss->buf, n);
            line[n] = '\0';
            memmove(ss->buf, ss->buf + n, ss->len - n);
            ss->len -= n;
            return (int)n;
        }
        if (ss->len >= max || fill(ss, REPL_LINE_MAX) <= 0)
            return -1;
    }
}

static void session_run(repl_slave *s, int fd)
{
    session ss = { .s = s, .fd = fd };
    char line[REPL_WELCOME_MAX + 1];
    uint64_t pos = atomic_load(&s->pos);
    repl_hello hello = { .after = pos, .sid = s->cfg.sid, .imax = s->cfg.item_max,
                         .port = s->cfg.port > 0 ? (uint32_t)s->cfg.port : 0 };
    repl_welcome w;
    int n = repl_hello_format(line, sizeof(line), &hello);
    if (n < 0 || repl_send_all(fd, line, (size_t)n, 10000) < 0 ||
        read_line(&ss, line, sizeof(line)) < 0) {
        logf_(s, KURA_LOG_ERROR, "replica: master %s:%d did not answer the repl command",
              s->host, s->port);
        goto out;
    }
    if (repl_welcome_parse(line, &w) != KURA_OK) {
        line[strcspn(line, "\r\n")] = '\0';
        logf_(s, KURA_LOG_ERROR, "replica: master %s:%d refused: %s", s->host, s->port, line);
        goto out;
    }
    unsigned long long a = w.pos;
    unsigned msid = w.msid;
    if (!w.boot) {
        logf_(s, KURA_LOG_INFO, "replica: following %s:%d (sid %u) from %llu", s->host, s->port,
              msid, a);
    } else {
        logf_(s, KURA_LOG_INFO, "replica: %s:%d (sid %u) sends a full copy as of %llu", s->host,
              s->port, msid, a);
        ss.copy_start = a;
        ss.copying = true;
        /* a read-only replica serves what it has until the copy is complete,
         * then the copy; one that takes writes applies the copy over what
         * it has and keeps the rest (its own changes may not have reached
         * the master) */
        if (!s->cfg.rw && s->cfg.open_shadow)
            ss.shadow = s->cfg.open_shadow(s->cfg.shadow_arg);
        if (!ss.shadow && !s->cfg.rw) {
            if (s->cfg.open_shadow)
                logf_(s, KURA_LOG_ERROR, "replica: no store of its own for the copy: applying "
                      "it over the store as it comes");
            ss.stale = keyset_new();
            if (!ss.stale || engine_iterate(s->cfg.engine, add_stale, ss.stale) != KURA_OK) {
                logf_(s, KURA_LOG_ERROR, "replica: out of memory listing the keys it holds");
                goto out;
            }
        }
        atomic_store(&s->copying, true);
        atomic_fetch_add(&s->copies, 1);
    }
    if (msid == s->cfg.sid)
        logf_(s, KURA_LOG_ERROR, "replica: master %s:%d has this server's own id %u: its rows "
              "are skipped as this server's own (give each server its own -sid)",
              s->host, s->port, msid);
    else if (s->cfg.rw && (msid & 15) == (s->cfg.sid & 15))
        logf_(s, KURA_LOG_ERROR, "replica: dual master with ids %u and %u, equal in their low "
              "4 bits: two changes in the same microsecond may not be ordered the same on "
              "both (give ids that differ modulo 16)", s->cfg.sid, msid);
    atomic_store(&s->connected, true);
    ss.progressed = true;

    size_t off = 0, need = 0;
    for (;;) {
        bool any = false;
        for (;;) {
            ul_row row;
            long long r = ul_decode(ss.buf + off, ss.len - off, &row, &need);
            if (r == SL_NEED_MORE) {
                if (s->cfg.row_max && need > s->cfg.row_max) {
                    /* a row larger than any item here: a master with a
                     * larger -I, or not a row at all; not buffered */
                    logf_(s, KURA_LOG_ERROR, "replica: a row of %zu bytes from %s:%d is larger "
                          "than this server takes (-I); reconnecting", need, s->host, s->port);
                    goto out;
                }
                break;
            }
            if (r <= 0) {
                logf_(s, KURA_LOG_ERROR, "replica: the stream from %s:%d does not decode "
                      "(not a row); reconnecting", s->host, s->port);
                goto out;
            }
            int rc = handle(&ss, &row);
            if (rc < 0) {
                logf_(s, KURA_LOG_ERROR, "replica: cannot apply a row: %s; reconnecting",
                      kura_strerror(rc));
                goto out;
            }
            off += (size_t)r;
            any = true;
        }
        if (off) {
            memmove(ss.buf, ss.buf + off, ss.len - off);
            ss.len -= off;
            off = 0;
        }
        if (any && !ss.copying && send_ack(&ss) < 0)
            goto out;
        if (!ss.copying && mono_ms() - s->rts_at_ms >= RTS_EVERY_MS)
            rts_write(s, atomic_load(&s->pos));
        pthread_mutex_lock(&s->lock);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->lock);
        if (stop)
            goto out;
        int f = fill(&ss, need > ss.len ? need : ss.len + 1);
        if (f == 0)
            logf_(s, KURA_LOG_ERROR, "replica: nothing from %s:%d for %d s; reconnecting",
                  s->host, s->port, SILENCE_MS / 1000);
        if (f <= 0)
            goto out;
    }
out:
    atomic_store(&s->connected, false);
    if (ss.copying) {
        keyset_free(ss.stale);
        if (ss.shadow)
            kura_store_close(ss.shadow);        /* removed by the next copy or start */
        atomic_store(&s->copying, false);
        logf_(s, KURA_LOG_ERROR, "replica: the copy was cut off; the next connection starts "
              "it again");
    } else {
        rts_write(s, atomic_load(&s->pos));
    }
    free(ss.buf);
}

static void *slave_main(void *arg)
{
    repl_slave *s = arg;
    int backoff = BACKOFF_MIN_MS;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->lock);
        if (stop)
            break;
        char why[200] = "";
        int fd = connect_master(s, why, sizeof(why));
        if (fd >= 0) {
            atomic_fetch_add(&s->connects, 1);
            pthread_mutex_lock(&s->lock);
            s->fd = fd;
            pthread_mutex_unlock(&s->lock);
            session_run(s, fd);
            pthread_mutex_lock(&s->lock);
            s->fd = -1;
            pthread_mutex_unlock(&s->lock);
            close(fd);
            backoff = BACKOFF_MIN_MS;
        } else {
            logf_(s, KURA_LOG_ERROR, "replica: cannot connect to master %s:%d: %s; retrying "
                  "with backoff", s->host, s->port, why);
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += backoff / 1000;
        until.tv_nsec += (long)(backoff % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&s->lock);
        while (!s->stop && pthread_cond_timedwait(&s->wake, &s->lock, &until) != ETIMEDOUT)
            ;
        pthread_mutex_unlock(&s->lock);
        if (fd < 0)
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    return NULL;
}

int repl_slave_start(const repl_config *cfg, const char *host, int port, const char *rts_path,
                     repl_slave **out)
{
    repl_slave *s = calloc(1, sizeof(*s));
    if (!s)
        return KURA_ENOMEM;
    s->cfg = *cfg;
    snprintf(s->host, sizeof(s->host), "%s", host);
    s->port = port;
    snprintf(s->rts_path, sizeof(s->rts_path), "%s", rts_path);
    s->fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    kura_cond_init_mono(&s->wake);
    uint64_t pos = rts_read(s);
    atomic_store(&s->pos, pos);
    s->rts_saved = pos;
    if (pthread_create(&s->thread, NULL, slave_main, s) != 0) {
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->wake);
        free(s);
        return KURA_ESYS;
    }
    *out = s;
    return KURA_OK;
}

void repl_slave_stop(repl_slave *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    if (s->fd >= 0)
        shutdown(s->fd, SHUT_RDWR);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    free(s);
}


void repl_slave_stats(repl_slave *s, bool all, kura_stat_fn emit, void *arg)
{
    char b[300];
    snprintf(b, sizeof(b), "%s:%d", s->host, s->port);
    if (all)
        emit(arg, "repl_master", b);
    repl_emit_u64(emit, arg, "repl_connected", atomic_load(&s->connected));
    repl_emit_u64(emit, arg, "repl_copying", atomic_load(&s->copying));
    uint64_t pos = atomic_load(&s->pos), last = atomic_load(&s->master_last);
    repl_emit_u64(emit, arg, "repl_position", pos);
    uint64_t lag = last > pos ? hlc_us(last) - hlc_us(pos) : 0;
    repl_emit_u64(emit, arg, "repl_lag_us", lag);
    snprintf(b, sizeof(b), "%.3f", (double)lag / 1e6);
    emit(arg, "repl_lag_seconds", b);
    repl_emit_u64(emit, arg, "repl_rows_applied", atomic_load(&s->applied));
    repl_emit_u64(emit, arg, "repl_rows_own_skipped", atomic_load(&s->skipped));
    repl_emit_u64(emit, arg, "repl_connects", atomic_load(&s->connects));
    repl_emit_u64(emit, arg, "repl_copies_received", atomic_load(&s->copies));
    repl_emit_u64(emit, arg, "repl_rts_errors", atomic_load(&s->rts_errors));
}

/*
 * slave.c - a replica following its master (include/kura/repl.h has the
 * protocol; docs/replication.md the operator's view).
 *
 * One thread: connect, send "repl <position> <sid>", apply every row that
 * comes, in order, through engine_apply_row() (which logs it in this
 * server's own update log, when it has one, with its origin's sid and
 * timestamp, so replicas can chain); ack what is applied; keep the position
 * in the rts file.  On a cut connection, a master that restarts or goes
 * silent (no heartbeat for 10 s), or a stream that does not decode, it
 * closes and connects again after a backoff that doubles from 100 ms to
 * 30 s.  Every way back to a connect waits the backoff (a refused stream,
 * one that breaks at once, a failed connect), and it starts again at
 * 100 ms only after a stream that worked (a row applied, a copy complete,
 * or STABLE_MS connected): a master that refuses is asked at most every
 * 30 s, never ten times a second.
 *
 * Before a row is applied, the master's welcome is checked (not with -rw):
 * a larger -I than this server's is refused (state "refused", retried with
 * the backoff); a history (journal.h) in which this server holds rows the
 * master never had is divergence (history_check).  Its rows are saved to a
 * file beside the update log, one WARN says so, and the next connection
 * asks for a full copy (copy=1), after which this server's history is the
 * master's; with -repl-divergence refuse it stops (exit 2) instead.
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

#include "kura/escape.h"
#include "kura/journal.h"
#include "kura/login.h"
#include "kura/repl.h"
#include "kura/tlsio.h"
#include "kura/thread.h"
#include "keyset.h"

#define CONNECT_TIMEOUT_MS 5000
#define SILENCE_MS 10000                /* no byte from the master this long: reconnect */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 30000
#define RTS_EVERY_MS 1000
/* The server's log has no warning level: a warning is written as an
 * error (kept under -le too), its text starting "WARNING:". */
#define LOG_WARN KURA_LOG_ERROR
#define STABLE_MS 5000                  /* connected this long: the stream worked */
#define LAG_FRESH_MS 3000               /* a heartbeat older than this: lag unknown */

/* what a stream ended with (slave_main decides the wait from it) */
enum { SESS_FAILED = 1, SESS_WORKED, SESS_REFUSED, SESS_DIVERGED, SESS_FATAL, SESS_OPEN };

static const char *const state_names[] = {
    [REPL_ST_CONNECTING] = "connecting", [REPL_ST_CONNECTED] = "connected",
    [REPL_ST_COPYING] = "copying", [REPL_ST_RECONNECTING] = "reconnecting",
    [REPL_ST_DIVERGED] = "diverged", [REPL_ST_REFUSED] = "refused",
    [REPL_ST_STOPPED] = "stopped",
};

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
    _Atomic int state;                  /* REPL_ST_* */
    _Atomic uint64_t next_attempt_ms;   /* mono_ms() of the next attempt; 0: none waited for */
    _Atomic uint64_t master_hid;        /* the last welcome's (0: none yet) */
    _Atomic uint64_t hb_at_ms;          /* mono_ms() of this stream's last heartbeat; 0: none */
    _Atomic uint64_t divergences;
    char last_error[512];               /* lock: the last failure, "" none */
    char last_logged[512];              /* lock: the last failure logged, "" after a stream
                                           worked (a failure repeated is logged once) */
    uint64_t rts_hid;                   /* the id of the master's log the position counts in */
    uint64_t rts_saved, rts_saved_hid;
    uint64_t rts_at_ms;
    bool want_copy;                     /* the thread's: ask copy=1 (its data diverged) */
    bool skip_login;                    /* the thread's: the master asked for no login */
    bool hist_warned;                   /* the thread's: "cannot check" logged once */
};

#define logf_(x, level, ...) repl_log((x)->cfg.log, level, __VA_ARGS__)

static uint64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* ---- the rts file ------------------------------------------------------------ */

/* "<pos> <hid, 16 hex>\n" (a file of one number, from before log ids:
 * hid 0, unknown). */
static uint64_t rts_read(repl_slave *s)
{
    FILE *f = fopen(s->rts_path, "r");
    unsigned long long v = 0, hid = 0;
    if (!f)
        return 0;
    int n = fscanf(f, "%llu %llx", &v, &hid);
    if (n < 1) {
        logf_(s, KURA_LOG_ERROR, "replica: %s does not hold a position; starting from a "
              "full copy", s->rts_path);
        v = 0;
    }
    fclose(f);
    s->rts_hid = n == 2 ? hid : 0;
    return v;
}

/* Makes what was applied durable, then writes the position beside the
 * file, syncs it and renames it into place. */
static void rts_write(repl_slave *s, uint64_t pos)
{
    if (pos == s->rts_saved && s->rts_hid == s->rts_saved_hid)
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
    char b[48];
    int n = snprintf(b, sizeof(b), "%" PRIu64 " %016" PRIx64 "\n", pos, s->rts_hid);
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
    s->rts_saved_hid = s->rts_hid;
}

/* ---- state and errors ------------------------------------------------------ */

static void set_state(repl_slave *s, int st)
{
    atomic_store(&s->state, st);
}

/* Records the failure (stats repl's repl_last_error) and logs it at level,
 * unless it is the same as the last one: a master that refuses the same
 * way at every retry gives one line, not one per retry. */
static void fail(repl_slave *s, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(repl_slave *s, int level, const char *fmt, ...)
{
    char b[sizeof(s->last_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof(b), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&s->lock);
    bool same = strcmp(b, s->last_logged) == 0;
    memcpy(s->last_error, b, sizeof(b));
    memcpy(s->last_logged, b, sizeof(b));
    pthread_mutex_unlock(&s->lock);
    if (!same)
        logf_(s, level, "replica: %s", b);
}

/* ---- the history check ------------------------------------------------------- */

static bool text_key(const void *key, size_t n)
{
    const unsigned char *k = key;
    for (size_t i = 0; i < n; i++)
        if (k[i] <= ' ' || k[i] == 0x7f)
            return false;
    return n > 0;
}

/* One row in the memcached text format "kuractl load" reads: 1 written,
 * 0 skipped (a key the text protocol cannot carry, a flush_all), -1 error. */
static int save_row(FILE *f, const ul_row *r)
{
    if (r->type == UL_FLUSH || !text_key(r->key, r->klen))
        return 0;
    if (r->type == UL_DEL)
        return fprintf(f, "delete %.*s\r\n", (int)r->klen, (const char *)r->key) < 0 ? -1 : 1;
    if (fprintf(f, "set %.*s %" PRIu32 " %" PRId64 " %zu\r\n", (int)r->klen,
                (const char *)r->key, r->flags, r->exptime, r->vlen) < 0 ||
        fwrite(r->val, 1, r->vlen, f) != r->vlen || fwrite("\r\n", 1, 2, f) != 2)
        return -1;
    return 1;
}

/* Writes the rows of this server's update log that the master never had
 * (origin o's rows past theirs[o], where mine[o] is above it) to a new file
 * beside the log, synced: KURA_OK with the path and counts, or an error. */
static int save_diverged(repl_slave *s, const journal_hist *mine, const journal_hist *theirs,
                         uint32_t msid, char *path, size_t plen, uint64_t *rows,
                         uint64_t *skipped)
{
    ul_log *log = s->cfg.ulog;
    uint64_t from = UINT64_MAX;
    for (size_t i = 0; i < mine->n; i++) {
        uint64_t t = journal_hist_get(theirs, mine->e[i].sid);
        if (mine->e[i].ts > t && t < from)
            from = t;
    }
    ul_extent ex;
    ul_get_extent(log, &ex);
    if (from < ex.from_ts)
        from = ex.from_ts;              /* the rows before are not held any more */
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32];
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
    FILE *f = NULL;
    for (int i = 1; !f && i < 100; i++) {       /* never over an earlier one */
        snprintf(path, plen, "%s/diverged-%s-from-sid%u%s%.0d.txt", ul_dir(log), stamp, msid,
                 i > 1 ? "-" : "", i > 1 ? i : 0);
        f = fopen(path, "wx");
        if (!f && errno != EEXIST)
            break;
    }
    if (!f)
        return sl_errno_status(errno);
    ul_reader *rd;
    int rc = ul_reader_open(log, from, &rd);
    *rows = *skipped = 0;
    if (rc == KURA_OK) {
        ul_row r;
        while ((rc = ul_reader_next(rd, &r)) == KURA_OK) {
            if (r.origin_ts <= journal_hist_get(theirs, r.sid))
                continue;
            int w = save_row(f, &r);
            if (w < 0) {
                rc = KURA_EIO;
                break;
            }
            *(w ? rows : skipped) += 1;
        }
        ul_reader_close(rd);
        if (rc == UL_CAUGHT_UP)
            rc = KURA_OK;
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        rc = rc ? rc : KURA_EIO;
    fclose(f);
    return rc;
}

/* The master's welcome against this server's history, before any row is
 * applied: 0 (go on), SESS_DIVERGED (saved; ask for a copy), SESS_FAILED
 * (could not save: nothing changes, tried again) or SESS_FATAL (refuse). */
static int history_check(repl_slave *s, const repl_welcome *w)
{
    if (s->cfg.rw || !s->cfg.ulog)
        return 0;                       /* a dual master keeps its rule; no log: no history */
    journal_hist theirs, mine;
    if (!w->ext || journal_hist_parse(w->hist, &theirs) != KURA_OK) {
        if (!s->hist_warned)
            logf_(s, LOG_WARN, "replica: WARNING: master %s:%d sends no history (an older kura, "
                  "or another server): this replica cannot check that it holds no rows the "
                  "master never had", s->host, s->port);
        s->hist_warned = true;
        return 0;
    }
    journal_history(engine_journal(s->cfg.engine), &mine);
    uint32_t o = journal_hist_ahead(&mine, &theirs);
    if (!o || (s->want_copy && w->boot))
        return 0;                       /* (its rows are saved: the copy asked for comes) */
    if (s->want_copy) {
        /* saved already, and the master did not send the copy asked for */
        set_state(s, REPL_ST_DIVERGED);
        fail(s, KURA_LOG_ERROR, "master %s:%d did not send the full copy asked for (copy=1); "
             "nothing applied, retrying", s->host, s->port);
        return SESS_FAILED;
    }
    set_state(s, REPL_ST_DIVERGED);
    atomic_fetch_add(&s->divergences, 1);
    char path[4300];
    uint64_t rows = 0, skipped = 0;
    int rc = save_diverged(s, &mine, &theirs, w->msid, path, sizeof(path), &rows, &skipped);
    if (rc != KURA_OK) {
        fail(s, KURA_LOG_ERROR, "diverged from master %s:%d (origin %u: rows up to %" PRIu64
             " here, %" PRIu64 " there), and cannot save its rows to %s: %s; nothing applied, "
             "retrying", s->host, s->port, o, journal_hist_get(&mine, o),
             journal_hist_get(&theirs, o), path, kura_strerror(rc));
        return SESS_FAILED;
    }
    char extra[96] = "";
    if (skipped)
        snprintf(extra, sizeof(extra), " (%" PRIu64 " flush_all rows or keys the text format "
                 "cannot carry left out)", skipped);
    logf_(s, LOG_WARN, "replica: WARNING: diverged from master %s:%d (sid %u): this server holds "
          "%" PRIu64 " rows the master never had (origin %u: up to %" PRIu64 " here, %" PRIu64
          " there); saved to %s%s (kuractl load DB FILE applies them); %s", s->host, s->port,
          w->msid, rows, o, journal_hist_get(&mine, o), journal_hist_get(&theirs, o), path,
          extra, s->cfg.divergence_refuse ? "stopping (-repl-divergence refuse)"
                                           : "taking a full copy from the master");
    pthread_mutex_lock(&s->lock);
    snprintf(s->last_error, sizeof(s->last_error), "diverged: %" PRIu64 " rows saved to %.400s",
             rows, path);
    pthread_mutex_unlock(&s->lock);
    if (s->cfg.divergence_refuse) {
        logf_(s, KURA_LOG_ERROR, "replica: stopped on divergence. Inspect the saved rows, "
              "apply them where they belong (kuractl load DB %s), then either start this "
              "server again as a replica with -repl-divergence copy (it replaces its data by a "
              "full copy), or remove its data (database and update log) and start it with "
              "-mhost for a full copy", path);
        if (s->cfg.fatal)
            s->cfg.fatal(s->cfg.fatal_arg, 2);
        return SESS_FATAL;
    }
    if (w->boot)
        return 0;                       /* the copy that follows replaces the data */
    s->want_copy = true;
    return SESS_DIVERGED;
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
    struct ssl_st *ssl;                 /* -mtls: the stream's TLS; NULL: plaintext */
    unsigned char *buf;
    size_t len, cap;
    keyset *stale;                      /* while a copy arrives over the store: keys it
                                           has not brought */
    kura_store *shadow;                 /* while a copy arrives into a store of its own */
    bool copying;
    uint64_t copy_start, copy_items;
    bool progressed;                    /* the stream worked: the backoff starts again */
    uint64_t hid;                       /* the master's log's id (0: unknown) */
    bool has_hist;                      /* hist: the master's history, from its welcome */
    journal_hist hist;
} session;

/* Sends all of buf to the master (TLS or not), waiting for the socket at
 * most 10 s at a time: 0 or -1. */
static int send_all(session *ss, const void *buf, size_t len)
{
    return kura_tls_send_all(ss->fd, ss->ssl, buf, len, 10000);
}

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
    if (!(ss->ssl && kura_tls_pending(ss->ssl))) {     /* decrypted already: no wait */
        struct pollfd pf = { .fd = ss->fd, .events = POLLIN };
        int r = poll(&pf, 1, SILENCE_MS);
        if (r == 0)
            return 0;
        if (r < 0)
            return errno == EINTR ? 1 : -1;
    }
    ssize_t n = ss->ssl ? kura_tls_recv(ss->ssl, ss->buf + ss->len, ss->cap - ss->len)
                        : recv(ss->fd, ss->buf + ss->len, ss->cap - ss->len, 0);
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
    int rc = engine_apply_row(ss->s->cfg.engine, &del);
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
    ss->progressed = true;
    /* this server holds the master's history now (and none of its own
     * rows from before: diverged ones included), durably before the
     * position moves on */
    if (ss->has_hist && !s->cfg.rw && s->cfg.ulog &&
        journal_history_reset(engine_journal(s->cfg.engine), &ss->hist) != KURA_OK)
        return KURA_EIO;
    s->want_copy = false;
    s->rts_hid = ss->hid;
    atomic_store(&s->pos, ss->copy_start);
    atomic_store(&s->copying, false);
    set_state(s, REPL_ST_CONNECTED);
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
        if (row->prev_ts == REPL_MARK_HEARTBEAT)
            atomic_store(&s->hb_at_ms, mono_ms());
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
            return kura_store_put(ss->shadow, &it, KURA_PUT_ANY, 0, &clk);
        }
        if (ss->stale)
            keyset_remove(ss->stale, row->key, row->klen);
        return engine_apply_row(s->cfg.engine, row);
    }
    if (row->ts <= atomic_load(&s->pos))
        return KURA_OK;                 /* had it (a master's log read from before) */
    int rc = KURA_OK;
    if (row->sid == s->cfg.sid)
        atomic_fetch_add(&s->skipped, 1);   /* our own change, back from a dual master */
    else if ((rc = engine_apply_row(s->cfg.engine, row)) == KURA_OK)
        atomic_fetch_add(&s->applied, 1);
    if (rc < 0)
        return rc;
    ss->progressed = true;
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
        if (engine_commit_source(s->cfg.engine, &src) &&
            src.commit(src.ctx, src.write_seq(src.ctx)) < 0)
            return -1;
    }
    char line[64];
    int n = snprintf(line, sizeof(line), "ACK %" PRIu64 "\r\n", pos);
    return send_all(ss, line, (size_t)n);
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

/* The welcome read, checked (-I, history) and acted on: 0 (rows follow),
 * or the SESS_* the stream ends with. */
static int welcome(session *ss, const char *line)
{
    repl_slave *s = ss->s;
    repl_welcome w;
    if (repl_welcome_parse(line, &w) != KURA_OK) {
        char shown[KURA_ESCAPED_MAX(200)];     /* the peer's bytes, escaped for the log */
        bool refused = strncmp(line, "SERVER_ERROR", 12) == 0 ||
                       strncmp(line, "CLIENT_ERROR", 12) == 0 || strncmp(line, "ERROR", 5) == 0;
        fail(s, KURA_LOG_ERROR, "master %s:%d refused: %s", s->host, s->port,
             kura_escape(shown, sizeof(shown), line, strcspn(line, "\r\n")));
        return refused ? SESS_REFUSED : SESS_FAILED;
    }
    if (w.ext && w.imax > s->cfg.item_max) {
        /* its rows may be larger than any this server takes: refused here
         * rather than stopped at the first such row */
        fail(s, KURA_LOG_ERROR, "master %s:%d's -I (%" PRIu64 ") is larger than this "
             "replica's (%" PRIu64 "): start this replica with -I %" PRIu64 " or more",
             s->host, s->port, w.imax, s->cfg.item_max, w.imax);
        return SESS_REFUSED;
    }
    atomic_store(&s->master_hid, w.hid);
    int hc = history_check(s, &w);
    if (hc)
        return hc;
    ss->hid = w.ext ? w.hid : s->rts_hid;
    ss->has_hist = w.ext && journal_hist_parse(w.hist, &ss->hist) == KURA_OK;
    if (!w.boot) {
        logf_(s, KURA_LOG_INFO, "replica: following %s:%d (sid %u) from %" PRIu64, s->host,
              s->port, w.msid, w.pos);
        /* the master's answer is the position (0 when it found the one
         * asked counted in another log) */
        atomic_store(&s->pos, w.pos);
        s->rts_hid = ss->hid;
        set_state(s, REPL_ST_CONNECTED);
    } else {
        logf_(s, KURA_LOG_INFO, "replica: %s:%d (sid %u) sends a full copy as of %" PRIu64,
              s->host, s->port, w.msid, w.pos);
        ss->copy_start = w.pos;
        ss->copying = true;
        /* a read-only replica serves what it has until the copy is complete,
         * then the copy; one that takes writes applies the copy over what
         * it has and keeps the rest (its own changes may not have reached
         * the master) */
        if (!s->cfg.rw && s->cfg.open_shadow)
            ss->shadow = s->cfg.open_shadow(s->cfg.shadow_arg);
        if (!ss->shadow && !s->cfg.rw) {
            if (s->cfg.open_shadow)
                logf_(s, KURA_LOG_ERROR, "replica: no store of its own for the copy: applying "
                      "it over the store as it comes");
            ss->stale = keyset_new();
            if (!ss->stale || engine_iterate(s->cfg.engine, add_stale, ss->stale) != KURA_OK) {
                fail(s, KURA_LOG_ERROR, "out of memory listing the keys it holds");
                return SESS_FAILED;
            }
        }
        atomic_store(&s->copying, true);
        atomic_fetch_add(&s->copies, 1);
        set_state(s, REPL_ST_COPYING);
    }
    if (w.msid == s->cfg.sid)
        logf_(s, KURA_LOG_ERROR, "replica: master %s:%d has this server's own id %u: its rows "
              "are skipped as this server's own (give each server its own -sid)",
              s->host, s->port, w.msid);
    else if (s->cfg.rw && (w.msid & 15) == (s->cfg.sid & 15))
        logf_(s, KURA_LOG_ERROR, "replica: dual master with ids %u and %u, equal in their low "
              "4 bits: two changes in the same microsecond may not be ordered the same on "
              "both (give ids that differ modulo 16)", s->cfg.sid, w.msid);
    atomic_store(&s->connected, true);
    return 0;
}

/* kura_login's I/O on the stream's socket and buffer. */
static int login_send(void *ss, const void *p, size_t n)
{
    return send_all(ss, p, n);
}

static int login_read(void *arg, void *p, size_t n)
{
    session *ss = arg;
    while (ss->len < n)
        if (fill(ss, n) <= 0)
            return -1;
    memcpy(p, ss->buf, n);
    memmove(ss->buf, ss->buf + n, ss->len - n);
    ss->len -= n;
    return 0;
}

/* With credentials (cfg.auth_user), before the repl line: the login the
 * master asks for, -Y's or -S's (kura_login); a master that asks for
 * neither gets none (one without -Y would store them as an item): then
 * SESS_OPEN, and the next connection, at once, goes without.  0: go on;
 * or the SESS_* the stream ends with (a wrong password: SESS_REFUSED,
 * retried with the backoff). */
static int authenticate(session *ss)
{
    repl_slave *s = ss->s;
    char msg[600];
    if (!s->cfg.auth_user || s->skip_login) {
        s->skip_login = false;
        return 0;
    }
    kura_login_io io = { ss, login_send, login_read };
    switch (kura_login(&io, s->cfg.auth_user, s->cfg.auth_pass, msg, sizeof(msg))) {
    case KURA_LOGIN_OK:
        return 0;
    case KURA_LOGIN_OPEN:
        s->skip_login = true;
        return SESS_OPEN;
    case KURA_LOGIN_REFUSED:
        fail(s, KURA_LOG_ERROR, "master %s:%d refused authentication as user '%s': %s; "
             "retrying with backoff", s->host, s->port, s->cfg.auth_user, msg);
        return SESS_REFUSED;
    case KURA_LOGIN_LOST:
        fail(s, KURA_LOG_ERROR, "master %s:%d did not answer the authentication", s->host,
             s->port);
        return SESS_FAILED;
    default:
        fail(s, KURA_LOG_ERROR, "master %s:%d: %s", s->host, s->port, msg);
        return SESS_REFUSED;
    }
}

static int session_run(repl_slave *s, int fd)
{
    session ss = { .s = s, .fd = fd };
    char line[REPL_WELCOME_MAX + 1];
    int res = SESS_FAILED;
    repl_hello hello = { .after = atomic_load(&s->pos), .sid = s->cfg.sid,
                         .hid = s->rts_hid, .imax = s->cfg.item_max,
                         .port = s->cfg.port > 0 ? (uint32_t)s->cfg.port : 0,
                         .copy = s->want_copy };
    atomic_store(&s->master_last, 0);
    atomic_store(&s->hb_at_ms, 0);
    if (s->cfg.tls_ctx) {
        char why[300];
        ss.ssl = kura_tls_connect(s->cfg.tls_ctx, fd, s->host, CONNECT_TIMEOUT_MS, why,
                                  sizeof(why));
        if (!ss.ssl) {
            fail(s, KURA_LOG_ERROR, "master %s:%d (-mtls): %s; retrying with backoff", s->host,
                 s->port, why);
            goto out;
        }
    }
    if ((res = authenticate(&ss)) != 0)
        goto out;
    res = SESS_FAILED;
    int n = repl_hello_format(line, sizeof(line), &hello);
    if (n < 0 || send_all(&ss, line, (size_t)n) < 0 ||
        read_line(&ss, line, sizeof(line)) < 0) {
        fail(s, KURA_LOG_ERROR, "master %s:%d did not answer the repl command", s->host,
             s->port);
        goto out;
    }
    if ((res = welcome(&ss, line)) != 0)
        goto out;
    res = SESS_FAILED;
    uint64_t since = mono_ms();

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
                    fail(s, KURA_LOG_ERROR, "a row of %zu bytes from %s:%d is larger than "
                         "this server takes (-I); reconnecting", need, s->host, s->port);
                    goto out;
                }
                break;
            }
            if (r <= 0) {
                fail(s, KURA_LOG_ERROR, "the stream from %s:%d does not decode (not a row); "
                     "reconnecting", s->host, s->port);
                goto out;
            }
            int rc = handle(&ss, &row);
            if (rc < 0) {
                fail(s, KURA_LOG_ERROR, "cannot apply a row: %s; reconnecting",
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
        if (mono_ms() - since >= STABLE_MS)
            ss.progressed = true;
        if (ss.progressed) {
            pthread_mutex_lock(&s->lock);
            s->last_logged[0] = '\0';   /* working again: the next failure is logged */
            pthread_mutex_unlock(&s->lock);
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
            fail(s, KURA_LOG_ERROR, "nothing from %s:%d for %d s; reconnecting", s->host,
                 s->port, SILENCE_MS / 1000);
        else if (f < 0)
            fail(s, KURA_LOG_INFO, "the stream from %s:%d ended", s->host, s->port);
        if (f <= 0)
            goto out;
    }
out:
    atomic_store(&s->connected, false);
    atomic_store(&s->hb_at_ms, 0);
    if (ss.copying) {
        keyset_free(ss.stale);
        if (ss.shadow)
            kura_store_close(ss.shadow);        /* removed by the next copy or start */
        atomic_store(&s->copying, false);
        logf_(s, KURA_LOG_ERROR, "replica: the copy was cut off; the next connection starts "
              "it again");
    } else if (res != SESS_DIVERGED && res != SESS_FATAL) {
        rts_write(s, atomic_load(&s->pos));
    }
    kura_tls_close(ss.ssl, true);
    free(ss.buf);
    return res == SESS_FAILED && ss.progressed ? SESS_WORKED : res;
}

/* Waits until mono_ms() reaches at (or a stop): stats show the time left. */
static void wait_until(repl_slave *s, uint64_t at)
{
    atomic_store(&s->next_attempt_ms, at);
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        uint64_t now = mono_ms();
        if (now >= at)
            break;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        uint64_t left = at - now;
        until.tv_sec += (time_t)(left / 1000);
        until.tv_nsec += (long)(left % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->wake, &s->lock, &until);
    }
    pthread_mutex_unlock(&s->lock);
    atomic_store(&s->next_attempt_ms, 0);
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
        int res = SESS_FAILED;
        /* A refused replica stays "refused" through its next attempts, until
         * one connects (the session says "connected") or fails otherwise:
         * shown as "connecting" for each attempt, /health and kuractl said
         * it was well for the length of every retry. */
        if (atomic_load(&s->state) != REPL_ST_REFUSED)
            set_state(s, REPL_ST_CONNECTING);
        int fd = connect_master(s, why, sizeof(why));
        if (fd >= 0) {
            atomic_fetch_add(&s->connects, 1);
            pthread_mutex_lock(&s->lock);
            s->fd = fd;
            pthread_mutex_unlock(&s->lock);
            res = session_run(s, fd);
            pthread_mutex_lock(&s->lock);
            s->fd = -1;
            pthread_mutex_unlock(&s->lock);
            close(fd);
        } else {
            fail(s, KURA_LOG_ERROR, "cannot connect to master %s:%d: %s; retrying with backoff",
                 s->host, s->port, why);
        }
        if (res == SESS_FATAL) {
            set_state(s, REPL_ST_DIVERGED);
            break;                      /* the server stops (cfg.fatal) */
        }
        if (res == SESS_DIVERGED || res == SESS_OPEN)
            continue;                   /* at once, asking for a copy or without a login */
        if (res == SESS_WORKED)
            backoff = BACKOFF_MIN_MS;
        /* every other way back waits the backoff, which grows until a
         * stream works: a master that refuses is not asked ten times a
         * second */
        set_state(s, res == SESS_REFUSED ? REPL_ST_REFUSED : REPL_ST_RECONNECTING);
        wait_until(s, mono_ms() + (uint64_t)backoff);
        if (res != SESS_WORKED)
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    if (atomic_load(&s->state) != REPL_ST_DIVERGED)
        set_state(s, REPL_ST_STOPPED);
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
    s->rts_saved_hid = s->rts_hid;
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
    int st = atomic_load(&s->state);
    emit(arg, "repl_state", state_names[st]);
    uint64_t at = atomic_load(&s->next_attempt_ms), now = mono_ms();
    repl_emit_u64(emit, arg, "repl_next_attempt_ms", at > now ? at - now : 0);
    if (all) {
        char e[sizeof(s->last_error)];
        pthread_mutex_lock(&s->lock);
        memcpy(e, s->last_error[0] ? s->last_error : "-", s->last_error[0] ? sizeof(e) : 2);
        pthread_mutex_unlock(&s->lock);
        emit(arg, "repl_last_error", e);
    }
    snprintf(b, sizeof(b), "%016" PRIx64, atomic_load(&s->master_hid));
    emit(arg, "repl_master_hid", b);
    repl_emit_u64(emit, arg, "repl_connected", atomic_load(&s->connected));
    repl_emit_u64(emit, arg, "repl_copying", atomic_load(&s->copying));
    uint64_t pos = atomic_load(&s->pos), last = atomic_load(&s->master_last);
    repl_emit_u64(emit, arg, "repl_position", pos);
    /* known only while connected, from a position, and while the master's
     * newest row is known: its heartbeats carry it, and one came in the
     * last LAG_FRESH_MS (rows alone say nothing of what the master has
     * beyond them) */
    uint64_t hb = atomic_load(&s->hb_at_ms);
    if (st == REPL_ST_CONNECTED && pos && hb && now - hb <= LAG_FRESH_MS) {
        uint64_t lag = last > pos ? hlc_us(last) - hlc_us(pos) : 0;
        repl_emit_u64(emit, arg, "repl_lag_us", lag);
        snprintf(b, sizeof(b), "%.3f", (double)lag / 1e6);
        emit(arg, "repl_lag_seconds", b);
    } else {
        emit(arg, "repl_lag_us", "unknown");
        emit(arg, "repl_lag_seconds", "unknown");
    }
    repl_emit_u64(emit, arg, "repl_rows_applied", atomic_load(&s->applied));
    repl_emit_u64(emit, arg, "repl_rows_own_skipped", atomic_load(&s->skipped));
    repl_emit_u64(emit, arg, "repl_connects", atomic_load(&s->connects));
    repl_emit_u64(emit, arg, "repl_copies_received", atomic_load(&s->copies));
    repl_emit_u64(emit, arg, "repl_divergences", atomic_load(&s->divergences));
    repl_emit_u64(emit, arg, "repl_rts_errors", atomic_load(&s->rts_errors));
}

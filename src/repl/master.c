/*
 * master.c - serving the update log to replicas (include/kura/repl.h has
 * the protocol; docs/replication.md the operator's view).
 *
 * Each replica's stream runs on a thread of its own, detached, with a
 * blocking loop: read rows from an ul_reader, encode them into a buffer,
 * send it; when caught up, wait in poll() on the socket (acks, or the
 * replica gone) and on an eventfd that the update log's append hook writes
 * (ul_set_notify), at most a second, then send a heartbeat.  Replicas are
 * few and each one's stream is sequential file reading and socket writing,
 * so a thread each is the simple shape; the workers never wait for them.
 *
 * A replica whose position the log no longer holds, or a new one (position
 * 0), gets a full copy first (BOOT).  The copy starts at the engine's
 * watermark W (every row up to W is in the store): the store's items are
 * spooled to an unlinked file beside the update log (engine_walk: batches
 * copied out of the store, written with no lock held; a network peer is
 * never waited for while the copy is taken), the file is sent, then
 * COPY_DONE, then every row after W.
 * Changes made while the copy was taken are in the copy or not, and are in
 * the rows after W either way: applying them in order over the copy gives
 * the master's state.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kura/journal.h"
#include "kura/lockorder.h"
#include "kura/repl.h"
#include "kura/thread.h"

#define SEND_TIMEOUT_MS 60000           /* a replica reading nothing this long is dropped */
#define FLUSH_AT (256 * 1024)           /* bytes of rows buffered before a send */
#define SEEN_MAX 64                     /* replicas remembered after they disconnect */
#define SEEN_KEEP 3600                  /* ... for this many seconds */

typedef struct peer {
    struct repl_master *m;
    int fd;
    int efd;                            /* written when a row is appended while waiting */
    _Atomic bool waiting;
    _Atomic bool stop;
    uint32_t sid;
    uint64_t after;
    repl_hello hello;                   /* what the replica asked */
    _Atomic uint64_t sent;              /* the last row's timestamp sent */
    _Atomic uint64_t acked;             /* the last the replica has in its log */
    _Atomic bool copying;
    _Atomic uint64_t rows_read;         /* rows its reader returned */
    _Atomic int64_t base;               /* appended - rows_read when last caught up; -1: never */
    char name[64];
    struct peer *next;
} peer;

typedef struct seen {
    uint32_t sid;
    uint64_t acked;
    time_t last;
} seen;

struct repl_master {
    repl_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t gone;                /* a stream's thread ended */
    pthread_cond_t acked;               /* a replica acknowledged more rows */
    peer *peers;
    int nthreads;
    seen seen[SEEN_MAX];
    int nseen;
    _Atomic int nwaiting;
    _Atomic uint64_t appended;          /* rows appended since start (lag in rows) */
    _Atomic uint64_t boots, streams, rows_sent, pruned_segs, pruned_bytes, forced;
    _Atomic uint64_t waits, wait_timeouts;
};

#define logf_(x, level, ...) repl_log((x)->cfg.log, level, __VA_ARGS__)

/* ul_set_notify's hook: under the log's append lock */
static void on_append(void *arg)
{
    repl_master *m = arg;
    atomic_fetch_add_explicit(&m->appended, 1, memory_order_relaxed);
    if (atomic_load_explicit(&m->nwaiting, memory_order_acquire) == 0)
        return;
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    for (peer *p = m->peers; p; p = p->next)
        if (atomic_exchange(&p->waiting, false)) {
            atomic_fetch_sub(&m->nwaiting, 1);
            uint64_t one = 1;
            if (write(p->efd, &one, sizeof(one)) < 0) {}
        }
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
}

/* ---- acks from the replica ------------------------------------------------ */

typedef struct ackbuf {
    char b[REPL_LINE_MAX * 2];
    size_t n;
} ackbuf;

/* Reads what the replica sent: "ACK <ts>" lines.  0, or -1 when the
 * stream must end (closed, an error, a line that is not an ack). */
static int read_acks(peer *p, ackbuf *ab)
{
    for (;;) {
        ssize_t r = recv(p->fd, ab->b + ab->n, sizeof(ab->b) - ab->n, MSG_DONTWAIT);
        if (r == 0)
            return -1;
        if (r < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : errno == EINTR ? 0 : -1;
        ab->n += (size_t)r;
        char *nl;
        while ((nl = memchr(ab->b, '\n', ab->n))) {
            unsigned long long ts;
            *nl = '\0';
            if (sscanf(ab->b, "ACK %llu", &ts) != 1)
                return -1;
            if (ts > atomic_load(&p->acked)) {
                lockorder_lock(&p->m->lock, LOCK_RANK_REPL);
                atomic_store(&p->acked, ts);
                pthread_cond_broadcast(&p->m->acked);
                lockorder_unlock(&p->m->lock, LOCK_RANK_REPL);
            }
            size_t used = (size_t)(nl + 1 - ab->b);
            memmove(ab->b, nl + 1, ab->n - used);
            ab->n -= used;
        }
        if (ab->n == sizeof(ab->b))
            return -1;                  /* a line longer than any ack */
    }
}

/* ---- the copy ---------------------------------------------------------------- */

typedef struct spool {
    FILE *f;
    uint64_t ts;
    uint32_t sid;
    uint64_t items;
    unsigned char *buf;
    size_t len, cap;
} spool;

static int spool_batch(void *arg, const kura_item *items, size_t n)
{
    spool *sp = arg;
    for (size_t i = 0; i < n; i++) {
        const kura_item *it = &items[i];
        ul_row r = {
            .type = UL_PUT, .ts = sp->ts, .origin_ts = sp->ts, .sid = sp->sid,
            .key = it->key, .klen = it->klen, .val = it->val, .vlen = it->vlen,
            .flags = it->flags, .exptime = it->exptime, .cas = it->cas,
        };
        sp->len = 0;
        if (repl_buf_row(&sp->buf, &sp->len, &sp->cap, &r) != KURA_OK)
            return KURA_ENOMEM;
        if (fwrite(sp->buf, 1, sp->len, sp->f) != sp->len)
            return KURA_EIO;
        sp->items++;
    }
    return 0;
}

static FILE *spool_file(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR, 0600);
    if (fd < 0) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/copy.XXXXXX", dir);
        fd = mkstemp(path);
        if (fd >= 0)
            unlink(path);
    }
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "w+");
    if (!f)
        close(fd);
    return f;
}

/* Spools every live item, then sends the file and COPY_DONE. */
static int send_copy(peer *p, uint64_t start, unsigned char **out, size_t *olen, size_t *ocap)
{
    repl_master *m = p->m;
    spool sp = { .ts = start, .sid = m->cfg.sid };
    sp.f = spool_file(m->cfg.tmpdir ? m->cfg.tmpdir : "/tmp");
    if (!sp.f) {
        logf_(m, KURA_LOG_ERROR, "replica %s: cannot create the copy's spool file in %s: %s",
              p->name, m->cfg.tmpdir, strerror(errno));
        return -1;
    }
    int rc = engine_walk(m->cfg.engine, spool_batch, &sp);
    free(sp.buf);
    if (rc || fflush(sp.f) != 0 || fseek(sp.f, 0, SEEK_SET) != 0) {
        logf_(m, KURA_LOG_ERROR, "replica %s: cannot spool the copy: %s", p->name,
              rc ? kura_strerror(rc) : strerror(errno));
        fclose(sp.f);
        return -1;
    }
    logf_(m, KURA_LOG_INFO, "replica %s: sending a copy of %" PRIu64 " items", p->name,
          sp.items);
    char chunk[64 * 1024];
    size_t n;
    ackbuf ab = { .n = 0 };
    while ((n = fread(chunk, 1, sizeof(chunk), sp.f)) > 0) {
        if (atomic_load(&p->stop) || repl_send_all(p->fd, chunk, n, SEND_TIMEOUT_MS) < 0 ||
            read_acks(p, &ab) < 0) {
            fclose(sp.f);
            return -1;
        }
    }
    bool failed = ferror(sp.f);
    fclose(sp.f);
    if (failed)
        return -1;
    ul_row done = { .type = UL_MARK, .ts = start, .sid = m->cfg.sid,
                    .prev_ts = REPL_MARK_COPY_DONE };
    *olen = 0;
    return repl_buf_row(out, olen, ocap, &done) == KURA_OK ? 0 : -1;
}

/* ---- a stream ------------------------------------------------------------------ */

static int flush_out(peer *p, unsigned char *out, size_t *olen, uint64_t last)
{
    if (*olen == 0)
        return 0;
    if (repl_send_all(p->fd, out, *olen, SEND_TIMEOUT_MS) < 0)
        return -1;
    *olen = 0;
    if (last)
        atomic_store(&p->sent, last);
    return 0;
}

static void stream(peer *p)
{
    repl_master *m = p->m;
    ul_log *log = m->cfg.ulog;
    ul_reader *rd = NULL;
    unsigned char *out = NULL;
    size_t olen = 0, ocap = 0;
    char line[REPL_WELCOME_MAX];
    repl_welcome w = { .msid = m->cfg.sid, .imax = m->cfg.item_max };
    /* ---- issue 19, history (docs/replication.md, "History and divergence"):
     * the welcome carries this log's id and history; a position counted in
     * another log (the request's hid) is no position here; copy=1 (a
     * replica that found its data diverged) always gets a full copy; a
     * replica with a smaller -I is refused (rows it could not take) */
    w.hid = ul_log_id(log);
    if (journal_history_format(m->cfg.engine, w.hist, sizeof(w.hist)) < 0)
        w.hist[0] = '\0';              /* too long to send: the replica cannot check */
    if (p->hello.hid && p->hello.hid != w.hid) {
        logf_(m, KURA_LOG_INFO, "replica %s (sid %u): its position %" PRIu64 " counts in "
              "another update log (%016" PRIx64 "): treated as a new replica", p->name, p->sid,
              p->after, p->hello.hid);
        p->after = 0;
        atomic_store(&p->acked, 0);
    }
    bool force_copy = p->hello.copy;
    if (p->hello.imax && p->hello.imax < m->cfg.item_max) {
        snprintf(line, sizeof(line), "SERVER_ERROR this master's -I (%" PRIu64 ") is larger "
                 "than the replica's (%" PRIu64 "): start the replica with -I %" PRIu64
                 " or more\r\n", m->cfg.item_max, p->hello.imax, m->cfg.item_max);
        logf_(m, KURA_LOG_ERROR, "replica %s (sid %u) refused: its -I (%" PRIu64 ") is smaller "
              "than this master's (%" PRIu64 ")", p->name, p->sid, p->hello.imax,
              m->cfg.item_max);
        (void)repl_send_all(p->fd, line, strlen(line), 1000);
        goto out;
    }
    /* ---- end of issue 19's lines */
    uint64_t start = p->after;
    ul_extent ex;
    ul_get_extent(log, &ex);
    /* a new replica needs no copy if the log still holds every change */
    bool whole = p->after == 0 && ex.from_ts == 0;
    int rc = force_copy ? KURA_NOTFOUND
           : p->after || whole ? ul_reader_open(log, p->after, &rd) : KURA_NOTFOUND;

    if (rc == KURA_NOTFOUND) {
        /* a new replica, or one the log has left behind: a copy first */
        start = journal_applied_ts(m->cfg.engine);
        atomic_store(&p->acked, start);         /* retention keeps the rows after it */
        rc = ul_reader_open(log, start, &rd);
        if (rc == KURA_OK) {
            atomic_store(&p->copying, true);
            atomic_fetch_add(&m->boots, 1);
            w.boot = true;
            w.pos = start;
            repl_welcome_format(line, sizeof(line), &w, p->hello.ext);
            logf_(m, KURA_LOG_INFO, "replica %s (sid %u) at %" PRIu64 ": %s", p->name, p->sid,
                  p->after, force_copy ? "asks for a full copy (its data diverged)"
                                       : p->after ? "position no longer held, sending a full copy"
                                                  : "new, sending a full copy");
            if (repl_send_all(p->fd, line, strlen(line), SEND_TIMEOUT_MS) < 0 ||
                send_copy(p, start, &out, &olen, &ocap) < 0)
                goto out;
            atomic_store(&p->copying, false);
        }
    } else if (rc == KURA_OK) {
        w.pos = p->after;
        repl_welcome_format(line, sizeof(line), &w, p->hello.ext);
        logf_(m, KURA_LOG_INFO, "replica %s (sid %u) follows from %" PRIu64, p->name, p->sid,
              p->after);
        if (repl_send_all(p->fd, line, strlen(line), SEND_TIMEOUT_MS) < 0)
            goto out;
    }
    if (rc != KURA_OK) {
        snprintf(line, sizeof(line), "SERVER_ERROR cannot read the update log: %s\r\n",
                 kura_strerror(rc));
        (void)repl_send_all(p->fd, line, strlen(line), 1000);
        goto out;
    }
    atomic_fetch_add(&m->streams, 1);

    ackbuf ab = { .n = 0 };
    uint64_t last = 0, whole_from = ul_start(log);
    bool armed = false;
    while (!atomic_load(&p->stop)) {
        if (ul_start(log) != whole_from) {
            /* this server took a full copy: its log no longer holds all it
             * has, and the replica gets a copy when it connects again */
            logf_(m, KURA_LOG_INFO, "replica %s: this server's log is whole only from now "
                  "on; ending the stream for a full copy", p->name);
            break;
        }
        ul_row row;
        rc = ul_reader_next(rd, &row);
        if (rc == KURA_OK) {
            armed = false;
            if (repl_buf_row(&out, &olen, &ocap, &row) != KURA_OK)
                break;
            last = row.ts;
            atomic_fetch_add(&m->rows_sent, 1);
            atomic_fetch_add(&p->rows_read, 1);
            if (olen >= FLUSH_AT && (flush_out(p, out, &olen, last) < 0 ||
                                     read_acks(p, &ab) < 0))
                break;
            continue;
        }
        if (rc != UL_CAUGHT_UP) {
            logf_(m, rc == KURA_NOTFOUND ? KURA_LOG_INFO : KURA_LOG_ERROR,
                  "replica %s: %s; the stream ends", p->name,
                  rc == KURA_NOTFOUND ? "its position was pruned while it read"
                                      : kura_strerror(rc));
            break;
        }
        /* caught up: every row appended so far is read (up to the rows
         * appended since this look, which the next look counts) */
        atomic_store(&p->base, (int64_t)(atomic_load(&m->appended) - atomic_load(&p->rows_read)));
        if (olen) {
            if (flush_out(p, out, &olen, last) < 0)
                break;
            continue;
        }
        if (read_acks(p, &ab) < 0)
            break;
        if (!armed) {
            /* look once more after arming: a row appended before the flag
             * was set has not written the eventfd */
            if (!atomic_exchange(&p->waiting, true))
                atomic_fetch_add(&m->nwaiting, 1);
            armed = true;
            continue;
        }
        struct pollfd pf[2] = { { .fd = p->fd, .events = POLLIN }, { .fd = p->efd,
                                                                     .events = POLLIN } };
        int r = poll(pf, 2, 1000);
        armed = false;
        if (r < 0 && errno != EINTR)
            break;
        if (pf[1].revents & POLLIN) {
            uint64_t v;
            if (read(p->efd, &v, sizeof(v)) < 0) {}
        }
        if (r == 0) {
            ul_row hb = { .type = UL_MARK, .ts = ul_last_ts(log), .sid = m->cfg.sid,
                          .prev_ts = REPL_MARK_HEARTBEAT };
            if (repl_buf_row(&out, &olen, &ocap, &hb) != KURA_OK ||
                flush_out(p, out, &olen, 0) < 0)
                break;
        }
        if ((pf[0].revents & (POLLIN | POLLHUP | POLLERR)) && read_acks(p, &ab) < 0)
            break;
    }
out:
    free(out);
    if (rd)
        ul_reader_close(rd);
}

static void remember(repl_master *m, const peer *p)
{
    time_t now = time(NULL);
    int at = -1;
    for (int i = 0; i < m->nseen; i++)
        if (m->seen[i].sid == p->sid || now - m->seen[i].last > SEEN_KEEP)
            at = at < 0 || m->seen[i].sid == p->sid ? i : at;
    if (at < 0)
        at = m->nseen < SEEN_MAX ? m->nseen++ : 0;
    m->seen[at] = (seen){ p->sid, atomic_load(&p->acked), now };
}

static void *peer_main(void *arg)
{
    peer *p = arg;
    repl_master *m = p->m;
    stream(p);
    logf_(m, KURA_LOG_INFO, "replica %s (sid %u): stream closed at %" PRIu64, p->name, p->sid,
          atomic_load(&p->sent));
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    for (peer **pp = &m->peers; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    if (atomic_exchange(&p->waiting, false))
        atomic_fetch_sub(&m->nwaiting, 1);
    remember(m, p);
    close(p->fd);
    close(p->efd);
    free(p);
    /* the last touch of m: repl_master_free may free it once this is seen */
    m->nthreads--;
    pthread_cond_broadcast(&m->gone);
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    return NULL;
}

int repl_master_serve(repl_master *m, int fd, const repl_hello *h)
{
    uint64_t after = h->after;
    uint32_t sid = h->sid;
    peer *p = calloc(1, sizeof(*p));
    if (!p) {
        close(fd);                      /* taken, as on every other failure */
        return KURA_ENOMEM;
    }
    p->m = m;
    p->fd = fd;
    p->after = after;
    p->sid = sid;
    p->hello = *h;
    atomic_store(&p->acked, after);
    p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    atomic_store(&p->base, -1);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[48] = "?";
    int port = 0;
    /* a peer already gone fails getpeername: the name stays "?:0" */
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        ss.ss_family = AF_UNSPEC;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        port = ntohs(a->sin6_port);
    }
    snprintf(p->name, sizeof(p->name), "%s:%d", host, port);
    int fl = fcntl(fd, F_GETFL);
    if (p->efd < 0 || fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        if (p->efd >= 0)
            close(p->efd);
        free(p);
        close(fd);
        return KURA_ESYS;
    }
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    p->next = m->peers;
    m->peers = p;
    m->nthreads++;
    pthread_t t;
    int err = pthread_create(&t, &at, peer_main, p);
    if (err) {
        m->peers = p->next;
        m->nthreads--;
    }
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    pthread_attr_destroy(&at);
    if (err) {
        close(p->efd);
        close(fd);
        free(p);
        return KURA_ESYS;
    }
    return KURA_OK;
}

/* ---- semi-synchronous writes ------------------------------------------------- */

int repl_master_wait(repl_master *m, uint64_t ts, int n, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    atomic_fetch_add(&m->waits, 1);
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    int rc = 0;
    for (;;) {
        int have = 0;
        for (peer *p = m->peers; p; p = p->next)
            if (!atomic_load(&p->copying) && atomic_load(&p->acked) >= ts)
                have++;
        if (have >= n)
            break;
        if (pthread_cond_timedwait(&m->acked, &m->lock, &until) == ETIMEDOUT) {
            rc = 1;
            atomic_fetch_add(&m->wait_timeouts, 1);
            break;
        }
    }
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    return rc;
}

/* ---- retention -------------------------------------------------------------- */

void repl_master_tick(repl_master *m)
{
    uint64_t keep = journal_applied_ts(m->cfg.engine);
    time_t now = time(NULL);
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    for (peer *p = m->peers; p; p = p->next)
        if (atomic_load(&p->acked) < keep)
            keep = atomic_load(&p->acked);
    for (int i = 0; i < m->nseen; i++)
        if (now - m->seen[i].last <= SEEN_KEEP && m->seen[i].acked < keep)
            keep = m->seen[i].acked;
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    if (!m->cfg.ulmax)
        return;
    ul_prune_result res;
    if (ul_prune(m->cfg.ulog, keep, m->cfg.ulmax, &res) == KURA_OK && res.segs) {
        atomic_fetch_add(&m->pruned_segs, res.segs);
        atomic_fetch_add(&m->pruned_bytes, res.bytes);
        atomic_fetch_add(&m->forced, res.forced);
        if (res.forced)
            logf_(m, KURA_LOG_ERROR, "update log past -ulmax: %u files a replica still needed "
                  "were deleted; it will be sent a full copy", res.forced);
    }
}

/* ---- life ----------------------------------------------------------------- */

int repl_master_new(const repl_config *cfg, repl_master **out)
{
    repl_master *m = calloc(1, sizeof(*m));
    if (!m)
        return KURA_ENOMEM;
    m->cfg = *cfg;
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->gone, NULL);
    kura_cond_init_mono(&m->acked);
    ul_set_notify(cfg->ulog, on_append, m);
    *out = m;
    return KURA_OK;
}

void repl_master_free(repl_master *m)
{
    if (!m)
        return;
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    for (peer *p = m->peers; p; p = p->next) {
        atomic_store(&p->stop, true);
        shutdown(p->fd, SHUT_RDWR);
        uint64_t one = 1;
        if (write(p->efd, &one, sizeof(one)) < 0) {}
    }
    while (m->nthreads > 0)
        pthread_cond_wait(&m->gone, &m->lock);
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    ul_set_notify(m->cfg.ulog, NULL, NULL);
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->gone);
    pthread_cond_destroy(&m->acked);
    free(m);
}


void repl_master_stats(repl_master *m, bool all, kura_stat_fn emit, void *arg)
{
    uint64_t last = ul_last_ts(m->cfg.ulog);
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    int n = 0;
    for (peer *p = m->peers; p; p = p->next)
        n++;
    repl_emit_u64(emit, arg, "repl_replicas", (uint64_t)n);
    for (peer *p = all ? m->peers : NULL; p; p = p->next) {
        char name[48], v[160];
        uint64_t acked = atomic_load(&p->acked);
        uint64_t lag = last > acked ? hlc_us(last) - hlc_us(acked) : 0;
        int64_t base = atomic_load(&p->base);
        char rows[40] = "";
        if (base >= 0) {
            uint64_t done = (uint64_t)base + atomic_load(&p->rows_read), all = atomic_load(&m->appended);
            snprintf(rows, sizeof(rows), ",lag_rows=%" PRIu64, all > done ? all - done : 0);
        }
        snprintf(name, sizeof(name), "repl_replica_%u", p->sid);
        snprintf(v, sizeof(v), "%s,acked=%" PRIu64 ",lag_us=%" PRIu64 "%s%s", p->name, acked,
                 lag, rows, atomic_load(&p->copying) ? ",copying" : "");
        emit(arg, name, v);
    }
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    repl_emit_u64(emit, arg, "repl_copies_sent", atomic_load(&m->boots));
    repl_emit_u64(emit, arg, "repl_rows_sent", atomic_load(&m->rows_sent));
    repl_emit_u64(emit, arg, "repl_syncrepl_waits", atomic_load(&m->waits));
    repl_emit_u64(emit, arg, "repl_syncrepl_timeouts", atomic_load(&m->wait_timeouts));
    repl_emit_u64(emit, arg, "ulog_pruned_files", atomic_load(&m->pruned_segs));
    repl_emit_u64(emit, arg, "ulog_pruned_bytes", atomic_load(&m->pruned_bytes));
    repl_emit_u64(emit, arg, "ulog_pruned_needed", atomic_load(&m->forced));
}

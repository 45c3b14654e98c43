/*
 * master_loop.c - one thread, one libevent base, every replication stream
 * (master_int.h has the shared parts; master.c the decisions).
 *
 * A stream is mostly waiting for rows, so its cost must be a few
 * kilobytes, not a thread and its stack: 1,000 idle streams cost one
 * event each and no thread (docs/benchmarks.md).  No stream can hold up
 * another: sockets are non-blocking; a stream reads at most TURN_ROWS rows
 * a turn, and none while OUT_HWM bytes of it are unsent, then the next
 * stream has its turn; streams with work go round a list, and the loop
 * polls its sockets between rounds (work_ev is activated, not run in a
 * loop).
 *
 * One eventfd wakes the loop: the update log's append hook writes it (once
 * per look the loop takes: m->armed), as do a new stream, the spool thread
 * and the end.  A timer every second sends a heartbeat to every stream
 * whose output is below its high-water mark and drops a replica whose socket took nothing for
 * SEND_TIMEOUT_MS.  An idle stream's reader sheds its read window.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kura/grow.h"
#include "kura/lockorder.h"
#include "kura/tlsio.h"
#include "master_int.h"

int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void loop_wake(repl_master *m)
{
    uint64_t one = 1;
    if (write(m->wake_fd, &one, sizeof(one)) < 0) {}    /* EAGAIN: it is awake already */
}

static void schedule(peer *p)
{
    repl_master *m = p->m;
    if (p->runnable)
        return;
    p->runnable = true;
    p->run_next = NULL;
    if (m->run_tail)
        m->run_tail->run_next = p;
    else
        m->run_head = p;
    m->run_tail = p;
    event_active(m->work_ev, 0, 0);
}

/* Ends a stream: it is freed on its next turn (so the run list never holds
 * a freed peer). */
static void end_peer(peer *p)
{
    if (p->closing)
        return;
    p->closing = true;
    if (p->rev)
        event_del(p->rev);
    if (p->wev)
        event_del(p->wev);
    schedule(p);
}

static void free_peer(peer *p)
{
    repl_master *m = p->m;
    if (p->state != PEER_NEW) {
        master_forget(p);
        logf_(m, KURA_LOG_INFO, "replica %s (sid %u): stream closed at %" PRIu64, p->name,
              p->sid, atomic_load(&p->sent));
    }
    if (p->sp) {
        spool_put(m, p->sp);
        m->copying--;
    }
    if (p->rd)
        ul_reader_close(p->rd);
    if (p->rev)
        event_free(p->rev);
    if (p->wev)
        event_free(p->wev);
    kura_tls_close(p->ssl, true);
    close(p->fd);
    free(p->out);
    free(p);
    if (m->cfg.stream_end)
        m->cfg.stream_end(m->cfg.stream_end_arg);  /* counted against -c until now */
}

int peer_queue(peer *p, const void *b, size_t n)
{
    if (p->olen + n > p->ocap) {
        if (p->ooff) {
            memmove(p->out, p->out + p->ooff, p->olen - p->ooff);
            p->olen -= p->ooff;
            p->ooff = 0;
        }
        if (kura_grow(&p->out, &p->ocap, p->olen + n, 1, 4096))
            return -1;
    }
    memcpy(p->out + p->olen, b, n);
    p->olen += n;
    return 0;
}

int peer_queue_row(peer *p, const ul_row *row)
{
    if (p->ooff == p->olen)
        p->ooff = p->olen = 0;
    return repl_buf_row(&p->out, &p->olen, &p->ocap, row) == KURA_OK ? 0 : -1;
}

/* Sends what the socket takes: 0, or -1 when the stream must end. */
static int flush_peer(peer *p)
{
    while (p->ooff < p->olen) {
        ssize_t n = p->ssl ? kura_tls_send(p->ssl, p->out + p->ooff, p->olen - p->ooff)
                           : send(p->fd, p->out + p->ooff, p->olen - p->ooff,
                                  MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p->ooff += (size_t)n;
            p->stalled_ms = 0;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!p->stalled_ms)
                p->stalled_ms = mono_ms();
            event_add(p->wev, NULL);
            return 0;
        }
        return -1;
    }
    p->ooff = p->olen = 0;
    p->stalled_ms = 0;
    atomic_store(&p->sent, p->queued);
    if (p->ocap > OUT_HWM * 2) {        /* a large row's buffer is not kept */
        free(p->out);
        p->out = NULL;
        p->ocap = 0;
    }
    return 0;
}

static size_t unsent(const peer *p)
{
    return p->olen - p->ooff;
}

/* Reads the stream's next rows into its output, one turn's worth: 0, or
 * -1 when the stream must end. */
static int fill_rows(peer *p)
{
    repl_master *m = p->m;
    ul_log *log = m->cfg.ulog;
    for (int i = 0; i < TURN_ROWS && unsent(p) < OUT_HWM; i++) {
        if (ul_start(log) != p->whole_from) {
            /* this server took a full copy: its log no longer holds all it
             * has, and the replica gets a copy when it connects again */
            logf_(m, KURA_LOG_INFO, "replica %s: this server's log is whole only from now "
                  "on; ending the stream for a full copy", p->name);
            return -1;
        }
        ul_row row;
        int rc = ul_reader_next(p->rd, &row);
        if (rc == KURA_OK) {
            if (peer_queue_row(p, &row) < 0)
                return -1;
            p->queued = row.ts;
            atomic_fetch_add(&m->rows_sent, 1);
            atomic_fetch_add(&p->rows_read, 1);
            continue;
        }
        if (rc != UL_CAUGHT_UP) {
            logf_(m, rc == KURA_NOTFOUND ? KURA_LOG_INFO : KURA_LOG_ERROR,
                  "replica %s: %s; the stream ends", p->name,
                  rc == KURA_NOTFOUND ? "its position was pruned while it read"
                                      : kura_strerror(rc));
            return -1;
        }
        /* caught up: every row appended so far is read (up to the rows
         * appended since this look, which the next look counts) */
        atomic_store(&p->base, (int64_t)(atomic_load(&m->appended) -
                                         atomic_load(&p->rows_read)));
        p->caught_up = true;
        ul_reader_shed(p->rd);
        break;
    }
    return 0;
}

/* One turn of a stream. */
static void turn(peer *p)
{
    repl_master *m = p->m;
    if (p->closing || atomic_load(&p->stop) || atomic_load(&m->ending)) {
        free_peer(p);
        return;
    }
    int rc = 0;
    bool waiting = false;               /* for the spool to grow */
    if (p->state == PEER_COPY && unsent(p) < OUT_HWM) {
        rc = spool_pump(p);
        if (rc == SPOOL_PUMP_WAIT) {
            waiting = true;
            rc = 0;
        } else if (rc == SPOOL_PUMP_ALL) {
            ul_row done = { .type = UL_MARK, .ts = p->sp->start, .sid = m->cfg.sid,
                            .prev_ts = REPL_MARK_COPY_DONE };
            logf_(m, KURA_LOG_INFO, "replica %s: the copy is sent (%" PRIu64 " items)",
                  p->name, p->sp->items);
            spool_put(m, p->sp);
            p->sp = NULL;
            m->copying--;
            p->state = PEER_STREAM;
            rc = peer_queue_row(p, &done);
            atomic_store(&p->copying, false);
        }
    }
    if (rc == 0 && p->state == PEER_STREAM && !p->caught_up)
        rc = fill_rows(p);
    if (rc < 0 || flush_peer(p) < 0) {
        free_peer(p);
        return;
    }
    bool more = p->state == PEER_COPY ? !waiting : !p->caught_up;
    if (more && unsent(p) < OUT_HWM)
        schedule(p);
}

static void on_work(evutil_socket_t fd, short what, void *arg)
{
    repl_master *m = arg;
    (void)fd; (void)what;
    /* from here an append wakes the loop: a stream that finds itself
     * caught up below will not miss a row appended after its look */
    atomic_store(&m->armed, true);
    peer *list = m->run_head;
    m->run_head = m->run_tail = NULL;
    while (list) {
        peer *p = list;
        list = p->run_next;
        p->runnable = false;
        turn(p);
    }
}

/* ---- a stream's socket -------------------------------------------------------- */

/* "ACK <ts>" with an optional CR: 1, or 0 for anything else */
static int parse_ack(const char *line, uint64_t *ts)
{
    if (strncmp(line, "ACK ", 4) != 0 || line[4] < '0' || line[4] > '9')
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(line + 4, &end, 10);
    if (errno || (*end && strcmp(end, "\r") != 0))
        return 0;
    *ts = v;
    return 1;
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    peer *p = arg;
    (void)what;
    for (;;) {
        ssize_t r = p->ssl ? kura_tls_recv(p->ssl, p->ab + p->abn, sizeof(p->ab) - p->abn)
                           : recv(fd, p->ab + p->abn, sizeof(p->ab) - p->abn, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            end_peer(p);
            return;
        }
        if (r < 0)
            return;
        p->abn += (size_t)r;
        char *nl;
        while ((nl = memchr(p->ab, '\n', p->abn))) {
            uint64_t ts;
            *nl = '\0';
            if (!parse_ack(p->ab, &ts) || master_ack(p, ts) < 0) {
                end_peer(p);
                return;
            }
            size_t used = (size_t)(nl + 1 - p->ab);
            memmove(p->ab, nl + 1, p->abn - used);
            p->abn -= used;
        }
        if (p->abn == sizeof(p->ab)) {
            end_peer(p);                /* a line longer than any ack */
            return;
        }
    }
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    peer *p = arg;
    (void)fd; (void)what;
    if (flush_peer(p) < 0) {
        end_peer(p);
        return;
    }
    if (unsent(p) < OUT_HWM)
        schedule(p);
}

/* A peer handed over: its events, then its first line. */
static void take(repl_master *m, peer *p)
{
    p->rev = event_new(m->base, p->fd, EV_READ | EV_PERSIST, on_readable, p);
    p->wev = event_new(m->base, p->fd, EV_WRITE, on_writable, p);
    if (!p->rev || !p->wev) {
        free_peer(p);
        return;
    }
    if (master_greet(p) < 0) {
        /* refused: the line is sent if the socket takes it at once */
        (void)flush_peer(p);
        free_peer(p);
        return;
    }
    event_add(p->rev, NULL);
    schedule(p);
}

/* Streams that wait for rows (or for the spool) have another look. */
static void rows_came(repl_master *m)
{
    for (peer *p = m->peers; p; p = p->next)
        if ((p->state == PEER_STREAM && p->caught_up) || p->state == PEER_COPY) {
            p->caught_up = false;
            schedule(p);
        }
}

static void end_all(repl_master *m)
{
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    peer *in = m->incoming;
    m->incoming = NULL;
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    while (in) {
        peer *p = in;
        in = p->next;
        free_peer(p);
    }
    for (peer *p = m->run_head; p; p = p->run_next)
        p->runnable = false;
    m->run_head = m->run_tail = NULL;
    while (m->peers)
        free_peer(m->peers);            /* leaves m->peers */
    event_base_loopbreak(m->base);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    repl_master *m = arg;
    uint64_t v;
    (void)what;
    if (read(fd, &v, sizeof(v)) < 0) {}
    if (atomic_load(&m->ending)) {
        end_all(m);
        return;
    }
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    peer *in = m->incoming;
    m->incoming = NULL;
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    /* in the order they came */
    peer *rev = NULL;
    while (in) {
        peer *p = in;
        in = p->next;
        p->next = rev;
        rev = p;
    }
    while (rev) {
        peer *p = rev;
        rev = p->next;
        p->next = NULL;
        take(m, p);
    }
    uint64_t a = atomic_load(&m->appended);
    if (a != m->appended_seen) {
        m->appended_seen = a;
        rows_came(m);
    } else {
        for (peer *p = m->peers; p; p = p->next)
            if (p->state == PEER_COPY)
                schedule(p);            /* the spool grew, or is done */
    }
}

/* Every second: heartbeats, send timeouts, replaced streams. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    repl_master *m = arg;
    (void)fd; (void)what;
    int64_t now = mono_ms();
    uint64_t last = ul_last_ts(m->cfg.ulog);
    for (peer *p = m->peers; p; p = p->next) {
        if (p->closing)
            continue;
        if (atomic_load(&p->stop)) {
            end_peer(p);
            continue;
        }
        if (p->stalled_ms && now - p->stalled_ms > SEND_TIMEOUT_MS) {
            logf_(m, KURA_LOG_ERROR, "replica %s (sid %u) read nothing for %d s: the stream "
                  "ends", p->name, p->sid, SEND_TIMEOUT_MS / 1000);
            end_peer(p);
            continue;
        }
        /* to every stream, caught up or not (after the rows queued, which
         * are older): the replica learns the master's newest row, and so
         * its lag, under steady writes too; not past the high-water mark */
        if (p->state == PEER_STREAM && unsent(p) < OUT_HWM) {
            ul_row hb = { .type = UL_MARK, .ts = last, .sid = m->cfg.sid,
                          .prev_ts = REPL_MARK_HEARTBEAT };
            /* the term, to a replica that knows of terms (it sent its own) */
            ul_row tm = { .type = UL_MARK, .ts = m->cfg.term ? m->cfg.term(m->cfg.term_arg) : 0,
                          .sid = m->cfg.sid, .prev_ts = REPL_MARK_TERM };
            if (peer_queue_row(p, &hb) < 0 ||
                (m->cfg.term && p->hello.has_term && peer_queue_row(p, &tm) < 0) ||
                flush_peer(p) < 0)
                end_peer(p);
        }
    }
    rows_came(m);                       /* a missed wake costs a second at most */
}

/* ---- life ------------------------------------------------------------------------ */

static void *loop_main(void *arg)
{
    repl_master *m = arg;
    event_base_dispatch(m->base);
    return NULL;
}

static void loop_free(repl_master *m)
{
    if (m->work_ev)
        event_free(m->work_ev);
    if (m->tick_ev)
        event_free(m->tick_ev);
    if (m->wake_ev)
        event_free(m->wake_ev);
    if (m->base)
        event_base_free(m->base);
    if (m->wake_fd >= 0)
        close(m->wake_fd);
}

int loop_start(repl_master *m)
{
    struct timeval sec = { 1, 0 };
    m->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    m->base = m->wake_fd >= 0 ? event_base_new() : NULL;
    if (m->base) {
        m->wake_ev = event_new(m->base, m->wake_fd, EV_READ | EV_PERSIST, on_wake, m);
        m->tick_ev = event_new(m->base, -1, EV_PERSIST, on_tick, m);
        m->work_ev = event_new(m->base, -1, 0, on_work, m);
    }
    if (!m->work_ev || !m->tick_ev || !m->wake_ev || event_add(m->wake_ev, NULL) < 0 ||
        event_add(m->tick_ev, &sec) < 0 || pthread_create(&m->thread, NULL, loop_main, m)) {
        logf_(m, KURA_LOG_ERROR, "cannot start the replication loop: %s", strerror(errno));
        loop_free(m);
        return -1;
    }
    m->running = true;
    return 0;
}

void loop_stop(repl_master *m)
{
    if (!m->running)
        return;
    atomic_store(&m->ending, true);
    loop_wake(m);
    pthread_join(m->thread, NULL);
    m->running = false;
    loop_free(m);
}

/*
 * conn.c - one client connection: read, hand to the protocol, write back.
 *
 * A connection lives on one worker's event base.  Bytes read are appended to
 * its read buffer; kura_session_process() (text, meta, binary or Tokyo
 * Tyrant's, chosen at the first byte: proto.h) answers the complete
 * requests in them into the write buffer, which goes out in one send() (so
 * a pipeline of requests costs one system call each way).  A large value the store lets
 * keep (the tree's) is not copied into the buffer but referenced (buf.h,
 * src/proto/value.c): the buffer then goes out in one sendmsg() over
 * iovecs of its bytes and the values', each value's hold released once it
 * is wholly sent, or when the connection closes.
 *
 * Memory is bounded whatever the client sends or fails to read:
 *  - the write buffer: the protocol stops once it holds
 *    KURA_REPLY_HIGH_WATER bytes (between requests, or between two keys of
 *    a multi-get, which then resumes at its next key: src/proto/text.c; a
 *    listing at KURA_OUT_HIGH_WATER), so it never holds more than that
 *    plus one value.  Referenced values count as bytes (kura_buf_size):
 *    a held value is memory the tree's value cache may no longer count
 *    once evicted or replaced, bounded here as its copy was.  While replies cannot be
 *    written the connection neither reads nor answers more;
 *  - the read buffer: at most one request line (KURA_MAX_GET_LINE for a
 *    get, 2 KB otherwise) or one value (-I) plus one read, since nothing is
 *    read while replies wait (binary: one header, extras and key, at most
 *    64 KiB, and one value; a value over -I is skipped, not buffered);
 *  - both are kept across requests (the steady state allocates nothing), and
 *    a buffer that grew past BUF_KEEP is given back once it is drained.
 *
 * Time is bounded too: no connection holds its worker for long.  A call
 * into the protocol answers at most KURA_REQUESTS_PER_CALL requests and
 * KURA_REPLY_HIGH_WATER bytes (a listing, a slice of its keys); when the
 * session says it paused, the connection sends what it has and waits for
 * its next turn of the event loop before it goes on, as memcached yields
 * after -R requests.
 *
 * A connection accepted on a TLS port (-Z) first finishes its handshake
 * (bounded by tls_handshake_timeout(): tls.c), then reads and writes
 * through OpenSSL (kura_tls_recv/send: tlsio.h) under the same bounds.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kura/testhooks.h"
#include "kura/tlsio.h"
#include "kura/watch.h"
#include "kura/thread.h"
#include "server.h"

#define READ_CHUNK (16 * 1024)
#define BUF_KEEP (64 * 1024)            /* buffers shrink back to this when idle */
#define MAX_READS_PER_EVENT 8           /* fairness between connections */
#define SEND_IOV 64                     /* iovecs per sendmsg (the output holds
                                           at most about 2 per 8 KiB referenced) */

typedef struct kura_conn {
    kura_worker *w;
    int fd;
    struct event *ev;
    bool write_mode;                    /* waiting for EV_WRITE */
    kura_buf rbuf;
    size_t rpos;                        /* bytes of rbuf already consumed */
    kura_buf wbuf;
    size_t wpos;                        /* bytes of wbuf already written (of
                                           kura_buf_size's: references too) */
    kura_session *sess;                 /* the protocol's (proto.h) */
    struct kura_conn *prev, *next;      /* the worker's list */
    bool held;                          /* replies wait for commit_target to be durable,
                                           or (job_wait) the session for its job */
    bool job_wait;                      /* held for a job (kura_session_waiting) */
    bool job_resumed;                   /* the next batch answers a job: its changes,
                                           made on the job's thread, are the batch's own */
    uint64_t commit_target;
    struct kura_conn *held_next;        /* the worker's held list */
    conn_entry *entry;                  /* "stats conns" (connlist.c) */
    struct ssl_st *ssl;                 /* a TLS port's (tls.c); NULL: plaintext */
    bool kt;                            /* accepted on -kt (Kyoto Tycoon's protocols) */
    bool handshaking;                   /* TLS: the handshake is not done */
    int64_t handshake_until;            /* ...by then (monotonic ms; 0: no bound) */
} kura_conn;

static void on_event(evutil_socket_t fd, short what, void *arg);

static ssize_t conn_send(kura_conn *c, const void *p, size_t n)
{
    return c->ssl ? kura_tls_send(c->ssl, p, n) : send(c->fd, p, n, MSG_NOSIGNAL);
}

/* Sends what of wbuf is left from wpos: one send() when it holds no
 * reference; else one sendmsg() over its pieces (TLS: the first piece, the
 * next ones on the next calls, as OpenSSL writes one buffer at a time). */
static ssize_t conn_send_out(kura_conn *c)
{
    if (!c->wbuf.refs || !c->wbuf.refs->n)
        return conn_send(c, c->wbuf.data + c->wpos, c->wbuf.len - c->wpos);
    struct iovec iov[SEND_IOV];
    int k = kura_buf_iov(&c->wbuf, c->wpos, iov, c->ssl ? 1 : SEND_IOV);
    if (c->ssl)
        return kura_tls_send(c->ssl, iov[0].iov_base, iov[0].iov_len);
    struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)k };
    return sendmsg(c->fd, &mh, MSG_NOSIGNAL);
}

static ssize_t conn_recv(kura_conn *c, void *p, size_t n)
{
    return c->ssl ? kura_tls_recv(c->ssl, p, n) : recv(c->fd, p, n, 0);
}

/* Why a connection is closed with its replies unsent (COMMIT_CLOSE). */
static void log_close_unconfirmed(kura_conn *c)
{
    bool failed = committer_failed(c->w->srv->committer);
    log_msg(KURA_LOG_ERROR, failed ? "closing connections whose changes cannot be synced"
                                     : "closing connections whose changes the replicas did "
                                       "not confirm in time (-syncrepl)");
}

/* Frees the connection but not its socket, which it returns; counted
 * (curr_connections, against -c) no more unless keep_count. */
static int conn_release(kura_conn *c, bool keep_count)
{
    kura_worker *w = c->w;
    int fd = c->fd;
    if (c->held) {
        for (kura_conn **pp = &w->held; *pp; pp = &(*pp)->held_next)
            if (*pp == c) {
                *pp = c->held_next;
                break;
            }
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    connlist_remove(c->entry);
    event_free(c->ev);
    if (c->ssl)
        kura_tls_close(c->ssl, !c->handshaking && !keep_count);
    kura_session_free(c->sess);
    kura_buf_free(&c->rbuf);
    kura_buf_free(&c->wbuf);
    free(c);
    if (!keep_count)
        atomic_fetch_sub(&w->srv->info.curr_connections, 1);
    return fd;
}

/* why: conn_close's reason in "watch connevents" (memcached's words) */
static void conn_close_why(kura_conn *c, const char *why)
{
    if (kura_watching(KURA_WATCH_CONNEVENTS))
        kura_watch_conn(c->fd, why);
    close(conn_release(c, false));
}

static void conn_close(kura_conn *c)
{
    conn_close_why(c, "normal");
}

/* A command gave the connection to a module ("repl": a replication
 * stream, cmdtab.h): the socket leaves the worker for the module's taker;
 * what the client sent after the command is dropped (it waits for the
 * answer first).  It stays counted against -c: the taker gives the count
 * back (curr_connections) when it closes the socket. */
static void conn_handoff(kura_conn *c, const kura_handoff *req)
{
    kura_handoff h = *req;              /* the session goes with the connection */
    struct ssl_st *ssl = c->ssl;        /* TLS: the taker picks it up (kura_tls_unstash) */
    c->ssl = NULL;
    int fd = conn_release(c, true);
    if (ssl)
        kura_tls_stash(fd, ssl);
    h.take(h.ctx, fd, h.arg);
}

/* The event's timeout in ms (0: none): -tout's idle time, or what is left
 * of the handshake's time (counted from accept, not from the peer's last
 * byte: a peer dripping a byte at a time gets no longer). */
static int64_t timeout_of(kura_conn *c)
{
    if (!c->handshaking) {
        int64_t idle = (int64_t)c->w->srv->settings->idle_timeout * 1000;
        /* -kt: ktserver's session timeout bounds an idle connection and a
         * silent half-sent request (src/proto/kt.c), unless -tout is less */
        if (c->kt && (idle == 0 || idle > KURA_KT_IDLE_MS))
            idle = KURA_KT_IDLE_MS;
        return idle;
    }
    if (!c->handshake_until)
        return 0;
    int64_t left = c->handshake_until - kura_mono_ms();
    return left > 0 ? left : 1;
}

/* (Re)registers the connection's event for reading or for writing. */
static void arm(kura_conn *c, bool write_mode)
{
    int64_t tout = timeout_of(c);
    struct timeval tv = { (time_t)(tout / 1000), (suseconds_t)(tout % 1000 * 1000) };
    event_del(c->ev);
    event_assign(c->ev, c->w->base, c->fd, (write_mode ? EV_WRITE : EV_READ) | EV_PERSIST,
                 on_event, c);
    event_add(c->ev, tout > 0 ? &tv : NULL);
    c->write_mode = write_mode;
}

static void set_mode(kura_conn *c, bool write_mode)
{
    if (c->write_mode != write_mode)
        arm(c, write_mode);
}

/* -sync always: the replies produced so far answer changes that are not yet
 * durable.  Stop reading and writing until the committer says they are. */
static void hold(kura_conn *c, uint64_t target)
{
    c->held = true;
    c->commit_target = target;
    event_del(c->ev);
    connlist_set(c->entry, CONN_MWRITE, false);
    c->held_next = c->w->held;
    c->w->held = c;
    committer_request(c->w->srv->committer, target);
}

/* The session waits for a job on another thread (a Tokyo Tyrant copy):
 * stop reading until the job's wake (conn_job_wake) brings the worker to
 * conn_release_durable, which drives the connection again. */
static void hold_for_job(kura_conn *c)
{
    c->held = true;
    c->job_wait = true;
    event_del(c->ev);
    c->held_next = c->w->held;
    c->w->held = c;
}

/* kura_session_config.wake: on the job's thread. */
static void conn_job_wake(void *arg)
{
    worker_wake(arg);
}

/* Writes what is queued.  Returns false if the connection was closed or must
 * wait for the socket to drain (write mode is then set). */
static bool flush_out(kura_conn *c)
{
    while (c->wpos < kura_buf_size(&c->wbuf)) {
        ssize_t n = conn_send_out(c);
        if (n > 0) {
            c->wpos += (size_t)n;
            kura_buf_sent(&c->wbuf, c->wpos);   /* values wholly sent: released */
            KURA_STAT_ADD(c->w->stats, bytes_written, (uint64_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            connlist_set(c->entry, CONN_MWRITE, false);
            set_mode(c, true);
            return false;
        }
        conn_close_why(c, "error");     /* the peer is gone */
        return false;
    }
    kura_buf_clear(&c->wbuf);
    c->wpos = 0;
    kura_buf_trim(&c->wbuf, BUF_KEEP);
    set_mode(c, false);
    return true;
}

/* Answers every complete request buffered, writing as it goes.  Returns
 * false if the connection was closed or is waiting to write. */
static bool pump(kura_conn *c)
{
    for (;;) {
        size_t avail = c->rbuf.len - c->rpos, used = 0;
        journal_committer *cm = c->w->srv->committer;
        uint64_t before = cm ? committer_thread_seq(cm) : 0;
        size_t need = kura_session_need(c->sess);
        if (avail > 0 && (need == 0 || avail >= need)) {
            connlist_set(c->entry, CONN_PARSE_CMD, true);   /* "stats conns" */
            used = kura_session_process(c->sess, c->rbuf.data + c->rpos, avail, &c->wbuf);
            c->rpos += used;
        }
        bool resumed = c->job_resumed;
        c->job_resumed = false;
        if (kura_session_take_dirty(c->sess)) {
            if (cm) {
                /* Replies wait until every change made so far is durable,
                 * not only this batch's own: an answer such as NOT_STORED
                 * may rest on another connection's change.  Once a sync
                 * has failed, a batch that changed nothing itself (writes
                 * refused with SERVER_ERROR) is answered rather than
                 * closed: its replies promise nothing about durability.
                 * A job's answer (a Tokyo Tyrant restore) counts the
                 * changes the job made on its own thread as the batch's. */
                uint64_t target = committer_write_seq(cm);
                int fate = commit_fate(cm, target);
                bool own = committer_thread_seq(cm) != before || resumed;
                if (fate == COMMIT_CLOSE && !own)
                    fate = COMMIT_SEND;
                /* A replica, or a fenced master, refuses every write: a
                 * batch that changed nothing here rests on no change of
                 * this server's, and the rows it holds are its master's
                 * to acknowledge (-syncrepl would close it unanswered). */
                if (fate == COMMIT_WAIT && !own && !repl_role_is_writable(c->w->srv))
                    fate = COMMIT_SEND;
                if (fate == COMMIT_CLOSE) {
                    /* A sync has failed: these changes will never be durable. */
                    log_close_unconfirmed(c);
                    conn_close(c);
                    return false;
                }
                if (fate == COMMIT_WAIT) {
                    hold(c, target);
                    return false;
                }
            }
        }
        if (!flush_out(c))
            return false;
        if (kura_session_waiting(c->sess)) {
            hold_for_job(c);
            return false;
        }
        const kura_handoff *h = kura_session_handoff(c->sess);
        if (h) {
            conn_handoff(c, h);
            return false;
        }
        if (kura_session_closing(c->sess)) {
            conn_close(c);
            return false;
        }
        if (kura_session_out_full(c->sess)) {
            /* The replies left, and the session paused (its output full, or
             * its share of requests for one call done): the rest waits for
             * this connection's next turn, after the worker's other
             * connections had theirs.  Writable now, the socket's EV_WRITE
             * comes back from the next poll. */
            KURA_STAT_INC(c->w->stats, conn_yields);
            set_mode(c, true);
            return false;
        }
        if (used == 0 || c->rpos == c->rbuf.len)
            break;
    }
    /* Keep only the unconsumed tail, at the front. */
    if (c->rpos > 0) {
        memmove(c->rbuf.data, c->rbuf.data + c->rpos, c->rbuf.len - c->rpos);
        c->rbuf.len -= c->rpos;
        c->rpos = 0;
    }
    if (c->rbuf.len == 0)
        kura_buf_trim(&c->rbuf, BUF_KEEP);
    connlist_set(c->entry, c->rbuf.len ? CONN_READ : CONN_NEW_CMD, false);
    return true;
}

static void drive(kura_conn *c)
{
    if (!pump(c))
        return;
    for (int i = 0; i < MAX_READS_PER_EVENT; i++) {
        size_t want = READ_CHUNK, need = kura_session_need(c->sess);
        if (need > c->rbuf.len && need - c->rbuf.len > want)
            want = need - c->rbuf.len;  /* a large value: read it in one go */
        if (!kura_buf_reserve(&c->rbuf, want)) {
            conn_close(c);
            return;
        }
        size_t space = c->rbuf.cap - c->rbuf.len;
        ssize_t n = conn_recv(c, c->rbuf.data + c->rbuf.len, space);
        if (n > 0) {
            c->rbuf.len += (size_t)n;
            KURA_STAT_ADD(c->w->stats, bytes_read, (uint64_t)n);
            if (!pump(c))
                return;
            /* A short read almost always means the socket is drained; the
             * event loop (level-triggered) calls again if it is not, so the
             * recv that would only say EAGAIN is saved.  TLS: a record
             * read is short too, and what OpenSSL holds decrypted is no
             * readiness of the socket: it is taken now. */
            if ((size_t)n < space && !(c->ssl && kura_tls_pending(c->ssl)))
                return;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        conn_close_why(c, n == 0 ? "normal" : "error");   /* EOF, or an error */
        return;
    }
    if (c->ssl && kura_tls_pending(c->ssl))
        event_active(c->ev, EV_READ, 0);    /* the rest on the next turn */
}

/* TLS: one step of the handshake.  Returns true once it is done (the
 * connection then carries on as any other), false while it waits or when
 * it failed (the connection is closed: nothing was sent, as memcached). */
static bool handshake(kura_conn *c)
{
    if (c->handshake_until && kura_mono_ms() >= c->handshake_until) {
        tls_conn_failed();
        log_msg(KURA_LOG_VERBOSE, "closing connection %d: TLS handshake timed out", c->fd);
        conn_close(c);
        return false;
    }
    int r = tls_conn_handshake(c->ssl);
    if (r == 1) {
        c->handshaking = false;
        arm(c, false);                  /* the idle timeout from now on */
        return true;
    }
    if (r < 0) {
        log_msg(KURA_LOG_VERBOSE, "closing connection %d: TLS handshake failed", c->fd);
        conn_close(c);
        return false;
    }
    set_mode(c, r == 2);
    return false;
}

static void on_event(evutil_socket_t fd, short what, void *arg)
{
    kura_conn *c = arg;
    (void)fd;
    if (what & EV_TIMEOUT) {
        if (c->handshaking)
            tls_conn_failed();
        log_msg(KURA_LOG_VERBOSE, "closing connection %d: %s", c->fd,
                c->handshaking ? "TLS handshake timed out" : "idle");
        conn_close_why(c, "idle_timeout");
        return;
    }
    if (c->handshaking && !handshake(c))
        return;
    if (c->write_mode) {
        if (!flush_out(c))
            return;
    }
    drive(c);
}

void conn_release_durable(kura_worker *w)
{
    kura_conn *list = w->held;
    w->held = NULL;
    while (list) {
        kura_conn *c = list;
        list = c->held_next;
        if (c->job_wait) {
            if (kura_session_waiting(c->sess)) {
                c->held_next = w->held;         /* still waiting */
                w->held = c;
            } else {
                c->held = c->job_wait = false;
                c->job_resumed = true;
                arm(c, false);
                drive(c);                       /* the request answers, then carry on */
            }
            continue;
        }
        int fate = commit_fate(w->srv->committer, c->commit_target);
        if (fate == COMMIT_SEND) {
            c->held = false;
            arm(c, false);
            drive(c);                   /* send the replies, then carry on */
        } else if (fate == COMMIT_CLOSE) {
            c->held = false;
            log_close_unconfirmed(c);
            conn_close(c);
        } else {
            c->held_next = w->held;     /* still waiting */
            w->held = c;
        }
    }
}

#ifdef KURA_TEST_HOOKS
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

/* test_value_refs' small send buffer (testhooks.h; test builds only) */
static void read_hooks(void)
{
    const char *v = getenv("KURA_TEST_SNDBUF");
    if (v)
        kura_test.conn_sndbuf = atoi(v);
}
#endif

struct kura_conn *conn_new(kura_worker *w, int fd, bool tls, bool kt)
{
#ifdef KURA_TEST_HOOKS
    pthread_once(&hooks_once, read_hooks);
    if (kura_test.conn_sndbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kura_test.conn_sndbuf, sizeof(int));
#endif
    kura_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->w = w;
    c->fd = fd;
    c->kt = kt;
    kura_session_config sc = {
        .engine = w->srv->engine, .stats = w->stats, .server = &w->srv->info,
        .wake = conn_job_wake, .wake_arg = w,
        .cmds = w->srv->cmds, .conn_id = fd, .kt = kt,
    };
    c->sess = kura_session_new(&sc);
    c->ssl = tls ? tls_conn_start(fd) : NULL;
    c->handshaking = tls;
    int hs = tls_handshake_timeout();
    c->handshake_until = tls && hs > 0 ? kura_mono_ms() + (int64_t)hs * 1000 : 0;
    c->ev = c->sess && (c->ssl || !tls) ? event_new(w->base, fd, EV_READ | EV_PERSIST, on_event, c)
                                        : NULL;
    int64_t tout = timeout_of(c);
    struct timeval tv = { (time_t)(tout / 1000), (suseconds_t)(tout % 1000 * 1000) };
    if (!c->ev || event_add(c->ev, tout > 0 ? &tv : NULL) < 0) {
        if (c->ev)
            event_free(c->ev);
        if (c->ssl)
            kura_tls_close(c->ssl, false);
        kura_session_free(c->sess);
        free(c);
        return NULL;
    }
    c->entry = connlist_add(fd, false);
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    atomic_fetch_add(&w->srv->info.conn_structures, 1);
    log_msg(KURA_LOG_VERBOSE, "new connection %d on worker %d", fd, w->index);
    if (kura_watching(KURA_WATCH_CONNEVENTS))
        kura_watch_conn(fd, NULL);
    return c;
}

/* At shutdown: replies already produced get one last chance to go out. */
void conn_close_all(kura_worker *w)
{
    while (w->conns) {
        kura_conn *c = w->conns;
        /* Replies waiting for a sync that never came are not sent: their
         * changes were not made durable, so they must not be acknowledged. */
        bool durable = !c->held || c->job_wait ||
                       commit_fate(w->srv->committer, c->commit_target) == COMMIT_SEND;
        if (durable && !c->handshaking && c->wpos < kura_buf_size(&c->wbuf)) {
            ssize_t n = conn_send_out(c);
            (void)n;                    /* the socket is non-blocking */
        }
        conn_close_why(c, "shutdown");
    }
}

/*
 * master.c - serving the update log to replicas (include/kura/repl.h has
 * the protocol; docs/replication.md the operator's view): the registry of
 * streams, the decision of each stream's first line, acks, -syncrepl's
 * wait, retention and the stats lines.
 *
 * A stream is mostly waiting, so every stream is served by one event loop
 * on a thread of its own (master_loop.c), not a thread each: the endpoint
 * is open to any client of the port, and it is bounded.  A stream counts
 * against -c until it ends (the server's hand-off keeps it counted;
 * cfg.stream_end gives it back) and against -repl-max; a replica server id
 * has one stream (a newer one replaces the older); a full copy is spooled
 * once and shared (master_copy.c), only where it leaves the update log its
 * room; an ACK beyond the newest row sent on its stream ends the stream.
 *
 * A replica whose position the log no longer holds, or a new one (position
 * 0), gets a full copy first (BOOT).  The copy starts at the engine's
 * watermark W (every row up to W is in the store): the store's items are
 * spooled, the spool is sent, then COPY_DONE, then every row after W.
 * Changes made while the copy was taken are in the copy or not, and are in
 * the rows after W either way: applying them in order over the copy gives
 * the master's state.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kura/journal.h"
#include "kura/lockorder.h"
#include "kura/thread.h"
#include "kura/tlsio.h"
#include "master_int.h"

/* ul_set_notify's hook: under the log's append lock, so no lock here; the
 * loop is woken once per look it takes, not once per row */
static void on_append(void *arg)
{
    repl_master *m = arg;
    atomic_fetch_add_explicit(&m->appended, 1, memory_order_relaxed);
    if (atomic_load_explicit(&m->armed, memory_order_acquire) &&
        atomic_exchange(&m->armed, false))
        loop_wake(m);
}

/* ---- the first line ---------------------------------------------------------- */

/* Streams counted against -repl-max: those not being replaced. Under lock. */
static int do_live_streams(repl_master *m)
{
    int n = 0;
    for (peer *p = m->peers; p; p = p->next)
        n += !atomic_load(&p->stop);
    return n;
}

/* Registers p (under lock): a stream of the same server id ends. */
static void do_register(peer *p)
{
    repl_master *m = p->m;
    for (peer *o = m->peers; o; o = o->next)
        if (o->sid == p->sid && !atomic_load(&o->stop)) {
            atomic_store(&o->stop, true);
            logf_(m, KURA_LOG_INFO, "replica sid %u connected again from %s: its stream from "
                  "%s ends", p->sid, p->name, o->name);
        }
    p->next = m->peers;
    m->peers = p;
    m->nstreams++;
}

/* The checks before anything is read for p: its log id (a position counted
 * in another log is no position here: *after becomes 0), its -I, its
 * server id, the stream count.  Fills w's history; a refusal is written
 * into line (empty when p may go on). */
static void greet_check(peer *p, repl_welcome *w, uint64_t *after, char *line, size_t len)
{
    repl_master *m = p->m;
    const repl_hello *h = &p->hello;
    /* The history (docs/replication.md, "History and divergence"): the
     * welcome carries this log's id and history; a position counted in
     * another log (the request's hid) is no position here; a replica with
     * a smaller -I is refused (rows it could not take). */
    w->hid = ul_log_id(m->cfg.ulog);
    if (journal_history_format(engine_journal(m->cfg.engine), w->hist, sizeof(w->hist)) < 0)
        w->hist[0] = '\0';              /* too long to send: the replica cannot check */
    if (h->hid && h->hid != w->hid) {
        logf_(m, KURA_LOG_INFO, "replica %s (sid %u): its position %" PRIu64 " counts in "
              "another update log (%016" PRIx64 "): treated as a new replica", p->name, p->sid,
              *after, h->hid);
        *after = 0;
    }
    if (h->imax && h->imax < m->cfg.item_max) {
        snprintf(line, len, "SERVER_ERROR this master's -I (%" PRIu64 ") is larger "
                 "than the replica's (%" PRIu64 "): start the replica with -I %" PRIu64
                 " or more\r\n", m->cfg.item_max, h->imax, m->cfg.item_max);
        return;
    }
    if (p->sid == m->cfg.sid) {
        snprintf(line, len, "SERVER_ERROR server id %u is this master's own (give the "
                 "replica a -sid of its own)\r\n", p->sid);
        return;
    }
    if (m->cfg.term) {                  /* "Roles and terms" */
        uint64_t mine = m->cfg.term(m->cfg.term_arg);
        w->has_term = true;
        w->term = mine;
        if (h->has_term && h->term > mine) {
            /* the replica has heard of a newer master: this one is fenced
             * (a master stops taking writes; a replica of a chain only
             * serves on, and the stream is refused either way) */
            m->cfg.heard_term(m->cfg.term_arg, h->term, false, p->name);
            snprintf(line, len, "SERVER_ERROR this server's term (%" PRIu64 ") is older than "
                     "the replica's (%" PRIu64 "): it is not the current master\r\n", mine,
                     h->term);
            return;
        }
    }
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    int live = do_live_streams(m);
    for (peer *o = m->peers; o; o = o->next)
        live -= o->sid == p->sid && !atomic_load(&o->stop);     /* replaced, not added */
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    if (live >= m->cfg.repl_max)
        snprintf(line, len, "SERVER_ERROR too many replication streams (-repl-max "
                 "%d)\r\n", m->cfg.repl_max);
}

/* A full copy for p (asked for, or its position is not held here): the
 * shared spool, and a reader at the spool's start into *rd.  Returns the
 * reader's status; a refusal is written into line. */
static int greet_copy(peer *p, repl_welcome *w, uint64_t after, ul_reader **rd, char *line,
                      size_t len)
{
    repl_master *m = p->m;
    char why[400];
    if (m->copying >= COPIES_MAX) {
        snprintf(line, len, "SERVER_ERROR too many full copies at once (%d); try "
                 "again later\r\n", COPIES_MAX);
        return KURA_OK;
    }
    spool *sp = spool_get(m, why, sizeof(why));
    if (!sp) {
        snprintf(line, len, "SERVER_ERROR %s\r\n", why);
        return KURA_OK;
    }
    int rc = ul_reader_open(m->cfg.ulog, sp->start, rd);
    if (rc != KURA_OK) {
        spool_put(m, sp);
        return rc;
    }
    ul_reader_shed(*rd);                /* not read until the copy is sent */
    p->sp = sp;
    p->state = PEER_COPY;
    m->copying++;
    atomic_store(&p->copying, true);
    atomic_fetch_add(&m->boots, 1);
    w->boot = true;
    w->pos = sp->start;
    logf_(m, KURA_LOG_INFO, "replica %s (sid %u) at %" PRIu64 ": %s", p->name, p->sid,
          after, p->hello.copy ? "asks for a full copy (its data diverged)" : after ?
          "position not held here, sending a full copy" : "new, sending a full copy");
    return KURA_OK;
}

int master_greet(peer *p)
{
    repl_master *m = p->m;
    ul_log *log = m->cfg.ulog;
    const repl_hello *h = &p->hello;
    char line[REPL_WELCOME_MAX];
    repl_welcome w = { .msid = m->cfg.sid, .imax = m->cfg.item_max };
    uint64_t after = h->after, last = ul_last_ts(log);
    bool copy = h->copy;
    ul_reader *rd = NULL;
    int rc = KURA_OK;

    line[0] = '\0';
    greet_check(p, &w, &after, line, sizeof(line));
    if (line[0])
        goto refuse;
    if (!copy && after > last) {
        /* a position past every row here counts in another log: never
         * taken as held (nor as acknowledged) */
        logf_(m, KURA_LOG_ERROR, "replica %s (sid %u) claims position %" PRIu64 ", past this "
              "master's newest row %" PRIu64 ": its position counts in another log; sending "
              "a full copy", p->name, p->sid, after, last);
        copy = true;
    }
    if (!copy) {
        ul_extent ex;
        ul_get_extent(log, &ex);
        /* a new replica needs no copy if the log still holds every change */
        bool whole = after == 0 && ex.from_ts == 0;
        rc = after || whole ? ul_reader_open(log, after, &rd) : KURA_NOTFOUND;
        copy = rc == KURA_NOTFOUND;
    }
    if (copy) {
        rc = greet_copy(p, &w, after, &rd, line, sizeof(line));
        if (line[0])
            goto refuse;
    } else if (rc == KURA_OK) {
        p->state = PEER_STREAM;
        w.pos = after;
        logf_(m, KURA_LOG_INFO, "replica %s (sid %u) follows from %" PRIu64, p->name, p->sid,
              after);
    }
    if (rc != KURA_OK) {
        snprintf(line, sizeof(line), "SERVER_ERROR cannot read the update log: %s\r\n",
                 kura_strerror(rc));
        goto refuse;
    }
    p->rd = rd;
    p->queued = w.pos;                  /* the replica may acknowledge its position */
    atomic_store(&p->sent, w.pos);
    atomic_store(&p->acked, w.pos);     /* retention keeps the rows after it */
    p->whole_from = ul_start(log);
    if (repl_welcome_format(line, sizeof(line), &w, h->ext) < 0 ||
        peer_queue(p, line, strlen(line)) < 0) {
        snprintf(line, sizeof(line), "SERVER_ERROR out of memory\r\n");
        goto refuse;
    }
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    do_register(p);
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    atomic_fetch_add(&m->streams, 1);
    return 0;

refuse:
    p->state = PEER_NEW;                /* never registered */
    if (p->sp) {
        spool_put(m, p->sp);
        p->sp = NULL;
        m->copying--;
        atomic_store(&p->copying, false);
    }
    if (rd)
        ul_reader_close(rd);
    p->rd = NULL;
    atomic_fetch_add(&m->refused, 1);
    logf_(m, KURA_LOG_ERROR, "replica at %s (sid %u) refused: %.*s", p->host, p->sid,
          (int)strcspn(line, "\r\n"), line);
    p->olen = p->ooff = 0;
    (void)peer_queue(p, line, strlen(line));  /* sent if the socket takes it at once */
    return -1;
}

/* ---- acks ---------------------------------------------------------------------- */

int master_ack(peer *p, uint64_t ts)
{
    repl_master *m = p->m;
    if (ts > p->queued) {
        logf_(m, KURA_LOG_ERROR, "replica %s (sid %u) acknowledged %" PRIu64 ", beyond the "
              "newest row sent to it (%" PRIu64 "): the stream ends", p->name, p->sid, ts,
              p->queued);
        return -1;
    }
    if (!atomic_load(&p->confirmed) || ts > atomic_load(&p->acked)) {
        lockorder_lock(&m->lock, LOCK_RANK_REPL);
        if (ts > atomic_load(&p->acked))
            atomic_store(&p->acked, ts);
        atomic_store(&p->confirmed, true);
        pthread_cond_broadcast(&m->acked);
        lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    }
    return 0;
}

/* ---- the registry ----------------------------------------------------------------- */

static void do_remember(repl_master *m, const peer *p)
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

void master_forget(peer *p)
{
    repl_master *m = p->m;
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    for (peer **pp = &m->peers; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            m->nstreams--;
            do_remember(m, p);
            break;
        }
    pthread_cond_broadcast(&m->acked);  /* -syncrepl's count may have changed */
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
}

static void peer_name(peer *p)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int port = 0;
    snprintf(p->host, sizeof(p->host), "?");
    /* a peer already gone fails getpeername: the name stays "?:0" */
    if (getpeername(p->fd, (struct sockaddr *)&ss, &sl) != 0)
        ss.ss_family = AF_UNSPEC;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, p->host, sizeof(p->host));
        port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, p->host, sizeof(p->host));
        port = ntohs(a->sin6_port);
    }
    snprintf(p->name, sizeof(p->name), "%s:%d", p->host, port);
}

int repl_master_serve(repl_master *m, int fd, const repl_hello *h)
{
    peer *p = calloc(1, sizeof(*p));
    struct ssl_st *ssl = kura_tls_unstash(fd);     /* a TLS port's connection */
    if (!p) {
        kura_tls_close(ssl, true);
        close(fd);                      /* taken, as on every other failure */
        if (m->cfg.stream_end)
            m->cfg.stream_end(m->cfg.stream_end_arg);
        return KURA_ENOMEM;
    }
    p->m = m;
    p->fd = fd;
    p->ssl = ssl;
    p->sid = h->sid;
    p->hello = *h;
    p->state = PEER_NEW;
    atomic_store(&p->base, -1);
    peer_name(p);
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    p->next = m->incoming;
    m->incoming = p;
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    loop_wake(m);
    return KURA_OK;
}

/* ---- semi-synchronous writes ------------------------------------------------- */

/* Replicas with every row up to ts (under lock).  One stream per server id
 * is live (do_register ends an older one), so this counts distinct
 * replicas; a stream's acked only passes what it was sent (master_ack). */
static int do_have(repl_master *m, uint64_t ts)
{
    int have = 0;
    for (peer *p = m->peers; p; p = p->next)
        if (!atomic_load(&p->stop) && !atomic_load(&p->copying) &&
            atomic_load(&p->confirmed) && atomic_load(&p->acked) >= ts)
            have++;
    return have;
}

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
    while (do_have(m, ts) < n) {
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
    uint64_t keep = journal_applied_ts(engine_journal(m->cfg.engine));
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
    if (m->cfg.repl_max <= 0)
        m->cfg.repl_max = REPL_MAX_DEFAULT;
    pthread_mutex_init(&m->lock, NULL);
    kura_cond_init_mono(&m->acked);
    if (loop_start(m) != 0) {
        pthread_cond_destroy(&m->acked);
        pthread_mutex_destroy(&m->lock);
        free(m);
        return KURA_ESYS;
    }
    ul_set_notify(cfg->ulog, on_append, m);
    *out = m;
    return KURA_OK;
}

void repl_master_free(repl_master *m)
{
    if (!m)
        return;
    ul_set_notify(m->cfg.ulog, NULL, NULL);
    loop_stop(m);                       /* every stream ends, every taker is told */
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->acked);
    free(m);
}

/* ---- stats -------------------------------------------------------------------- */

/* repl_replica_<sid>'s value (docs/replication.md): under lock */
static void do_replica_line(repl_master *m, const peer *p, uint64_t last, char *v, size_t cap)
{
    bool copying = atomic_load(&p->copying);
    uint64_t acked = atomic_load(&p->acked);
    char lag_us[24] = "unknown", lag_rows[24] = "unknown";
    if (!copying && atomic_load(&p->confirmed))
        snprintf(lag_us, sizeof(lag_us), "%" PRIu64,
                 last > acked ? hlc_us(last) - hlc_us(acked) : 0);
    int64_t base = atomic_load(&p->base);
    if (!copying && base >= 0) {
        uint64_t done = (uint64_t)base + atomic_load(&p->rows_read);
        uint64_t all = atomic_load(&m->appended);
        snprintf(lag_rows, sizeof(lag_rows), "%" PRIu64, all > done ? all - done : 0);
    }
    snprintf(v, cap, "%s:%u,state=%s,acked=%" PRIu64 ",sent=%" PRIu64 ",lag_rows=%s,lag_us=%s",
             p->host, p->hello.port, copying ? "copying" : "streaming", acked,
             atomic_load(&p->sent), lag_rows, lag_us);
}

void repl_master_stats(repl_master *m, bool all, kura_stat_fn emit, void *arg)
{
    uint64_t last = ul_last_ts(m->cfg.ulog);
    lockorder_lock(&m->lock, LOCK_RANK_REPL);
    repl_emit_u64(emit, arg, "repl_replicas", (uint64_t)do_live_streams(m));
    repl_emit_u64(emit, arg, "repl_streams_refused", atomic_load(&m->refused));
    repl_emit_u64(emit, arg, "repl_max", (uint64_t)m->cfg.repl_max);
    for (peer *p = all ? m->peers : NULL; p; p = p->next) {
        char name[48], v[200];
        if (atomic_load(&p->stop))
            continue;
        snprintf(name, sizeof(name), "repl_replica_%u", p->sid);
        do_replica_line(m, p, last, v, sizeof(v));
        emit(arg, name, v);
    }
    lockorder_unlock(&m->lock, LOCK_RANK_REPL);
    repl_emit_u64(emit, arg, "repl_copies_sent", atomic_load(&m->boots));
    repl_emit_u64(emit, arg, "repl_copy_spools", atomic_load(&m->spools));
    repl_emit_u64(emit, arg, "repl_rows_sent", atomic_load(&m->rows_sent));
    repl_emit_u64(emit, arg, "repl_syncrepl_waits", atomic_load(&m->waits));
    repl_emit_u64(emit, arg, "repl_syncrepl_timeouts", atomic_load(&m->wait_timeouts));
    repl_emit_u64(emit, arg, "ulog_pruned_files", atomic_load(&m->pruned_segs));
    repl_emit_u64(emit, arg, "ulog_pruned_bytes", atomic_load(&m->pruned_bytes));
    repl_emit_u64(emit, arg, "ulog_pruned_needed", atomic_load(&m->forced));
}

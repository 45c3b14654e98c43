/*
 * slave_stream.c - one stream from a replica's master (slave.c's first
 * comment says what comes): rows decoded from the buffer, applied in
 * order, acked; the position kept in the rts file at most once a second;
 * the stream ends on silence, a row that does not decode or cannot be
 * applied, or a stop.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "kura/grow.h"
#include "kura/tlsio.h"
#include "slave_int.h"

/* Sends all of buf to the master (TLS or not), waiting for the socket at
 * most 10 s at a time: 0 or -1. */
int slave_send_all(session *ss, const void *buf, size_t len)
{
    return kura_tls_send_all(ss->fd, ss->ssl, buf, len, 10000);
}

/* Reads more into the buffer: 1 when bytes came, 0 on silence, -1 closed. */
int slave_fill(session *ss, size_t want)
{
    if (kura_grow(&ss->buf, &ss->cap, want, 1, 256 * 1024))
        return -1;
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

/* Applies one row; KURA_OK or an error that ends the stream. */
static int handle(session *ss, const ul_row *row)
{
    repl_slave *s = ss->s;
    if (row->type == UL_MARK && row->prev_ts == REPL_MARK_TERM) {
        ss->term_stale = slave_term_check(s, row->ts) != 0;
        return KURA_OK;                 /* a stale master: apply_rows ends the stream */
    }
    if (row->type == UL_MARK) {
        if (row->ts > atomic_load(&s->master_last))
            atomic_store(&s->master_last, row->ts);
        if (row->prev_ts == REPL_MARK_HEARTBEAT)
            atomic_store(&s->hb_at_ms, mono_ms());
        if (row->prev_ts == REPL_MARK_COPY_DONE && ss->copying)
            return slave_copy_done(ss);
        return KURA_OK;
    }
    if (ss->copying)                    /* an item of the copy */
        return slave_copy_item(ss, row);
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
    return slave_send_all(ss, line, (size_t)n);
}

/* Decodes and applies the rows in the buffer, from *off (moved past
 * them); *need: the bytes the next row needs.  1 if any was applied, 0 if
 * none, -1 when the stream must end (failure recorded). */
static int apply_rows(session *ss, size_t *off, size_t *need)
{
    repl_slave *s = ss->s;
    int any = 0;
    for (;;) {
        ul_row row;
        long long r = ul_decode(ss->buf + *off, ss->len - *off, &row, need);
        if (r == SL_NEED_MORE) {
            if (s->cfg.row_max && *need > s->cfg.row_max) {
                /* a row larger than any item here: a master with a
                 * larger -I, or not a row at all; not buffered */
                slave_fail(s, KURA_LOG_ERROR, "a row of %zu bytes from %s:%d is larger than "
                           "this server takes (-I); reconnecting", *need, s->host, s->port);
                return -1;
            }
            return any;
        }
        if (r <= 0) {
            slave_fail(s, KURA_LOG_ERROR, "the stream from %s:%d does not decode (not a row); "
                       "reconnecting", s->host, s->port);
            return -1;
        }
        int rc = handle(ss, &row);
        if (ss->term_stale)
            return -1;                  /* recorded by slave_term_check */
        if (rc < 0) {
            slave_fail(s, KURA_LOG_ERROR, "cannot apply a row: %s; reconnecting",
                       kura_strerror(rc));
            return -1;
        }
        *off += (size_t)r;
        any = 1;
    }
}

/* Follows the stream after the welcome until it ends (silence, a row
 * that does not decode or cannot be applied, a failed ack, a stop). */
static void follow(session *ss)
{
    repl_slave *s = ss->s;
    uint64_t since = mono_ms();
    size_t off = 0, need = 0;
    for (;;) {
        int any = apply_rows(ss, &off, &need);
        if (any < 0)
            return;
        if (off) {
            memmove(ss->buf, ss->buf + off, ss->len - off);
            ss->len -= off;
            off = 0;
        }
        if (mono_ms() - since >= STABLE_MS)
            ss->progressed = true;
        if (ss->progressed) {
            pthread_mutex_lock(&s->lock);
            s->last_logged[0] = '\0';   /* working again: the next failure is logged */
            pthread_mutex_unlock(&s->lock);
        }
        if (any && !ss->copying && send_ack(ss) < 0)
            return;
        if (!ss->copying && mono_ms() - s->rts_at_ms >= RTS_EVERY_MS)
            slave_rts_write(s, atomic_load(&s->pos));
        pthread_mutex_lock(&s->lock);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->lock);
        if (stop)
            return;
        int f = slave_fill(ss, need > ss->len ? need : ss->len + 1);
        if (f == 0)
            slave_fail(s, KURA_LOG_ERROR, "nothing from %s:%d for %d s; reconnecting", s->host,
                       s->port, SILENCE_MS / 1000);
        else if (f < 0)
            slave_fail(s, KURA_LOG_INFO, "the stream from %s:%d ended", s->host, s->port);
        if (f <= 0)
            return;
    }
}

/* One stream on the connected socket fd, to its end: the SESS_* it ended
 * with (SESS_WORKED for a failure after the stream worked). */
int slave_session_run(repl_slave *s, int fd)
{
    session ss = { .s = s, .fd = fd };
    atomic_store(&s->master_last, 0);
    atomic_store(&s->hb_at_ms, 0);
    int res = slave_handshake(&ss);
    if (res == 0) {
        follow(&ss);
        res = ss.term_stale ? SESS_REFUSED : SESS_FAILED;
    }
    atomic_store(&s->connected, false);
    atomic_store(&s->hb_at_ms, 0);
    if (ss.copying)
        slave_copy_abort(&ss);
    else if (res != SESS_DIVERGED && res != SESS_FATAL)
        slave_rts_write(s, atomic_load(&s->pos));
    kura_tls_close(ss.ssl, true);
    free(ss.buf);
    return res == SESS_FAILED && ss.progressed ? SESS_WORKED : res;
}

/*
 * slave_connect.c - a replica's connection to its master and the
 * handshake before the rows: TLS (-mtls), the login the master asks for,
 * the repl line, and the master's welcome, checked (-I, the history) and
 * acted on (a stream from a position, or a full copy first).
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kura/escape.h"
#include "kura/login.h"
#include "kura/netaddr.h"
#include "kura/tlsio.h"
#include "slave_int.h"

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

int slave_connect(repl_slave *s, char *why, size_t whylen)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", s->port);
    int fd = kura_netaddr_connect(s->host, port, CONNECT_TIMEOUT_MS, why, whylen);
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
        if (ss->len >= max || slave_fill(ss, REPL_LINE_MAX) <= 0)
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
        slave_fail(s, KURA_LOG_ERROR, "master %s:%d refused: %s", s->host, s->port,
                   kura_escape(shown, sizeof(shown), line, strcspn(line, "\r\n")));
        return refused ? SESS_REFUSED : SESS_FAILED;
    }
    if (w.ext && w.imax > s->cfg.item_max) {
        /* its rows may be larger than any this server takes: refused here
         * rather than stopped at the first such row */
        slave_fail(s, KURA_LOG_ERROR, "master %s:%d's -I (%" PRIu64 ") is larger than this "
                   "replica's (%" PRIu64 "): start this replica with -I %" PRIu64 " or more",
                   s->host, s->port, w.imax, s->cfg.item_max, w.imax);
        return SESS_REFUSED;
    }
    atomic_store(&s->master_hid, w.hid);
    if (w.has_term && slave_term_check(s, w.term) != 0)
        return SESS_REFUSED;
    int hc = slave_history_check(s, &w);
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
        slave_set_state(s, REPL_ST_CONNECTED);
    } else {
        logf_(s, KURA_LOG_INFO, "replica: %s:%d (sid %u) sends a full copy as of %" PRIu64,
              s->host, s->port, w.msid, w.pos);
        ss->copy_start = w.pos;
        if (slave_copy_begin(ss))
            return SESS_FAILED;
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
    return slave_send_all(ss, p, n);
}

static int login_read(void *arg, void *p, size_t n)
{
    session *ss = arg;
    while (ss->len < n)
        if (slave_fill(ss, n) <= 0)
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
        slave_fail(s, KURA_LOG_ERROR, "master %s:%d refused authentication as user '%s': %s; "
                   "retrying with backoff", s->host, s->port, s->cfg.auth_user, msg);
        return SESS_REFUSED;
    case KURA_LOGIN_LOST:
        slave_fail(s, KURA_LOG_ERROR, "master %s:%d did not answer the authentication", s->host,
                   s->port);
        return SESS_FAILED;
    default:
        slave_fail(s, KURA_LOG_ERROR, "master %s:%d: %s", s->host, s->port, msg);
        return SESS_REFUSED;
    }
}

/* The stream's start, on a connected socket: TLS (-mtls), the login, the
 * repl line, the welcome.  0: rows follow; or the SESS_* the stream ends
 * with. */
int slave_handshake(session *ss)
{
    repl_slave *s = ss->s;
    char line[REPL_WELCOME_MAX + 1];
    int res;
    repl_hello hello = { .after = atomic_load(&s->pos), .sid = s->cfg.sid,
                         .hid = s->rts_hid, .imax = s->cfg.item_max,
                         .port = s->cfg.port > 0 ? (uint32_t)s->cfg.port : 0,
                         .copy = s->want_copy, .has_term = s->cfg.term != NULL,
                         .term = s->cfg.term ? s->cfg.term(s->cfg.term_arg) : 0 };
    if (s->cfg.tls_ctx) {
        char why[300];
        ss->ssl = kura_tls_connect(s->cfg.tls_ctx, ss->fd, s->host, CONNECT_TIMEOUT_MS, why,
                                   sizeof(why));
        if (!ss->ssl) {
            slave_fail(s, KURA_LOG_ERROR, "master %s:%d (-mtls): %s; retrying with backoff",
                             s->host, s->port, why);
            return SESS_FAILED;
        }
    }
    if ((res = authenticate(ss)) != 0)
        return res;
    int n = repl_hello_format(line, sizeof(line), &hello);
    if (n < 0 || slave_send_all(ss, line, (size_t)n) < 0 ||
        read_line(ss, line, sizeof(line)) < 0) {
        slave_fail(s, KURA_LOG_ERROR, "master %s:%d did not answer the repl command", s->host,
                         s->port);
        return SESS_FAILED;
    }
    return welcome(ss, line);
}

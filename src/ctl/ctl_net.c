/*
 * ctl_net.c - kuractl's connection to a server: connect with a deadline
 * (TCP, IPv6 or a unix socket), buffered line and byte reads each with a
 * deadline, and the two requests every command group needs (stats, gets).
 *
 * Blocking I/O with poll() deadlines: one request at a time is all a tool
 * needs, and a deadline on every wait is what keeps a hung server from
 * hanging a script.  Every failure to connect, a closed connection and a
 * timeout are CTL_UNREACHABLE, printed once, naming the server.
 *
 * With -a, a connection authenticates first, by the login the server asks
 * for: memcached's ASCII authentication (kurad -Y) or SASL PLAIN over the
 * binary protocol (kurad -S), as kura_login (src/util/login.c) finds out.
 * A server that asks for neither gets no credentials (one without -Y would
 * store them as the item "auth"): the connection is made again, in text.
 *
 * With -tls (-tls-ca, -tls-cert) the connection is TLS (kurad -Z): the
 * handshake within the same deadline, the server's certificate verified
 * against the address's host name or IP (tlsio.h); the login, if any,
 * goes over it.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "kura/grow.h"
#include "kura/login.h"
#include "kura/proto.h"
#include "kura/tlsio.h"

struct ctl_conn {
    int fd;
    struct ssl_st *ssl;         /* -tls; NULL: plaintext */
    char name[300];
    char *buf;                  /* unread bytes at buf[pos..len) */
    size_t pos, len, cap;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits for events on fd until the deadline: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0)
            return 0;
        struct pollfd p = { .fd = fd, .events = events };
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

static int connect_fd(int fd, const struct sockaddr *sa, socklen_t len, double deadline,
                      int *err)
{
    if (connect(fd, sa, len) == 0)
        return 0;
    if (errno != EINPROGRESS) {
        *err = errno;
        return -1;
    }
    int w = wait_fd(fd, POLLOUT, deadline);
    if (w <= 0) {
        *err = w == 0 ? ETIMEDOUT : errno;
        return -1;
    }
    int e = 0;
    socklen_t el = sizeof(e);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
    if (e) {
        *err = e;
        return -1;
    }
    return 0;
}

/* kura_login's I/O: the connection's own, with its deadlines; a failure
 * is printed here (CTL_UNREACHABLE), once. */
static int login_send(void *c, const void *p, size_t n) { return ctl_send(c, p, n) ? -1 : 0; }
static int login_read(void *c, void *p, size_t n) { return ctl_read(c, p, n) ? -1 : 0; }

/* -a's credentials, by whichever login the server asks for (-Y's or -S's;
 * kura_login); a refusal is the server's error (CTL_FAIL), its answer
 * printed.  CTL_AGAIN: the server asks for none (the connection now
 * speaks binary): connect again without. */
#define CTL_AGAIN (-1)
static int authenticate(ctl_conn *c)
{
    char msg[600];
    kura_login_io io = { c, login_send, login_read };
    switch (kura_login(&io, g_ctl.auth_user, g_ctl.auth_pass, msg, sizeof(msg))) {
    case KURA_LOGIN_OK:
        return CTL_OK;
    case KURA_LOGIN_OPEN:
        return CTL_AGAIN;
    case KURA_LOGIN_LOST:
        return CTL_UNREACHABLE;         /* printed by the I/O */
    case KURA_LOGIN_REFUSED:
        return ctl_err(CTL_FAIL, "%s: authentication as user '%s' refused: %s", c->name,
                       g_ctl.auth_user, msg);
    default:
        return ctl_err(CTL_FAIL, "%s: %s", c->name, msg);
    }
}

/* -tls: the handshake, within what is left of the connect's deadline; the
 * client context is made once per run */
static int start_tls(ctl_conn *c, const char *addr, double deadline)
{
    static struct ssl_ctx_st *ctx;
    char err[400], host[256];
    if (!ctx && !(ctx = kura_tls_client_ctx(g_ctl.tls_ca, g_ctl.tls_cert, err, sizeof(err))))
        return ctl_err(CTL_USAGE, "-tls: %s", err);
    /* the host the certificate must name: addr without its port */
    const char *colon = strrchr(addr, ':'), *rb = strchr(addr, ']');
    size_t hl = colon && strchr(addr, ':') == colon ? (size_t)(colon - addr) : strlen(addr);
    if (addr[0] == '[' && rb) {         /* [V6]:PORT */
        hl = (size_t)(rb - addr - 1);
        addr++;
    }
    snprintf(host, sizeof(host), "%.*s", (int)(hl < sizeof(host) ? hl : sizeof(host) - 1), addr);
    int ms = (int)((deadline - now_s()) * 1000);
    c->ssl = kura_tls_connect(ctx, c->fd, host, ms > 0 ? ms : 1, err, sizeof(err));
    if (!c->ssl)
        return ctl_err(CTL_UNREACHABLE, "%s: %s", c->name, err);
    return CTL_OK;
}

int ctl_connect(const char *addr, ctl_conn **out)
{
    double deadline = now_s() + g_ctl.timeout;
    int fd = -1, err = 0;
    *out = NULL;
    if (strchr(addr, '/')) {
        struct sockaddr_un un = { .sun_family = AF_UNIX };
        if (strlen(addr) >= sizeof(un.sun_path))
            return ctl_err(CTL_USAGE, "unix socket path too long: %s", addr);
        strcpy(un.sun_path, addr);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect_fd(fd, (struct sockaddr *)&un, sizeof(un), deadline, &err) != 0) {
            if (fd < 0)
                err = errno;
            if (fd >= 0)
                close(fd);
            return ctl_err(CTL_UNREACHABLE, "cannot connect to %s: %s", addr, strerror(err));
        }
    } else {
        char host[256], port[32] = "11211";
        const char *colon = strrchr(addr, ':');
        size_t hl;
        if (addr[0] == '[') {
            const char *rb = strchr(addr, ']');
            if (!rb || (rb[1] && rb[1] != ':'))
                return ctl_err(CTL_USAGE, "bad server address '%s' (HOST:PORT, [V6]:PORT or "
                               "a socket path)", addr);
            hl = (size_t)(rb - addr - 1);
            if (hl >= sizeof(host))
                return ctl_err(CTL_USAGE, "server address too long: %s", addr);
            memcpy(host, addr + 1, hl);
            host[hl] = '\0';
            if (rb[1] == ':')
                snprintf(port, sizeof(port), "%s", rb + 2);
        } else {
            if (colon && strchr(addr, ':') != colon)
                colon = NULL;   /* a bare IPv6 address: the default port */
            hl = colon ? (size_t)(colon - addr) : strlen(addr);
            if (hl >= sizeof(host))
                return ctl_err(CTL_USAGE, "server address too long: %s", addr);
            memcpy(host, addr, hl);
            host[hl] = '\0';
            if (colon)
                snprintf(port, sizeof(port), "%s", colon + 1);
        }
        char *end;
        long pn = strtol(port, &end, 10);
        if (!*port || *end || pn < 1 || pn > 65535 || !*host)
            return ctl_err(CTL_USAGE, "bad server address '%s' (HOST:PORT, [V6]:PORT or a "
                           "socket path)", addr);
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai, *p;
        int gr = getaddrinfo(host, port, &hints, &ai);
        if (gr != 0)
            return ctl_err(CTL_UNREACHABLE, "cannot resolve %s: %s", host, gai_strerror(gr));
        err = ECONNREFUSED;
        for (p = ai; p; p = p->ai_next) {
            fd = socket(p->ai_family, p->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        p->ai_protocol);
            if (fd < 0) {
                err = errno;
                continue;
            }
            if (connect_fd(fd, p->ai_addr, p->ai_addrlen, deadline, &err) == 0)
                break;
            close(fd);
            fd = -1;
        }
        freeaddrinfo(ai);
        if (fd < 0)
            return ctl_err(CTL_UNREACHABLE, "cannot connect to %s: %s", addr,
                           err == ETIMEDOUT ? "timed out" : strerror(err));
    }
    ctl_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return ctl_err(CTL_FAIL, "out of memory");
    }
    c->fd = fd;
    snprintf(c->name, sizeof(c->name), "%s", addr);
    int rc = g_ctl.tls ? start_tls(c, addr, deadline) : CTL_OK;
    if (!rc && g_ctl.auth_user)
        rc = authenticate(c);
    if (rc == CTL_AGAIN) {              /* no login asked for: again, in text */
        ctl_close(c);
        const char *user = g_ctl.auth_user;
        g_ctl.auth_user = NULL;
        rc = ctl_connect(addr, out);
        g_ctl.auth_user = user;
        return rc;
    }
    if (rc) {
        ctl_close(c);
        return rc;
    }
    *out = c;
    return CTL_OK;
}

void ctl_close(ctl_conn *c)
{
    if (!c)
        return;
    kura_tls_close(c->ssl, true);
    close(c->fd);
    free(c->buf);
    free(c);
}

const char *ctl_conn_name(const ctl_conn *c)
{
    return c->name;
}

int ctl_send(ctl_conn *c, const void *p, size_t n)
{
    const char *b = p;
    double deadline = now_s() + g_ctl.timeout;
    while (n > 0) {
        ssize_t w = c->ssl ? kura_tls_send(c->ssl, b, n) : send(c->fd, b, n, MSG_NOSIGNAL);
        if (w > 0) {
            b += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(c->fd, POLLOUT, deadline) > 0)
                continue;
            return ctl_err(CTL_UNREACHABLE, "%s: timed out sending (after %g s)", c->name,
                           g_ctl.timeout);
        }
        return ctl_err(CTL_UNREACHABLE, "%s: connection lost: %s", c->name, strerror(errno));
    }
    return CTL_OK;
}

/* Reads more bytes into the buffer, within the deadline. */
static int fill(ctl_conn *c, double deadline)
{
    if (c->pos > 0 && c->pos == c->len)
        c->pos = c->len = 0;
    if (c->len == c->cap) {
        if (c->pos > 0) {
            memmove(c->buf, c->buf + c->pos, c->len - c->pos);
            c->len -= c->pos;
            c->pos = 0;
        } else if (kura_grow(&c->buf, &c->cap, c->cap + 1, 1, 65536)) {
            return ctl_err(CTL_FAIL, "out of memory");
        }
    }
    for (;;) {
        ssize_t r = c->ssl ? kura_tls_recv(c->ssl, c->buf + c->len, c->cap - c->len)
                           : recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (r > 0) {
            c->len += (size_t)r;
            return CTL_OK;
        }
        if (r == 0)
            return ctl_err(CTL_UNREACHABLE, "%s: the server closed the connection", c->name);
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return ctl_err(CTL_UNREACHABLE, "%s: connection lost: %s", c->name, strerror(errno));
        if (wait_fd(c->fd, POLLIN, deadline) <= 0)
            return ctl_err(CTL_UNREACHABLE, "%s: no answer within %g s (-t)", c->name,
                           g_ctl.timeout);
    }
}

int ctl_line(ctl_conn *c, const char **line, size_t *len)
{
    double deadline = now_s() + g_ctl.timeout;
    size_t scanned = c->pos;
    for (;;) {
        char *nl = c->len > scanned ? memchr(c->buf + scanned, '\n', c->len - scanned) : NULL;
        if (nl) {
            char *start = c->buf + c->pos;
            size_t l = (size_t)(nl - start);
            if (l > 0 && start[l - 1] == '\r')
                l--;
            start[l] = '\0';
            c->pos = (size_t)(nl - c->buf) + 1;
            *line = start;
            *len = l;
            return CTL_OK;
        }
        size_t off = c->len - c->pos;
        int rc = fill(c, deadline);
        if (rc)
            return rc;
        scanned = c->pos + off;
    }
}

int ctl_read(ctl_conn *c, void *buf, size_t n)
{
    double deadline = now_s() + g_ctl.timeout;
    char *b = buf;
    while (n > 0) {
        if (c->pos == c->len) {
            int rc = fill(c, deadline);
            if (rc)
                return rc;
        }
        size_t k = c->len - c->pos < n ? c->len - c->pos : n;
        memcpy(b, c->buf + c->pos, k);
        c->pos += k;
        b += k;
        n -= k;
    }
    return CTL_OK;
}

int ctl_stats(ctl_conn *c, const char *section, ctl_stat_fn fn, void *arg)
{
    char req[300];
    int n = snprintf(req, sizeof(req), "stats%s%s\r\n", section ? " " : "",
                     section ? section : "");
    if (n >= (int)sizeof(req) || strpbrk(section ? section : "", " \r\n"))
        return ctl_err(CTL_USAGE, "bad stats section '%s'", section);
    int rc = ctl_send(c, req, (size_t)n);
    for (;;) {
        const char *l;
        size_t len;
        if (rc || (rc = ctl_line(c, &l, &len)))
            return rc;
        if (strcmp(l, "END") == 0)
            return CTL_OK;
        if (strncmp(l, "STAT ", 5) == 0) {
            char *name = (char *)l + 5, *sp = strchr(name, ' ');
            if (sp)
                *sp = '\0';
            fn(arg, name, sp ? sp + 1 : "");
            continue;
        }
        return ctl_err(CTL_FAIL, "%s: stats%s%s: %s", c->name, section ? " " : "",
                       section ? section : "", l);
    }
}

int ctl_gets(ctl_conn *c, const char *key, ctl_value *v)
{
    char req[300];
    memset(v, 0, sizeof(*v));
    int n = snprintf(req, sizeof(req), "gets %s\r\n", key);
    int rc = ctl_send(c, req, (size_t)n);
    const char *l;
    size_t len;
    if (rc || (rc = ctl_line(c, &l, &len)))
        return rc;
    if (strcmp(l, "END") == 0)
        return CTL_DIFF;
    unsigned long long vlen, cas;
    unsigned flags;
    int kl = 0;
    if (strncmp(l, "VALUE ", 6) != 0 ||
        sscanf(l + 6, "%*s%n %u %llu %llu", &kl, &flags, &vlen, &cas) != 3)
        return ctl_err(CTL_FAIL, "%s: gets %s: %s", c->name, key, l);
    v->data = malloc(vlen + 1);
    if (!v->data)
        return ctl_err(CTL_FAIL, "out of memory for a value of %llu bytes", vlen);
    char crlf[2];
    if ((rc = ctl_read(c, v->data, vlen)) || (rc = ctl_read(c, crlf, 2)) ||
        (rc = ctl_line(c, &l, &len))) {
        free(v->data);
        v->data = NULL;
        return rc;
    }
    if (strcmp(l, "END") != 0) {
        free(v->data);
        v->data = NULL;
        return ctl_err(CTL_FAIL, "%s: gets %s: expected END, got: %s", c->name, key, l);
    }
    v->data[vlen] = '\0';
    v->len = vlen;
    v->flags = flags;
    v->cas = cas;
    return CTL_OK;
}

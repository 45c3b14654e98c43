/*
 * replchain.c - the chain of masters above a server, asked before a
 * "repl follow" (docs/replication.md, "Roles and terms"): following a
 * server that follows this one, directly or up its chain, would leave a
 * ring of replicas with no master, each refusing writes and waiting for
 * rows nobody takes; a chain that ends in no master (a loop elsewhere, or
 * a fenced server) is no better.  Each hop is asked its "stats repl"
 * (repl_role, repl_master) over a plain connection with a short timeout;
 * a server that does not answer (down, or asking for a login) ends the
 * walk as "cannot tell", and the follow goes on: the check refuses only
 * what it saw.
 *
 * Also the small blocking client replprobe.c uses (replchain_ask).
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kura/login.h"
#include "server.h"

#define HOP_TIMEOUT_MS 2000
#define HOPS_MAX 8

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Waits for fd to be ready for events until deadline: 1, or 0. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = { .fd = fd, .events = events };
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return 0;
    }
}

static int connect_to(const char *host, int port, int64_t deadline, char *local, size_t llen)
{
    char ps[16];
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res, *ai;
    snprintf(ps, sizeof(ps), "%d", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        int err = 0;
        socklen_t el = sizeof(err);
        if (rc < 0 && (errno != EINPROGRESS || !wait_fd(fd, POLLOUT, deadline) ||
                       getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err)) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0 && local) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        local[0] = '\0';
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
            getnameinfo((struct sockaddr *)&ss, sl, local, (socklen_t)llen, NULL, 0,
                        NI_NUMERICHOST);
    }
    return fd;
}

typedef struct ask_io {
    int fd;
    int64_t deadline;
} ask_io;

static int ask_send(void *ctx, const void *buf, size_t len)
{
    ask_io *a = ctx;
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(a->fd, (const char *)buf + off, len - off, MSG_NOSIGNAL);
        if (n > 0)
            off += (size_t)n;
        else if (n < 0 && errno == EAGAIN && wait_fd(a->fd, POLLOUT, a->deadline))
            continue;
        else if (n < 0 && errno == EINTR)
            continue;
        else
            return -1;
    }
    return 0;
}

static int ask_read(void *ctx, void *buf, size_t len)
{
    ask_io *a = ctx;
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(a->fd, (char *)buf + got, len - got, 0);
        if (n > 0)
            got += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else if (n < 0 && errno == EAGAIN && wait_fd(a->fd, POLLIN, a->deadline))
            continue;
        else
            return -1;
    }
    return 0;
}

/* A connection ready for text requests: logged in when the server asks
 * (-Y, -S) and the replica's credentials are set; -1 when none. */
static int open_session(const char *host, int port, const replchain_auth *auth, int64_t deadline,
                        char *local, size_t llen)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = connect_to(host, port, deadline, local, llen);
        if (fd < 0 || !auth || !auth->user)
            return fd;
        ask_io a = { fd, deadline };
        kura_login_io io = { &a, ask_send, ask_read };
        char msg[300];
        int rc = kura_login(&io, auth->user, auth->pass, msg, sizeof(msg));
        if (rc == KURA_LOGIN_OK)
            return fd;
        close(fd);
        if (rc != KURA_LOGIN_OPEN)
            return -1;
        auth = NULL;                    /* it asks for none: connect again, speak text */
    }
    return -1;
}

int replchain_ask(const char *host, int port, const replchain_auth *auth, const char *req,
                  const char *end, char *buf, size_t cap, int timeout_ms, char *local,
                  size_t llen)
{
    int64_t deadline = now_ms() + timeout_ms;
    int fd = open_session(host, port, auth, deadline, local, llen);
    if (fd < 0)
        return -1;
    size_t got = 0;
    int rc = -1;
    ask_io a = { fd, deadline };
    if (ask_send(&a, req, strlen(req)) < 0)
        goto out;
    while (got + 1 < cap) {
        ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
        if (n > 0) {
            got += (size_t)n;
            buf[got] = '\0';
            if (strstr(buf, end) || strstr(buf, "ERROR")) {
                rc = 0;
                break;
            }
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (errno == EAGAIN && !wait_fd(fd, POLLIN, deadline))
                break;
        } else {
            break;
        }
    }
out:
    close(fd);
    return rc;
}

/* A "STAT name value" line's value into v: true when found. */
static bool stat_value(const char *stats, const char *name, char *v, size_t vlen)
{
    char key[64];
    snprintf(key, sizeof(key), "STAT %s ", name);
    const char *p = strstr(stats, key);
    if (!p)
        return false;
    p += strlen(key);
    size_t n = strcspn(p, "\r\n");
    snprintf(v, vlen, "%.*s", (int)(n < vlen ? n : vlen - 1), p);
    return true;
}

static bool reaches_self(const char *host, int port)
{
    char ps[16];
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
    snprintf(ps, sizeof(ps), "%d", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0)
        return false;
    bool self = selfaddr_reaches_self(res);
    freeaddrinfo(res);
    return self;
}

void replchain_credentials(kura_server *srv, replchain_auth *auth)
{
    repl_config rc;
    replctl_config(srv, &rc);
    auth->user = rc.auth_user;
    auth->pass = rc.auth_pass;
}

int replchain_check(kura_server *srv, const char *host, int port, char *msg, size_t msglen)
{
    char path[HOPS_MAX * 300 + 64], cur[300], stats[16384], role[32], master[300];
    int cport = port;
    replchain_auth auth;
    replchain_credentials(srv, &auth);
    snprintf(cur, sizeof(cur), "%s", host);
    snprintf(path, sizeof(path), "%s:%d", host, port);
    for (int hop = 0; hop < HOPS_MAX; hop++) {
        if (replchain_ask(cur, cport, &auth, "stats repl\r\n", "END\r\n", stats, sizeof(stats),
                          HOP_TIMEOUT_MS, NULL, 0) < 0 ||
            !stat_value(stats, "repl_role", role, sizeof(role)))
            return 0;                   /* cannot tell */
        if (strcmp(role, "fenced") == 0) {
            snprintf(msg, msglen, "CLIENT_ERROR %s is fenced (a master that was replaced): its "
                     "chain has no master (%s); follow the current master", cur, path);
            return -1;
        }
        if (strcmp(role, "replica") != 0 || !stat_value(stats, "repl_master", master,
                                                        sizeof(master)))
            return 0;                   /* a master (or dual, or none): the chain ends */
        char *colon = strrchr(master, ':');
        if (!colon)
            return 0;
        *colon = '\0';
        cport = atoi(colon + 1);
        size_t pl = strlen(path);
        snprintf(path + pl, sizeof(path) - pl, " -> %s:%d", master, cport);
        if (reaches_self(master, cport)) {
            snprintf(msg, msglen, "CLIENT_ERROR %s:%d follows this server (%s -> this server): "
                     "following it would form a loop with no master", host, port, path);
            return -1;
        }
        snprintf(cur, sizeof(cur), "%s", master);
    }
    snprintf(msg, msglen, "CLIENT_ERROR no master within %d servers up the chain of %s:%d (%s): "
             "a loop, or a chain too long", HOPS_MAX, host, port, path);
    return -1;
}

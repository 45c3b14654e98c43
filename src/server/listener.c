/*
 * listener.c - listening sockets on the main thread; accepted sockets go to
 * the workers round-robin.
 *
 * Past -c connections memcached (with its default maxconns_fast) accepts,
 * writes "ERROR Too many open connections" and closes; so do we, counting
 * rejected_connections.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "server.h"

#define MAX_LISTENERS 8

static struct event *listen_events[MAX_LISTENERS];
static int listen_fds[MAX_LISTENERS];
static int nlisten;

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    kura_server *srv = arg;
    (void)what;
    for (int i = 0; i < 64; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                atomic_fetch_add(&srv->info.listen_disabled_num, 1);
                log_msg(LOG_ERR, "accept: %s", strerror(errno));
            }
            return;
        }
        if (atomic_load(&srv->info.curr_connections) >= (uint64_t)srv->settings->maxconns) {
            static const char msg[] = "ERROR Too many open connections\r\n";
            ssize_t w = write(fd, msg, sizeof(msg) - 1);
            (void)w;
            close(fd);
            atomic_fetch_add(&srv->info.rejected_connections, 1);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  /* fails harmlessly on unix */
        atomic_fetch_add(&srv->info.curr_connections, 1);
        atomic_fetch_add(&srv->info.total_connections, 1);
        worker_dispatch(srv, fd);
    }
}

static int add_listener(kura_server *srv, int fd)
{
    if (nlisten == MAX_LISTENERS) {
        close(fd);
        return -1;
    }
    listen_events[nlisten] = event_new(srv->base, fd, EV_READ | EV_PERSIST, on_accept, srv);
    if (!listen_events[nlisten] || event_add(listen_events[nlisten], NULL) < 0) {
        close(fd);
        return -1;
    }
    listen_fds[nlisten++] = fd;
    return 0;
}

static int open_tcp(kura_server *srv)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res, *ai;
    char port[16];
    const char *host = srv->settings->host;
    int opened = 0;

    snprintf(port, sizeof(port), "%d", srv->settings->port);
    if (host && (strcmp(host, "") == 0 || strcmp(host, "*") == 0))
        host = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) {
        log_msg(LOG_ERR, "cannot resolve listen address '%s': %s",
                host ? host : "*", gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (ai->ai_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            log_msg(LOG_ERR, "cannot listen on %s port %d: %s", host ? host : "*",
                    srv->settings->port, strerror(errno));
            close(fd);
            freeaddrinfo(res);
            return -1;
        }
        if (add_listener(srv, fd) == 0)
            opened++;
    }
    freeaddrinfo(res);
    return opened ? 0 : -1;
}

static int open_unix(kura_server *srv)
{
    const char *path = srv->settings->unix_path;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(sa.sun_path)) {
        log_msg(LOG_ERR, "unix socket path too long: %s", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);                   /* a stale socket from an earlier run */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        log_msg(LOG_ERR, "cannot listen on unix socket %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return add_listener(srv, fd);
}

/* Binds every address; listener_listen() then starts accepting. */
int listener_open(kura_server *srv)
{
    if (srv->settings->port > 0 && open_tcp(srv) < 0)
        return -1;
    if (srv->settings->unix_path && open_unix(srv) < 0)
        return -1;
    return 0;
}

/* Bound sockets refuse connections until they listen: main.c binds early
 * (as root, and to find a taken port before the store is opened) and
 * listens once the workers are there to serve. */
int listener_listen(kura_server *srv)
{
    for (int i = 0; i < nlisten; i++) {
        if (listen(listen_fds[i], 1024) < 0) {
            log_msg(LOG_ERR, "cannot listen (port %d): %s", srv->settings->port, strerror(errno));
            return -1;
        }
    }
    return 0;
}

void listener_close(kura_server *srv)
{
    for (int i = 0; i < nlisten; i++) {
        event_free(listen_events[i]);
        close(listen_fds[i]);
    }
    nlisten = 0;
    if (srv->settings->unix_path)
        unlink(srv->settings->unix_path);
}

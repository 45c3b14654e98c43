/*
 * listener.c - listening sockets on the main thread; accepted sockets go to
 * the workers round-robin.
 *
 * Past -c connections memcached (with its default maxconns_fast) accepts,
 * writes "ERROR Too many open connections" and closes; so do we, counting
 * rejected_connections.  -c plus a reserve fits in the descriptor limit
 * (fdlimit.c), so that is the usual end of a connection flood.
 *
 * If accept() still fails for want of descriptors or memory (EMFILE,
 * ENFILE: the limit was lowered under us, or the system is out), the
 * pending connection stays in the backlog and the listening socket stays
 * readable: accepting again at once would spin.  So the listeners are
 * taken off the event base for ACCEPT_BACKOFF_MS (as memcached does with
 * its accept_new_conns(false), counted in listen_disabled_num), then tried
 * again; the log line is the same text each time, so log.c folds repeats.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kura/netaddr.h"
#include "server.h"

#define MAX_LISTENERS 8

#define ACCEPT_BACKOFF_MS 100

static struct event *listen_events[MAX_LISTENERS];
static int listen_fds[MAX_LISTENERS];
static bool listen_tls[MAX_LISTENERS];  /* -Z, unless the address said notls: */
static bool listen_kt[MAX_LISTENERS];   /* -kt's: Kyoto Tycoon's protocols */
static conn_entry *listen_entries[MAX_LISTENERS];   /* "stats conns" */
static int nlisten;
static struct event *backoff_timer;     /* re-enables accepting */
static const char *unix_bound;          /* -s: the socket file we made (removed at close) */
static bool accept_paused;
static char bound_desc[256];            /* "127.0.0.1 and ::1": the TCP addresses bound */

/* The backoff is over: listen again (a connection still pending is then
 * accepted at once, or the pause starts over). */
static void on_backoff_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what; (void)arg;
    accept_paused = false;
    for (int i = 0; i < nlisten; i++)
        event_add(listen_events[i], NULL);
}

static void pause_accepting(kura_server *srv, int err)
{
    if (accept_paused)
        return;
    accept_paused = true;
    for (int i = 0; i < nlisten; i++)
        event_del(listen_events[i]);
    struct timeval tv = { 0, ACCEPT_BACKOFF_MS * 1000 };
    evtimer_add(backoff_timer, &tv);
    atomic_fetch_add(&srv->info.listen_disabled_num, 1);
    log_msg(KURA_LOG_ERROR, "accept: %s: not accepting new connections for %d ms", strerror(err),
            ACCEPT_BACKOFF_MS);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    kura_server *srv = arg;
    (void)what;
    bool tls = false, kt = false;
    for (int i = 0; i < nlisten; i++)
        if (listen_fds[i] == lfd) {
            tls = listen_tls[i];
            kt = listen_kt[i];
        }
    for (int i = 0; i < 64; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                pause_accepting(srv, errno);
            return;                     /* EAGAIN: the backlog is empty */
        }
        if (atomic_load(&srv->info.curr_connections) >= (uint64_t)srv->settings->maxconns) {
            static const char msg[] = "ERROR Too many open connections\r\n";
            /* -kt: an HTTP client is told in HTTP (a TLS one gets the close) */
            static const char kt_msg[] = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
                                         "Content-Length: 26\r\nContent-Type: text/plain\r\n\r\n"
                                         "too many open connections\n";
            /* Count before the client can see the close: one that then asks
             * for stats must find itself counted. */
            atomic_fetch_add(&srv->info.rejected_connections, 1);
            ssize_t w = kt ? (tls ? 0 : write(fd, kt_msg, sizeof(kt_msg) - 1))
                           : write(fd, msg, sizeof(msg) - 1);
            (void)w;
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  /* fails harmlessly on unix */
        atomic_fetch_add(&srv->info.curr_connections, 1);
        atomic_fetch_add(&srv->info.total_connections, 1);
        worker_dispatch(srv, fd, tls, kt);
    }
}

static int add_listener(kura_server *srv, int fd, bool tls, bool kt)
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
    listen_entries[nlisten] = connlist_add(fd, true);
    listen_tls[nlisten] = tls;
    listen_kt[nlisten] = kt;
    listen_fds[nlisten++] = fd;
    return 0;
}

/* Binds one address of getaddrinfo's; the socket, or -1 with errno set. */
static int bind_one(const struct addrinfo *ai)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/* Binds host:port (NULL: every address), each address getaddrinfo gives,
 * into fds (room for max).  optional: a family this host lacks (no IPv6:
 * EAFNOSUPPORT, or ::1 not configured: EADDRNOTAVAIL) is skipped with an
 * INFO line naming it rather than failing (a host without IPv6 is
 * normal); anything else (a port in use) is an error.  Returns how many
 * were bound (0 when all were skipped), or -1 with the reason logged
 * (what names the listener: "", "metrics: "). */
static int bind_host(const char *what, const char *host, int port, bool optional, int *fds,
                     int max)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *res;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc) {
        log_msg(KURA_LOG_ERROR, "%scannot resolve listen address '%s': %s", what,
                host ? host : "*", gai_strerror(rc));
        return -1;
    }
    int n = 0;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = n < max ? bind_one(ai) : (errno = EMFILE, -1);
        if (fd >= 0) {
            fds[n++] = fd;
            continue;
        }
        int err = errno;
        if (optional && (err == EAFNOSUPPORT || err == EADDRNOTAVAIL)) {
            log_msg(KURA_LOG_INFO, "%snot listening on %s port %d: %s (this host has no such "
                    "address; skipped)", what, host, port, strerror(err));
            continue;
        }
        log_msg(KURA_LOG_ERROR, "%scannot listen on %s port %d: %s", what, host ? host : "*",
                port, strerror(err));
        while (n)
            close(fds[--n]);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    return n;
}

int listener_bind(const char *what, const char *host, int port, int *fds, int max)
{
    if (host && (strcmp(host, "") == 0 || strcmp(host, "*") == 0))
        host = NULL;
    if (!host || !kura_netaddr_is_localhost(host))
        return bind_host(what, host, port, false, fds, max);
    /* both loopbacks, each skipped where the host lacks its family */
    int n4 = bind_host(what, KURA_LOOPBACK_V4, port, true, fds, max);
    if (n4 < 0)
        return -1;
    int n6 = bind_host(what, KURA_LOOPBACK_V6, port, true, fds + n4, max - n4);
    if (n6 < 0) {
        while (n4)
            close(fds[--n4]);
        return -1;
    }
    if (n4 + n6 == 0)
        log_msg(KURA_LOG_ERROR, "%scannot listen on localhost port %d: neither %s nor %s is "
                "available", what, port, KURA_LOOPBACK_V4, KURA_LOOPBACK_V6);
    return n4 + n6 ? n4 + n6 : -1;
}

/* Adds fd's address to bound_desc ("127.0.0.1 and ::1") unless it is
 * there already (-plex port=N's second port, which the start-up line names
 * apart); with its port when that is neither -p's nor -plex's
 * ("127.0.0.1 and 10.0.0.5:11212"). */
static void describe(const kura_settings *st, int fd)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    char ip[INET6_ADDRSTRLEN] = "?", addr[INET6_ADDRSTRLEN + 10];
    char word[sizeof(addr) + 10], have[sizeof(bound_desc) + 10];
    int port = 0;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
        if (sa.ss_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
        } else if (sa.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
        }
    }
    if (port && port != st->port && port != st->port2)
        snprintf(addr, sizeof(addr), strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
    else
        snprintf(addr, sizeof(addr), "%s", ip);
    snprintf(have, sizeof(have), " and %s and ", bound_desc);
    snprintf(word, sizeof(word), " and %s and ", addr);
    if (strstr(have, word))
        return;
    snprintf(word, sizeof(word), "%s%s", bound_desc[0] ? " and " : "", addr);
    strncat(bound_desc, word, sizeof(bound_desc) - strlen(bound_desc) - 1);
}

static int open_tcp(kura_server *srv, const char *host, int tcp_port, bool tls, bool kt)
{
    int fds[MAX_LISTENERS];
    int n = listener_bind("", host, tcp_port, fds, MAX_LISTENERS - nlisten);
    if (n < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        describe(srv->settings, fds[i]);
        if (add_listener(srv, fds[i], tls, kt) < 0) {
            while (++i < n)
                close(fds[i]);
            return -1;
        }
    }
    return 0;
}

/* True when a server answers on the unix socket at sa: a live kurad (or
 * anything else) whose path must not be taken over. */
static bool unix_socket_live(const struct sockaddr_un *sa)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool live = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0;
    close(fd);
    return live;
}

/* -s PATH: bound with -a's mode from the start (the umask is set around
 * bind, as memcached does, so the socket never exists with a wider mode;
 * no other thread runs yet), given to the -u user later
 * (listener_chown), removed by listener_close.  A socket file left by a
 * crash is replaced; one a live server answers on is not. */
static int open_unix(kura_server *srv)
{
    const char *path = srv->settings->unix_path;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(sa.sun_path)) {
        log_msg(KURA_LOG_ERROR, "unix socket path too long: %s", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        if (unix_socket_live(&sa)) {
            log_msg(KURA_LOG_ERROR, "cannot listen on unix socket %s: a server is listening "
                    "there already", path);
            return -1;
        }
        unlink(path);                   /* a stale socket from an earlier run */
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    mode_t old = umask((mode_t)(~srv->settings->unix_mode & 0777));
    int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    int err = errno;
    umask(old);
    if (rc < 0) {
        log_msg(KURA_LOG_ERROR, "cannot listen on unix socket %s: %s", path, strerror(err));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    unix_bound = path;
    return add_listener(srv, fd, false, false);     /* memcached: no TLS on a unix socket */
}

void listener_chown(uid_t uid, gid_t gid)
{
    if (unix_bound && chown(unix_bound, uid, gid) < 0)
        log_msg(KURA_LOG_ERROR, "cannot give the unix socket %s to uid %d: %s", unix_bound,
                (int)uid, strerror(errno));
}

/* -l as memcached's: addresses separated by commas, each [notls:]HOST
 * [:PORT] ([V6]:PORT), -p's port where none is given; TLS (-Z) on each
 * but the notls: ones; "localhost" (the default) is 127.0.0.1 and ::1.
 * port2: the port of ktserver's memcached plug-in (-plex port=N), serving
 * the same protocols, on each address without a port of its own.  The
 * forms were checked when the options were read (options.c). */
static int open_addresses(kura_server *srv)
{
    const kura_settings *st = srv->settings;
    char list[1024], host[256], why[160];
    /* "" (-l '') is every address, as it was for memcached's getaddrinfo */
    snprintf(list, sizeof(list), "%s", !st->host ? "localhost" : st->host[0] ? st->host : "*");
    char *save = NULL;
    for (char *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        bool tls = tls_enabled();
        if (strncmp(item, "notls:", 6) == 0) {
            item += 6;
            tls = false;
        }
        int given;
        if (kura_netaddr_split(item, host, sizeof(host), &given, why, sizeof(why)) < 0) {
            log_msg(KURA_LOG_ERROR, "-host '%s': %s", item, why);
            return -1;
        }
        int port = given ? given : st->port;
        if ((port > 0 && open_tcp(srv, host, port, tls, false) < 0) ||
            (!given && st->port2 > 0 && open_tcp(srv, host, st->port2, tls, false) < 0))
            return -1;
    }
    return 0;
}

/* -kt [notls:][HOST:]PORT: Kyoto Tycoon's HTTP and binary protocols
 * (src/proto/kt.c), served by the same workers under the same -c, -Y and
 * TLS rules as -l's addresses; without a host, on -l's first one (or
 * localhost). */
static int open_kt(kura_server *srv)
{
    const kura_settings *st = srv->settings;
    char item[300], host[256], why[160];
    snprintf(item, sizeof(item), "%s", st->kt_listen);
    char *p = item;
    bool tls = tls_enabled();
    if (strncmp(p, "notls:", 6) == 0) {
        p += 6;
        tls = false;
    }
    int port, given;
    if (strspn(p, "0123456789") == strlen(p)) {
        port = atoi(p);
        char first[256];
        snprintf(first, sizeof(first), "%s", !st->host ? "localhost" : st->host[0] ? st->host : "*");
        first[strcspn(first, ",")] = '\0';
        const char *f = strncmp(first, "notls:", 6) == 0 ? first + 6 : first;
        if (kura_netaddr_split(f, host, sizeof(host), &given, why, sizeof(why)) < 0)
            snprintf(host, sizeof(host), "localhost");
    } else if (kura_netaddr_split(p, host, sizeof(host), &port, why, sizeof(why)) < 0 || !port) {
        log_msg(KURA_LOG_ERROR, "-kt '%s': %s", st->kt_listen, port ? why : "no port");
        return -1;
    }
    srv->info.kt_port = port;
    return open_tcp(srv, host, port, tls, true);
}

const char *listener_addresses(void)
{
    return bound_desc[0] ? bound_desc : "no TCP address";
}

/* Binds every address; listener_listen() then starts accepting. */
int listener_open(kura_server *srv)
{
    backoff_timer = evtimer_new(srv->base, on_backoff_done, srv);
    if (!backoff_timer)
        return -1;
    if (open_addresses(srv) < 0 || (srv->settings->unix_path && open_unix(srv) < 0) ||
        (srv->settings->kt_listen && open_kt(srv) < 0)) {
        event_free(backoff_timer);
        backoff_timer = NULL;
        return -1;
    }
    return 0;
}

/* Bound sockets refuse connections until they listen: main.c binds early
 * (as root, and to find a taken port before the store is opened) and
 * listens once the workers are there to serve. */
int listener_listen(kura_server *srv)
{
    for (int i = 0; i < nlisten; i++) {
        if (listen(listen_fds[i], 1024) < 0) {
            log_msg(KURA_LOG_ERROR, "cannot listen (port %d): %s", srv->settings->port, strerror(errno));
            return -1;
        }
    }
    return 0;
}

int listener_sockaddrs(struct sockaddr_storage *out, int max)
{
    int n = 0;
    for (int i = 0; i < nlisten && n < max; i++) {
        socklen_t len = sizeof(out[n]);
        if (getsockname(listen_fds[i], (struct sockaddr *)&out[n], &len) == 0 &&
            (out[n].ss_family == AF_INET || out[n].ss_family == AF_INET6))
            n++;
    }
    return n;
}

void listener_close(kura_server *srv)
{
    for (int i = 0; i < nlisten; i++) {
        event_free(listen_events[i]);
        connlist_remove(listen_entries[i]);
        listen_entries[i] = NULL;
        close(listen_fds[i]);
    }
    nlisten = 0;
    bound_desc[0] = '\0';
    if (backoff_timer) {
        event_free(backoff_timer);
        backoff_timer = NULL;
    }
    accept_paused = false;
    (void)srv;
    if (unix_bound)
        unlink(unix_bound);             /* only the one we made: never another server's */
    unix_bound = NULL;
}

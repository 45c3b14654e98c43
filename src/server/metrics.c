/*
 * metrics.c - the Prometheus endpoint: -metrics [HOST:]PORT serves
 * /metrics (metrics_expo.c's exposition), /health, and for load balancers
 * /primary and /replica (Patroni's checks, ha_adapter.c) over HTTP, with
 * libevent's evhttp on a thread and event base of its own, so a slow or
 * hostile scraper never holds up a worker or the listener.
 *
 * Bounded like every endpoint: at most METRICS_MAX_CONNS connections,
 * request headers of METRICS_MAX_HEADERS bytes, no body, GET and HEAD only,
 * and a whole-request deadline: METRICS_TIMEOUT seconds from a connection's
 * start (or its last request) for its next request, headers and all, and
 * the reply taken.  evhttp's own timeout is an idle one (reset by every
 * byte), so a client sending a header byte every few seconds would keep
 * its slot for ever: the sweep, once a second, shuts down a connection past
 * its deadline.  And a slow client cannot take every slot: a connection
 * that comes when all METRICS_MAX_CONNS are taken closes the oldest one,
 * so /health answers at once however many clients trickle.  libevent 2.1's
 * evhttp has no connection limit of its own (evhttp_set_max_connections
 * came in 2.2), so each connection's bufferevent is made here
 * (evhttp_set_bevcb) and kept referenced, and the sweep counts the
 * connections evhttp is done with.  A connection shut down here stays in
 * its slot until evhttp has seen the end and freed it; METRICS_SLOTS
 * bounds those too (the listeners pause when every slot is in use).
 *
 * The address: -metrics [HOST:]PORT, HOST by default -host's first; as
 * for the memcached port, "localhost" is 127.0.0.1 and ::1, bound here
 * (listener_bind) and handed to evhttp.
 *
 * A scrape reads the same figures "stats" does, on this thread, as a stats
 * command reads them on a worker's.
 *
 * With credentials (-metrics-auth FILE, else -Y's file), /metrics asks for
 * HTTP Basic authentication: a request without a matching Authorization
 * header gets 401 with WWW-Authenticate, counted in
 * kura_metrics_auth_failures_total, and costs what a success's check
 * costs (no delay: one thread serves every scraper, so a delay would hold
 * up the others).  /health stays open, for load balancers that send no
 * credentials, but says why only to an authenticated request: an
 * unauthenticated one gets the status code and "ok" or "unavailable".
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kura/base64.h"
#include "kura/netaddr.h"
#include "metrics.h"
#include "server.h"

#define METRICS_MAX_CONNS 16
#define METRICS_SLOTS (2 * METRICS_MAX_CONNS)   /* the live ones and those closing */
#define METRICS_LISTENERS 4
#define METRICS_MAX_HEADERS 8192
#define METRICS_TIMEOUT 10              /* seconds */
#define METRICS_CREDENTIALS_MAX 2048    /* a decoded Authorization header */

static struct {
    kura_stats_source src;
    kura_server *srv;                   /* /primary, /replica (ha_adapter.c) */
    const kura_auth *auth;              /* NULL: /metrics open */
    uint64_t auth_failures;             /* this thread's */
    struct event_base *base;
    struct evhttp *http;
    struct evconnlistener *listeners[METRICS_LISTENERS];
    int nlisteners;
    struct event *stop_ev;
    int stop_fd[2];                     /* the main thread writes: stop */
    pthread_t thread;
    bool running;
    struct metrics_slot {
        struct bufferevent *bev;        /* the connection's, referenced; NULL: free */
        struct timespec start;          /* its deadline runs from here */
        bool closing;                   /* shut down here; evhttp has yet to free it */
    } slots[METRICS_SLOTS];
    struct event *sweep_ev;             /* once a second: sweep() */
    int live;                           /* slots in use and not closing (this thread only) */
    int used;                           /* slots in use */
    bool paused;                        /* the listeners are off: every slot in use */
} ms = { .stop_fd = { -1, -1 } };

static double elapsed(const struct timespec *since)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - since->tv_sec) + (double)(now.tv_nsec - since->tv_nsec) / 1e9;
}

static void pause_listeners(bool pause)
{
    for (int i = 0; i < ms.nlisteners; i++)
        pause ? evconnlistener_disable(ms.listeners[i]) : evconnlistener_enable(ms.listeners[i]);
    ms.paused = pause;
}

/* Ends a connection evhttp still holds: shut down both ways, so that
 * evhttp reads the end (or fails its write) and frees it as it frees one
 * its client closed. */
static void close_slot(struct metrics_slot *sl)
{
    shutdown(bufferevent_getfd(sl->bev), SHUT_RDWR);
    sl->closing = true;
    ms.live--;
}

/* Drops the connections evhttp has freed: a bufferevent it freed has no
 * callbacks left (bufferevent_free clears them) and lives on only by our
 * reference, with its socket, which evhttp shut down for writing.  Shuts
 * down those past their deadline.  Then accepts again if every slot had
 * been in use.  At every new connection and once a second. */
static void sweep(void)
{
    for (int i = 0; i < METRICS_SLOTS; i++) {
        struct metrics_slot *sl = &ms.slots[i];
        bufferevent_data_cb r, w;
        bufferevent_event_cb e;
        void *arg;
        if (!sl->bev)
            continue;
        bufferevent_getcb(sl->bev, &r, &w, &e, &arg);
        if (r || w || e) {
            if (!sl->closing && elapsed(&sl->start) >= METRICS_TIMEOUT)
                close_slot(sl);
            continue;
        }
        bufferevent_decref(sl->bev);    /* the last reference: closes the socket */
        if (!sl->closing)
            ms.live--;
        *sl = (struct metrics_slot){0};
        ms.used--;
    }
    if (ms.paused && ms.used < METRICS_SLOTS)
        pause_listeners(false);
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what; (void)arg;
    sweep();
}

/* evhttp's bufferevent for a new connection: a socket's, of which we keep
 * a reference so that sweep() sees when evhttp is done with it.  Its input
 * is bounded (evhttp takes headers of METRICS_MAX_HEADERS and no body).
 * At the cap, the oldest connection makes room. */
static struct bufferevent *http_conn_new(struct event_base *base, void *arg)
{
    (void)arg;
    sweep();
    if (ms.live >= METRICS_MAX_CONNS) {
        struct metrics_slot *oldest = NULL;
        for (int i = 0; i < METRICS_SLOTS; i++) {
            struct metrics_slot *sl = &ms.slots[i];
            if (sl->bev && !sl->closing &&
                (!oldest || elapsed(&sl->start) > elapsed(&oldest->start)))
                oldest = sl;
        }
        if (oldest)
            close_slot(oldest);
    }
    int slot = 0;
    while (slot < METRICS_SLOTS && ms.slots[slot].bev)
        slot++;
    if (slot == METRICS_SLOTS)
        return NULL;                    /* not reached: the listeners are off when full */
    struct bufferevent *b = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!b)
        return NULL;
    bufferevent_setwatermark(b, EV_READ, 0, 2 * METRICS_MAX_HEADERS);
    bufferevent_incref(b);
    ms.slots[slot].bev = b;
    ms.slots[slot].closing = false;
    clock_gettime(CLOCK_MONOTONIC, &ms.slots[slot].start);
    ms.live++;
    if (++ms.used >= METRICS_SLOTS && !ms.paused)
        pause_listeners(true);
    return b;
}

/* A whole request came on req's connection: its deadline starts again,
 * for the reply and the next request. */
static void request_done(struct evhttp_request *req)
{
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    struct bufferevent *b = c ? evhttp_connection_get_bufferevent(c) : NULL;
    for (int i = 0; b && i < METRICS_SLOTS; i++)
        if (ms.slots[i].bev == b)
            clock_gettime(CLOCK_MONOTONIC, &ms.slots[i].start);
}

static void reply(struct evhttp_request *req, int code, const char *status, const char *type,
                  const void *body, size_t len)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", type);
    evbuffer_add(b, body, len);
    evhttp_send_reply(req, code, status, b);
    evbuffer_free(b);
}

/* Whether the request's "Authorization: Basic ..." names an entry of
 * ms.auth (true when there is none to check). */
static bool authorized(struct evhttp_request *req)
{
    if (!ms.auth)
        return true;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    unsigned char cred[METRICS_CREDENTIALS_MAX + 1];
    size_t n = 0;
    if (h && strncasecmp(h, "Basic ", 6) == 0) {
        h += 6;
        while (*h == ' ')
            h++;
        size_t hl = strlen(h);
        if (hl <= METRICS_CREDENTIALS_MAX * 4 / 3)
            n = kura_base64_decode(h, hl, cred, METRICS_CREDENTIALS_MAX);
    }
    cred[n] = '\0';
    const unsigned char *colon = n ? memchr(cred, ':', n) : NULL;
    if (colon && kura_auth_check(ms.auth, (const char *)cred, (size_t)(colon - cred),
                                 (const char *)colon + 1, n - (size_t)(colon - cred) - 1))
        return true;
    ms.auth_failures++;
    return false;
}

static void on_request(struct evhttp_request *req, void *arg)
{
    (void)arg;
    request_done(req);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    bool metrics = path && strcmp(path, "/metrics") == 0;
    bool health = path && strcmp(path, "/health") == 0;
    /* /health is checked only for what it says, and only when credentials came */
    bool ok = metrics || (health && evhttp_find_header(evhttp_request_get_input_headers(req),
                                                       "Authorization"))
              ? authorized(req) : !ms.auth;
    if (metrics && !ok) {
        static const char no[] = "authentication required\n";
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                          "Basic realm=\"kura\", charset=\"UTF-8\"");
        reply(req, 401, "Unauthorized", "text/plain; charset=utf-8", no, sizeof(no) - 1);
    } else if (metrics) {
        kura_buf out = {0};
        int rc = metrics_render(&ms.src, &out);
        if (rc == 0 && ms.auth) {
            char line[300];
            int n = snprintf(line, sizeof(line), "# HELP kura_metrics_auth_failures_total "
                             "Requests to /metrics and /health refused for their credentials."
                             "\n# TYPE kura_metrics_auth_failures_total counter\n"
                             "kura_metrics_auth_failures_total %llu\n",
                             (unsigned long long)ms.auth_failures);
            rc = kura_buf_append(&out, line, (size_t)n) ? 0 : -1;
        }
        if (rc < 0) {
            kura_buf_free(&out);
            evhttp_send_error(req, 500, "out of memory");
            return;
        }
        reply(req, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", out.data, out.len);
        kura_buf_free(&out);
    } else if (health) {
        char why[1024], body[1100];
        int code = metrics_health(&ms.src, why, sizeof(why));
        int n = snprintf(body, sizeof(body), "%s\n", code == 200 ? "ok" : ok ? why
                                                                    : "unavailable");
        reply(req, code, code == 200 ? "OK" : "Service Unavailable", "text/plain; charset=utf-8",
              body, (size_t)n < sizeof(body) ? (size_t)n : sizeof(body) - 1);
    } else if (path && (strcmp(path, "/primary") == 0 || strcmp(path, "/replica") == 0)) {
        /* for load balancers (HAProxy's httpchk), open as /health is */
        char why[600], body[620];
        int code = ha_adapter_http(ms.srv, path[1] == 'p', why, sizeof(why));
        int n = snprintf(body, sizeof(body), "%s\n", why);
        reply(req, code, code == 200 ? "OK" : "Service Unavailable", "text/plain; charset=utf-8",
              body, (size_t)n < sizeof(body) ? (size_t)n : sizeof(body) - 1);
    } else {
        static const char nf[] = "not found: kurad serves /metrics, /health, /primary and "
                                 "/replica\n";
        reply(req, 404, "Not Found", "text/plain; charset=utf-8", nf, sizeof(nf) - 1);
    }
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what; (void)arg;
    event_base_loopbreak(ms.base);
}

static void *metrics_thread(void *arg)
{
    (void)arg;
    event_base_dispatch(ms.base);
    return NULL;
}

/* -metrics' host and port: HOST, else -host's first address (its port,
 * if it has one, is the memcached port's, not ours).  The forms were
 * checked when the options were read. */
static int metrics_addr(const kura_settings *st, char *host, size_t hlen, int *port)
{
    char why[160], first[256];
    if (kura_netaddr_port_spec(st->metrics, host, hlen, port, why, sizeof(why)) < 0) {
        log_msg(KURA_LOG_ERROR, "-metrics '%s': %s", st->metrics, why);
        return -1;
    }
    if (host[0])
        return 0;
    const char *h = st->host ? st->host : "localhost";
    if (strncmp(h, "notls:", 6) == 0)
        h += 6;
    snprintf(first, sizeof(first), "%.*s", (int)strcspn(h, ","), h);
    int ignored;
    return kura_netaddr_split(first, host, hlen, &ignored, why, sizeof(why));
}

static void teardown(void)
{
    if (ms.http)
        evhttp_free(ms.http);           /* closes its listener and connections */
    for (int i = 0; i < METRICS_SLOTS; i++)
        if (ms.slots[i].bev)
            bufferevent_decref(ms.slots[i].bev);
    memset(ms.slots, 0, sizeof(ms.slots));
    if (ms.sweep_ev)
        event_free(ms.sweep_ev);
    ms.sweep_ev = NULL;
    if (ms.stop_ev)
        event_free(ms.stop_ev);
    if (ms.base)
        event_base_free(ms.base);
    for (int i = 0; i < 2; i++)
        if (ms.stop_fd[i] >= 0)
            close(ms.stop_fd[i]);
    ms.http = NULL;
    ms.stop_ev = NULL;
    ms.base = NULL;
    ms.nlisteners = 0;
    ms.stop_fd[0] = ms.stop_fd[1] = -1;
    ms.live = ms.used = 0;
    ms.paused = false;
}

int metrics_start(kura_server *srv)
{
    const char *spec = srv->settings->metrics;
    char host[256];
    int port;
    if (!spec)
        return 0;
    if (metrics_addr(srv->settings, host, sizeof(host), &port) < 0)
        return -1;
    ms.src = (kura_stats_source){ srv->engine, &srv->info, srv->cmds };
    ms.srv = srv;
    ms.auth = srv->settings->metrics_auth;
    ms.base = event_base_new();
    ms.http = ms.base ? evhttp_new(ms.base) : NULL;
    if (!ms.http || pipe2(ms.stop_fd, O_CLOEXEC | O_NONBLOCK) < 0) {
        log_msg(KURA_LOG_ERROR, "-metrics: cannot set up the HTTP server");
        teardown();
        return -1;
    }
    ms.stop_ev = event_new(ms.base, ms.stop_fd[0], EV_READ, on_stop, NULL);
    ms.sweep_ev = event_new(ms.base, -1, EV_PERSIST, on_sweep, NULL);
    struct timeval one_second = { 1, 0 };
    evhttp_set_allowed_methods(ms.http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_max_headers_size(ms.http, METRICS_MAX_HEADERS);
    evhttp_set_max_body_size(ms.http, 0);
    evhttp_set_timeout(ms.http, METRICS_TIMEOUT);
    evhttp_set_bevcb(ms.http, http_conn_new, NULL);
    evhttp_set_gencb(ms.http, on_request, NULL);
    if (!ms.stop_ev || event_add(ms.stop_ev, NULL) < 0 || !ms.sweep_ev ||
        event_add(ms.sweep_ev, &one_second) < 0) {
        log_msg(KURA_LOG_ERROR, "-metrics: cannot set up the HTTP server");
        teardown();
        return -1;
    }
    int fds[METRICS_LISTENERS];
    int n = listener_bind("metrics: ", host, port, fds, METRICS_LISTENERS);
    for (int i = 0; i < n; i++) {
        struct evhttp_bound_socket *bound =
            listen(fds[i], 64) == 0 ? evhttp_accept_socket_with_handle(ms.http, fds[i]) : NULL;
        if (!bound) {
            log_msg(KURA_LOG_ERROR, "-metrics: cannot listen on %s port %d: %s", host, port,
                    strerror(errno));
            while (i < n)
                close(fds[i++]);
            teardown();
            return -1;
        }
        ms.listeners[ms.nlisteners++] = evhttp_bound_socket_get_listener(bound);
    }
    if (n < 0) {
        teardown();
        return -1;
    }
    if (pthread_create(&ms.thread, NULL, metrics_thread, NULL) != 0) {
        log_msg(KURA_LOG_ERROR, "-metrics: cannot start its thread");
        teardown();
        return -1;
    }
    ms.running = true;
    log_msg(KURA_LOG_INFO, "metrics: /metrics and /health on %s port %d", host, port);
    return 0;
}

void metrics_stop(void)
{
    if (!ms.running)
        return;
    ssize_t w = write(ms.stop_fd[1], "x", 1);
    (void)w;
    pthread_join(ms.thread, NULL);
    ms.running = false;
    teardown();
}

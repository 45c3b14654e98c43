/*
 * metrics.c - the Prometheus endpoint: -metrics [HOST:]PORT serves
 * /metrics (metrics_expo.c's exposition) and /health over HTTP, with
 * libevent's evhttp on a thread and event base of its own, so a slow or
 * hostile scraper never holds up a worker or the listener.
 *
 * Bounded like every endpoint: at most METRICS_MAX_CONNS connections (past
 * that the listener stops accepting until one closes, so the rest wait in
 * the kernel's backlog), request headers of METRICS_MAX_HEADERS bytes, no
 * body, GET and HEAD only, and METRICS_TIMEOUT seconds for a connection to
 * send its request or take its reply.  libevent 2.1's evhttp has no
 * connection limit of its own (evhttp_set_max_connections came in 2.2), so
 * each connection's bufferevent is made here (evhttp_set_bevcb) and kept
 * referenced, and a sweep counts the connections evhttp is done with.
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
#include <unistd.h>

#include "kura/base64.h"
#include "metrics.h"
#include "server.h"

#define METRICS_MAX_CONNS 16
#define METRICS_MAX_HEADERS 8192
#define METRICS_TIMEOUT 10              /* seconds */
#define METRICS_CREDENTIALS_MAX 2048    /* a decoded Authorization header */

static struct {
    kura_stats_source src;
    const kura_auth *auth;              /* NULL: /metrics open */
    uint64_t auth_failures;             /* this thread's */
    struct event_base *base;
    struct evhttp *http;
    struct evconnlistener *listener;
    struct event *stop_ev;
    int stop_fd[2];                     /* the main thread writes: stop */
    pthread_t thread;
    bool running;
    struct bufferevent *conns[METRICS_MAX_CONNS];   /* each connection's, referenced */
    struct event *sweep_ev;             /* once a second: sweep() */
    int live;                           /* connections in conns (this thread only) */
    bool paused;                        /* the listener is off: live reached the cap */
} ms = { .stop_fd = { -1, -1 } };

/* Drops the connections evhttp has freed: a bufferevent it freed has no
 * callbacks left (bufferevent_free clears them) and lives on only by our
 * reference, with its socket, which evhttp shut down for writing.  Then
 * accept again if the cap had stopped accepting.  At every new connection
 * and once a second. */
static void sweep(void)
{
    for (int i = 0; i < METRICS_MAX_CONNS; i++) {
        bufferevent_data_cb r, w;
        bufferevent_event_cb e;
        void *arg;
        if (!ms.conns[i])
            continue;
        bufferevent_getcb(ms.conns[i], &r, &w, &e, &arg);
        if (r || w || e)
            continue;
        bufferevent_decref(ms.conns[i]);   /* the last reference: closes the socket */
        ms.conns[i] = NULL;
        ms.live--;
    }
    if (ms.paused && ms.live < METRICS_MAX_CONNS) {
        evconnlistener_enable(ms.listener);
        ms.paused = false;
    }
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what; (void)arg;
    sweep();
}

/* evhttp's bufferevent for a new connection: a socket's, of which we keep
 * a reference so that sweep() sees when evhttp is done with it.  Its input
 * is bounded (evhttp takes headers of METRICS_MAX_HEADERS and no body). */
static struct bufferevent *http_conn_new(struct event_base *base, void *arg)
{
    (void)arg;
    sweep();
    int slot = 0;
    while (slot < METRICS_MAX_CONNS && ms.conns[slot])
        slot++;
    if (slot == METRICS_MAX_CONNS)
        return NULL;                    /* not reached: the listener is off at the cap */
    struct bufferevent *b = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!b)
        return NULL;
    bufferevent_setwatermark(b, EV_READ, 0, 2 * METRICS_MAX_HEADERS);
    bufferevent_incref(b);
    ms.conns[slot] = b;
    if (++ms.live >= METRICS_MAX_CONNS && !ms.paused) {
        evconnlistener_disable(ms.listener);
        ms.paused = true;
    }
    return b;
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
    } else {
        static const char nf[] = "not found: kurad serves /metrics and /health\n";
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

/* "[HOST:]PORT" ("[::1]:9150" for an IPv6 address); host defaults to
 * def.  0, or -1 with the reason logged. */
static int parse_addr(const char *spec, const char *def, char *host, size_t hlen, int *port)
{
    const char *p = strrchr(spec, ':');
    const char *h = def;
    size_t n = strlen(def);
    if (p) {
        h = spec;
        n = (size_t)(p - spec);
        if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
            h++;
            n -= 2;
        }
        p++;
    } else {
        p = spec;
    }
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno || end == p || *end || v < 1 || v > 65535 || n == 0 || n >= hlen) {
        log_msg(KURA_LOG_ERROR, "-metrics '%s': not [HOST:]PORT with PORT from 1 to 65535", spec);
        return -1;
    }
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (int)v;
    return 0;
}

static void teardown(void)
{
    if (ms.http)
        evhttp_free(ms.http);           /* closes its listener and connections */
    for (int i = 0; i < METRICS_MAX_CONNS; i++)
        if (ms.conns[i]) {
            bufferevent_decref(ms.conns[i]);
            ms.conns[i] = NULL;
        }
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
    ms.listener = NULL;
    ms.stop_fd[0] = ms.stop_fd[1] = -1;
    ms.live = 0;
    ms.paused = false;
}

int metrics_start(kura_server *srv)
{
    const char *spec = srv->settings->metrics;
    char host[256];
    int port;
    if (!spec)
        return 0;
    if (parse_addr(spec, srv->settings->host ? srv->settings->host : "127.0.0.1", host,
                   sizeof(host), &port) < 0)
        return -1;
    ms.src = (kura_stats_source){ srv->engine, &srv->info, srv->cmds };
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
    struct evhttp_bound_socket *bound =
        evhttp_bind_socket_with_handle(ms.http, strcmp(host, "*") ? host : "0.0.0.0",
                                       (ev_uint16_t)port);
    if (!ms.stop_ev || event_add(ms.stop_ev, NULL) < 0 || !ms.sweep_ev ||
        event_add(ms.sweep_ev, &one_second) < 0 || !bound) {
        log_msg(KURA_LOG_ERROR, "-metrics: cannot listen on %s port %d: %s", host, port,
                strerror(errno));
        teardown();
        return -1;
    }
    ms.listener = evhttp_bound_socket_get_listener(bound);
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

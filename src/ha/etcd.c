/*
 * etcd.c - a client of etcd v3's JSON gateway, for failover (kura/etcd.h
 * says what and why).  One request is one connection: connect (bounded),
 * TLS for https://, "POST /v3/... HTTP/1.0", the reply read until etcd
 * closes, all within the client's deadline and ETCD_REPLY_MAX bytes.  The
 * calls build their JSON bodies with keys and values in base64 and read
 * the replies with json.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ha_int.h"
#include "kura/base64.h"
#include "kura/etcd.h"
#include "kura/netaddr.h"
#include "kura/tlsio.h"

struct etcd_endpoint {
    char host[300];
    char port[8];
    bool tls;
};

struct etcd_client {
    struct etcd_endpoint ep[ETCD_ENDPOINTS_MAX];
    int nep, cur;
    char url[340];                      /* the current endpoint, for messages */
    int timeout_ms;
    char user[256], password[256];
    bool auth;
    char token[512];                    /* "": none yet */
    struct ssl_ctx_st *tls_ctx;         /* for https:// endpoints; NULL: none */
    char err[300];
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fail(etcd_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return -1;
}

static void set_url(etcd_client *c)
{
    const struct etcd_endpoint *e = &c->ep[c->cur];
    bool v6 = strchr(e->host, ':') != NULL;
    snprintf(c->url, sizeof(c->url), "%s://%s%s%s:%s", e->tls ? "https" : "http", v6 ? "[" : "",
             e->host, v6 ? "]" : "", e->port);
}

/* "http[s]://HOST:PORT" (a path after it ignored) into e. */
static int parse_url(const char *u, size_t n, struct etcd_endpoint *e)
{
    char buf[300];
    if (n >= sizeof(buf))
        return -1;
    memcpy(buf, u, n);
    buf[n] = '\0';
    char *p = buf;
    if (strncmp(p, "http://", 7) == 0) {
        p += 7;
        e->tls = false;
    } else if (strncmp(p, "https://", 8) == 0) {
        p += 8;
        e->tls = true;
    } else {
        return -1;
    }
    p[strcspn(p, "/")] = '\0';
    char *colon;
    if (*p == '[') {
        char *close = strchr(p, ']');
        if (!close)
            return -1;
        *close = '\0';
        snprintf(e->host, sizeof(e->host), "%s", p + 1);
        colon = close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = strrchr(p, ':');
        if (colon)
            *colon = '\0';
        snprintf(e->host, sizeof(e->host), "%s", p);
    }
    const char *port = colon ? colon + 1 : "2379";
    if (!e->host[0] || !*port || strlen(port) > 5 || strspn(port, "0123456789") != strlen(port))
        return -1;
    snprintf(e->port, sizeof(e->port), "%s", port);
    return 0;
}

/* Whether s goes into a JSON string as it is. */
static bool json_plain(const char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            return false;
    return true;
}

int etcd_open(const char *urls, const char *user, const char *password, const char *ca_file,
              int timeout_ms, etcd_client **out, char *err, size_t errlen)
{
    *out = NULL;
    etcd_client *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 2000;
    bool any_tls = false;
    for (const char *p = urls; *p;) {
        size_t n = strcspn(p, ",");
        if (c->nep == ETCD_ENDPOINTS_MAX || parse_url(p, n, &c->ep[c->nep]) < 0) {
            snprintf(err, errlen, "bad etcd endpoint '%.*s' (http[s]://HOST:PORT, at most %d)",
                     (int)(n > 200 ? 200 : n), p, ETCD_ENDPOINTS_MAX);
            etcd_close(c);
            return -1;
        }
        any_tls |= c->ep[c->nep++].tls;
        p += n;
        if (*p == ',')
            p++;
    }
    if (!c->nep) {
        snprintf(err, errlen, "no etcd endpoint given");
        etcd_close(c);
        return -1;
    }
    if (user) {
        if (!password || strlen(user) >= sizeof(c->user) ||
            strlen(password) >= sizeof(c->password) || !json_plain(user) ||
            !json_plain(password)) {
            snprintf(err, errlen, "etcd user or password too long, or holding a quote, a "
                     "backslash or a control character");
            etcd_close(c);
            return -1;
        }
        snprintf(c->user, sizeof(c->user), "%s", user);
        snprintf(c->password, sizeof(c->password), "%s", password);
        c->auth = true;
    }
    if (any_tls && !(c->tls_ctx = kura_tls_client_ctx(ca_file, NULL, err, errlen))) {
        etcd_close(c);
        return -1;
    }
    set_url(c);
    *out = c;
    return 0;
}

void etcd_close(etcd_client *c)
{
    if (!c)
        return;
    if (c->tls_ctx)
        kura_tls_ctx_free(c->tls_ctx);
    free(c);
}

const char *etcd_error(const etcd_client *c)
{
    return c->err;
}

const char *etcd_endpoint(const etcd_client *c)
{
    return c->url;
}

static int wait_fd(int fd, short ev, int64_t deadline)
{
    int64_t left = deadline - now_ms();
    if (left <= 0)
        return -1;
    struct pollfd p = { fd, ev, 0 };
    int r = poll(&p, 1, (int)left);
    return r > 0 ? 0 : -1;
}

/* A connected non-blocking socket to the current endpoint, or -1. */
static int dial(etcd_client *c, int64_t deadline)
{
    char why[200];
    int64_t left = deadline - now_ms();
    int fd = left > 0 ? kura_netaddr_connect(c->ep[c->cur].host, c->ep[c->cur].port, (int)left,
                                             why, sizeof(why)) : -1;
    if (fd < 0)
        fail(c, "%s: cannot connect: %s", c->url, left > 0 ? why : "timed out");
    return fd;
}

/* Reads until the peer closes, at most ETCD_REPLY_MAX bytes: the length,
 * or -1. */
static ssize_t read_all(etcd_client *c, int fd, struct ssl_st *ssl, char **buf, int64_t deadline)
{
    size_t cap = 4096, len = 0;
    char *b = malloc(cap + 1);
    if (!b)
        return fail(c, "out of memory");
    for (;;) {
        if (len == cap) {
            if (cap >= ETCD_REPLY_MAX) {
                free(b);
                return fail(c, "%s: a reply over %u bytes", c->url, ETCD_REPLY_MAX);
            }
            cap *= 2;
            char *nb = realloc(b, cap + 1);
            if (!nb) {
                free(b);
                return fail(c, "out of memory");
            }
            b = nb;
        }
        ssize_t r = ssl ? kura_tls_recv(ssl, b + len, cap - len) : recv(fd, b + len, cap - len, 0);
        if (r > 0) {
            len += (size_t)r;
        } else if (r == 0) {
            break;
        } else if (errno == EAGAIN || errno == EINTR) {
            if ((!ssl || !kura_tls_pending(ssl)) && wait_fd(fd, POLLIN, deadline) < 0) {
                free(b);
                return fail(c, "%s: no whole reply within %d ms", c->url, c->timeout_ms);
            }
        } else {
            free(b);
            return fail(c, "%s: %s", c->url, strerror(errno));
        }
    }
    b[len] = '\0';
    *buf = b;
    return (ssize_t)len;
}

int etcd_http_split(const char *raw, size_t n, int *code, size_t *body_off)
{
    int major, minor;
    const char *sep = memmem(raw, n, "\r\n\r\n", 4);
    if (!sep || n < 12 || sscanf(raw, "HTTP/%d.%d %d", &major, &minor, code) != 3 ||
        *code < 100 || *code > 999)
        return -1;
    *body_off = (size_t)(sep + 4 - raw);
    return 0;
}

/* One POST: the status code and the body (in *body, freed by the caller),
 * or -1 (a transport failure: the next endpoint is tried next time). */
static int post(etcd_client *c, const char *path, const char *json, char **body, size_t *blen)
{
    int64_t deadline = now_ms() + c->timeout_ms;
    char head[1200];
    const struct etcd_endpoint *e = &c->ep[c->cur];
    int hn = snprintf(head, sizeof(head),
                      "POST %s HTTP/1.0\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n%s%s%s\r\n", path, e->host, e->port, strlen(json),
                      c->token[0] ? "Authorization: " : "", c->token, c->token[0] ? "\r\n" : "");
    struct ssl_st *ssl = NULL;
    char *reply = NULL;
    int code = -1;
    int fd = dial(c, deadline);
    if (fd < 0)
        goto out;
    if (e->tls) {
        char why[200];
        int64_t left = deadline - now_ms();
        ssl = left > 0 ? kura_tls_connect(c->tls_ctx, fd, e->host, (int)left, why, sizeof(why))
                       : NULL;
        if (!ssl) {
            fail(c, "%s: TLS: %s", c->url, left > 0 ? why : "timed out");
            goto out;
        }
    }
    int64_t left = deadline - now_ms();
    if (left <= 0 || kura_tls_send_all(fd, ssl, head, (size_t)hn, (int)left) < 0 ||
        kura_tls_send_all(fd, ssl, json, strlen(json), (int)(deadline - now_ms() > 0 ?
                                                             deadline - now_ms() : 1)) < 0) {
        fail(c, "%s: cannot send: %s", c->url, strerror(errno));
        goto out;
    }
    ssize_t n = read_all(c, fd, ssl, &reply, deadline);
    if (n < 0)
        goto out;
    size_t off;
    if (etcd_http_split(reply, (size_t)n, &code, &off) < 0) {
        code = -1;
        fail(c, "%s: not an HTTP reply", c->url);
        goto out;
    }
    *blen = (size_t)n - off;
    memmove(reply, reply + off, *blen + 1);
    *body = reply;
    reply = NULL;
out:
    if (ssl)
        kura_tls_close(ssl, true);
    if (fd >= 0)
        close(fd);
    free(reply);
    if (code < 0) {
        c->cur = (c->cur + 1) % c->nep;
        set_url(c);
    }
    return code;
}

static int authenticate(etcd_client *c);

/* POST with authentication: the reply's top object in *top (its body in
 * *body, freed by the caller).  0, or -1 with the reason (etcd's error
 * message for a refusal). */
static int call(etcd_client *c, const char *path, const char *json, char **body, json_span *top)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (c->auth && !c->token[0] && authenticate(c) < 0)
            return -1;
        size_t len = 0;
        *body = NULL;
        int code = post(c, path, json, body, &len);
        if (code < 0)
            return -1;
        if (!json_value(*body, *body + len, top)) {
            free(*body);
            return fail(c, "%s: HTTP %d, not JSON", c->url, code);
        }
        if (code == 200)
            return 0;
        json_span m;
        char msg[200] = "";
        if (json_member(*top, "message", &m) || json_member(*top, "error", &m))
            json_string(m, msg, sizeof(msg));
        free(*body);
        *body = NULL;
        fail(c, "%s: HTTP %d: %s", c->url, code, msg[0] ? msg : "(no message)");
        if (c->auth && attempt == 0 && strstr(msg, "token")) {
            c->token[0] = '\0';         /* expired or revoked: once more with a new one */
            continue;
        }
        return -1;
    }
    return -1;
}

/* The user's token, into c->token (/v3/auth/authenticate). */
static int authenticate(etcd_client *c)
{
    char json[1300], *body;
    json_span top, t;
    /* JSON strings as they are: etcd_open refused quotes, backslashes and
     * control characters in them */
    snprintf(json, sizeof(json), "{\"name\":\"%s\",\"password\":\"%s\"}", c->user, c->password);
    bool was = c->auth;
    c->auth = false;                    /* this call itself carries no token */
    int rc = call(c, "/v3/auth/authenticate", json, &body, &top);
    c->auth = was;
    if (rc < 0)
        return -1;
    if (!json_member(top, "token", &t) || !json_string(t, c->token, sizeof(c->token)) ||
        !c->token[0]) {
        free(body);
        return fail(c, "%s: authentication gave no token", c->url);
    }
    free(body);
    return 0;
}

/* key into base64, NUL-terminated, in a new buffer. */
static char *b64(const char *s, size_t n)
{
    char *o = malloc(4 * ((n + 2) / 3) + 1);
    if (o)
        o[kura_base64_encode((const unsigned char *)s, n, o)] = '\0';
    return o;
}

/* A JSON body built with two base64 strings (%s twice in fmt, in order)
 * and an int64, then called. */
static int call_kv(etcd_client *c, const char *path, const char *fmt, const char *key,
                   const char *value, int64_t num, char **body, json_span *top)
{
    char *k = b64(key, strlen(key)), *v = value ? b64(value, strlen(value)) : NULL;
    int rc = -1;
    if (!k || (value && !v)) {
        fail(c, "out of memory");
        goto out;
    }
    size_t n = strlen(fmt) + strlen(k) * 3 + (v ? strlen(v) : 0) + 64;
    char *json = malloc(n);
    if (!json) {
        fail(c, "out of memory");
        goto out;
    }
    if (v)
        snprintf(json, n, fmt, k, v, num);
    else
        snprintf(json, n, fmt, k, num);
    rc = call(c, path, json, body, top);
    free(json);
out:
    free(k);
    free(v);
    return rc;
}

int etcd_lease_grant(etcd_client *c, int ttl, int64_t *id, int *granted)
{
    char json[64], *body;
    json_span top, v;
    snprintf(json, sizeof(json), "{\"TTL\":%d}", ttl);
    if (call(c, "/v3/lease/grant", json, &body, &top) < 0)
        return -1;
    *id = json_member(top, "ID", &v) ? json_int(v) : 0;
    *granted = json_member(top, "TTL", &v) ? (int)json_int(v) : 0;
    free(body);
    return *id ? 0 : fail(c, "%s: lease grant gave no ID", c->url);
}

int etcd_lease_keepalive(etcd_client *c, int64_t id, int *ttl)
{
    char json[64], *body;
    json_span top, r, v;
    snprintf(json, sizeof(json), "{\"ID\":\"%" PRId64 "\"}", id);
    if (call(c, "/v3/lease/keepalive", json, &body, &top) < 0)
        return -1;
    if (!json_member(top, "result", &r)) {
        free(body);
        return fail(c, "%s: keepalive gave no result", c->url);
    }
    /* a lease etcd no longer has: no TTL (0 is left out) */
    *ttl = json_member(r, "TTL", &v) ? (int)json_int(v) : 0;
    free(body);
    return 0;
}

int etcd_lease_ttl(etcd_client *c, int64_t id, int *ttl)
{
    char json[64], *body;
    json_span top, v;
    snprintf(json, sizeof(json), "{\"ID\":\"%" PRId64 "\"}", id);
    if (call(c, "/v3/lease/timetolive", json, &body, &top) < 0)
        return -1;
    *ttl = json_member(top, "TTL", &v) ? (int)json_int(v) : -1;
    free(body);
    return 0;
}

int etcd_lease_revoke(etcd_client *c, int64_t id)
{
    char json[64], *body;
    json_span top;
    snprintf(json, sizeof(json), "{\"ID\":\"%" PRId64 "\"}", id);
    if (call(c, "/v3/lease/revoke", json, &body, &top) < 0)
        return -1;
    free(body);
    return 0;
}

int etcd_put(etcd_client *c, const char *key, const char *value, int64_t lease)
{
    char *body;
    json_span top;
    if (call_kv(c, "/v3/kv/put", "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%" PRId64 "\"}",
                key, value, lease, &body, &top) < 0)
        return -1;
    free(body);
    return 0;
}

int etcd_create(etcd_client *c, const char *key, const char *value, int64_t lease, bool *won)
{
    char *k = b64(key, strlen(key)), *v = b64(value, strlen(value)), *json = NULL, *body;
    json_span top, s;
    int rc = -1;
    size_t n = (k ? strlen(k) * 2 : 0) + (v ? strlen(v) : 0) + 300;
    if (!k || !v || !(json = malloc(n))) {
        fail(c, "out of memory");
        goto out;
    }
    snprintf(json, n, "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
             "\"create_revision\":\"0\"}],\"success\":[{\"request_put\":{\"key\":\"%s\","
             "\"value\":\"%s\",\"lease\":\"%" PRId64 "\"}}]}", k, k, v, lease);
    if (call(c, "/v3/kv/txn", json, &body, &top) == 0) {
        *won = json_member(top, "succeeded", &s) && json_true(s);
        free(body);
        rc = 0;
    }
out:
    free(k);
    free(v);
    free(json);
    return rc;
}

int etcd_delete(etcd_client *c, const char *key, int64_t mod_rev, bool *deleted)
{
    char *body;
    json_span top, s;
    int rc;
    if (mod_rev) {
        char *k = b64(key, strlen(key)), *json = k ? malloc(2 * strlen(k) + 300) : NULL;
        if (!json) {
            free(k);
            return fail(c, "out of memory");
        }
        snprintf(json, 2 * strlen(k) + 300, "{\"compare\":[{\"key\":\"%s\",\"target\":\"MOD\","
                 "\"result\":\"EQUAL\",\"mod_revision\":\"%" PRId64 "\"}],\"success\":"
                 "[{\"request_delete_range\":{\"key\":\"%s\"}}]}", k, mod_rev, k);
        rc = call(c, "/v3/kv/txn", json, &body, &top);
        free(json);
        free(k);
    } else {
        rc = call_kv(c, "/v3/kv/deleterange", "{\"key\":\"%s\"}", key, NULL, 0, &body, &top);
    }
    if (rc < 0)
        return -1;
    *deleted = mod_rev ? json_member(top, "succeeded", &s) && json_true(s)
                       : json_member(top, "deleted", &s) && json_int(s) > 0;
    free(body);
    return 0;
}

void etcd_kvs_free(etcd_kv *kvs, int n)
{
    for (int i = 0; kvs && i < n; i++) {
        free(kvs[i].key);
        free(kvs[i].value);
    }
    free(kvs);
}

int etcd_range_prefix(etcd_client *c, const char *prefix, etcd_kv **kvs, int *n, int64_t *rev)
{
    size_t pl = strlen(prefix);
    char *end = malloc(pl + 1), *body;
    json_span top;
    *kvs = NULL;
    *n = 0;
    if (!end || !pl) {
        free(end);
        return fail(c, pl ? "out of memory" : "an empty prefix");
    }
    memcpy(end, prefix, pl + 1);
    end[pl - 1]++;                      /* the prefix's range end: its last byte plus one */
    int rc = call_kv(c, "/v3/kv/range", "{\"key\":\"%s\",\"range_end\":\"%s\"}", prefix, end, 0,
                     &body, &top);
    free(end);
    if (rc < 0)
        return -1;
    const char *why;
    rc = etcd_range_decode(top, kvs, n, rev, &why);
    free(body);
    if (rc < 0)
        return fail(c, "%s: %s", c->url, why);
    c->err[0] = '\0';
    return 0;
}

int etcd_range_decode(json_span top, etcd_kv **kvs, int *n, int64_t *rev, const char **why)
{
    json_span arr, kv = { NULL, NULL }, v, hdr;
    etcd_kv *out = NULL;
    int count = 0, cap = 0;
    *kvs = NULL;
    *n = 0;
    *rev = json_member(top, "header", &hdr) && json_member(hdr, "revision", &v) ? json_int(v) : 0;
    bool has = json_member(top, "kvs", &arr);
    while (has && json_next(arr, &kv)) {
        if (count == cap) {
            cap = cap ? cap * 2 : 8;
            etcd_kv *grown = realloc(out, (size_t)cap * sizeof(*out));
            if (!grown) {
                etcd_kvs_free(out, count);
                *why = "out of memory";
                return -1;
            }
            out = grown;
        }
        etcd_kv *e = &out[count++];
        size_t kl;
        memset(e, 0, sizeof(*e));
        e->key = json_member(kv, "key", &v) ? json_base64(v, &kl) : NULL;
        e->value = json_member(kv, "value", &v) ? json_base64(v, &e->value_len) : calloc(1, 1);
        e->create_rev = json_member(kv, "create_revision", &v) ? json_int(v) : 0;
        e->mod_rev = json_member(kv, "mod_revision", &v) ? json_int(v) : 0;
        e->lease = json_member(kv, "lease", &v) ? json_int(v) : 0;
        if (!e->key || !e->value) {
            etcd_kvs_free(out, count);
            *why = "a key or value that does not decode";
            return -1;
        }
    }
    *kvs = out;
    *n = count;
    return 0;
}


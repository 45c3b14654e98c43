/*
 * kt_rest.c - Kyoto Tycoon's RESTful interface: GET, HEAD, PUT and DELETE
 * of /KEY (URL-encoded; kt.c decoded it and checked a /DB/ prefix), with
 * ktserver's status codes and headers.
 *
 *   GET     200 and the value (X-Kt-Xt: the expiry as an RFC 1123 date,
 *           when there is one); 404 no record
 *   HEAD    the same without a body (Content-Length: the value's size)
 *   PUT     201 stored (Location: the URL); X-Kt-Mode: add or replace
 *           make it conditional (450 when the record is there / is not);
 *           X-Kt-Xt: an absolute expiry (seconds since the epoch, or a
 *           date, as ktserver's strmktime reads it)
 *   DELETE  204 removed; 404 no record
 *   other   501
 * A failure carries X-Kt-Error: "DB: code: name: message".
 */
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>

#include "kt_int.h"

typedef struct got {
    kura_buf *body;
    int64_t exptime;
    uint64_t vlen;
    bool head;
} got;

static int take_value(void *arg, const kura_item *it)
{
    got *g = arg;
    g->exptime = it->exptime;
    g->vlen = it->vlen;
    g->body->len = 0;
    if (g->head)
        return 0;
    return kura_buf_append(g->body, it->val, it->vlen) ? 0 : KURA_ENOMEM;
}

static void rest_get(kt_req *r, const char *key, size_t klen)
{
    kura_session *s = r->s;
    got g = { &r->st->reply, 0, 0, r->h.method == KT_HEAD };
    int rc = proto_key_ok(klen, KT_KEY_MAX(r->s))
                 ? engine_get(s->engine, s->stats, key, klen, NULL, take_value, &g, NULL)
                 : KURA_NOTFOUND;
    char h[256];
    if (rc != KURA_OK) {
        snprintf(h, sizeof(h), "%sX-Kt-Error: %s\r\n",
                 r->h.method == KT_HEAD ? "Content-Length: 0\r\n" : "", kt_db_error(rc));
        kt_respond(r, rc == KURA_NOTFOUND ? 404 : 500, h, NULL, 0);
        return;
    }
    int n = 0;
    h[0] = '\0';
    if (r->h.method == KT_HEAD)
        n = snprintf(h, sizeof(h), "Content-Length: %llu\r\n", (unsigned long long)g.vlen);
    if (g.exptime) {
        char d[48];
        kt_date(g.exptime, d);
        snprintf(h + n, sizeof(h) - (size_t)n, "X-Kt-Xt: %s\r\n", d);
    }
    kt_respond(r, 200, h, g.body->data, g.head ? 0 : g.body->len);
}

/* ktserver's strmktime: decimal seconds (a trailing s, m, h or d scales
 * them), 0x hexadecimal, or a date (RFC 1123, or W3CDTF in UTC);
 * INT64_MIN when it is none of these. */
static int64_t parse_time(kt_span v)
{
    char buf[64];
    if (!v.p || v.n == 0 || v.n >= sizeof(buf))
        return INT64_MIN;
    memcpy(buf, v.p, v.n);
    buf[v.n] = '\0';
    char *end;
    if (buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X')) {
        long long x = strtoll(buf + 2, &end, 16);
        return *end ? INT64_MIN : x;
    }
    if ((buf[0] >= '0' && buf[0] <= '9') || buf[0] == '-') {
        long long x = strtoll(buf, &end, 10);
        int64_t mul = *end == 's' ? 1 : *end == 'm' ? 60 : *end == 'h' ? 3600
                      : *end == 'd' ? 86400 : *end == '\0' ? 1 : 0;
        if (mul == 0 || (*end && end[1]))
            return INT64_MIN;
        return x > INT64_MAX / mul || x < INT64_MIN / mul ? INT64_MIN : x * mul;
    }
    static const char *const fmts[] = { "%a, %d %b %Y %H:%M:%S GMT", "%Y-%m-%dT%H:%M:%SZ",
                                        "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d" };
    for (size_t i = 0; i < sizeof(fmts) / sizeof(*fmts); i++) {
        struct tm tm = { 0 };
        char *e = strptime(buf, fmts[i], &tm);
        if (e && *e == '\0')
            return (int64_t)timegm(&tm);
    }
    return INT64_MIN;
}

static void rest_put(kt_req *r, const char *key, size_t klen)
{
    kura_session *s = r->s;
    int cmd = KURA_CMD_SET;
    if (r->h.mode.p && r->h.mode.n == 3 && strncasecmp(r->h.mode.p, "add", 3) == 0)
        cmd = KURA_CMD_ADD;
    else if (r->h.mode.p && r->h.mode.n == 7 && strncasecmp(r->h.mode.p, "replace", 7) == 0)
        cmd = KURA_CMD_REPLACE;
    int64_t xt = parse_time(r->h.xt);
    xt = xt > 0 && xt < ((int64_t)1 << 40) - 1 ? -xt : INT64_MAX;
    kura_item it = { .key = key, .klen = klen, .val = r->body, .vlen = r->blen,
                     .exptime = kt_exptime(s->engine, xt) };
    int rc;
    if (!proto_key_ok(klen, KT_KEY_MAX(r->s)))
        rc = KURA_EINVAL;
    else if (!engine_item_fits(s->engine, klen, r->blen, 0))
        rc = KURA_ETOOBIG;
    else {
        s->dirty = true;
        KURA_STAT_INC(s->stats, cmd_set);
        rc = engine_store(s->engine, s->stats, cmd, &it, NULL, NULL);
    }
    char h[512];
    if (rc == KURA_STORED) {
        /* ktserver's own name: "localhost", and its port unless 80 */
        char port[16] = "";
        int kp = s->server->kt_port;
        if (kp > 0 && kp != 80)
            snprintf(port, sizeof(port), ":%d", kp);
        snprintf(h, sizeof(h), "Location: http://localhost%s%.*s\r\n", port,
                 (int)(r->h.path.n < 400 ? r->h.path.n : 400), r->h.path.p);
        kt_respond(r, 201, h, NULL, 0);
        return;
    }
    int code = 500;
    if (rc == KURA_NOT_STORED) {
        rc = cmd == KURA_CMD_ADD ? KURA_EXISTS : KURA_NOTFOUND;
        code = 450;
    }
    snprintf(h, sizeof(h), "X-Kt-Error: %s\r\n", kt_db_error(rc));
    kt_respond(r, code, h, NULL, 0);
}

static void rest_delete(kt_req *r, const char *key, size_t klen)
{
    kura_session *s = r->s;
    int rc = KURA_NOTFOUND;
    if (proto_key_ok(klen, KT_KEY_MAX(r->s))) {
        s->dirty = true;
        rc = engine_delete(s->engine, s->stats, key, klen, NULL);
    }
    if (rc == KURA_OK) {
        kt_respond(r, 204, NULL, NULL, 0);
        return;
    }
    char h[256];
    snprintf(h, sizeof(h), "X-Kt-Error: %s\r\n", kt_db_error(rc));
    kt_respond(r, rc == KURA_NOTFOUND ? 404 : 500, h, NULL, 0);
}

void kt_rest(kt_req *r, const char *key, size_t klen)
{
    switch (r->h.method) {
    case KT_GET: case KT_HEAD:
        rest_get(r, key, klen);
        break;
    case KT_PUT:
        rest_put(r, key, klen);
        break;
    case KT_DELETE:
        rest_delete(r, key, klen);
        break;
    default:
        kt_respond(r, 501, NULL, NULL, 0);
        break;
    }
}

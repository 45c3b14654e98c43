/*
 * kt.c - Kyoto Tycoon's protocols on the -kt listener: the session, the
 * framing of HTTP requests and binary ones, routing, and HTTP replies.
 *
 * Every connection accepted on -kt speaks it (proto.c: the listener, not
 * a first byte, decides).  As ktserver does, each request's first byte
 * says what it is: 0 or 0x80 and above a binary request (kt_bin.c), any
 * other an HTTP/1.x request (kt_http.c decodes its head).  Requests are
 * pipelined: every complete one in the input is answered in order, into
 * one output, until the session's share of a turn is done
 * (session_turn_over), as the memcached protocols do.
 *
 * An HTTP request is wholly buffered before it is handled (its head, at
 * most KT_HEAD_MAX, and its body, at most KT_BODY_MAX, or -I plus 64 KiB
 * for a PUT): a larger body is answered 413 and the connection closed, as
 * ktserver answers one past 256 MiB.  A request that is not complete
 * KT_REQ_DEADLINE_MS after its first byte arrived is answered 408 and the
 * connection closed (a client dripping bytes holds nothing for long);
 * the connection layer closes a silent one (conn.c: the same deadline as
 * its idle timeout on this listener, unless -tout is shorter).
 *
 * With -Y (memcached's ASCII authentication) an HTTP request must carry
 * the file's user and password as HTTP Basic credentials
 * ("Authorization: Basic base64(user:password)"), else it is answered
 * 401; binary requests have no way to carry them and close the
 * connection.  Kyoto Tycoon's own clients send no credentials, so with -Y
 * only clients that can add a header (curl, most HTTP libraries) are
 * served.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kura/base64.h"
#include "kura/thread.h"
#include "kt_int.h"

/* ---- replies ------------------------------------------------------------------------------- */

const char *kt_status_name(int code)
{
    switch (code) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 413: return "Request Entity Too Large";
    case 414: return "Request-URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 450: return "Logical Inconsistency";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Unknown Status";
    }
}

void kt_date(int64_t t, char *buf)
{
    static const char *const wd[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char *const mon[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm)) {
        snprintf(buf, 48, "Thu, 01 Jan 1970 00:00:00 GMT");
        return;
    }
    snprintf(buf, 48, "%s, %02d %s %04d %02d:%02d:%02d GMT", wd[tm.tm_wday], tm.tm_mday,
             mon[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

void kt_respond(kt_req *r, int code, const char *headers, const void *body, size_t blen)
{
    kura_session *s = r->s;
    char head[512], date[48];
    kt_date(engine_now(s->engine), date);
    bool closing = s->close || !r->h.keep;
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nServer: KyotoTycoon/" KT_VERSION " (kura/" KURA_VERSION
                     ")\r\nDate: %s\r\n%s",
                     code, kt_status_name(code), date, closing ? "Connection: close\r\n" : "");
    bool with_body = r->h.method != KT_HEAD;
    if (with_body)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "Content-Length: %zu\r\n", blen);
    size_t hl = headers ? strlen(headers) : 0;
    kura_buf *out = r->out;
    if (!kura_buf_reserve(out, (size_t)n + hl + 2 + (with_body ? blen : 0))) {
        s->close = true;
        return;
    }
    kura_buf_append(out, head, (size_t)n);
    kura_buf_append(out, headers, hl);
    kura_buf_append(out, "\r\n", 2);
    if (with_body)
        kura_buf_append(out, body, blen);
    if (closing)
        s->close = true;
}

void kt_fail(kt_req *r, int code, const char *msg)
{
    char body[256];
    int n = snprintf(body, sizeof(body), "%d %s (%s)\n", code, kt_status_name(code),
                     msg ? msg : "error");
    r->s->close = true;
    r->h.keep = false;
    if (r->h.method == KT_HEAD)
        r->h.method = KT_GET;           /* an error's body goes out whatever the method */
    kt_respond(r, code, "Content-Type: text/plain\r\n", body, (size_t)n);
}

int64_t kt_exptime(kura_engine *e, int64_t xt)
{
    if (xt == INT64_MAX)
        return 0;                       /* never */
    int64_t now = engine_now(e);
    int64_t abs = xt < 0 ? (xt == INT64_MIN ? INT64_MAX : -xt)
                         : (xt > INT64_MAX - now ? INT64_MAX : now + xt);
    if (abs >= ((int64_t)1 << 40) - 1)
        return 0;                       /* past Kyoto Tycoon's XTMAX: never */
    if (abs <= now || abs <= 60 * 60 * 24 * 30)
        return -1;                      /* expired at once */
    return abs;                         /* absolute: past 30 days, as memcached reads it */
}

const char *kt_db_error(int rc)
{
    switch (rc) {
    case KURA_NOTFOUND: return "DB: 7: no record: no record";
    case KURA_EXISTS: return "DB: 6: record duplication: record duplication";
    case KURA_ETOOBIG: return "DB: 2: invalid operation: the record is larger than -I";
    case KURA_EREPLICA: return "DB: 4: no permission: this server is a read-only replica";
    case KURA_EINVAL: return "DB: 2: invalid operation: the key is longer than -kmax";
    default: return "DB: 9: system error: the store failed (see the server's log)";
    }
}

/* ---- requests --------------------------------------------------------------------------------- */

/* -Y: the request's Basic credentials match an entry. */
static bool authorized(kt_req *r)
{
    const kura_auth *a = r->s->server->auth;
    if (!a)
        return true;
    kt_span v = r->h.auth;
    if (!v.p || v.n < 6 || strncasecmp(v.p, "Basic ", 6) != 0 || v.n - 6 > 1024)
        return false;
    unsigned char dec[800];
    size_t n = kura_base64_decode(v.p + 6, v.n - 6, dec, sizeof(dec));
    const unsigned char *colon = n ? memchr(dec, ':', n) : NULL;
    if (!colon)
        return false;
    size_t ul = (size_t)(colon - dec);
    return kura_auth_check(a, (const char *)dec, ul, (const char *)colon + 1, n - ul - 1);
}

/* Copies the query and the body into st->body and parses them into
 * st->in; false (answered) when they cannot be kept. */
static bool rpc_params(kt_req *r)
{
    kt_state *st = r->st;
    st->body.len = 0;
    st->in.n = 0;
    bool tsv, form;
    int enc = kt_content_enc(r->h.ctype, &tsv, &form);
    size_t bl = tsv || form ? r->blen : 0;
    if (!kura_buf_reserve(&st->body, r->h.query.n + bl + 1)) {
        r->s->close = true;
        return false;
    }
    kura_buf_append(&st->body, r->h.query.p, r->h.query.n);
    kura_buf_append(&st->body, r->body, bl);
    char *q = st->body.data, *b = q + r->h.query.n;
    bool ok = kt_form_parse(q, r->h.query.n, &st->in, KT_BODY_MAX / 2);
    if (ok && form)
        ok = kt_form_parse(b, bl, &st->in, KT_BODY_MAX / 2);
    else if (ok && tsv)
        ok = kt_tsv_parse(b, bl, enc, &st->in, KT_BODY_MAX / 2);
    if (!ok) {
        kt_fail(r, 500, "out of memory");
        return false;
    }
    kt_params_finish(&st->in);
    return true;
}

/* The database a REST path or DB= names: nothing, "0" or this server's
 * database name (its path as given, or the file's name). */
static bool our_db(kura_session *s, const char *p, size_t n)
{
    if (n == 0 || (n == 1 && p[0] == '0'))
        return true;
    const char *db = s->server->dbname;
    if (!db)
        return false;
    const char *base = strrchr(db, '/');
    base = base ? base + 1 : db;
    return (strlen(db) == n && memcmp(db, p, n) == 0) ||
           (strlen(base) == n && memcmp(base, p, n) == 0);
}

bool kt_our_db(kura_session *s, kt_span db)
{
    return !db.p || our_db(s, db.p, db.n);
}

/* A REST request: /[DB/]KEY. */
static void route_rest(kt_req *r)
{
    kt_state *st = r->st;
    const char *p = r->h.path.p;
    size_t n = r->h.path.n;
    if (n && *p == '/') {
        p++;
        n--;
    }
    st->body.len = 0;
    if (!kura_buf_reserve(&st->body, n + 1)) {
        r->s->close = true;
        return;
    }
    const char *slash = memchr(p, '/', n);
    if (slash) {
        char *db = st->body.data;
        size_t dn = (size_t)(slash - p);
        memcpy(db, p, dn);
        dn = kt_decode(db, dn, 'U');
        if (!our_db(r->s, db, dn)) {
            kt_respond(r, 400, NULL, "no such database\n", 17);
            return;
        }
        n -= (size_t)(slash + 1 - p);
        p = slash + 1;
        if (n && *p == '/') {
            p++;
            n--;
        }
    }
    char *key = st->body.data;
    memcpy(key, p, n);
    n = kt_decode(key, n, 'U');
    kt_rest(r, key, n);
}

/* Runs a complete HTTP request; false when it paused (run again later). */
static bool route(kt_req *r)
{
    if (!authorized(r)) {
        kt_respond(r, 401, "WWW-Authenticate: Basic realm=\"kura\"\r\n"
                   "Content-Type: text/plain\r\n", "authentication required\n", 24);
        return true;
    }
    kt_span path = r->h.path;
    if (path.n >= 5 && memcmp(path.p, "/rpc/", 5) == 0) {
        if (!rpc_params(r))
            return true;
        char name[64];
        size_t nn = path.n - 5 < sizeof(name) ? path.n - 5 : sizeof(name) - 1;
        memcpy(name, path.p + 5, nn);
        nn = kt_decode(name, nn, 'U');
        name[nn] = '\0';
        return kt_rpc(r, name, nn);
    }
    route_rest(r);
    return true;
}

/* The body a request may carry. */
static size_t body_max(kura_session *s)
{
    size_t item = engine_item_size_max(s->engine) + (64u << 10);
    return item > KT_BODY_MAX ? item : KT_BODY_MAX;
}

bool kt_late(kura_session *s, const kt_state *st)
{
    int64_t limit = KT_REQ_DEADLINE_MS, tout = (int64_t)s->server->idle_timeout * 1000;
    if (tout > 0 && tout < limit)
        limit = tout;
    return st->started_ms && kura_mono_ms() - st->started_ms > limit;
}

/* A request not complete in time: 408, close. */
static size_t too_slow(kt_req *r, size_t avail)
{
    kt_fail(r, 408, "the request was not complete in time");
    return avail;
}

/* -vv: the request line, as the text protocol traces its lines (once,
 * not at each resumed slice of a walk). */
static void trace(kura_session *s, const char *in, size_t head_len)
{
    if (!s->server->trace ||
        atomic_load_explicit(&s->server->verbosity, memory_order_relaxed) < 2)
        return;
    const char *eol = memchr(in, '\n', head_len);
    size_t n = eol ? (size_t)(eol - in) : head_len;
    if (n && in[n - 1] == '\r')
        n--;
    s->server->trace(s->conn_id, in, n);
}

static size_t kt_one(kura_session *s, kt_state *st, char *in, size_t avail, kura_buf *out)
{
    unsigned char c = (unsigned char)in[0];
    if (c == 0 || c >= 0x80) {
        if (s->server->auth) {
            KURA_STAT_INC(s->stats, protocol_closes);
            s->close = true;            /* no credentials in a binary request */
            return avail;
        }
        return kt_bin(s, st, in, avail, out);
    }
    kt_req r = { .s = s, .st = st, .out = out };
    int rc = kt_http_parse(in, avail, body_max(s), &r.h);
    bool late = kt_late(s, st);
    if (rc == KT_HTTP_NEED)
        return late ? too_slow(&r, avail) : 0;
    if (rc == KT_HTTP_DROP) {
        KURA_STAT_INC(s->stats, protocol_closes);
        s->close = true;
        return avail;
    }
    if (rc > 0) {
        kt_fail(&r, rc, r.h.why);
        return avail;
    }
    if (avail - r.h.head_len < r.h.body_len)
        return late ? too_slow(&r, avail) : 0;     /* need stays 0: called at every read,
                                                       so the deadline is checked */
    r.body = in + r.h.head_len;
    r.blen = r.h.body_len;
    if (!st->walk.kind)
        trace(s, in, r.h.head_len);
    if (!route(&r))
        return 0;
    if (!r.h.keep)
        s->close = true;
    return r.h.head_len + r.h.body_len;
}

/* What a connection keeps between requests: a large request's copies
 * (body, reply, output map, parameters) are given back once it is done,
 * so an idle connection holds KT_KEEP bytes of each at most. */
#define KT_KEEP (64u << 10)
static void trim(kt_state *st)
{
    st->body.len = st->reply.len = 0;
    kura_buf_trim(&st->body, KT_KEEP);
    kura_buf_trim(&st->reply, KT_KEEP);
    if (st->out.bytes.cap > KT_KEEP || st->out.cap > KT_KEEP / 32)
        kt_out_free(&st->out);
    if (st->in.cap > KT_KEEP / 32)
        kt_params_free(&st->in);
}

static size_t kt_process(kura_session *s, char *in, size_t len, kura_buf *out)
{
    kt_state *st = s->state;
    size_t pos = 0;
    unsigned turns = 0;
    s->need = 0;
    s->out_full = false;
    while (pos < len && !s->close) {
        if (session_turn_over(s, out, &turns))
            break;
        if (!st->started_ms)
            st->started_ms = kura_mono_ms();
        size_t used = kt_one(s, st, in + pos, len - pos, out);
        if (used == 0)
            break;
        pos += used;
        trim(st);
        st->started_ms = 0;
        st->bin_scan[0] = st->bin_scan[1] = 0;
        st->bin_off = 0;
    }
    return s->close ? len : pos;
}

static void kt_release(void *state)
{
    kt_state *st = state;
    kura_buf_free(&st->body);
    kura_buf_free(&st->reply);
    kt_params_free(&st->in);
    kt_out_free(&st->out);
    kt_cursors_free(st);
    if (st->walk.kind)
        ere_free(st->walk.re);
    engine_list_end(&st->walk.cur);
    kura_buf_free(&st->walk.keys);
}

const kura_proto kura_proto_kt = { "kyototycoon", kt_process, sizeof(kt_state), kt_release };

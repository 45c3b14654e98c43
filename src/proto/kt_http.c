/*
 * kt_http.c - the HTTP request decoder of the -kt listener: a request
 * line and headers in, spans out (kt_int.h, kt_http_parse).
 *
 * It reads what ktserver's HTTP server reads: "METHOD TARGET HTTP/1.x"
 * (1.0 or 1.1, nothing else), then "Name: value" lines up to an empty
 * line, a line ending in \n with or without \r.  Keep-alive is HTTP/1.1's
 * default and 1.0's with "Connection: keep-alive"; "Connection: close"
 * ends it.  A body is read for POST, PUT and an unknown method, of
 * Content-Length bytes.  ktserver also reads a chunked body; kura answers
 * 501 to one (no Kyoto Tycoon client sends it).
 *
 * Bounded: a line of KT_LINE_MAX, a head of KT_HEAD_MAX, KT_HEADERS_MAX
 * headers and the caller's body_max; it scans only the bytes it is given,
 * never allocates, and is called again from the start when more arrive
 * (a head is at most 64 KiB, so the rescan is cheap).
 */
#include <string.h>

#include "kt_int.h"

static bool ieq(const char *p, size_t n, const char *lit)
{
    size_t ln = strlen(lit);
    if (n != ln)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != lit[i])
            return false;
    }
    return true;
}

/* Trims spaces and tabs at both ends. */
static kt_span trim(const char *p, size_t n)
{
    while (n && (*p == ' ' || *p == '\t')) {
        p++;
        n--;
    }
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    return (kt_span){ p, n };
}

/* The request line [p, p+n): method, target, version. */
static int request_line(const char *p, size_t n, kt_http_req *req)
{
    const char *sp1 = memchr(p, ' ', n);
    if (!sp1)
        return KT_HTTP_DROP;
    const char *t = sp1 + 1, *end = p + n;
    const char *sp2 = memchr(t, ' ', (size_t)(end - t));
    if (!sp2 || sp2 == t)
        return KT_HTTP_DROP;
    kt_span m = { p, (size_t)(sp1 - p) }, v = { sp2 + 1, (size_t)(end - sp2 - 1) };
    if (kt_span_is(v, "HTTP/1.1"))
        req->http11 = true;
    else if (!kt_span_is(v, "HTTP/1.0"))
        return KT_HTTP_DROP;
    req->method = kt_span_is(m, "GET")      ? KT_GET
                  : kt_span_is(m, "HEAD")   ? KT_HEAD
                  : kt_span_is(m, "POST")   ? KT_POST
                  : kt_span_is(m, "PUT")    ? KT_PUT
                  : kt_span_is(m, "DELETE") ? KT_DELETE
                                            : KT_OTHER;
    size_t tn = (size_t)(sp2 - t);
    const char *q = memchr(t, '?', tn);
    req->path = (kt_span){ t, q ? (size_t)(q - t) : tn };
    if (q)
        req->query = (kt_span){ q + 1, (size_t)(sp2 - q - 1) };
    if (req->path.n == 0)
        return KT_HTTP_DROP;            /* ktserver: an empty path ends the session */
    req->keep = req->http11;
    return KT_HTTP_DONE;
}

/* A Content-Length: decimal digits only. */
static int content_length(kt_span v, kt_http_req *req)
{
    if (v.n == 0 || v.n > 18) {
        req->why = "invalid Content-Length";
        return 400;
    }
    int64_t n = 0;
    for (size_t i = 0; i < v.n; i++) {
        if (v.p[i] < '0' || v.p[i] > '9') {
            req->why = "invalid Content-Length";
            return 400;
        }
        n = n * 10 + (v.p[i] - '0');
    }
    req->clen = n;
    return 0;
}

/* One header line; 0 or a status. */
static int header(const char *p, size_t n, kt_http_req *req)
{
    const char *colon = memchr(p, ':', n);
    if (!colon)
        return 0;                       /* ktserver skips a line without a colon */
    kt_span name = trim(p, (size_t)(colon - p));
    kt_span v = trim(colon + 1, (size_t)(p + n - colon - 1));
    if (name.n == 0)
        return 0;
    if (++req->nheaders > KT_HEADERS_MAX) {
        req->why = "too many headers";
        return 431;
    }
    if (ieq(name.p, name.n, "connection")) {
        if (ieq(v.p, v.n, "close"))
            req->keep = false;
        else if (ieq(v.p, v.n, "keep-alive"))
            req->keep = true;
    } else if (ieq(name.p, name.n, "content-length")) {
        return content_length(v, req);
    } else if (ieq(name.p, name.n, "transfer-encoding")) {
        req->chunked = ieq(v.p, v.n, "chunked");
    } else if (ieq(name.p, name.n, "content-type")) {
        req->ctype = v;
    } else if (ieq(name.p, name.n, "x-kt-mode")) {
        req->mode = v;
    } else if (ieq(name.p, name.n, "x-kt-xt")) {
        req->xt = v;
    } else if (ieq(name.p, name.n, "authorization")) {
        req->auth = v;
    } else if (ieq(name.p, name.n, "host")) {
        req->host = v;
    }
    return 0;
}

/* The body's length once the head is read; KT_HTTP_DONE or a status. */
static int body_length(size_t body_max, kt_http_req *req)
{
    bool has_body = req->method == KT_POST || req->method == KT_PUT || req->method == KT_OTHER;
    if (!has_body)
        return 0;
    if (req->clen < 0 && req->chunked) {
        req->why = "chunked bodies are not supported";
        return 501;
    }
    if (req->clen > (int64_t)body_max) {
        req->why = "request entity too large";
        return 413;
    }
    req->body_len = req->clen > 0 ? (size_t)req->clen : 0;
    return 0;
}

int kt_http_parse(const char *buf, size_t len, size_t body_max, kt_http_req *req)
{
    memset(req, 0, sizeof(*req));
    req->clen = -1;
    size_t pos = 0;
    bool first = true;
    for (;;) {
        size_t avail = len - pos;
        if (avail > KT_LINE_MAX + 2)
            avail = KT_LINE_MAX + 2;
        const char *nl = memchr(buf + pos, '\n', avail);
        if (!nl) {
            if (avail <= KT_LINE_MAX + 1 && pos + avail == len)
                return pos + avail > KT_HEAD_MAX ? (req->why = "request head too large", 431)
                                                 : KT_HTTP_NEED;
            req->why = first ? "request line too long" : "header line too long";
            return first ? 414 : 431;
        }
        size_t n = (size_t)(nl - (buf + pos));
        const char *line = buf + pos;
        size_t ln = n && line[n - 1] == '\r' ? n - 1 : n;
        pos += n + 1;
        if (pos > KT_HEAD_MAX) {
            req->why = "request head too large";
            return 431;
        }
        if (first) {
            if (ln == 0 && pos <= 2)
                continue;               /* a blank line before a request: skipped */
            int rc = request_line(line, ln, req);
            if (rc != KT_HTTP_DONE)
                return rc;
            first = false;
            continue;
        }
        if (ln == 0)
            break;
        int rc = header(line, ln, req);
        if (rc)
            return rc;
    }
    req->head_len = pos;
    return body_length(body_max, req);
}

/*
 * test_kt.c - the decoders of Kyoto Tycoon's protocols (src/proto/kt_http.c,
 * kt_tsv.c, kt_bin.c) without a network: what each reads, where each asks
 * for more, and each class of bad input.
 *
 *  - kt_http_parse: a whole request's spans and flags; every strict prefix
 *    of it needs more (never a wrong answer from half a request); the
 *    request lines ktserver does not read are dropped; a line, head or
 *    header count past its bound, a bad Content-Length, a body past the
 *    bound and a chunked body are answered with their status;
 *  - kt_tsv_parse / kt_form_parse with each column encoding (B, Q, U, and
 *    a form's %XX and '+'), a name given twice keeping its last value;
 *  - the output map: sorted by name, the last value of a name, and the
 *    encoding ktserver would choose (none, base64, %XX);
 *  - kt_bin_parse: a set_bulk and a get_bulk read whole, every prefix
 *    needing more; a length past KT_DATA_MAX flagged; replication, an
 *    unknown magic and a request past KT_BIN_MAX closing; replication's
 *    header read whole (to be answered 0xBF).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/proto/kt_int.h"
#include "unit.h"

static int parse(const char *s, kt_http_req *r)
{
    return kt_http_parse(s, strlen(s), 1000, r);
}

static void test_http_request(void)
{
    const char *req = "PUT /a%20b?x=1 HTTP/1.1\r\nHost: h:1\r\nContent-Length: 5\r\n"
                      "X-Kt-Mode: add\r\nContent-Type: text/tab-separated-values; colenc=B\r\n"
                      "X-Kt-Xt: 100\r\n\r\nhello";
    kt_http_req r;
    REQUIRE(parse(req, &r) == KT_HTTP_DONE);
    CHECK(r.method == KT_PUT && r.http11 && r.keep);
    CHECK(kt_span_is(r.path, "/a%20b") && kt_span_is(r.query, "x=1"));
    CHECK(kt_span_is(r.host, "h:1") && kt_span_is(r.mode, "add") && kt_span_is(r.xt, "100"));
    CHECK(r.clen == 5 && r.body_len == 5 && r.nheaders == 5);
    CHECK(r.head_len == strlen(req) - 5);
    bool tsv, form;
    CHECK(kt_content_enc(r.ctype, &tsv, &form) == 'B' && tsv && !form);
    /* every strict prefix of the head: more is needed */
    for (size_t n = 0; n < r.head_len; n++)
        CHECK(kt_http_parse(req, n, 1000, &r) == KT_HTTP_NEED);
    REQUIRE(parse("GET /k HTTP/1.0\nConnection: keep-alive\n\n", &r) == KT_HTTP_DONE);
    CHECK(r.method == KT_GET && !r.http11 && r.keep && r.body_len == 0);
    REQUIRE(parse("GET /k HTTP/1.1\r\nConnection: close\r\nContent-Length: 9\r\n\r\n", &r) ==
            KT_HTTP_DONE);
    CHECK(!r.keep && r.body_len == 0);  /* GET carries no body, as ktserver reads it */
    REQUIRE(parse("BREW /k HTTP/1.1\r\nContent-Length: 2\r\n\r\nxx", &r) == KT_HTTP_DONE);
    CHECK(r.method == KT_OTHER && r.body_len == 2);
}

static void test_http_bad(void)
{
    kt_http_req r;
    CHECK(parse("GARBAGE\r\n\r\n", &r) == KT_HTTP_DROP);
    CHECK(parse("GET / HTTP/2\r\n\r\n", &r) == KT_HTTP_DROP);
    CHECK(parse("GET  HTTP/1.1\r\n\r\n", &r) == KT_HTTP_DROP);
    CHECK(parse("GET ?q HTTP/1.1\r\n\r\n", &r) == KT_HTTP_DROP);
    CHECK(parse("PUT /a HTTP/1.1\r\nContent-Length: -1\r\n\r\n", &r) == 400);
    CHECK(parse("PUT /a HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", &r) == 413);
    CHECK(parse("PUT /a HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", &r) == KT_HTTP_DONE);
    CHECK(parse("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &r) == 501);
    size_t big = KT_HEAD_MAX + 100;
    char *b = malloc(2 * big);
    REQUIRE(b);
    memcpy(b, "GET /", 5);
    memset(b + 5, 'a', big - 5);
    b[big] = '\0';
    CHECK(kt_http_parse(b, big, 1000, &r) == 414);          /* no end of line in 8 KiB */
    CHECK(kt_http_parse(b, KT_LINE_MAX, 1000, &r) == KT_HTTP_NEED);
    /* many short headers: past KT_HEADERS_MAX */
    size_t n = (size_t)sprintf(b, "GET /a HTTP/1.1\r\n");
    for (int i = 0; i <= KT_HEADERS_MAX; i++)
        n += (size_t)sprintf(b + n, "X-%d: v\r\n", i);
    n += (size_t)sprintf(b + n, "\r\n");
    CHECK(kt_http_parse(b, n, 1000, &r) == 431);
    /* long header lines filling the head past KT_HEAD_MAX */
    n = (size_t)sprintf(b, "GET /a HTTP/1.1\r\n");
    while (n <= KT_HEAD_MAX) {
        n += (size_t)sprintf(b + n, "X: ");
        memset(b + n, 'v', 8000);
        n += 8000;
        n += (size_t)sprintf(b + n, "\r\n");
    }
    CHECK(kt_http_parse(b, n, 1000, &r) == 431);
    free(b);
}

static void test_tsv(void)
{
    kt_params p = { 0 };
    char body[] = "key\tk1\r\nnoTab\nvalue\tv\tw\nkey\tk2\n\tempty";
    REQUIRE(kt_tsv_parse(body, strlen(body), 0, &p, 100));
    kt_params_finish(&p);
    CHECK(p.n == 3);
    CHECK(kt_span_is(kt_param(&p, "key"), "k2"));          /* the last wins */
    CHECK(kt_span_is(kt_param(&p, "value"), "v\tw"));
    CHECK(kt_span_is(kt_param(&p, ""), "empty"));
    CHECK(kt_param(&p, "nope").p == NULL);
    p.n = 0;
    char b64[] = "a2V5\tAAEC/w==\n";
    REQUIRE(kt_tsv_parse(b64, strlen(b64), 'B', &p, 100));
    kt_params_finish(&p);
    kt_span v = kt_param(&p, "key");
    CHECK(v.n == 4 && memcmp(v.p, "\x00\x01\x02\xff", 4) == 0);
    p.n = 0;
    char qp[] = "k=3Dy\ta=09b=\r\nc=ZZ\tz=\n";     /* =ZZ: Kyoto reads a non-hex digit as 0 */
    REQUIRE(kt_tsv_parse(qp, strlen(qp), 'Q', &p, 100));
    kt_params_finish(&p);
    CHECK(kt_span_is(kt_param(&p, "k=y"), "a\tb"));     /* a trailing '=': a soft break */
    REQUIRE(p.n == 2);                  /* "c\0" (sorted first) and "k=y" */
    CHECK(p.v[0].k.n == 2 && memcmp(p.v[0].k.p, "c\0", 2) == 0 && kt_span_is(p.v[0].v, "z"));
    p.n = 0;
    char url[] = "%6Bey\ta%zz+b c%4\n";
    REQUIRE(kt_tsv_parse(url, strlen(url), 'U', &p, 100));
    kt_params_finish(&p);
    v = kt_param(&p, "key");
    /* as Kyoto's urldecode: %zz is 0, + a space, a space dropped, a cut %4 */
    CHECK(v.n == 5 && memcmp(v.p, "a\0 bc", 5) == 0);
    p.n = 0;
    char form[] = " key=a+b%21&x&;y=1&key2=%";
    REQUIRE(kt_form_parse(form, strlen(form), &p, 100));
    kt_params_finish(&p);
    CHECK(kt_span_is(kt_param(&p, "key"), "a b!") && kt_span_is(kt_param(&p, "x"), ""));
    CHECK(kt_span_is(kt_param(&p, "y"), "1") && kt_span_is(kt_param(&p, "key2"), ""));
    p.n = 0;
    char many[] = "a\t1\nb\t2\nc\t3\n";
    CHECK(!kt_tsv_parse(many, strlen(many), 0, &p, 2));     /* past max */
    kt_params_free(&p);
}

static void test_output(void)
{
    kt_outmap m = { 0 };
    kura_buf body = { 0 };
    int enc;
    kt_out_set(&m, "b", 1, "2", 1);
    kt_out_set(&m, "a", 1, "1", 1);
    kt_out_set(&m, "b", 1, "3", 1);
    REQUIRE(kt_out_write(&m, &body, &enc));
    CHECK(enc == 0 && body.len == 8 && memcmp(body.data, "a\t1\nb\t3\n", 8) == 0);
    kt_out_reset(&m);
    body.len = 0;
    kt_out_set(&m, "v", 1, "a\x01z", 3);       /* a control byte, short: %XX */
    REQUIRE(kt_out_write(&m, &body, &enc));
    CHECK(enc == 'U' && body.len == 8 && memcmp(body.data, "v\ta%01z\n", 8) == 0);
    kt_out_reset(&m);
    body.len = 0;
    char bin[40];
    for (int i = 0; i < 40; i++)
        bin[i] = (char)(0x80 + i);
    kt_out_set(&m, "v", 1, bin, sizeof(bin));  /* mostly high bytes, and \x01: base64 */
    kt_out_set(&m, "w", 1, "\x01", 1);
    REQUIRE(kt_out_write(&m, &body, &enc));
    CHECK(enc == 'B' && body.len > 4 && memcmp(body.data, "dg==\t", 5) == 0);
    kura_buf_free(&body);
    kt_out_free(&m);
}

static size_t put_rec(char *p, const char *k, const char *v, bool set)
{
    size_t kl = strlen(k), vl = v ? strlen(v) : 0, n = 0;
    put_be16((unsigned char *)p, 0);
    put_be32((unsigned char *)p + 2, (uint32_t)kl);
    n = 6;
    if (set) {
        put_be32((unsigned char *)p + 6, (uint32_t)vl);
        put_be64((unsigned char *)p + 10, 100);
        n = 18;
    }
    memcpy(p + n, k, kl);
    memcpy(p + n + kl, v ? v : "", vl);
    return n + kl + vl;
}

static void test_binary(void)
{
    char b[256];
    b[0] = (char)KT_BIN_SET_BULK;
    put_be32((unsigned char *)b + 1, 1);
    put_be32((unsigned char *)b + 5, 2);
    size_t n = 9;
    n += put_rec(b + n, "k1", "value", true);
    n += put_rec(b + n, "k22", "", true);
    kt_bin_req req;
    size_t need, scan[2] = { 0, 0 };
    REQUIRE(kt_bin_parse(b, n, &req, &need, scan) == KT_BIN_DONE);
    CHECK(req.len == n && req.rnum == 2 && req.flags == 1 && !req.bad);
    size_t off = req.recs;
    uint16_t db;
    kt_span k, v;
    int64_t xt;
    kt_bin_record(b, &req, &off, &db, &k, &v, &xt);
    CHECK(db == 0 && kt_span_is(k, "k1") && kt_span_is(v, "value") && xt == 100);
    kt_bin_record(b, &req, &off, &db, &k, &v, &xt);
    CHECK(kt_span_is(k, "k22") && v.n == 0 && off == n);
    for (size_t i = 1; i < n; i++) {
        size_t s2[2] = { 0, 0 };
        CHECK(kt_bin_parse(b, i, &req, &need, s2) == KT_HTTP_NEED && need > i);
    }
    /* get_bulk, resumed: the scan state carries over */
    b[0] = (char)KT_BIN_GET_BULK;
    put_be32((unsigned char *)b + 5, 2);
    n = 9 + put_rec(b + 9, "a", NULL, false);
    size_t mid = n;
    n += put_rec(b + n, "bb", NULL, false);
    scan[0] = scan[1] = 0;
    CHECK(kt_bin_parse(b, mid + 3, &req, &need, scan) == KT_HTTP_NEED);
    CHECK(scan[1] == 1 && scan[0] == mid);
    CHECK(kt_bin_parse(b, n, &req, &need, scan) == KT_BIN_DONE && req.len == n);
    /* a key past KT_DATA_MAX: an error reply */
    put_be32((unsigned char *)b + 5, 1);
    put_be32((unsigned char *)b + 11, KT_DATA_MAX + 1);
    scan[0] = scan[1] = 0;
    CHECK(kt_bin_parse(b, 15, &req, &need, scan) == KT_BIN_DONE && req.bad);
    /* a record past KT_BIN_MAX closes */
    put_be32((unsigned char *)b + 11, KT_BIN_MAX);
    scan[0] = scan[1] = 0;
    CHECK(kt_bin_parse(b, 15, &req, &need, scan) == KT_BIN_CLOSE);
    b[0] = (char)KT_BIN_REPL;           /* read whole, to be answered 0xBF */
    CHECK(kt_bin_parse(b, 14, &req, &need, scan) == KT_HTTP_NEED && need == 15);
    CHECK(kt_bin_parse(b, 20, &req, &need, scan) == KT_BIN_DONE && req.len == 15);
    b[0] = 0;
    CHECK(kt_bin_parse(b, 15, &req, &need, scan) == KT_BIN_CLOSE);
    /* play_script: read whole */
    b[0] = (char)KT_BIN_SCRIPT;
    put_be32((unsigned char *)b + 1, 0);
    put_be32((unsigned char *)b + 5, 3);
    put_be32((unsigned char *)b + 9, 1);
    memcpy(b + 13, "fun", 3);
    put_be32((unsigned char *)b + 16, 1);
    put_be32((unsigned char *)b + 20, 2);
    memcpy(b + 24, "kvv", 3);
    scan[0] = scan[1] = 0;
    CHECK(kt_bin_parse(b, 27, &req, &need, scan) == KT_BIN_DONE && req.len == 27);
    CHECK(kt_span_is(req.name, "fun"));
}

int main(void)
{
    RUN(test_http_request);
    RUN(test_http_bad);
    RUN(test_tsv);
    RUN(test_output);
    RUN(test_binary);
    UNIT_DONE();
}

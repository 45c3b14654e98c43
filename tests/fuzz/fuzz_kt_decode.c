/*
 * fuzz_kt_decode.c - Kyoto Tycoon's decoders alone, with what they return
 * checked (src/proto/kt_int.h: kt_http_parse, kt_tsv_parse, kt_form_parse,
 * kt_decode, kt_content_enc, kt_bin_parse, kt_bin_record).  fuzz_kt.c
 * drives them through a session, where a wrong span shows only if it
 * crashes; here each result is held to its contract, and an input that
 * breaks one aborts (a finding):
 *
 *   HTTP    a whole head: head_len within the input, every span inside the
 *           head, the body within body_max; the head's own bytes parse to
 *           the same request, and one byte fewer asks for more
 *   TSV     every pair's name and value inside the buffer (decoding never
 *   form    lengthens); no more pairs than the bound; after finishing,
 *           names strictly ascending and each found by kt_param
 *   binary  fed as a connection would (the bytes kt_bin_parse asks for,
 *           its scan carried over), the same answer as the whole input at
 *           once; each wanted length past the bytes given; a whole
 *           request's records (set_bulk, remove_bulk, get_bulk) read by
 *           kt_bin_record end where it does
 *
 * Input: a first byte choosing the decoder (its value mod 5: HTTP, TSV,
 * form, kt_decode and kt_content_enc, binary) and its parameter (the
 * byte's upper bits: the body bound, the column encoding, the pair
 * bound), then the bytes the decoder is given, copied to a buffer of
 * their exact size (so that a read past them is AddressSanitizer's).
 */
#include <stdlib.h>
#include <string.h>

#include "../../src/proto/kt_int.h"
#include "fuzz.h"

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool inside(kt_span s, const char *lo, const char *hi)
{
    return !s.p || (s.p >= lo && s.p + s.n <= hi);
}

static void http(const char *b, size_t n, size_t body_max)
{
    kt_http_req r, again;
    int rc = kt_http_parse(b, n, body_max, &r);
    if (rc != KT_HTTP_DONE)
        return;
    const char *end = b + r.head_len;
    check(r.head_len > 0 && r.head_len <= n && r.body_len <= body_max);
    check(r.method >= KT_GET && r.method <= KT_OTHER && r.nheaders <= KT_HEADERS_MAX);
    check(r.path.p && r.path.n > 0);
    kt_span spans[] = { r.path, r.query, r.ctype, r.mode, r.xt, r.auth, r.host };
    for (size_t i = 0; i < sizeof(spans) / sizeof(spans[0]); i++)
        check(inside(spans[i], b, end));
    check(kt_http_parse(b, r.head_len, body_max, &again) == KT_HTTP_DONE);
    check(again.head_len == r.head_len && again.body_len == r.body_len &&
          again.method == r.method && again.keep == r.keep);
    unsigned char *pre = fuzz_dup((const uint8_t *)b, r.head_len - 1);
    check(kt_http_parse((const char *)pre, r.head_len - 1, body_max, &again) == KT_HTTP_NEED);
    free(pre);
}

static void params(char *b, size_t n, bool form, int enc, size_t max)
{
    kt_params p = { 0 };
    bool ok = form ? kt_form_parse(b, n, &p, max) : kt_tsv_parse(b, n, enc, &p, max);
    check(p.n <= max);
    for (size_t i = 0; i < p.n; i++)
        check(inside(p.v[i].k, b, b + n) && inside(p.v[i].v, b, b + n) && p.v[i].k.p);
    if (ok) {
        kt_params_finish(&p);
        for (size_t i = 0; i < p.n; i++) {
            if (i) {
                kt_span a = p.v[i - 1].k, c = p.v[i].k;
                size_t m = a.n < c.n ? a.n : c.n;
                int cmp = m ? memcmp(a.p, c.p, m) : 0;
                check(cmp < 0 || (cmp == 0 && a.n < c.n));
            }
            /* kt_param takes a C string: names holding a NUL are not looked up */
            if (p.v[i].k.n < 64 && !memchr(p.v[i].k.p, 0, p.v[i].k.n)) {
                char name[64];
                memcpy(name, p.v[i].k.p, p.v[i].k.n);
                name[p.v[i].k.n] = 0;
                kt_span v = kt_param(&p, name);
                check(v.p == p.v[i].v.p && v.n == p.v[i].v.n);
            }
        }
    }
    kt_params_free(&p);
}

static void binary(const char *b, size_t n)
{
    kt_bin_req whole, step;
    size_t need_whole = 0, need = 0, scan[2] = { 0, 0 };
    int rc = kt_bin_parse(b, n, &whole, &need_whole, scan);
    if (rc == KT_HTTP_NEED)
        check(need_whole > n);
    /* as a connection brings it: the bytes asked for, the scan kept, each
     * prefix in a buffer of its own size (a read past it is ASan's) */
    size_t have = 1;
    size_t inc_scan[2] = { 0, 0 };
    int inc;
    for (;;) {
        unsigned char *pre = fuzz_dup((const uint8_t *)b, have);
        inc = kt_bin_parse((const char *)pre, have, &step, &need, inc_scan);
        free(pre);
        if (inc != KT_HTTP_NEED)
            break;
        check(need > have);             /* so the loop ends */
        if (have == n)
            break;
        have = need < n ? need : n;
    }
    check(inc == rc);
    if (rc == KT_HTTP_NEED)
        check(need == need_whole);
    if (rc != KT_BIN_DONE || whole.bad)
        return;
    check(step.len == whole.len && whole.len <= n && whole.recs <= whole.len);
    check(inside(whole.name, b, b + whole.len));
    /* play_script's records are not read (it is refused), replication's
     * header has none */
    if (whole.magic != KT_BIN_SET_BULK && whole.magic != KT_BIN_REMOVE_BULK &&
        whole.magic != KT_BIN_GET_BULK)
        return;
    size_t off = whole.recs;
    for (uint32_t i = 0; i < whole.rnum; i++) {
        uint16_t db;
        kt_span key, val;
        int64_t xt;
        kt_bin_record(b, &whole, &off, &db, &key, &val, &xt);
        check(off <= whole.len && inside(key, b, b + off) && inside(val, b, b + off));
    }
    check(off == whole.len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned sel = data[0] % 5, arg = data[0] / 5;
    static const int encs[4] = { 0, 'B', 'Q', 'U' };
    size_t n = size - 1;
    unsigned char *b = fuzz_dup(data + 1, n);
    switch (sel) {
    case 0:
        http((const char *)b, n, (size_t)arg * 97);
        break;
    case 1:
        params((char *)b, n, false, encs[arg % 4], 1 + arg);
        break;
    case 2:
        params((char *)b, n, true, 'F', 1 + arg);
        break;
    case 3: {
        bool tsv, form;
        int enc = kt_content_enc((kt_span){ (const char *)b, n }, &tsv, &form);
        check(enc == 0 || enc == 'B' || enc == 'Q' || enc == 'U');
        check(!(tsv && form) && (tsv || enc == 0));
        check(kt_decode((char *)b, n, encs[arg % 4]) <= n);
        break;
    }
    default:
        binary((const char *)b, n);
        break;
    }
    free(b);
    return 0;
}

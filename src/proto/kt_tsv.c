/*
 * kt_tsv.c - Kyoto Tycoon's RPC parameters: tab-separated values and
 * forms in, a sorted map of decoded spans; a procedure's output map out,
 * as TSV in the column encoding ktserver would choose.
 *
 * Input (kt_tsv_parse, kt_form_parse): a TSV body is lines of
 * "name\tvalue" (a line without a tab is skipped); a form or query string
 * is name=value joined by '&' or ';'.  With "colenc=B|Q|U" in the
 * Content-Type every name and value is base64, quoted-printable or
 * %XX-encoded; a form is %XX with '+' for a space.  Fields are decoded in
 * place (decoding only shortens), so the spans point into the caller's
 * copy of the body.  ktserver keeps the parameters in a std::map, so a
 * name given twice means its last value, and bulk procedures see the
 * names in byte order: kt_params_finish sorts so.
 *
 * Output (kt_outmap): names and values are copied into one buffer, set in
 * any order, written sorted by name.  ktserver encodes the whole body when
 * a field holds a control byte (below 0x20, or 0x7f) or is longer than 255
 * bytes: base64 or %XX, whichever its estimate finds shorter, named in the
 * reply's Content-Type.  kura estimates the same way, so a client sees the
 * same encoding for the same output.
 */
#include <stdarg.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>

#include "kura/base64.h"
#include "kt_int.h"

/* ---- decoding ----------------------------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A hex digit's value; 0 for another byte, as Kyoto Cabinet reads one. */
static int nibble(char c)
{
    int v = hexval(c);
    return v < 0 ? 0 : v;
}

/* Kyoto Cabinet's urldecode: %XX (the two bytes after % read as hex
 * digits, another byte counting 0; cut short at the end: dropped), '+' a
 * space, spaces and control bytes dropped. */
static size_t url_decode(char *p, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '%') {
            if (i + 2 >= n)
                break;
            p[w++] = (char)(nibble(p[i + 1]) << 4 | nibble(p[i + 2]));
            i += 2;
        } else if (c == '+') {
            p[w++] = ' ';
        } else if ((unsigned char)c > ' ' && c != 0x7f) {
            p[w++] = c;
        }
    }
    return w;
}

/* Kyoto Cabinet's quotedecode: =XX as %XX above, '=' before a line end a
 * soft break, control bytes dropped. */
static size_t qp_decode(char *p, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '=') {
            if (i + 1 < n && p[i + 1] == '\n') {
                i += 1;
            } else if (i + 1 < n && p[i + 1] == '\r') {
                i += i + 2 < n && p[i + 2] == '\n' ? 2 : 1;
            } else if (i + 2 < n) {
                p[w++] = (char)(nibble(p[i + 1]) << 4 | nibble(p[i + 2]));
                i += 2;
            } else {
                break;
            }
        } else if ((unsigned char)c >= ' ' && c != 0x7f) {
            p[w++] = c;
        }
    }
    return w;
}

/* Base64 as Kyoto Cabinet's basedecode reads it: characters outside the
 * alphabet are skipped and padding may be missing. */
static size_t b64_decode(char *p, size_t n)
{
    static const char alpha[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t w = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '=')
            break;
        const char *a = p[i] ? memchr(alpha, p[i], 64) : NULL;
        if (!a)
            continue;
        acc = acc << 6 | (uint32_t)(a - alpha);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            p[w++] = (char)(acc >> bits & 0xff);
        }
    }
    return w;
}

size_t kt_decode(char *p, size_t n, int enc)
{
    if (enc) {
        const char *nul = memchr(p, '\0', n);
        if (nul)
            n = (size_t)(nul - p);      /* ktserver decodes C strings: a NUL ends one */
    }
    switch (enc) {
    case 'B':
        return b64_decode(p, n);
    case 'Q':
        return qp_decode(p, n);
    case 'U': case 'F':
        return url_decode(p, n);
    default:
        return n;
    }
}

int kt_content_enc(kt_span ct, bool *tsv, bool *form)
{
    static const char tsvt[] = "text/tab-separated-values", formt[] = "application/x-www-form-urlencoded";
    *tsv = *form = false;
    if (!ct.p)
        return 0;
    if (ct.n >= sizeof(formt) - 1 && strncasecmp(ct.p, formt, sizeof(formt) - 1) == 0) {
        *form = true;
        return 0;
    }
    if (ct.n < sizeof(tsvt) - 1 || strncasecmp(ct.p, tsvt, sizeof(tsvt) - 1) != 0)
        return 0;
    *tsv = true;
    int enc = 0;
    for (size_t i = sizeof(tsvt) - 1; i + 7 <= ct.n; i++) {
        if (strncasecmp(ct.p + i, "colenc=", 7) != 0)
            continue;
        size_t j = i + 7;
        if (j < ct.n && ct.p[j] == '"')
            j++;
        if (j < ct.n) {
            char c = (char)(ct.p[j] & ~0x20);
            if (c == 'B' || c == 'Q' || c == 'U')
                enc = c;
        }
    }
    return enc;
}

/* ---- the parameter map ------------------------------------------------------------------------ */

static bool add_pair(kt_params *out, char *k, size_t kn, char *v, size_t vn, int enc, size_t max)
{
    if (out->n >= max)
        return false;
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 16;
        kt_pair *nv = realloc(out->v, cap * sizeof(*nv));
        if (!nv)
            return false;
        out->v = nv;
        out->cap = cap;
    }
    kn = kt_decode(k, kn, enc);
    vn = kt_decode(v, vn, enc);
    out->v[out->n] = (kt_pair){ { k, kn }, { v, vn }, (uint32_t)out->n };
    out->n++;
    return true;
}

bool kt_tsv_parse(char *buf, size_t len, int enc, kt_params *out, size_t max)
{
    size_t pos = 0;
    while (pos < len) {
        char *line = buf + pos;
        char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + (nl ? 1 : 0);
        if (n && line[n - 1] == '\r')
            n--;
        char *tab = memchr(line, '\t', n);
        if (!tab)
            continue;
        if (!add_pair(out, line, (size_t)(tab - line), tab + 1, (size_t)(line + n - tab - 1), enc,
                      max))
            return false;
    }
    return true;
}

bool kt_form_parse(char *buf, size_t len, kt_params *out, size_t max)
{
    size_t pos = 0;
    while (pos < len) {
        char *f = buf + pos;
        size_t n = 0;
        while (pos + n < len && f[n] != '&' && f[n] != ';')
            n++;
        pos += n + 1;
        while (n && (unsigned char)*f <= ' ' && *f) {
            f++;
            n--;
        }
        if (n == 0)
            continue;
        char *eq = memchr(f, '=', n);
        size_t kn = eq ? (size_t)(eq - f) : n;
        char *v = eq ? eq + 1 : f + n;
        size_t vn = eq ? (size_t)(f + n - eq - 1) : 0;
        if (!add_pair(out, f, kn, v, vn, 'F', max))
            return false;
    }
    return true;
}

static int span_cmp(kt_span a, kt_span b)
{
    size_t n = a.n < b.n ? a.n : b.n;
    int c = n ? memcmp(a.p, b.p, n) : 0;
    return c ? c : (a.n > b.n) - (a.n < b.n);
}

static int pair_cmp(const void *x, const void *y)
{
    const kt_pair *a = x, *b = y;
    int c = span_cmp(a->k, b->k);
    return c ? c : (a->seq > b->seq) - (a->seq < b->seq);
}

void kt_params_finish(kt_params *p)
{
    if (p->n < 2)
        return;
    qsort(p->v, p->n, sizeof(*p->v), pair_cmp);
    size_t w = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (i + 1 < p->n && span_cmp(p->v[i].k, p->v[i + 1].k) == 0)
            continue;                   /* a later one of the same name wins */
        p->v[w++] = p->v[i];
    }
    p->n = w;
}

kt_span kt_param(const kt_params *p, const char *name)
{
    kt_span want = { name, strlen(name) };
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = span_cmp(p->v[mid].k, want);
        if (c == 0)
            return p->v[mid].v;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (kt_span){ NULL, 0 };
}

void kt_params_free(kt_params *p)
{
    free(p->v);
    *p = (kt_params){ 0 };
}

/* ---- the output map ----------------------------------------------------------------------------- */

bool kt_out_set(kt_outmap *m, const char *k, size_t kn, const void *v, size_t vn)
{
    if (m->bytes.len + kn + vn > KT_OUT_MAX) {
        m->full = true;
        return false;
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        struct kt_opair *nv = realloc(m->v, cap * sizeof(*nv));
        if (!nv)
            return false;
        m->v = nv;
        m->cap = cap;
    }
    size_t at = m->bytes.len;
    if (!kura_buf_reserve(&m->bytes, kn + vn + 1))
        return false;
    kura_buf_append(&m->bytes, k, kn);
    kura_buf_append(&m->bytes, v, vn);
    m->v[m->n] = (struct kt_opair){ at, kn, at + kn, vn, (uint32_t)m->n };
    m->n++;
    return true;
}

bool kt_out_setf(kt_outmap *m, const char *k, const char *fmt, ...)
{
    char v[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(v, sizeof(v), fmt, ap);
    va_end(ap);
    if (n < 0)
        return false;
    return kt_out_set(m, k, strlen(k), v, (size_t)n < sizeof(v) ? (size_t)n : sizeof(v) - 1);
}

static _Thread_local const char *sort_base;    /* opair_cmp's buffer (qsort has no context) */

static int opair_cmp(const void *x, const void *y)
{
    const struct kt_opair *a = x, *b = y;
    kt_span ka = { sort_base + a->k, a->kn }, kb = { sort_base + b->k, b->kn };
    int c = span_cmp(ka, kb);
    return c ? c : (a->seq > b->seq) - (a->seq < b->seq);
}

static bool url_plain(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (c && strchr("_-.!~*'()", c));
}

/* ktserver's choice (checkmapenc): 0, 'B' or 'U'. */
static int choose_enc(const kt_outmap *m, const char *b)
{
    bool bin = false;
    size_t blen = 0, ulen = 0;
    for (size_t i = 0; i < m->n; i++) {
        size_t off[2] = { m->v[i].k, m->v[i].v }, len[2] = { m->v[i].kn, m->v[i].vn };
        for (int f = 0; f < 2; f++) {
            size_t n = len[f];
            if (n > 255) {
                n = 255;
                bin = true;
            }
            blen += n * 6 / 4 + 3;
            for (size_t j = 0; j < n; j++) {
                unsigned char c = (unsigned char)b[off[f] + j];
                if (c < ' ' || c == 0x7f)
                    bin = true;
                ulen += url_plain(c) ? 1 : 3;
            }
        }
    }
    return !bin ? 0 : blen < ulen ? 'B' : 'U';
}

static bool put_field(kura_buf *out, const char *p, size_t n, int enc)
{
    if (enc == 'B') {
        if (!kura_buf_reserve(out, 4 * ((n + 2) / 3) + 1))
            return false;
        out->len += kura_base64_encode((const unsigned char *)p, n, out->data + out->len);
        return true;
    }
    if (enc != 'U')
        return kura_buf_append(out, p, n);
    if (!kura_buf_reserve(out, 3 * n + 1))
        return false;
    static const char hex[] = "0123456789abcdef";    /* Kyoto Cabinet's urlencode: lower case */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (url_plain(c)) {
            out->data[out->len++] = (char)c;
        } else {
            out->data[out->len++] = '%';
            out->data[out->len++] = hex[c >> 4];
            out->data[out->len++] = hex[c & 15];
        }
    }
    return true;
}

bool kt_out_write(kt_outmap *m, kura_buf *body, int *enc)
{
    const char *b = m->bytes.data;
    sort_base = b;
    if (m->n > 1)
        qsort(m->v, m->n, sizeof(*m->v), opair_cmp);
    size_t w = 0;
    for (size_t i = 0; i < m->n; i++) {
        kt_span a = { b + m->v[i].k, m->v[i].kn };
        if (i + 1 < m->n && span_cmp(a, (kt_span){ b + m->v[i + 1].k, m->v[i + 1].kn }) == 0)
            continue;                   /* set again later: the last wins */
        m->v[w++] = m->v[i];
    }
    m->n = w;
    *enc = choose_enc(m, b);
    for (size_t i = 0; i < m->n; i++) {
        if (!put_field(body, b + m->v[i].k, m->v[i].kn, *enc) || !kura_buf_append(body, "\t", 1) ||
            !put_field(body, b + m->v[i].v, m->v[i].vn, *enc) || !kura_buf_append(body, "\n", 1))
            return false;
    }
    return true;
}

void kt_out_reset(kt_outmap *m)
{
    m->bytes.len = 0;
    m->n = 0;
    m->full = false;
}

void kt_out_free(kt_outmap *m)
{
    kura_buf_free(&m->bytes);
    free(m->v);
    *m = (kt_outmap){ 0 };
}

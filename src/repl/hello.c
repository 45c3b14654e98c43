/*
 * hello.c - the two first lines of a replication stream: the replica's
 * request and the master's answer (include/kura/repl.h has both forms;
 * docs/replication.md the protocol).
 *
 * Both lines keep their original three-word form and grow by key=value
 * words, so a server of either age can talk to the other: a master answers
 * with key=value words only to a replica that sent some, and each side
 * ignores the keys it does not know.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/repl.h"

/* A decimal number that fills len bytes exactly: 1, or 0. */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    if (len == 0 || len > 20)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

static int parse_hex64(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    if (len == 0 || len > 16)
        return 0;
    for (size_t i = 0; i < len; i++) {
        int c = s[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return 0;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 1;
}

static bool key_is(const char *w, size_t klen, const char *key)
{
    return strlen(key) == klen && memcmp(w, key, klen) == 0;
}

int repl_hello_parse(const char *const *words, const size_t *lens, int n, repl_hello *h,
                     char *err, size_t errlen)
{
    uint64_t sid;
    memset(h, 0, sizeof(*h));
    if (n < 2 || !parse_u64(words[0], lens[0], &h->after) || !parse_u64(words[1], lens[1], &sid)) {
        snprintf(err, errlen, "CLIENT_ERROR bad command line format");
        return KURA_EINVAL;
    }
    if (sid < REPL_SID_MIN || sid > REPL_SID_MAX) {
        snprintf(err, errlen, "CLIENT_ERROR bad server id (%d-%d)", REPL_SID_MIN, REPL_SID_MAX);
        return KURA_EINVAL;
    }
    h->sid = (uint32_t)sid;
    for (int i = 2; i < n; i++) {
        const char *eq = memchr(words[i], '=', lens[i]);
        if (!eq) {
            snprintf(err, errlen, "CLIENT_ERROR bad command line format");
            return KURA_EINVAL;
        }
        size_t klen = (size_t)(eq - words[i]), vlen = lens[i] - klen - 1;
        const char *v = eq + 1;
        uint64_t x;
        int ok = 1;
        h->ext = true;
        if (key_is(words[i], klen, "hid"))
            ok = parse_hex64(v, vlen, &h->hid);
        else if (key_is(words[i], klen, "imax"))
            ok = parse_u64(v, vlen, &h->imax);
        else if (key_is(words[i], klen, "port"))
            ok = parse_u64(v, vlen, &x) && x <= 65535 && (h->port = (uint32_t)x, 1);
        else if (key_is(words[i], klen, "copy"))
            ok = parse_u64(v, vlen, &x) && x <= 1 && (h->copy = x == 1, 1);
        else if (key_is(words[i], klen, "term"))
            ok = parse_u64(v, vlen, &h->term) && (h->has_term = true);
        /* other keys: a newer replica's; ignored */
        if (!ok) {
            snprintf(err, errlen, "CLIENT_ERROR bad command line format");
            return KURA_EINVAL;
        }
    }
    return KURA_OK;
}

/* arg[3]: sid (16 bits) | port << 16 | copy << 32 | ext << 33 | has_term << 34;
 * arg[4]: the term */
void repl_hello_pack(const repl_hello *h, uint64_t arg[5])
{
    arg[0] = h->after;
    arg[1] = h->hid;
    arg[2] = h->imax;
    arg[3] = (uint64_t)h->sid | (uint64_t)h->port << 16 | (uint64_t)h->copy << 32 |
             (uint64_t)h->ext << 33 | (uint64_t)h->has_term << 34;
    arg[4] = h->term;
}

void repl_hello_unpack(const uint64_t arg[5], repl_hello *h)
{
    memset(h, 0, sizeof(*h));
    h->after = arg[0];
    h->hid = arg[1];
    h->imax = arg[2];
    h->sid = (uint32_t)(arg[3] & 0xffff);
    h->port = (uint32_t)(arg[3] >> 16 & 0xffff);
    h->copy = arg[3] >> 32 & 1;
    h->ext = arg[3] >> 33 & 1;
    h->has_term = arg[3] >> 34 & 1;
    h->term = arg[4];
}

int repl_hello_format(char *buf, size_t cap, const repl_hello *h)
{
    char term[32] = "";
    if (h->has_term)
        snprintf(term, sizeof(term), " term=%" PRIu64, h->term);
    int n = snprintf(buf, cap, "repl %" PRIu64 " %u hid=%016" PRIx64 " imax=%" PRIu64
                     " port=%u%s%s\r\n", h->after, h->sid, h->hid, h->imax, h->port,
                     h->copy ? " copy=1" : "", term);
    return n > 0 && (size_t)n < cap ? n : -1;
}

int repl_welcome_format(char *buf, size_t cap, const repl_welcome *w, bool ext)
{
    char term[32] = "";
    if (w->has_term)
        snprintf(term, sizeof(term), " term=%" PRIu64, w->term);
    int n = ext ? snprintf(buf, cap, "%s %" PRIu64 " %u hid=%016" PRIx64 " imax=%" PRIu64
                           " hist=%s%s\r\n", w->boot ? "BOOT" : "REPL", w->pos, w->msid,
                           w->hid, w->imax, w->hist[0] ? w->hist : "-", term)
                : snprintf(buf, cap, "%s %" PRIu64 " %u\r\n", w->boot ? "BOOT" : "REPL", w->pos,
                           w->msid);
    return n > 0 && (size_t)n < cap ? n : -1;
}

int repl_welcome_parse(const char *line, repl_welcome *w)
{
    memset(w, 0, sizeof(*w));
    char kind[8];
    unsigned long long pos;
    unsigned msid;
    int used = 0;
    if (sscanf(line, "%7s %llu %u%n", kind, &pos, &msid, &used) != 3)
        return KURA_EINVAL;
    if (strcmp(kind, "REPL") == 0)
        w->boot = false;
    else if (strcmp(kind, "BOOT") == 0)
        w->boot = true;
    else
        return KURA_EINVAL;
    w->pos = pos;
    w->msid = msid;
    const char *p = line + used;
    while (*p) {
        while (*p == ' ')
            p++;
        size_t len = strcspn(p, " \r\n");
        if (len == 0)
            break;
        const char *eq = memchr(p, '=', len);
        if (eq) {
            size_t klen = (size_t)(eq - p), vlen = len - klen - 1;
            w->ext = true;
            if (key_is(p, klen, "hid") && !parse_hex64(eq + 1, vlen, &w->hid))
                return KURA_EINVAL;
            if (key_is(p, klen, "imax") && !parse_u64(eq + 1, vlen, &w->imax))
                return KURA_EINVAL;
            if (key_is(p, klen, "term")) {
                if (!parse_u64(eq + 1, vlen, &w->term))
                    return KURA_EINVAL;
                w->has_term = true;
            }
            if (key_is(p, klen, "hist")) {
                if (vlen >= sizeof(w->hist))
                    return KURA_EINVAL;
                bool none = vlen == 1 && eq[1] == '-';
                memcpy(w->hist, eq + 1, none ? 0 : vlen);
                w->hist[none ? 0 : vlen] = '\0';
            }
        }
        p += len;
    }
    return KURA_OK;
}

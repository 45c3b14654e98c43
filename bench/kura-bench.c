/*
 * kura-bench - a load generator for the memcached protocols: the text
 * protocol, the meta commands (--proto meta) and the binary protocol
 * (--proto binary).  A multi-get (--multiget N) is N quiet gets fenced by
 * "mn" (meta) or a noop (binary), the pipelined form those clients use;
 * --noreply sends quiet sets and deletes (ms q, setq) fenced the same way.
 * Tokyo Tyrant's binary protocol (--proto tt) sends put (putnr with
 * --noreply, fenced by rnum), get, mget for a multi-get, and out; it has no
 * flags, so --verify checks values alone.
 *
 * Threads each run their own epoll loop over --conns connections.  Every
 * connection keeps up to --pipeline requests in flight: it writes a batch,
 * parses the replies incrementally as they arrive (any split of the byte
 * stream is handled), and refills the pipeline.  Latency is measured per
 * request from the moment it is queued for writing to the moment its reply
 * has been parsed completely, into a log-linear histogram (HdrHistogram-like,
 * about 1.6% resolution).
 *
 * Values are derived from the key and a version, so --verify can check every
 * hit under concurrent sets without any shared state: a value of length L >= 16
 * starts with its version as 16 hex digits, followed by bytes of a fixed
 * printable pattern at an offset given by hash(key, version); L itself and the
 * client flags are functions of hash(key, version) too.  Shorter values use
 * version 0.  A hit is a mismatch unless its length, flags, header and body are
 * exactly what some set of that key would have written.
 *
 * Exit status: 0 success; 1 protocol error, connection failure or closed
 * connection; 2 usage; 3 --verify mismatches; 4 error replies (ERROR,
 * CLIENT_ERROR, SERVER_ERROR, or NOT_STORED/EXISTS/NOT_FOUND to a set).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kura/tlsio.h"

#define VERSION_STR "kura-bench 1.0"
#define KEYBUF 300
#define HDR_LEN 16              /* hex version header in values >= 16 bytes */
#define PAT_SLACK 256           /* pattern offsets are hash % PAT_SLACK */

/* ---------------------------------------------------------------- options */

enum { PAT_SEQ, PAT_UNIFORM, PAT_ZIPF };
enum { OUT_KV, OUT_CSV, OUT_JSON };
enum { PROTO_TEXT, PROTO_META, PROTO_BINARY, PROTO_TT };

static struct {
    const char *host, *port, *sock;
    int threads, conns, depth, multiget;
    uint64_t ops;
    double duration;
    uint64_t keys;
    int pattern;
    double zipf_s;
    const char *prefix;
    size_t vmin, vmax;
    unsigned set_w, get_w, del_w;
    double miss_ratio;
    bool noreply, prefill, verify, quiet, spin;
    int out;
    int proto;
    const char *label;
    uint64_t seed;
    double timeout;
    const char *tls_ca;         /* --tls-ca: TLS (kurad -Z), verified against these CAs */
} opt = {
    .host = "127.0.0.1", .port = "11211", .threads = 1, .conns = 1, .depth = 1,
    .multiget = 1, .keys = 100000, .pattern = PAT_UNIFORM, .zipf_s = 0.99,
    .prefix = "kb:", .vmin = 32, .vmax = 32, .set_w = 1, .get_w = 9,
    .out = OUT_KV, .seed = 1, .timeout = 10.0,
};

static void usage(FILE *f)
{
    fprintf(f,
"usage: kura-bench [options]\n"
"  -h, --host H          server host (default 127.0.0.1); \"unix:/path\" or a\n"
"                        path starting with / means a unix socket\n"
"  -p, --port P          TCP port (default 11211)\n"
"  -s, --socket PATH     unix socket instead of TCP\n"
"  -t, --threads N       client threads, one epoll loop each (default 1)\n"
"  -c, --conns N         connections per thread (default 1)\n"
"  -P, --pipeline N      requests in flight per connection (default 1)\n"
"  -n, --ops N           total requests over all connections (default 100000\n"
"                        unless --duration is given)\n"
"  -d, --duration S      run for S seconds (may be fractional)\n"
"  -k, --keys N          key space size (default 100000)\n"
"      --pattern P       seq | uniform | zipf[:S]  (S in (0,1), default 0.99)\n"
"      --key-prefix S    key prefix (default \"kb:\"); keys are PREFIX<index>\n"
"  -v, --value-size N    value size, or MIN-MAX for sizes spread over a range\n"
"                        (a function of key and version) (default 32)\n"
"  -r, --ratio S:G[:D]   weights of sets, gets (and deletes) (default 1:9)\n"
"      --miss-ratio F    fraction of get keys drawn from never-set keys\n"
"                        (PREFIXm<index>) (default 0)\n"
"  -m, --multiget N      keys per get request (default 1)\n"
"      --proto P         text | meta | binary | tt (default text)\n"
"      --noreply         send sets (and deletes) with noreply\n"
"      --prefill         set every key once before the measured run\n"
"      --verify          check every hit against what a set would have stored\n"
"  -q, --quiet           no progress line and no human-readable line\n"
"      --csv             machine line as CSV (a header line, then the row)\n"
"      --json            machine line as one JSON object\n"
"      --label S         a label echoed in the machine line\n"
"      --seed N          random seed (default 1)\n"
"      --spin            busy-poll (epoll_wait without sleeping): the client's\n"
"                        own wake-up latency leaves the measurement; uses a\n"
"                        full core per thread\n"
"      --timeout S       give up when a connection is silent this long (default 10)\n"
"      --tls-ca FILE     TLS (kurad -Z): the server's certificate must chain to\n"
"                        FILE's CAs and name --host\n"
"  -V, --version         print the version\n"
"      --help            this text\n"
"Exit: 0 ok, 1 protocol/connection error, 2 usage, 3 verify mismatches,\n"
"      4 error replies from the server.\n");
}

static void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kura-bench: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

static uint64_t parse_u64(const char *name, const char *s)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-')
        die(2, "%s: '%s' is not a number", name, s ? s : "");
    double mul = 1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end == 'k' || *end == 'K') { mul = 1e3; end++; }
    else if (*end == 'm' || *end == 'M') { mul = 1e6; end++; }
    if (errno || end == s || *end)
        die(2, "%s: '%s' is not a number", name, s);
    return (uint64_t)(v * mul);
}

static double parse_double(const char *name, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0))
        die(2, "%s: '%s' is not a non-negative number", name, s);
    return v;
}

/* ------------------------------------------------------------- utilities */

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

static inline double rng_01(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

#define MISS_BIT (1ull << 63)

/* Writes the key for index id (MISS_BIT: a never-set key); returns length. */
static inline size_t key_str(char *buf, uint64_t id)
{
    size_t pl = strlen(opt.prefix);
    memcpy(buf, opt.prefix, pl);
    char *p = buf + pl;
    if (id & MISS_BIT)
        *p++ = 'm';
    uint64_t v = id & ~MISS_BIT;
    char tmp[24];
    int n = 0;
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n)
        *p++ = tmp[--n];
    return (size_t)(p - buf);
}

/* --------------------------------------------------------- value scheme */

static char *pattern;           /* vmax + PAT_SLACK printable bytes */

static inline uint64_t kv_hash(uint64_t id, uint64_t version)
{
    return mix64(id * 0x9e3779b97f4a7c15ull ^ mix64(version + 0x1234567));
}

static inline size_t kv_len(uint64_t h)
{
    if (opt.vmax == opt.vmin)
        return opt.vmin;
    return opt.vmin + (size_t)((h >> 8) % (opt.vmax - opt.vmin + 1));
}

static inline uint32_t kv_flags(uint64_t h) { return (uint32_t)(h >> 32); }

/*
 * The value a set of key id writes at version v (40 bits, never 0):
 *  - length L = kv_len(hash(id, v)), flags = high half of hash(id, v);
 *  - L >= 16: a header of 10 hex digits of v and 6 hex digits of L, then
 *    L - 16 bytes of the pattern from offset hash(id, v) % PAT_SLACK;
 *  - L < 16: no header; flags and offset come from hash(id, 0) and the
 *    value is just pattern bytes (so only content and flags are checked).
 * The header makes a value self-describing, so values left by a run with
 * other size options still verify; any truncation, splice or foreign byte
 * does not.
 */
typedef struct vspec {
    uint64_t version;
    size_t len;
    uint32_t flags;
    const char *body;           /* the bytes after the header (if any) */
} vspec;

#define VER_MASK ((1ull << 40) - 1)
static size_t pattern_len;

static void value_spec(uint64_t id, uint64_t version, vspec *vs)
{
    version &= VER_MASK;
    if (!version) version = 1;
    uint64_t h = kv_hash(id, version);
    size_t len = kv_len(h);
    if (len < HDR_LEN) {            /* short: keep the length, version 0 */
        version = 0;
        h = kv_hash(id, 0);
    }
    vs->version = version;
    vs->len = len;
    vs->flags = kv_flags(h);
    vs->body = pattern + (h & (PAT_SLACK - 1));
}

static const char hexd[] = "0123456789abcdef";

static void put_hex(char *p, uint64_t v, int digits)
{
    for (int i = digits - 1; i >= 0; i--, v >>= 4)
        p[i] = hexd[v & 15];
}

static bool get_hex(const char *p, int digits, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < digits; i++) {
        const char *q = memchr(hexd, p[i], 16);
        if (!q)
            return false;
        v = (v << 4) | (uint64_t)(q - hexd);
    }
    *out = v;
    return true;
}

/* Is (data, len, flags) exactly what some set of key id wrote? */
static bool value_ok(uint64_t id, const char *data, size_t len, uint32_t flags)
{
    if (len >= HDR_LEN) {
        uint64_t version, hlen;
        if (!get_hex(data, 10, &version) || !get_hex(data + 10, 6, &hlen) ||
            hlen != len || version == 0)
            return false;
        uint64_t h = kv_hash(id, version);
        if ((opt.proto != PROTO_TT && kv_flags(h) != flags) ||
            len - HDR_LEN + PAT_SLACK > pattern_len)
            return false;
        return memcmp(data + HDR_LEN, pattern + (h & (PAT_SLACK - 1)), len - HDR_LEN) == 0;
    }
    uint64_t h = kv_hash(id, 0);
    return (opt.proto == PROTO_TT || kv_flags(h) == flags) &&
           memcmp(data, pattern + (h & (PAT_SLACK - 1)), len) == 0;
}

/* ------------------------------------------------------------ histogram */

/* Values in nanoseconds.  Below 128 one bucket per value; above, 64
 * sub-buckets per power of two. */
#define H_SUB 64
#define H_MAXBIT 44
#define H_BUCKETS (128 + (H_MAXBIT - 7 + 1) * H_SUB)

typedef struct hist {
    uint64_t count[H_BUCKETS];
    uint64_t n, max, min;
    double sum;
} hist;

static inline int h_index(uint64_t v)
{
    if (v < 128)
        return (int)v;
    int msb = 63 - __builtin_clzll(v);
    if (msb > H_MAXBIT)
        return H_BUCKETS - 1;
    int shift = msb - 6;
    return 128 + (msb - 7) * H_SUB + (int)((v >> shift) - 64);
}

/* The middle of a bucket's range. */
static inline uint64_t h_value(int idx)
{
    if (idx < 128)
        return (uint64_t)idx;
    int msb = (idx - 128) / H_SUB + 7, sub = (idx - 128) % H_SUB;
    int shift = msb - 6;
    return ((uint64_t)(64 + sub) << shift) + ((1ull << shift) >> 1);
}

static inline void h_add(hist *h, uint64_t v)
{
    h->count[h_index(v)]++;
    h->n++;
    h->sum += (double)v;
    if (v > h->max) h->max = v;
    if (h->n == 1 || v < h->min) h->min = v;
}

static void h_merge(hist *a, const hist *b)
{
    for (int i = 0; i < H_BUCKETS; i++)
        a->count[i] += b->count[i];
    if (b->n && (a->n == 0 || b->min < a->min)) a->min = b->min;
    if (b->max > a->max) a->max = b->max;
    a->n += b->n;
    a->sum += b->sum;
}

static uint64_t h_pct(const hist *h, double p)
{
    if (!h->n)
        return 0;
    uint64_t want = (uint64_t)ceil(p / 100.0 * (double)h->n), acc = 0;
    if (want < 1) want = 1;
    for (int i = 0; i < H_BUCKETS; i++) {
        acc += h->count[i];
        if (acc >= want) {
            uint64_t v = h_value(i);
            return v > h->max ? h->max : v < h->min ? h->min : v;
        }
    }
    return h->max;
}

/* --------------------------------------------------------- key choosers */

static _Atomic uint64_t seq_next;
static double z_zetan, z_eta, z_alpha, z_theta, z_half;

static double zeta(uint64_t n, double theta)
{
    double s = 0;
    for (uint64_t i = 1; i <= n; i++)
        s += pow((double)i, -theta);
    return s;
}

static void zipf_init(void)
{
    z_theta = opt.zipf_s;
    z_zetan = zeta(opt.keys, z_theta);
    double zeta2 = zeta(2, z_theta);
    z_alpha = 1.0 / (1.0 - z_theta);
    z_eta = (1 - pow(2.0 / (double)opt.keys, 1 - z_theta)) / (1 - zeta2 / z_zetan);
    z_half = 1.0 + pow(0.5, z_theta);
}

/* Gray et al., "Quickly generating billion-record synthetic databases". */
static inline uint64_t zipf_next(uint64_t *rs)
{
    double u = rng_01(rs), uz = u * z_zetan;
    if (uz < 1.0) return 0;
    if (uz < z_half) return 1 % opt.keys;
    uint64_t r = (uint64_t)((double)opt.keys * pow(z_eta * u - z_eta + 1, z_alpha));
    return r >= opt.keys ? opt.keys - 1 : r;
}

static inline uint64_t pick_key(uint64_t *rs)
{
    switch (opt.pattern) {
    case PAT_SEQ:
        return atomic_fetch_add_explicit(&seq_next, 1, memory_order_relaxed) % opt.keys;
    case PAT_ZIPF:
        return zipf_next(rs);
    default:
        return rng_next(rs) % opt.keys;
    }
}

/* ------------------------------------------------------------- counters */

typedef struct counters {
    uint64_t ops, sets, gets, dels, keys_req, hits, misses, mismatches, errors,
             unexpected_hits, bytes_out, bytes_in;
} counters;

/* ------------------------------------------------------------ connection */

enum { RQ_SET, RQ_GET, RQ_DEL, RQ_SYNC };
enum { PS_LINE, PS_DATA };

typedef struct slot {
    uint8_t type;
    uint16_t nkeys;
    uint64_t t0;
    uint64_t *ids;              /* nkeys key ids (conn-owned storage) */
    uint8_t *seen;              /* per key: reply block received */
} slot;

struct worker;

typedef struct conn {
    struct worker *w;
    int fd;
    struct ssl_st *ssl;         /* --tls-ca; NULL: plaintext */
    int idx;
    bool want_out;              /* EPOLLOUT registered */
    bool done_issuing, synced, closed;
    char *wbuf; size_t wlen, wcap, woff;
    char *rbuf; size_t rlen, rcap, rpos;
    slot *q; int qcap, qhead, qcount;
    uint64_t *idstore; uint8_t *seenstore;
    /* parser state for the head request */
    int ps;
    size_t dlen;                /* PS_DATA: value bytes expected */
    uint32_t dflags;
    int dkey;                   /* PS_DATA: index in head slot's keys, -1 unknown */
    uint64_t last_io;
} conn;

typedef struct worker {
    int id;
    pthread_t th;
    int ep;
    conn *conns;
    int nconns;
    uint64_t rs;                /* rng state */
    uint64_t version;           /* per-thread version counter */
    counters c;
    hist h;                     /* all requests */
    hist hset, hget;
    _Atomic uint64_t live_ops;
    bool prefill;               /* running the prefill phase */
    int fatal;                  /* exit code of a fatal error, 0 none */
    char fatal_msg[256];
} worker;

static _Atomic int64_t ops_left;        /* for --ops */
static _Atomic uint64_t prefill_next;
static uint64_t deadline_ns;            /* for --duration, 0 none */
static _Atomic int stop_all;

static void fatal(worker *w, int code, const char *fmt, ...)
{
    if (w->fatal)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->fatal_msg, sizeof(w->fatal_msg), fmt, ap);
    va_end(ap);
    w->fatal = code;
    atomic_store(&stop_all, 1);
}

static void wreserve(conn *c, size_t need)
{
    if (c->wlen + need <= c->wcap)
        return;
    if (c->woff) {
        memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
        c->wlen -= c->woff;
        c->woff = 0;
        if (c->wlen + need <= c->wcap)
            return;
    }
    size_t n = c->wcap ? c->wcap : 16384;
    while (n < c->wlen + need) n *= 2;
    c->wbuf = realloc(c->wbuf, n);
    if (!c->wbuf) die(1, "out of memory");
    c->wcap = n;
}

static inline void wput(conn *c, const void *p, size_t n)
{
    memcpy(c->wbuf + c->wlen, p, n);
    c->wlen += n;
}

static inline size_t u64str(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    size_t len = (size_t)n;
    while (n) *p++ = tmp[--n];
    return len;
}

/* Takes one op from the budget; false when the run is over. */
static bool take_op(worker *w)
{
    if (atomic_load_explicit(&stop_all, memory_order_relaxed))
        return false;
    if (w->prefill)
        return true;
    if (deadline_ns)
        return now_ns() < deadline_ns;
    return atomic_fetch_sub_explicit(&ops_left, 1, memory_order_relaxed) > 0;
}

static slot *push_slot(conn *c, int type)
{
    slot *s = &c->q[(c->qhead + c->qcount) % c->qcap];
    c->qcount++;
    s->type = (uint8_t)type;
    s->nkeys = 0;
    s->t0 = now_ns();
    return s;
}

/* ---- binary protocol packets ---- */

enum { BIN_SET = 0x01, BIN_DELETE = 0x04, BIN_NOOP = 0x0a, BIN_GETK = 0x0c, BIN_GETKQ = 0x0d,
       BIN_SETQ = 0x11 };

static void put_be(char *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (char)(v & 0xff);
}

static uint64_t get_be(const char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | (unsigned char)p[i];
    return v;
}

/* A request header; the caller appends extras, key and value. */
static void bin_hdr(conn *c, int op, size_t klen, size_t extlen, size_t bodylen)
{
    char h[24] = { (char)0x80, (char)op };
    put_be(h + 2, klen, 2);
    h[4] = (char)extlen;
    put_be(h + 8, bodylen, 4);
    wput(c, h, 24);
}

/* A one-key binary request (get, delete, ...) with no extras. */
static void bin_key_req(conn *c, int op, uint64_t id)
{
    char kb[KEYBUF];
    size_t kl = key_str(kb, id);
    wreserve(c, 24 + kl);
    bin_hdr(c, op, kl, 0, kl);
    wput(c, kb, kl);
}

/* ---- Tokyo Tyrant's protocol ---- */

enum { TT_PUT = 0x10, TT_PUTNR = 0x18, TT_OUT = 0x20, TT_GET = 0x30, TT_MGET = 0x31,
       TT_RNUM = 0x80 };

/* A one-key request [0xC8][cmd][klen][key]; cmd 0: the key alone, as
 * one of mget's. */
static void tt_key_req(conn *c, int cmd, uint64_t id)
{
    char kb[KEYBUF], h[6] = { (char)0xC8, (char)cmd };
    size_t kl = key_str(kb, id);
    wreserve(c, 6 + kl);
    if (cmd) {
        put_be(h + 2, kl, 4);
        wput(c, h, 6);
    } else {
        put_be(h, kl, 4);
        wput(c, h, 4);
    }
    wput(c, kb, kl);
}

static void emit_set(conn *c, uint64_t id, bool noreply)
{
    worker *w = c->w;
    vspec vs;
    value_spec(id, ++w->version, &vs);
    char line[KEYBUF + 96];
    size_t n = 0;
    if (opt.proto == PROTO_TT) {
        char kb[KEYBUF], h[10] = { (char)0xC8, noreply ? TT_PUTNR : TT_PUT };
        size_t kl = key_str(kb, id);
        wreserve(c, 10 + kl + vs.len);
        put_be(h + 2, kl, 4);
        put_be(h + 6, vs.len, 4);
        wput(c, h, 10);
        wput(c, kb, kl);
    } else if (opt.proto == PROTO_BINARY) {
        char kb[KEYBUF], ext[8];
        size_t kl = key_str(kb, id);
        wreserve(c, 24 + 8 + kl + vs.len);
        bin_hdr(c, noreply ? BIN_SETQ : BIN_SET, kl, 8, 8 + kl + vs.len);
        put_be(ext, vs.flags, 4);
        put_be(ext + 4, 0, 4);
        wput(c, ext, 8);
        wput(c, kb, kl);
    } else if (opt.proto == PROTO_META) {
        memcpy(line, "ms ", 3); n = 3;
        n += key_str(line + n, id);
        line[n++] = ' ';
        n += u64str(line + n, vs.len);
        memcpy(line + n, " F", 2); n += 2;
        n += u64str(line + n, vs.flags);
        if (noreply) { memcpy(line + n, " q", 2); n += 2; }
        line[n++] = '\r'; line[n++] = '\n';
    } else {
        memcpy(line, "set ", 4); n = 4;
        n += key_str(line + n, id);
        line[n++] = ' ';
        n += u64str(line + n, vs.flags);
        memcpy(line + n, " 0 ", 3); n += 3;
        n += u64str(line + n, vs.len);
        if (noreply) { memcpy(line + n, " noreply", 8); n += 8; }
        line[n++] = '\r'; line[n++] = '\n';
    }
    wreserve(c, n + vs.len + 2);
    wput(c, line, n);
    if (vs.len >= HDR_LEN) {
        char hdr[HDR_LEN];
        put_hex(hdr, vs.version, 10);
        put_hex(hdr + 10, vs.len, 6);
        wput(c, hdr, HDR_LEN);
        wput(c, vs.body, vs.len - HDR_LEN);
    } else {
        wput(c, vs.body, vs.len);
    }
    if (opt.proto != PROTO_BINARY && opt.proto != PROTO_TT)
        wput(c, "\r\n", 2);
    if (!w->prefill)
        w->c.sets++;
}

/* Queues one request (or, after the last, the final sync); false if none. */
static bool issue_one(conn *c)
{
    worker *w = c->w;
    if (c->done_issuing)
        return false;
    if (w->prefill) {
        uint64_t id = atomic_fetch_add_explicit(&prefill_next, 1, memory_order_relaxed);
        if (id >= opt.keys || atomic_load_explicit(&stop_all, memory_order_relaxed)) {
            c->done_issuing = true;
            return false;
        }
        push_slot(c, RQ_SET);
        emit_set(c, id, false);
        return true;
    }
    if (!take_op(w)) {
        c->done_issuing = true;
        if (opt.noreply && !c->synced && !atomic_load(&stop_all)) {
            /* a barrier: every noreply request before it has been processed */
            c->synced = true;
            push_slot(c, RQ_SYNC);
            wreserve(c, 24);
            if (opt.proto == PROTO_BINARY)
                bin_hdr(c, BIN_NOOP, 0, 0, 0);
            else if (opt.proto == PROTO_TT)
                wput(c, "\xC8\x80", 2);      /* rnum */
            else if (opt.proto == PROTO_META)
                wput(c, "mn\r\n", 4);
            else
                wput(c, "version\r\n", 9);
            return true;
        }
        return false;
    }
    unsigned tot = opt.set_w + opt.get_w + opt.del_w;
    unsigned r = (unsigned)(rng_next(&w->rs) % tot);
    w->c.ops++;
    atomic_store_explicit(&w->live_ops, w->c.ops, memory_order_relaxed);
    if (r < opt.set_w) {
        uint64_t id = pick_key(&w->rs);
        if (!opt.noreply)
            push_slot(c, RQ_SET);
        emit_set(c, id, opt.noreply);
    } else if (r < opt.set_w + opt.get_w) {
        slot *s = push_slot(c, RQ_GET);
        s->nkeys = (uint16_t)opt.multiget;
        size_t per = (size_t)opt.multiget * (KEYBUF + 32) + 32;
        wreserve(c, per);
        bool quiet = opt.multiget > 1;  /* meta/binary: quiet gets and a fence */
        if (opt.proto == PROTO_TEXT)
            wput(c, "get", 3);
        if (opt.proto == PROTO_TT && opt.multiget > 1) {
            char h[6] = { (char)0xC8, TT_MGET };
            put_be(h + 2, (uint64_t)opt.multiget, 4);
            wput(c, h, 6);
        }
        for (int i = 0; i < opt.multiget; i++) {
            uint64_t id = pick_key(&w->rs);
            if (opt.miss_ratio > 0 && rng_01(&w->rs) < opt.miss_ratio)
                id |= MISS_BIT;
            s->ids[i] = id;
            s->seen[i] = 0;
            if (opt.proto == PROTO_TT) {
                tt_key_req(c, opt.multiget > 1 ? 0 : TT_GET, id);
            } else if (opt.proto == PROTO_BINARY) {
                bin_key_req(c, quiet ? BIN_GETKQ : BIN_GETK, id);
            } else if (opt.proto == PROTO_META) {
                wput(c, "mg ", 3);
                c->wlen += key_str(c->wbuf + c->wlen, id);
                if (quiet) wput(c, " v f k q\r\n", 10);
                else wput(c, " v f k\r\n", 8);
            } else {
                c->wbuf[c->wlen++] = ' ';
                c->wlen += key_str(c->wbuf + c->wlen, id);
            }
        }
        if (opt.proto == PROTO_TEXT)
            wput(c, "\r\n", 2);
        else if (quiet && opt.proto == PROTO_META)
            wput(c, "mn\r\n", 4);
        else if (quiet && opt.proto == PROTO_BINARY)
            bin_hdr(c, BIN_NOOP, 0, 0, 0);
        w->c.gets++;
        w->c.keys_req += (uint64_t)opt.multiget;
    } else {
        uint64_t id = pick_key(&w->rs);
        /* meta and binary answer a quiet delete's miss: deletes stay loud */
        bool quiet_del = opt.noreply && opt.proto == PROTO_TEXT;
        if (!quiet_del) {
            slot *s = push_slot(c, RQ_DEL);
            s->nkeys = 1;
            s->ids[0] = id;
        }
        if (opt.proto == PROTO_BINARY) {
            bin_key_req(c, BIN_DELETE, id);
        } else if (opt.proto == PROTO_TT) {
            tt_key_req(c, TT_OUT, id);
        } else {
            wreserve(c, KEYBUF + 24);
            wput(c, opt.proto == PROTO_META ? "md " : "delete ", opt.proto == PROTO_META ? 3 : 7);
            c->wlen += key_str(c->wbuf + c->wlen, id);
            if (quiet_del)
                wput(c, " noreply", 8);
            wput(c, "\r\n", 2);
        }
        w->c.dels++;
    }
    return true;
}

static void update_events(conn *c)
{
    bool want = c->woff < c->wlen;
    if (want == c->want_out)
        return;
    struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c };
    if (epoll_ctl(c->w->ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        fatal(c->w, 1, "epoll_ctl: %s", strerror(errno));
    c->want_out = want;
}

static void flush_out(conn *c)
{
    while (c->woff < c->wlen) {
        ssize_t n = c->ssl ? kura_tls_send(c->ssl, c->wbuf + c->woff, c->wlen - c->woff)
                           : send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
        if (n > 0) {
            c->woff += (size_t)n;
            c->w->c.bytes_out += (uint64_t)n;
            c->last_io = now_ns();
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        fatal(c->w, 1, "conn %d: send: %s", c->idx, n < 0 ? strerror(errno) : "0 bytes");
        return;
    }
    if (c->woff == c->wlen)
        c->woff = c->wlen = 0;
    update_events(c);
}

/* Fills the pipeline and writes.  With noreply sets in the mix, a bounded
 * number of them go out per call so that one connection cannot spin. */
static void refill(conn *c)
{
    int budget = opt.depth * 4;
    while (c->qcount < opt.depth && budget-- > 0 && c->wlen - c->woff < (1u << 20)) {
        if (!issue_one(c))
            break;
    }
    flush_out(c);
}

static void complete(conn *c, bool is_error)
{
    worker *w = c->w;
    slot *s = &c->q[c->qhead];
    uint64_t t = now_ns() - s->t0;
    if (s->type != RQ_SYNC && !w->prefill) {
        h_add(&w->h, t);
        if (s->type == RQ_SET) h_add(&w->hset, t);
        else if (s->type == RQ_GET) h_add(&w->hget, t);
    }
    if (s->type == RQ_GET) {
        for (int i = 0; i < s->nkeys; i++) {
            if (s->seen[i]) w->c.hits++;
            else w->c.misses++;
        }
    }
    if (is_error)
        w->c.errors++;
    c->qhead = (c->qhead + 1) % c->qcap;
    c->qcount--;
    c->ps = PS_LINE;
}

static bool line_is(const char *l, size_t n, const char *word)
{
    size_t wl = strlen(word);
    return n == wl && memcmp(l, word, wl) == 0;
}

static bool line_starts(const char *l, size_t n, const char *word)
{
    size_t wl = strlen(word);
    return n >= wl && memcmp(l, word, wl) == 0;
}

/* Parses a "VALUE key flags bytes [cas]" line into the head get slot. */
static int parse_value_line(conn *c, const char *l, size_t n)
{
    slot *s = &c->q[c->qhead];
    const char *p = l + 6, *e = l + n;
    const char *k = p;
    while (p < e && *p != ' ') p++;
    size_t klen = (size_t)(p - k);
    if (p >= e || klen == 0 || klen > 250)
        return -1;
    p++;
    char *end;
    errno = 0;
    unsigned long long fl = strtoull(p, &end, 10);
    if (end == p || *end != ' ' || fl > UINT32_MAX)
        return -1;
    p = end + 1;
    unsigned long long bytes = strtoull(p, &end, 10);
    if (end == p || (end < e && *end != ' ') || end > e || bytes > (1ull << 30))
        return -1;
    c->dlen = (size_t)bytes;
    c->dflags = (uint32_t)fl;
    c->dkey = -1;
    char kb[KEYBUF];
    for (int i = 0; i < s->nkeys; i++) {
        if (s->seen[i])
            continue;
        size_t kl = key_str(kb, s->ids[i]);
        if (kl == klen && memcmp(kb, k, klen) == 0) {
            c->dkey = i;
            break;
        }
    }
    if (c->dkey < 0)
        return -2;
    return 0;
}

/* Finds the head get slot's key k (not seen yet) and sets c->dkey. */
static int match_key(conn *c, const char *k, size_t klen)
{
    slot *s = &c->q[c->qhead];
    char kb[KEYBUF];
    c->dkey = -1;
    for (int i = 0; i < s->nkeys; i++) {
        if (s->seen[i])
            continue;
        size_t kl = key_str(kb, s->ids[i]);
        if (kl == klen && memcmp(kb, k, klen) == 0) {
            c->dkey = i;
            return 0;
        }
    }
    return -2;
}

/* Parses a meta "VA <bytes> f<flags> k<key>" line into the head get slot. */
static int parse_va_line(conn *c, const char *l, size_t n)
{
    const char *p = l + 3, *e = l + n;
    char *end;
    unsigned long long bytes = strtoull(p, &end, 10);
    if (end == p || bytes > (1ull << 30))
        return -1;
    c->dlen = (size_t)bytes;
    c->dflags = 0;
    const char *k = NULL;
    size_t klen = 0;
    for (p = end; p < e; ) {
        while (p < e && *p == ' ') p++;
        const char *t = p;
        while (p < e && *p != ' ') p++;
        if (t < p && *t == 'f')
            c->dflags = (uint32_t)strtoul(t + 1, NULL, 10);
        else if (t < p && *t == 'k') {
            k = t + 1;
            klen = (size_t)(p - t - 1);
        }
    }
    if (!k)
        return -1;
    return match_key(c, k, klen);
}

static void protocol_error(conn *c, const char *what, const char *l, size_t n)
{
    if (n > 80) n = 80;
    char show[96];
    size_t j = 0;
    for (size_t i = 0; i < n && j < sizeof(show) - 1; i++)
        show[j++] = (l[i] >= 32 && l[i] < 127) ? l[i] : '?';
    show[j] = 0;
    fatal(c->w, 1, "conn %d: protocol error: %s: \"%s\"", c->idx, what, show);
}

/* Makes the read buffer hold a reply of total bytes (its start at rpos). */
static void make_room(conn *c, size_t total)
{
    size_t avail = c->rlen - c->rpos;
    if (total <= c->rcap - c->rpos)
        return;
    size_t cap = c->rcap;
    while (cap < total * 2) cap *= 2;
    char *nb = malloc(cap);
    if (!nb) die(1, "out of memory");
    memcpy(nb, c->rbuf + c->rpos, avail);
    free(c->rbuf);
    c->rbuf = nb;
    c->rlen = avail;
    c->rpos = 0;
    c->rcap = cap;
}

/* A value read for the head get slot's key dkey. */
static void got_value(conn *c, const char *val, size_t vlen, uint32_t flags)
{
    worker *w = c->w;
    slot *s = &c->q[c->qhead];
    s->seen[c->dkey] = 1;
    uint64_t id = s->ids[c->dkey];
    if (id & MISS_BIT) {
        w->c.unexpected_hits++;
        if (opt.verify) w->c.mismatches++;
    } else if (opt.verify && !value_ok(id, val, vlen, flags)) {
        w->c.mismatches++;
    }
}

/* Tokyo Tyrant: the bytes of the complete reply at buf to the head
 * request, 0 if it has not all arrived (*want: at least this many), or
 * -1 if it is malformed. */
static long tt_reply_len(conn *c, const char *buf, size_t avail, size_t *want)
{
    slot *s = &c->q[c->qhead];
    *want = s->type == RQ_SYNC ? 9 : 1;
    if (avail < *want)
        return 0;
    if (s->type != RQ_GET || buf[0] != 0)
        return (long)*want;
    *want = 5;
    if (avail < 5)
        return 0;
    uint64_t n = get_be(buf + 1, 4);
    if (opt.multiget == 1) {
        *want = 5 + n;
        return avail < *want ? 0 : (long)*want;
    }
    size_t off = 5;
    for (uint64_t i = 0; i < n; i++) {
        if (avail < off + 8) {
            *want = off + 8;
            return 0;
        }
        off += 8 + get_be(buf + off, 4) + get_be(buf + off + 4, 4);
        if (off > (1u << 30))
            return -1;
    }
    *want = off;
    return avail < off ? 0 : (long)off;
}

/* Tokyo Tyrant: parses as many complete replies as the buffer holds. */
static void parse_tt(conn *c)
{
    worker *w = c->w;
    while (!w->fatal && c->qcount > 0) {
        char *buf = c->rbuf + c->rpos;
        size_t avail = c->rlen - c->rpos, want;
        long n = tt_reply_len(c, buf, avail, &want);
        if (n < 0) {
            protocol_error(c, "bad Tokyo Tyrant reply", buf, avail);
            return;
        }
        if (n == 0) {
            make_room(c, want);
            return;
        }
        c->rpos += (size_t)n;
        slot *s = &c->q[c->qhead];
        if (s->type != RQ_GET) {
            bool ok = buf[0] == 0 || s->type == RQ_DEL;     /* out: a miss is 1 */
            if (!ok && !opt.quiet && w->c.errors < 3)
                fprintf(stderr, "kura-bench: conn %d: status %d\n", c->idx, buf[0]);
            complete(c, !ok);
            continue;
        }
        if (buf[0] == 0 && opt.multiget == 1) {
            c->dkey = 0;
            got_value(c, buf + 5, (size_t)n - 5, 0);
        } else if (buf[0] == 0) {
            size_t off = 5;
            for (uint64_t i = get_be(buf + 1, 4); i > 0; i--) {
                size_t kl = get_be(buf + off, 4), vl = get_be(buf + off + 4, 4);
                if (match_key(c, buf + off + 8, kl) != 0) {
                    protocol_error(c, "value for a key not requested (or twice)", buf, 5);
                    return;
                }
                got_value(c, buf + off + 8 + kl, vl, 0);
                off += 8 + kl + vl;
            }
        }
        complete(c, false);
    }
    if (c->qcount == 0 && c->rpos < c->rlen)
        protocol_error(c, "reply with no request outstanding", c->rbuf + c->rpos,
                       c->rlen - c->rpos);
}

/* Binary: parses as many complete response packets as the buffer holds. */
static void parse_binary(conn *c)
{
    worker *w = c->w;
    while (!w->fatal) {
        char *buf = c->rbuf + c->rpos;
        size_t avail = c->rlen - c->rpos;
        if (avail < 24)
            return;
        size_t bodylen = (size_t)get_be(buf + 8, 4);
        if ((unsigned char)buf[0] != 0x81 || bodylen > (1u << 30)) {
            protocol_error(c, "bad binary response header", buf, 24);
            return;
        }
        if (avail < 24 + bodylen) {
            make_room(c, 24 + bodylen);
            return;
        }
        c->rpos += 24 + bodylen;
        if (c->qcount == 0) {
            protocol_error(c, "reply with no request outstanding", buf, 24);
            return;
        }
        slot *s = &c->q[c->qhead];
        int op = (unsigned char)buf[1], status = (int)get_be(buf + 6, 2);
        size_t klen = (size_t)get_be(buf + 2, 2), extlen = (unsigned char)buf[4];
        if (op == BIN_NOOP) {
            complete(c, false);                 /* the fence of a quiet batch */
            continue;
        }
        switch (s->type) {
        case RQ_SET:
            if (status == 0) {
                complete(c, false);
            } else {
                if (!opt.quiet && w->c.errors < 3)
                    fprintf(stderr, "kura-bench: conn %d: set status 0x%x\n", c->idx, status);
                complete(c, true);
            }
            break;
        case RQ_DEL:
            complete(c, !(status == 0 || status == 1));
            break;
        case RQ_GET:
            if (status == 0 && extlen == 4 && klen + 4 <= bodylen) {
                if (match_key(c, buf + 28, klen) != 0) {
                    protocol_error(c, "value for a key not requested (or twice)", buf, 24);
                    return;
                }
                got_value(c, buf + 28 + klen, bodylen - 4 - klen, (uint32_t)get_be(buf + 24, 4));
                if (op == BIN_GETK)
                    complete(c, false);
            } else if (status == 1 && op == BIN_GETK) {
                complete(c, false);             /* a miss */
            } else {
                protocol_error(c, "unexpected reply to get", buf, 24);
                return;
            }
            break;
        default:
            protocol_error(c, "unexpected binary reply", buf, 24);
            return;
        }
    }
}

/* Parses as many complete replies as the read buffer holds. */
static void parse(conn *c)
{
    worker *w = c->w;
    if (opt.proto == PROTO_BINARY) {
        parse_binary(c);
        return;
    }
    if (opt.proto == PROTO_TT) {
        parse_tt(c);
        return;
    }
    while (!w->fatal) {
        char *buf = c->rbuf + c->rpos;
        size_t avail = c->rlen - c->rpos;
        if (c->ps == PS_DATA) {
            if (avail < c->dlen + 2)
                return;
            if (buf[c->dlen] != '\r' || buf[c->dlen + 1] != '\n') {
                protocol_error(c, "value block not followed by CRLF", buf, c->dlen + 2);
                return;
            }
            slot *s = &c->q[c->qhead];
            got_value(c, buf, c->dlen, c->dflags);
            c->rpos += c->dlen + 2;
            c->ps = PS_LINE;
            if (opt.proto == PROTO_META && s->nkeys == 1 && opt.multiget == 1)
                complete(c, false);
            continue;
        }
        char *nl = memchr(buf, '\n', avail);
        if (!nl) {
            if (avail > 2048)
                protocol_error(c, "reply line too long", buf, avail);
            return;
        }
        size_t n = (size_t)(nl - buf);
        if (n == 0 || buf[n - 1] != '\r') {
            protocol_error(c, "line not ended by CRLF", buf, n);
            return;
        }
        n--;                                    /* without CR */
        c->rpos += n + 2;
        if (c->qcount == 0) {
            protocol_error(c, "reply with no request outstanding", buf, n);
            return;
        }
        slot *s = &c->q[c->qhead];
        /* error replies end any request */
        if (line_is(buf, n, "ERROR") || line_starts(buf, n, "ERROR ") ||
            line_starts(buf, n, "CLIENT_ERROR ") ||
            line_starts(buf, n, "SERVER_ERROR ") || line_is(buf, n, "CLIENT_ERROR") ||
            line_is(buf, n, "SERVER_ERROR")) {
            if (!opt.quiet && w->c.errors < 3)
                fprintf(stderr, "kura-bench: conn %d: server replied: %.*s\n", c->idx,
                        (int)(n > 200 ? 200 : n), buf);
            complete(c, true);
            continue;
        }
        if (opt.proto == PROTO_META) {
            if (s->type == RQ_GET && line_starts(buf, n, "VA ")) {
                int rc = parse_va_line(c, buf, n);
                if (rc == -1)
                    protocol_error(c, "malformed VA line", buf, n);
                else if (rc == -2)
                    protocol_error(c, "VA for a key not requested (or twice)", buf, n);
                else
                    c->ps = PS_DATA;
            } else if ((s->type == RQ_SET && line_is(buf, n, "HD")) ||
                       (s->type == RQ_DEL && (line_is(buf, n, "HD") || line_is(buf, n, "NF"))) ||
                       (s->type == RQ_SYNC && line_is(buf, n, "MN")) ||
                       (s->type == RQ_GET && (line_starts(buf, n, "EN") || line_is(buf, n, "MN")))) {
                complete(c, false);
            } else if (s->type == RQ_SET && (line_is(buf, n, "NS") || line_is(buf, n, "EX") ||
                                             line_is(buf, n, "NF"))) {
                complete(c, true);
            } else {
                protocol_error(c, "unexpected meta reply", buf, n);
            }
            continue;
        }
        switch (s->type) {
        case RQ_SET:
            if (line_is(buf, n, "STORED"))
                complete(c, false);
            else if (line_is(buf, n, "NOT_STORED") || line_is(buf, n, "EXISTS") ||
                     line_is(buf, n, "NOT_FOUND"))
                complete(c, true);
            else
                protocol_error(c, "unexpected reply to set", buf, n);
            break;
        case RQ_DEL:
            if (line_is(buf, n, "DELETED") || line_is(buf, n, "NOT_FOUND"))
                complete(c, false);
            else
                protocol_error(c, "unexpected reply to delete", buf, n);
            break;
        case RQ_SYNC:
            if (line_starts(buf, n, "VERSION "))
                complete(c, false);
            else
                protocol_error(c, "unexpected reply to version", buf, n);
            break;
        case RQ_GET:
            if (line_is(buf, n, "END")) {
                complete(c, false);
            } else if (line_starts(buf, n, "VALUE ")) {
                int rc = parse_value_line(c, buf, n);
                if (rc == -1) {
                    protocol_error(c, "malformed VALUE line", buf, n);
                } else if (rc == -2) {
                    protocol_error(c, "VALUE for a key not requested (or twice)", buf, n);
                } else {
                    c->ps = PS_DATA;
                    /* make room for the whole block in the buffer */
                    size_t need = c->dlen + 2;
                    if (need > c->rcap - c->rpos && need > c->rcap / 2) {
                        size_t cap = c->rcap;
                        while (cap < need * 2) cap *= 2;
                        char *nb = malloc(cap);
                        if (!nb) die(1, "out of memory");
                        memcpy(nb, c->rbuf + c->rpos, c->rlen - c->rpos);
                        free(c->rbuf);
                        c->rbuf = nb;
                        c->rlen -= c->rpos;
                        c->rpos = 0;
                        c->rcap = cap;
                    }
                }
            } else {
                protocol_error(c, "unexpected reply to get", buf, n);
            }
            break;
        }
    }
}

static void on_readable(conn *c)
{
    for (;;) {
        if (c->rpos == c->rlen) {
            c->rpos = c->rlen = 0;
        } else if (c->rpos > 0 && (c->rcap - c->rlen < 4096 || c->rpos > c->rcap / 2)) {
            memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
            c->rlen -= c->rpos;
            c->rpos = 0;
        }
        if (c->rcap - c->rlen < 4096) {
            c->rcap *= 2;
            c->rbuf = realloc(c->rbuf, c->rcap);
            if (!c->rbuf) die(1, "out of memory");
        }
        size_t room = c->rcap - c->rlen;
        ssize_t n = c->ssl ? kura_tls_recv(c->ssl, c->rbuf + c->rlen, room)
                           : recv(c->fd, c->rbuf + c->rlen, room, 0);
        if (n > 0) {
            c->rlen += (size_t)n;
            c->w->c.bytes_in += (uint64_t)n;
            c->last_io = now_ns();
            parse(c);
            if (c->w->fatal)
                return;
            if ((size_t)n < room && !(c->ssl && kura_tls_pending(c->ssl)))
                break;              /* short read: the socket is drained (TLS: and
                                       nothing decrypted is left, which epoll
                                       would not report) */
            continue;
        }
        if (n == 0) {
            if (c->qcount > 0 || c->rpos < c->rlen)
                fatal(c->w, 1, "conn %d: server closed the connection with %d "
                      "request(s) outstanding", c->idx, c->qcount);
            c->closed = true;
            return;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            break;
        fatal(c->w, 1, "conn %d: recv: %s", c->idx, strerror(errno));
        return;
    }
}

/* ------------------------------------------------------------- connecting */

static int connect_one(char *err, size_t errlen)
{
    int fd;
    if (opt.sock) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(opt.sock) >= sizeof(sa.sun_path)) {
            snprintf(err, errlen, "socket path too long");
            return -1;
        }
        strcpy(sa.sun_path, opt.sock);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            snprintf(err, errlen, "%s: %s", opt.sock, strerror(errno));
            if (fd >= 0) close(fd);
            return -1;
        }
    } else {
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res, *ai;
        int rc = getaddrinfo(opt.host, opt.port, &hints, &res);
        if (rc) {
            snprintf(err, errlen, "%s:%s: %s", opt.host, opt.port, gai_strerror(rc));
            return -1;
        }
        fd = -1;
        for (ai = res; ai; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0)
                continue;
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
                break;
            snprintf(err, errlen, "%s:%s: %s", opt.host, opt.port, strerror(errno));
            close(fd);
            fd = -1;
        }
        freeaddrinfo(res);
        if (fd < 0)
            return -1;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* --------------------------------------------------------------- workers */

static void run_phase(worker *w)
{
    for (int i = 0; i < w->nconns; i++) {
        conn *c = &w->conns[i];
        c->done_issuing = false;
        c->synced = false;
        c->last_io = now_ns();
        refill(c);
    }
    struct epoll_event evs[64];
    uint64_t tmo = (uint64_t)(opt.timeout * 1e9);
    for (;;) {
        if (w->fatal)
            return;
        int active = 0;
        for (int i = 0; i < w->nconns; i++) {
            conn *c = &w->conns[i];
            if (c->qcount > 0 || !c->done_issuing || c->woff < c->wlen) {
                active++;
                if (now_ns() - c->last_io > tmo && c->qcount > 0) {
                    fatal(w, 1, "conn %d: no reply within %.1f s (%d outstanding)",
                          c->idx, opt.timeout, c->qcount);
                    return;
                }
            }
        }
        if (!active)
            return;
        /* noreply requests get no answer to wake us: keep issuing them */
        int wait_ms = 100;
        if (opt.noreply)
            for (int i = 0; i < w->nconns; i++) {
                conn *c = &w->conns[i];
                if (!c->done_issuing && c->qcount < opt.depth && !c->want_out)
                    wait_ms = 0;
            }
        if (opt.spin)
            wait_ms = 0;
        int n = epoll_wait(w->ep, evs, 64, wait_ms);
        if (n < 0 && errno != EINTR) {
            fatal(w, 1, "epoll_wait: %s", strerror(errno));
            return;
        }
        for (int i = 0; i < n && !w->fatal; i++) {
            conn *c = evs[i].data.ptr;
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                on_readable(c);
            if (w->fatal) break;
            if (c->closed) {
                fatal(w, 1, "conn %d: server closed the connection", c->idx);
                break;
            }
            if (evs[i].events & EPOLLOUT)
                flush_out(c);
            refill(c);
        }
        if (wait_ms == 0)
            for (int i = 0; i < w->nconns && !w->fatal; i++)
                refill(&w->conns[i]);
    }
}

static pthread_barrier_t bar_go, bar_prefilled, bar_main;
static _Atomic int workers_done;

static void *worker_main(void *arg)
{
    worker *w = arg;
    if (opt.prefill) {
        w->prefill = true;
        pthread_barrier_wait(&bar_go);
        run_phase(w);
        w->prefill = false;
        pthread_barrier_wait(&bar_prefilled);
    }
    pthread_barrier_wait(&bar_main);
    if (!atomic_load(&stop_all))
        run_phase(w);
    atomic_fetch_add(&workers_done, 1);
    return NULL;
}

/* --------------------------------------------------------------- output */

static const char *pattern_name(void)
{
    static char buf[32];
    if (opt.pattern == PAT_SEQ) return "seq";
    if (opt.pattern == PAT_UNIFORM) return "uniform";
    snprintf(buf, sizeof(buf), "zipf:%.3g", opt.zipf_s);
    return buf;
}

static void sigint(int sig)
{
    (void)sig;
    atomic_store(&stop_all, 1);
}

int main(int argc, char **argv)
{
    enum { O_PATTERN = 256, O_PREFIX, O_MISS, O_NOREPLY, O_PREFILL, O_VERIFY, O_CSV,
           O_JSON, O_LABEL, O_SEED, O_TIMEOUT, O_HELP, O_SPIN, O_PROTO, O_TLS_CA };
    static const struct option lo[] = {
        { "host", 1, 0, 'h' }, { "port", 1, 0, 'p' }, { "socket", 1, 0, 's' },
        { "threads", 1, 0, 't' }, { "conns", 1, 0, 'c' }, { "pipeline", 1, 0, 'P' },
        { "ops", 1, 0, 'n' }, { "duration", 1, 0, 'd' }, { "keys", 1, 0, 'k' },
        { "pattern", 1, 0, O_PATTERN }, { "key-prefix", 1, 0, O_PREFIX },
        { "value-size", 1, 0, 'v' }, { "ratio", 1, 0, 'r' }, { "miss-ratio", 1, 0, O_MISS },
        { "multiget", 1, 0, 'm' }, { "noreply", 0, 0, O_NOREPLY },
        { "prefill", 0, 0, O_PREFILL }, { "verify", 0, 0, O_VERIFY },
        { "quiet", 0, 0, 'q' }, { "csv", 0, 0, O_CSV }, { "json", 0, 0, O_JSON },
        { "label", 1, 0, O_LABEL }, { "seed", 1, 0, O_SEED }, { "timeout", 1, 0, O_TIMEOUT }, { "spin", 0, 0, O_SPIN }, { "tls-ca", 1, 0, O_TLS_CA },
        { "proto", 1, 0, O_PROTO },
        { "version", 0, 0, 'V' }, { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
    };
    bool ops_given = false;
    int ch;
    while ((ch = getopt_long(argc, argv, "h:p:s:t:c:P:n:d:k:v:r:m:qV", lo, NULL)) != -1) {
        switch (ch) {
        case 'h': opt.host = optarg; break;
        case 'p': opt.port = optarg; break;
        case 's': opt.sock = optarg; break;
        case 't': opt.threads = (int)parse_u64("--threads", optarg); break;
        case 'c': opt.conns = (int)parse_u64("--conns", optarg); break;
        case 'P': opt.depth = (int)parse_u64("--pipeline", optarg); break;
        case 'n': opt.ops = parse_u64("--ops", optarg); ops_given = true; break;
        case 'd': opt.duration = parse_double("--duration", optarg); break;
        case 'k': opt.keys = parse_u64("--keys", optarg); break;
        case O_PATTERN:
            if (!strcmp(optarg, "seq") || !strcmp(optarg, "sequential")) opt.pattern = PAT_SEQ;
            else if (!strcmp(optarg, "uniform") || !strcmp(optarg, "random")) opt.pattern = PAT_UNIFORM;
            else if (!strncmp(optarg, "zipf", 4)) {
                opt.pattern = PAT_ZIPF;
                if (optarg[4] == ':' || optarg[4] == '=')
                    opt.zipf_s = parse_double("--pattern zipf", optarg + 5);
                else if (optarg[4])
                    die(2, "--pattern: '%s' (use seq, uniform or zipf[:S])", optarg);
                if (!(opt.zipf_s > 0 && opt.zipf_s < 1))
                    die(2, "--pattern zipf:S needs 0 < S < 1");
            } else die(2, "--pattern: '%s' (use seq, uniform or zipf[:S])", optarg);
            break;
        case O_PREFIX: opt.prefix = optarg; break;
        case 'v': {
            char *dash = strchr(optarg, '-');
            if (dash && dash != optarg) {
                *dash = 0;
                opt.vmin = (size_t)parse_u64("--value-size", optarg);
                opt.vmax = (size_t)parse_u64("--value-size", dash + 1);
                *dash = '-';
            } else {
                opt.vmin = opt.vmax = (size_t)parse_u64("--value-size", optarg);
            }
            if (opt.vmin > opt.vmax || opt.vmax > 0xffffff)
                die(2, "--value-size: bad range '%s'", optarg);
            break;
        }
        case 'r': {
            unsigned a, b, d = 0;
            char extra;
            int k = sscanf(optarg, "%u:%u:%u%c", &a, &b, &d, &extra);
            if (k != 2 && k != 3)
                die(2, "--ratio: '%s' (use SETS:GETS or SETS:GETS:DELETES)", optarg);
            if (a + b + d == 0)
                die(2, "--ratio: all weights are zero");
            opt.set_w = a; opt.get_w = b; opt.del_w = d;
            break;
        }
        case O_MISS:
            opt.miss_ratio = parse_double("--miss-ratio", optarg);
            if (opt.miss_ratio > 1) die(2, "--miss-ratio must be within 0..1");
            break;
        case 'm': opt.multiget = (int)parse_u64("--multiget", optarg); break;
        case O_NOREPLY: opt.noreply = true; break;
        case O_PREFILL: opt.prefill = true; break;
        case O_VERIFY: opt.verify = true; break;
        case 'q': opt.quiet = true; break;
        case O_CSV: opt.out = OUT_CSV; break;
        case O_JSON: opt.out = OUT_JSON; break;
        case O_LABEL: opt.label = optarg; break;
        case O_SEED: opt.seed = parse_u64("--seed", optarg); break;
        case O_TIMEOUT: opt.timeout = parse_double("--timeout", optarg); break;
        case O_SPIN: opt.spin = true; break;
        case O_TLS_CA: opt.tls_ca = optarg; break;
        case O_PROTO:
            if (!strcmp(optarg, "text")) opt.proto = PROTO_TEXT;
            else if (!strcmp(optarg, "meta")) opt.proto = PROTO_META;
            else if (!strcmp(optarg, "binary")) opt.proto = PROTO_BINARY;
            else if (!strcmp(optarg, "tt")) opt.proto = PROTO_TT;
            else die(2, "--proto: text, meta, binary or tt");
            break;
        case 'V': puts(VERSION_STR); return 0;
        case O_HELP: usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc)
        die(2, "unexpected argument '%s' (see --help)", argv[optind]);
    if (!strncmp(opt.host, "unix:", 5)) opt.sock = opt.host + 5;
    else if (opt.host[0] == '/') opt.sock = opt.host;
    if (opt.threads < 1 || opt.threads > 1024) die(2, "--threads must be 1..1024");
    if (opt.conns < 1 || opt.conns > 10000) die(2, "--conns must be 1..10000");
    if (opt.depth < 1 || opt.depth > 65536) die(2, "--pipeline must be 1..65536");
    if (opt.multiget < 1 || opt.multiget > 1000) die(2, "--multiget must be 1..1000");
    if (opt.keys < 1) die(2, "--keys must be at least 1");
    if (strlen(opt.prefix) + 22 > 250) die(2, "--key-prefix too long");
    for (const char *p = opt.prefix; *p; p++)
        if (*p <= 32 || *p == 127) die(2, "--key-prefix must not contain spaces or control characters");
    if (opt.duration > 0 && ops_given) die(2, "give --ops or --duration, not both");
    if (!ops_given && opt.duration <= 0) opt.ops = 100000;
    if (opt.get_w == 0 && opt.multiget > 1) opt.multiget = 1;

    /* the same bytes in every run, long enough to verify values of any size
     * a previous run may have left (up to 2 MiB) */
    pattern_len = (opt.vmax > (2u << 20) ? opt.vmax : (2u << 20)) + PAT_SLACK;
    pattern = malloc(pattern_len);
    if (!pattern) die(1, "out of memory");
    {
        uint64_t s = 0x5eed;
        static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        for (size_t i = 0; i < pattern_len; i++)
            pattern[i] = al[rng_next(&s) % 62];
    }
    if (opt.pattern == PAT_ZIPF)
        zipf_init();

    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, sigint);
    signal(SIGTERM, sigint);

    worker *ws = calloc((size_t)opt.threads, sizeof(worker));
    if (!ws) die(1, "out of memory");
    int qcap = opt.depth + 2;
    for (int t = 0; t < opt.threads; t++) {
        worker *w = &ws[t];
        w->id = t;
        w->rs = mix64(opt.seed * 1000003 + (uint64_t)t) | 1;
        w->version = mix64(opt.seed * 7919 + (uint64_t)t * 104729 + (uint64_t)time(NULL));
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        w->nconns = opt.conns;
        w->conns = calloc((size_t)opt.conns, sizeof(conn));
        if (w->ep < 0 || !w->conns) die(1, "epoll/alloc failed");
        for (int i = 0; i < opt.conns; i++) {
            conn *c = &w->conns[i];
            char err[256] = "";
            c->w = w;
            c->idx = t * opt.conns + i;
            c->fd = connect_one(err, sizeof(err));
            if (c->fd < 0) die(1, "connect: %s", err);
            if (opt.tls_ca) {
                static struct ssl_ctx_st *ctx;
                if (!ctx && !(ctx = kura_tls_client_ctx(opt.tls_ca, NULL, err, sizeof(err))))
                    die(2, "--tls-ca: %s", err);
                c->ssl = kura_tls_connect(ctx, c->fd, opt.host, 10000, err, sizeof(err));
                if (!c->ssl) die(1, "connect: %s", err);
            }
            c->rcap = 65536;
            c->rbuf = malloc(c->rcap);
            c->qcap = qcap;
            c->q = calloc((size_t)qcap, sizeof(slot));
            c->idstore = calloc((size_t)qcap * (size_t)opt.multiget, sizeof(uint64_t));
            c->seenstore = calloc((size_t)qcap * (size_t)opt.multiget, 1);
            if (!c->rbuf || !c->q || !c->idstore || !c->seenstore) die(1, "out of memory");
            for (int j = 0; j < qcap; j++) {
                c->q[j].ids = c->idstore + (size_t)j * (size_t)opt.multiget;
                c->q[j].seen = c->seenstore + (size_t)j * (size_t)opt.multiget;
            }
            struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
            if (epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
                die(1, "epoll_ctl: %s", strerror(errno));
        }
    }

    bool tty = isatty(2) && !opt.quiet;
    unsigned nb = (unsigned)opt.threads + 1;
    pthread_barrier_init(&bar_go, NULL, nb);
    pthread_barrier_init(&bar_prefilled, NULL, nb);
    pthread_barrier_init(&bar_main, NULL, nb);
    atomic_store(&ops_left, (int64_t)opt.ops);
    for (int t = 0; t < opt.threads; t++)
        if (pthread_create(&ws[t].th, NULL, worker_main, &ws[t]))
            die(1, "pthread_create failed");

    double prefill_s = 0;
    if (opt.prefill) {
        uint64_t t0 = now_ns();
        pthread_barrier_wait(&bar_go);
        pthread_barrier_wait(&bar_prefilled);
        prefill_s = (double)(now_ns() - t0) / 1e9;
        if (tty)
            fprintf(stderr, "prefilled %" PRIu64 " keys in %.2f s\n", opt.keys, prefill_s);
    }
    uint64_t t_start = now_ns();
    if (opt.duration > 0)
        deadline_ns = t_start + (uint64_t)(opt.duration * 1e9);
    pthread_barrier_wait(&bar_main);

    /* progress, about twice a second, while the workers run */
    if (tty) {
        uint64_t last_ops = 0, last_t = t_start;
        while (atomic_load(&workers_done) < opt.threads) {
            struct timespec ts = { 0, 50 * 1000 * 1000 };
            for (int k = 0; k < 10 && atomic_load(&workers_done) < opt.threads; k++)
                nanosleep(&ts, NULL);
            uint64_t ops = 0, t = now_ns();
            for (int i = 0; i < opt.threads; i++)
                ops += atomic_load_explicit(&ws[i].live_ops, memory_order_relaxed);
            double el = (double)(t - t_start) / 1e9;
            double rate = (double)(ops - last_ops) / ((double)(t - last_t) / 1e9 + 1e-9);
            if (opt.duration > 0)
                fprintf(stderr, "\r%6.1f/%gs  %12" PRIu64 " ops  %10.0f ops/s   ", el,
                        opt.duration, ops, rate);
            else
                fprintf(stderr, "\r%6.1fs  %12" PRIu64 "/%" PRIu64 " ops (%3.0f%%)  %10.0f ops/s   ",
                        el, ops, opt.ops, 100.0 * (double)ops / (double)opt.ops, rate);
            last_ops = ops; last_t = t;
        }
        fprintf(stderr, "\r%*s\r", 72, "");
    }
    for (int t = 0; t < opt.threads; t++)
        pthread_join(ws[t].th, NULL);
    uint64_t t_end = now_ns();
    double secs = (double)(t_end - t_start) / 1e9;

    counters C = { 0 };
    hist *H = calloc(3, sizeof(hist));
    int code = 0;
    for (int t = 0; t < opt.threads; t++) {
        worker *w = &ws[t];
        counters *c = &w->c;
        C.ops += c->ops; C.sets += c->sets; C.gets += c->gets; C.dels += c->dels;
        C.keys_req += c->keys_req; C.hits += c->hits; C.misses += c->misses;
        C.mismatches += c->mismatches; C.errors += c->errors;
        C.unexpected_hits += c->unexpected_hits;
        C.bytes_out += c->bytes_out; C.bytes_in += c->bytes_in;
        h_merge(&H[0], &w->h); h_merge(&H[1], &w->hset); h_merge(&H[2], &w->hget);
        if (w->fatal && !code) {
            code = w->fatal;
            fprintf(stderr, "kura-bench: %s\n", w->fatal_msg);
        }
    }
    if (!code && opt.verify && C.mismatches) code = 3;
    if (!code && C.errors) code = 4;
    double ops_s = secs > 0 ? (double)C.ops / secs : 0;
    double p50 = (double)h_pct(&H[0], 50) / 1e3, p99 = (double)h_pct(&H[0], 99) / 1e3,
           p999 = (double)h_pct(&H[0], 99.9) / 1e3, pmax = (double)H[0].max / 1e3,
           avg = H[0].n ? H[0].sum / (double)H[0].n / 1e3 : 0;
    double get_p50 = (double)h_pct(&H[2], 50) / 1e3, get_p99 = (double)h_pct(&H[2], 99) / 1e3;
    double set_p50 = (double)h_pct(&H[1], 50) / 1e3, set_p99 = (double)h_pct(&H[1], 99) / 1e3;
    const char *status = code == 0 ? "ok" : code == 1 ? "protocol_error"
                       : code == 3 ? "mismatch" : "error_replies";

    if (!opt.quiet) {
        printf("%s%s%.0f ops/s  %" PRIu64 " ops in %.3f s  (%d thr x %d conn, pipeline %d)\n",
               opt.label ? opt.label : "", opt.label ? ": " : "", ops_s, C.ops, secs,
               opt.threads, opt.conns, opt.depth);
        if (H[0].n)
            printf("  latency us: p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f  avg %.1f"
                   "  (%" PRIu64 " timed)\n", p50, p99, p999, pmax, avg, H[0].n);
        else
            printf("  latency: nothing timed (noreply requests have no reply)\n");
        printf("  sets %" PRIu64 "  gets %" PRIu64 " (%" PRIu64 " keys)  hits %" PRIu64
               "  misses %" PRIu64 "  errors %" PRIu64 "%s",
               C.sets, C.gets, C.keys_req, C.hits, C.misses, C.errors,
               opt.verify ? "" : "\n");
        if (opt.verify)
            printf("  mismatches %" PRIu64 "\n", C.mismatches);
        if (C.unexpected_hits)
            printf("  warning: %" PRIu64 " hits on keys never set\n", C.unexpected_hits);
    }
    /* the machine line */
    struct { const char *k; char v[64]; } f[40];
    int nf = 0;
#define F(key, ...) do { f[nf].k = key; snprintf(f[nf].v, sizeof(f[nf].v), __VA_ARGS__); nf++; } while (0)
    F("label", "%s", opt.label ? opt.label : "");
    F("status", "%s", status);
    F("threads", "%d", opt.threads);
    F("conns", "%d", opt.conns);
    F("pipeline", "%d", opt.depth);
    F("multiget", "%d", opt.multiget);
    F("keys", "%" PRIu64, opt.keys);
    F("pattern", "%s", pattern_name());
    F("value_min", "%zu", opt.vmin);
    F("value_max", "%zu", opt.vmax);
    F("ratio", "%u:%u:%u", opt.set_w, opt.get_w, opt.del_w);
    F("miss_ratio", "%g", opt.miss_ratio);
    F("noreply", "%d", opt.noreply);
    F("prefill_s", "%.3f", prefill_s);
    F("seconds", "%.4f", secs);
    F("ops", "%" PRIu64, C.ops);
    F("ops_per_sec", "%.1f", ops_s);
    F("sets", "%" PRIu64, C.sets);
    F("gets", "%" PRIu64, C.gets);
    F("dels", "%" PRIu64, C.dels);
    F("get_keys", "%" PRIu64, C.keys_req);
    F("hits", "%" PRIu64, C.hits);
    F("misses", "%" PRIu64, C.misses);
    F("errors", "%" PRIu64, C.errors);
    F("mismatches", "%" PRIu64, C.mismatches);
    F("verified", "%d", opt.verify);
    F("p50_us", "%.1f", p50);
    F("p99_us", "%.1f", p99);
    F("p999_us", "%.1f", p999);
    F("max_us", "%.1f", pmax);
    F("avg_us", "%.2f", avg);
    F("get_p50_us", "%.1f", get_p50);
    F("get_p99_us", "%.1f", get_p99);
    F("set_p50_us", "%.1f", set_p50);
    F("set_p99_us", "%.1f", set_p99);
    F("bytes_out", "%" PRIu64, C.bytes_out);
    F("bytes_in", "%" PRIu64, C.bytes_in);
#undef F
    if (opt.out == OUT_CSV) {
        for (int i = 0; i < nf; i++) printf("%s%s", i ? "," : "", f[i].k);
        putchar('\n');
        for (int i = 0; i < nf; i++) printf("%s%s", i ? "," : "", f[i].v);
        putchar('\n');
    } else if (opt.out == OUT_JSON) {
        printf("{");
        for (int i = 0; i < nf; i++) {
            const char *v = f[i].v;
            char *end;
            strtod(v, &end);
            bool num = *v && !*end && strcmp(f[i].k, "ratio") && strcmp(f[i].k, "label") &&
                       strcmp(f[i].k, "pattern");
            printf("%s\"%s\":%s", i ? "," : "", f[i].k, num ? "" : "\"");
            for (const char *p = v; *p; p++) {
                if (*p == '"' || *p == '\\') putchar('\\');
                putchar(*p);
            }
            printf("%s", num ? "" : "\"");
        }
        printf("}\n");
    } else {
        printf("RESULT");
        for (int i = 0; i < nf; i++) {
            if (!strcmp(f[i].k, "label") && !opt.label) continue;
            printf(" %s=%s", f[i].k, f[i].v);
        }
        putchar('\n');
    }
    fflush(stdout);

    for (int t = 0; t < opt.threads; t++) {
        for (int i = 0; i < ws[t].nconns; i++) {
            conn *c = &ws[t].conns[i];
            close(c->fd);
            free(c->wbuf); free(c->rbuf); free(c->q); free(c->idstore); free(c->seenstore);
        }
        free(ws[t].conns);
        close(ws[t].ep);
    }
    free(ws);
    free(H);
    free(pattern);
    return code;
}

/*
 * kura-hitbench - a cache's hit ratio under a memory limit, measured the way
 * an application uses a cache: get a key, and on a miss set it (cache-aside).
 * It speaks the memcached text protocol, so the same run measures memcached
 * and kurad with the same request stream (bench/cache.py runs it on both).
 *
 *   kura-hitbench -p PORT [--keys N] [--zipf S] [--requests R] [--warmup W]
 *                 [--value-size B] [--batch K] [--scan EVERY:LEN] [--seed X]
 *
 * The stream: keys "h:<10 digits>" (12 bytes) over N ids; each request draws
 * a popularity rank from Zipf(S) over N (any S > 0: the CDF is tabulated and
 * searched, 8 bytes a key), mapped to an id by a fixed permutation (rank *
 * A mod N with A coprime to N), so that the popular keys are spread over
 * the key space and a sequential scan meets popular and unpopular ones
 * alike.  With --scan EVERY:LEN, each EVERY Zipf requests are followed by LEN
 * requests of consecutive ids, the next scan going on where the last one
 * stopped (wrapping at N): a scan-heavy mix, keys read once and rarely again.
 *
 * For speed (one client process keeps up with a server on one core), the
 * requests go K at a time: one multi-get "get k1 ... kK", the misses then set
 * with noreply (a value of B bytes) in the same write as the next multi-get,
 * so they are stored before it is read.  A key drawn twice in one batch is
 * sent twice (the server sees every access, as its eviction may count them);
 * if its first request missed, the later ones count as hits, as they would
 * have been had each get and its set gone one at a time, and the key is set
 * once.  The first W requests (the warm-up) are not counted.
 *
 * Output: one JSON line: requests, hits, hit_ratio, the same for the Zipf
 * and scan requests apart, sets, seconds (of the counted part).
 * Exit status: 0 ok, 1 connection or protocol error, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define KEYLEN 12               /* "h:" and 10 digits */
#define BATCH_MAX 4096

static struct {
    const char *host, *port;
    uint64_t keys, requests, warmup, scan_every, scan_len, seed;
    double zipf_s;
    size_t vsize;
    int batch;
} opt = {
    .host = "127.0.0.1", .port = "11211", .keys = 2000000, .requests = 2000000,
    .warmup = 1000000, .seed = 1, .zipf_s = 0.99, .vsize = 300, .batch = 100,
};

static void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kura-hitbench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* xorshift-style generator seeded by mix64: a uniform double in [0, 1). */
static double uniform(uint64_t *st)
{
    *st += 0x9e3779b97f4a7c15ull;
    return (double)(mix64(*st) >> 11) * 0x1.0p-53;
}

/* ------------------------------------------------------------ the stream */

static double *zcdf;            /* zcdf[r]: P(rank <= r), ranks 0..keys-1 */
static uint64_t perm_a;         /* rank -> id: rank * perm_a mod keys */

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Tabulates Zipf(s) over opt.keys ranks and picks the permutation.
 * O(keys) time, 8 bytes a key. */
static void stream_init(void)
{
    zcdf = malloc(opt.keys * sizeof *zcdf);
    if (!zcdf)
        die(1, "out of memory for %llu keys", (unsigned long long)opt.keys);
    double sum = 0;
    for (uint64_t r = 0; r < opt.keys; r++) {
        sum += pow((double)(r + 1), -opt.zipf_s);
        zcdf[r] = sum;
    }
    for (uint64_t r = 0; r < opt.keys; r++)
        zcdf[r] /= sum;
    perm_a = 1000003 % opt.keys;
    if (perm_a == 0)
        perm_a = 1;
    while (gcd(perm_a, opt.keys) != 1)
        perm_a++;
}

/* A Zipf rank: binary search of the CDF, O(log keys). */
static uint64_t zipf_rank(uint64_t *st)
{
    double u = uniform(st);
    uint64_t lo = 0, hi = opt.keys - 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (zcdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct stream {
    uint64_t rng, n, in_phase, scan_pos;
    bool scanning;
};

/* The next request's id; *scan says whether it belongs to a scan. */
static uint64_t stream_next(struct stream *s, bool *scan)
{
    if (opt.scan_every) {
        uint64_t len = s->scanning ? opt.scan_len : opt.scan_every;
        if (s->in_phase == len) {
            s->scanning = !s->scanning;
            s->in_phase = 0;
        }
        s->in_phase++;
    }
    *scan = s->scanning;
    s->n++;
    if (s->scanning) {
        uint64_t id = s->scan_pos;
        s->scan_pos = (s->scan_pos + 1) % opt.keys;
        return id;
    }
    return (unsigned __int128)zipf_rank(&s->rng) * perm_a % opt.keys;
}

/* ----------------------------------------------------------- the client */

static int sock_connect(void)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int rc = getaddrinfo(opt.host, opt.port, &hints, &ai);
    if (rc)
        die(1, "%s:%s: %s", opt.host, opt.port, gai_strerror(rc));
    int fd = -1;
    for (struct addrinfo *p = ai; p; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype, p->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, p->ai_addr, p->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0)
        die(1, "connect %s:%s: %s", opt.host, opt.port, strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die(1, "write: %s", w < 0 ? strerror(errno) : "closed");
        p += w;
        n -= (size_t)w;
    }
}

/* The reply buffer: bytes read and not yet parsed are rb[rpos..rlen). */
static char *rb;
static size_t rcap, rpos, rlen;

/* Makes at least `need` unparsed bytes available, reading as needed. */
static void rb_need(int fd, size_t need)
{
    while (rlen - rpos < need) {
        if (rpos > 0) {
            memmove(rb, rb + rpos, rlen - rpos);
            rlen -= rpos;
            rpos = 0;
        }
        if (rcap - rlen < 65536) {
            rcap = rcap * 2 + 65536;
            rb = realloc(rb, rcap);
            if (!rb)
                die(1, "out of memory");
        }
        ssize_t r = read(fd, rb + rlen, rcap - rlen);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die(1, "read: %s", r < 0 ? strerror(errno) : "connection closed");
        rlen += (size_t)r;
    }
}

/* The next reply line (without its CRLF, NUL-terminated in place). */
static char *rb_line(int fd)
{
    size_t scanned = 0;
    for (;;) {
        char *nl = memchr(rb + rpos + scanned, '\n', rlen - rpos - scanned);
        if (nl) {
            char *line = rb + rpos;
            size_t len = (size_t)(nl - line);
            if (len == 0 || line[len - 1] != '\r')
                die(1, "reply line not ended by CRLF");
            line[len - 1] = '\0';
            rpos += len + 1;
            return line;
        }
        scanned = rlen - rpos;
        rb_need(fd, scanned + 1);
    }
}

struct counts {
    uint64_t req, hit, zreq, zhit, sreq, shit, sets;
};

/* One batch: ids[0..n) were sent as one multi-get; reads its reply and
 * appends a noreply set of each key that missed (once) to out. */
static void batch_reply(int fd, const uint64_t *ids, const bool *scan, int n, bool counted,
                        struct counts *c, char *out, size_t *olen, const char *value)
{
    bool hit[BATCH_MAX] = {false};
    int at = 0;
    for (;;) {
        char *line = rb_line(fd);
        if (!strcmp(line, "END"))
            break;
        char key[64];
        unsigned flags;
        size_t bytes;
        if (sscanf(line, "VALUE %63s %u %zu", key, &flags, &bytes) != 3)
            die(1, "unexpected reply: %.80s", line);
        rb_need(fd, bytes + 2);
        rpos += bytes + 2;
        char want[KEYLEN + 1];
        while (at < n) {            /* replies come in request order, misses left out */
            snprintf(want, sizeof want, "h:%010llu", (unsigned long long)ids[at]);
            if (!strcmp(want, key))
                break;
            at++;
        }
        if (at == n)
            die(1, "reply for a key not asked for: %s", key);
        hit[at++] = true;
    }
    for (int i = 0; i < n; i++) {
        bool h = hit[i], first = true;
        for (int j = 0; j < i && first; j++)
            first = ids[j] != ids[i];
        if (!first)
            h = true;               /* the first request set it (or it was there) */
        else if (!h) {
            *olen += (size_t)sprintf(out + *olen, "set h:%010llu 0 0 %zu noreply\r\n",
                                     (unsigned long long)ids[i], opt.vsize);
            memcpy(out + *olen, value, opt.vsize);
            *olen += opt.vsize;
            memcpy(out + *olen, "\r\n", 2);
            *olen += 2;
        }
        if (!counted)
            continue;
        c->req++;
        c->hit += h;
        if (scan[i]) {
            c->sreq++;
            c->shit += h;
        } else {
            c->zreq++;
            c->zhit += h;
        }
        if (first && !hit[i])
            c->sets++;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double ratio(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

static void run(void)
{
    int fd = sock_connect();
    char *value = malloc(opt.vsize + 1);
    size_t ocap = (size_t)opt.batch * (opt.vsize + 64) * 2 + 64;
    char *out = malloc(ocap);
    if (!value || !out)
        die(1, "out of memory");
    memset(value, 'v', opt.vsize);
    struct stream st = {.rng = mix64(opt.seed)};
    struct counts c = {0};
    uint64_t ids[BATCH_MAX];
    bool scan[BATCH_MAX];
    size_t olen = 0;
    uint64_t total = opt.warmup + opt.requests;
    double t0 = opt.warmup ? 0 : now_s();
    while (st.n < total) {
        bool counted = st.n >= opt.warmup;
        if (counted && t0 == 0)
            t0 = now_s();
        int n = 0;
        memcpy(out + olen, "get", 3);
        olen += 3;
        /* a batch never straddles the end of the warm-up */
        uint64_t end = counted ? total : opt.warmup;
        while (n < opt.batch && st.n < end) {
            ids[n] = stream_next(&st, &scan[n]);
            olen += (size_t)sprintf(out + olen, " h:%010llu", (unsigned long long)ids[n]);
            n++;
        }
        memcpy(out + olen, "\r\n", 2);
        olen += 2;
        send_all(fd, out, olen);
        olen = 0;
        batch_reply(fd, ids, scan, n, counted, &c, out, &olen, value);
    }
    /* the last sets, then a round trip so that they are done */
    memcpy(out + olen, "version\r\n", 9);
    send_all(fd, out, olen + 9);
    char *v = rb_line(fd);
    if (strncmp(v, "VERSION", 7))
        die(1, "unexpected reply to version: %.80s", v);
    double secs = now_s() - t0;
    printf("{\"requests\": %llu, \"hits\": %llu, \"hit_ratio\": %.5f, "
           "\"zipf_requests\": %llu, \"zipf_hits\": %llu, \"zipf_hit_ratio\": %.5f, "
           "\"scan_requests\": %llu, \"scan_hits\": %llu, \"scan_hit_ratio\": %.5f, "
           "\"sets\": %llu, \"seconds\": %.3f, \"zipf_s\": %g, \"keys\": %llu}\n",
           (unsigned long long)c.req, (unsigned long long)c.hit, ratio(c.hit, c.req),
           (unsigned long long)c.zreq, (unsigned long long)c.zhit, ratio(c.zhit, c.zreq),
           (unsigned long long)c.sreq, (unsigned long long)c.shit, ratio(c.shit, c.sreq),
           (unsigned long long)c.sets, secs, opt.zipf_s, (unsigned long long)opt.keys);
    close(fd);
    free(value);
    free(out);
}

/* ---------------------------------------------------------------- options */

static uint64_t num(const char *name, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end)
        die(2, "%s: not a number: '%s'", name, s);
    return v;
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: kura-hitbench [options]   (a cache's hit ratio, get then set on a miss)\n"
"  -h, --host H          server host (default 127.0.0.1)\n"
"  -p, --port P          TCP port (default 11211)\n"
"  -k, --keys N          key space (default 2000000); keys are h:<10 digits>\n"
"  -z, --zipf S          Zipf exponent, any S > 0 (default 0.99)\n"
"  -n, --requests R      requests counted (default 2000000)\n"
"  -w, --warmup W        requests before them, not counted (default 1000000)\n"
"  -v, --value-size B    value set on a miss (default 300)\n"
"  -b, --batch K         keys a multi-get (default 100, at most %d)\n"
"      --scan EVERY:LEN  after each EVERY Zipf requests, LEN sequential ones\n"
"      --seed X          random seed (default 1)\n"
"Prints one JSON line.  Exit: 0 ok, 1 connection or protocol error, 2 usage.\n",
            BATCH_MAX);
}

int main(int argc, char **argv)
{
    enum { O_SCAN = 256, O_SEED, O_HELP };
    static const struct option lo[] = {
        {"host", 1, 0, 'h'}, {"port", 1, 0, 'p'}, {"keys", 1, 0, 'k'}, {"zipf", 1, 0, 'z'},
        {"requests", 1, 0, 'n'}, {"warmup", 1, 0, 'w'}, {"value-size", 1, 0, 'v'},
        {"batch", 1, 0, 'b'}, {"scan", 1, 0, O_SCAN}, {"seed", 1, 0, O_SEED},
        {"help", 0, 0, O_HELP}, {0, 0, 0, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "h:p:k:z:n:w:v:b:", lo, NULL)) != -1) {
        switch (ch) {
        case 'h': opt.host = optarg; break;
        case 'p': opt.port = optarg; break;
        case 'k': opt.keys = num("--keys", optarg); break;
        case 'z': opt.zipf_s = strtod(optarg, NULL); break;
        case 'n': opt.requests = num("--requests", optarg); break;
        case 'w': opt.warmup = num("--warmup", optarg); break;
        case 'v': opt.vsize = (size_t)num("--value-size", optarg); break;
        case 'b': opt.batch = (int)num("--batch", optarg); break;
        case O_SCAN:
            if (sscanf(optarg, "%llu:%llu", (unsigned long long *)&opt.scan_every,
                       (unsigned long long *)&opt.scan_len) != 2 || !opt.scan_every ||
                !opt.scan_len)
                die(2, "--scan: EVERY:LEN, both above 0, not '%s'", optarg);
            break;
        case O_SEED: opt.seed = num("--seed", optarg); break;
        case O_HELP: usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc)
        die(2, "unexpected argument '%s'", argv[optind]);
    if (opt.keys < 1 || opt.keys > 9999999999ull)
        die(2, "--keys must be 1..9999999999");
    if (!(opt.zipf_s > 0))
        die(2, "--zipf must be above 0");
    if (opt.batch < 1 || opt.batch > BATCH_MAX)
        die(2, "--batch must be 1..%d", BATCH_MAX);
    if (opt.vsize < 1 || opt.vsize > 1000000)
        die(2, "--value-size must be 1..1000000");
    stream_init();
    run();
    free(zcdf);
    free(rb);
    return 0;
}

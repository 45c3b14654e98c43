/*
 * test_text.c - the text protocol parser and the engine, without a network.
 *
 * Feeds request bytes to a session (kura_session_process, which picks the
 * text protocol from the first byte) over an in-memory cache and checks
 * the reply bytes: every command, memcached's error strings and number
 * quirks, noreply, pipelining, values split across reads (down to one byte
 * at a time), swallowing a refused value, and the long-line rule; the bound
 * on output (a multi-get of large values pauses at the high-water mark and
 * resumes byte-exact, a too-long key after the pause point still gives only
 * memcached's CLIENT_ERROR) and a long line scanned once however it arrives;
 * the command table (registered commands and stats groups, a hand-off).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "kura/proto.h"
#include "kura/testhooks.h"
#include "../../src/proto/proto_int.h"     /* the session's newline scan, checked below */
#include "unit.h"

typedef struct harness {
    kura_engine *engine;
    kura_server_info info;
    kura_thread_stats stats[2];
    kura_cmdtab *cmds;
    kura_session *s;
    kura_buf in, out, acc;
} harness;

static void h_open(harness *h, size_t item_max)
{
    memset(h, 0, sizeof(*h));
    kura_store_config cfg = { .mem_limit = 64 << 20, .item_size_max = item_max };
    kura_store *st;
    char err[256];
    if (kura_store_open("*", &cfg, &st, err, sizeof(err)) != KURA_OK)
        abort();
    kura_engine_config ecfg = { .item_size_max = item_max };
    if (engine_open(&h->engine, st, &ecfg) != KURA_OK)
        abort();
    h->info.nthreads = 1;
    h->info.thread_stats = h->stats;
    pthread_mutex_init(&h->info.reset_lock, NULL);
    h->cmds = kura_cmdtab_new();
    kura_session_config sc = {
        .engine = h->engine, .stats = &h->stats[0], .server = &h->info, .cmds = h->cmds,
    };
    h->s = kura_session_new(&sc);
    if (!h->cmds || !h->s)
        abort();
}

static void h_close(harness *h)
{
    kura_session_free(h->s);
    kura_cmdtab_free(h->cmds);
    engine_close(h->engine);
    kura_buf_free(&h->in);
    kura_buf_free(&h->out);
    kura_buf_free(&h->acc);
}

/* Appends what out would send, its referenced values included (a large
 * value of the cache or the tree goes out by reference: kura_buf_iov), to
 * to, as a connection's writer would. */
static void take_sent(const kura_buf *out, kura_buf *to)
{
    struct iovec iov[64];
    for (size_t pos = 0, total = kura_buf_size(out); pos < total;) {
        int k = kura_buf_iov(out, pos, iov, 64);
        for (int i = 0; i < k; i++) {
            kura_buf_append(to, iov[i].iov_base, iov[i].iov_len);
            pos += iov[i].iov_len;
        }
        if (k == 0)
            break;
    }
}

/* Appends bytes to the input, runs the parser as a connection would, and
 * returns the replies produced (NUL-terminated, reset for the next call). */
static const char *feed(harness *h, const char *data, size_t len)
{
    kura_buf_append(&h->in, data, len);
    h->acc.len = 0;
    for (;;) {
        size_t need = kura_session_need(h->s);
        if (h->in.len == 0 || (need && h->in.len < need))
            break;
        kura_buf_clear(&h->out);
        size_t used = kura_session_process(h->s, h->in.data, h->in.len, &h->out);
        take_sent(&h->out, &h->acc);  /* "sent" */
        memmove(h->in.data, h->in.data + used, h->in.len - used);
        h->in.len -= used;
        if (kura_session_closing(h->s) || (used == 0 && !kura_session_out_full(h->s)))
            break;
    }
    kura_buf_append(&h->acc, "", 1);
    h->acc.len--;
    return h->acc.data;
}

#define SEND(h, lit) feed((h), (lit), sizeof(lit) - 1)

static void test_set_get(void)
{
    harness h;
    h_open(&h, 1 << 20);
    CHECK_EQ_STR(SEND(&h, "set foo 5 0 3\r\nbar\r\n"), "STORED\r\n");
    CHECK_EQ_STR(SEND(&h, "get foo\r\n"), "VALUE foo 5 3\r\nbar\r\nEND\r\n");
    CHECK_EQ_STR(SEND(&h, "get nope foo nope\r\n"), "VALUE foo 5 3\r\nbar\r\nEND\r\n");
    CHECK_EQ_STR(SEND(&h, "set e 0 0 0\r\n\r\nget e\r\n"),
                 "STORED\r\nVALUE e 0 0\r\n\r\nEND\r\n");
    /* a bare \n ends a line too */
    CHECK_EQ_STR(SEND(&h, "get foo\n"), "VALUE foo 5 3\r\nbar\r\nEND\r\n");
    h_close(&h);
}

static void test_gets_cas(void)
{
    harness h;
    h_open(&h, 1 << 20);
    SEND(&h, "set k 0 0 1\r\na\r\n");
    const char *r = SEND(&h, "gets k\r\n");
    unsigned long long cas = 0;
    REQUIRE(sscanf(r, "VALUE k 0 1 %llu", &cas) == 1);
    char req[128];
    snprintf(req, sizeof(req), "cas k 0 0 1 %llu\r\nb\r\n", cas + 1);
    CHECK_EQ_STR(feed(&h, req, strlen(req)), "EXISTS\r\n");
    snprintf(req, sizeof(req), "cas k 0 0 1 %llu\r\nb\r\n", cas);
    CHECK_EQ_STR(feed(&h, req, strlen(req)), "STORED\r\n");
    CHECK_EQ_STR(feed(&h, req, strlen(req)), "EXISTS\r\n");
    CHECK_EQ_STR(SEND(&h, "cas none 0 0 1 1\r\nb\r\n"), "NOT_FOUND\r\n");
    CHECK_EQ_STR(SEND(&h, "cas k 0 0 1 x\r\nb\r\n"),
                 "CLIENT_ERROR bad command line format\r\nERROR\r\n");
    h_close(&h);
}

static void test_add_replace_append(void)
{
    harness h;
    h_open(&h, 1 << 20);
    CHECK_EQ_STR(SEND(&h, "add a 1 0 1\r\nx\r\nadd a 1 0 1\r\ny\r\n"), "STORED\r\nNOT_STORED\r\n");
    CHECK_EQ_STR(SEND(&h, "replace b 0 0 1\r\nx\r\nreplace a 2 0 1\r\nz\r\n"),
                 "NOT_STORED\r\nSTORED\r\n");
    CHECK_EQ_STR(SEND(&h, "append a 9 0 2\r\n>>\r\nprepend a 9 0 2\r\n<<\r\nget a\r\n"),
                 "STORED\r\nSTORED\r\nVALUE a 2 5\r\n<<z>>\r\nEND\r\n");
    CHECK_EQ_STR(SEND(&h, "append none 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
    h_close(&h);
}

static void test_incr_decr(void)
{
    harness h;
    h_open(&h, 1 << 20);
    SEND(&h, "set n 0 0 3\r\n100\r\n");
    CHECK_EQ_STR(SEND(&h, "decr n 1\r\n"), "99\r\n");
    /* memcached pads a shorter number with spaces in place */
    CHECK_EQ_STR(SEND(&h, "get n\r\n"), "VALUE n 0 3\r\n99 \r\nEND\r\n");
    CHECK_EQ_STR(SEND(&h, "decr n 1000\r\n"), "0\r\n");
    SEND(&h, "set m 0 0 20\r\n18446744073709551615\r\n");
    CHECK_EQ_STR(SEND(&h, "incr m 2\r\n"), "1\r\n");
    CHECK_EQ_STR(SEND(&h, "incr nope 1\r\n"), "NOT_FOUND\r\n");
    CHECK_EQ_STR(SEND(&h, "incr m -1\r\n"), "CLIENT_ERROR invalid numeric delta argument\r\n");
    SEND(&h, "set s 0 0 3\r\nabc\r\n");
    CHECK_EQ_STR(SEND(&h, "incr s 1\r\n"),
                 "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
    SEND(&h, "set g 0 0 1\r\n9\r\n");
    CHECK_EQ_STR(SEND(&h, "incr g 1\r\nget g\r\n"), "10\r\nVALUE g 0 2\r\n10\r\nEND\r\n");
    h_close(&h);
}

static void test_delete_touch(void)
{
    harness h;
    h_open(&h, 1 << 20);
    SEND(&h, "set d 0 0 1\r\nx\r\n");
    CHECK_EQ_STR(SEND(&h, "delete d 1\r\n"),
                 "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n");
    CHECK_EQ_STR(SEND(&h, "delete d 0\r\ndelete d\r\n"), "DELETED\r\nNOT_FOUND\r\n");
    CHECK_EQ_STR(SEND(&h, "touch d 10\r\n"), "NOT_FOUND\r\n");
    SEND(&h, "set d 0 0 1\r\nx\r\n");
    CHECK_EQ_STR(SEND(&h, "touch d 10\r\ntouch d x\r\n"),
                 "TOUCHED\r\nCLIENT_ERROR invalid exptime argument\r\n");
    CHECK_EQ_STR(SEND(&h, "gat 100 d\r\n"), "VALUE d 0 1\r\nx\r\nEND\r\n");
    /* a negative exptime expires at once */
    CHECK_EQ_STR(SEND(&h, "touch d -1\r\nget d\r\n"), "TOUCHED\r\nEND\r\n");
    h_close(&h);
}

static void test_noreply(void)
{
    harness h;
    h_open(&h, 1 << 20);
    CHECK_EQ_STR(SEND(&h, "set a 0 0 1 noreply\r\nx\r\nadd a 0 0 1 noreply\r\ny\r\n"
                          "incr a 1 noreply\r\ndelete a noreply\r\nflush_all noreply\r\n"), "");
    /* noreply silences errors too, as in memcached */
    CHECK_EQ_STR(SEND(&h, "set a 0 0 1 noreply\r\nxx\r\n"), "ERROR\r\n");
    h_close(&h);
}

static void test_errors(void)
{
    harness h;
    h_open(&h, 1 << 20);
    CHECK_EQ_STR(SEND(&h, "bogus\r\n\r\nget\r\nGET a\r\n"), "ERROR\r\nERROR\r\nERROR\r\nERROR\r\n");
    CHECK_EQ_STR(SEND(&h, "set a 0 0 -1\r\n"), "CLIENT_ERROR bad command line format\r\n");
    CHECK_EQ_STR(SEND(&h, "set a x 0 1\r\n"), "CLIENT_ERROR bad command line format\r\n");
    CHECK_EQ_STR(SEND(&h, "set a 0 0 1 2 3\r\n"), "ERROR\r\n");
    CHECK_EQ_STR(SEND(&h, "set a 0 0 3\r\nabcde\r\n"), "CLIENT_ERROR bad data chunk\r\nERROR\r\n");
    char key[300];
    memset(key, 'k', sizeof(key));
    char req[400];
    snprintf(req, sizeof(req), "get %.251s\r\n", key);
    CHECK_EQ_STR(feed(&h, req, strlen(req)), "CLIENT_ERROR bad command line format\r\n");
    snprintf(req, sizeof(req), "set %.250s 0 0 1\r\nx\r\n", key);
    CHECK_EQ_STR(feed(&h, req, strlen(req)), "STORED\r\n");
    /* memcached keeps the low 32 bits of 32-bit fields */
    CHECK_EQ_STR(SEND(&h, "set w 4294967297 0 4294967297\r\nx\r\nget w\r\n"),
                 "STORED\r\nVALUE w 1 1\r\nx\r\nEND\r\n");
    CHECK_EQ_STR(SEND(&h, "flush_all x\r\n"), "CLIENT_ERROR invalid exptime argument\r\n");
    h_close(&h);
}

static void test_too_large(void)
{
    harness h;
    h_open(&h, 1024 * 1024);
    SEND(&h, "set b 0 0 1\r\nx\r\n");
    size_t n = 2000000;
    char *req = malloc(n + 64);
    int hl = sprintf(req, "set b 0 0 %zu\r\n", n);
    memset(req + hl, 'y', n);
    memcpy(req + hl + n, "\r\nget b\r\n", 9);
    CHECK_EQ_STR(feed(&h, req, (size_t)hl + n + 9),
                 "SERVER_ERROR object too large for cache\r\nEND\r\n");
    /* the largest value memcached accepts for a 1-byte key and no flags */
    size_t max = 1024 * 1024 - (48 + 8 + 1 + 1 + 2);
    hl = sprintf(req, "set b 0 0 %zu\r\n", max);
    memset(req + hl, 'z', max);
    memcpy(req + hl + max, "\r\n", 2);
    CHECK_EQ_STR(feed(&h, req, (size_t)hl + max + 2), "STORED\r\n");
    hl = sprintf(req, "set b 1 0 %zu\r\n", max);
    memset(req + hl, 'z', max);
    memcpy(req + hl + max, "\r\n", 2);
    CHECK_EQ_STR(feed(&h, req, (size_t)hl + max + 2), "SERVER_ERROR object too large for cache\r\n");
    free(req);
    h_close(&h);
}

static void test_byte_at_a_time(void)
{
    harness h;
    h_open(&h, 1 << 20);
    const char req[] = "set slow 3 0 5\r\nhello\r\nget slow\r\n";
    kura_buf all = {0};
    for (size_t i = 0; i < sizeof(req) - 1; i++) {
        const char *r = feed(&h, req + i, 1);
        kura_buf_append(&all, r, strlen(r));
    }
    kura_buf_append(&all, "", 1);
    CHECK_EQ_STR(all.data, "STORED\r\nVALUE slow 3 5\r\nhello\r\nEND\r\n");
    kura_buf_free(&all);
    h_close(&h);
}

static void test_pipeline_and_multiget(void)
{
    harness h;
    h_open(&h, 1 << 20);
    kura_buf req = {0}, want = {0};
    char line[64];
    for (int i = 0; i < 200; i++) {
        int n = sprintf(line, "set k%d 0 0 2\r\n%02d\r\n", i, i % 100);
        kura_buf_append(&req, line, (size_t)n);
        KURA_BUF_LIT(&want, "STORED\r\n");
    }
    KURA_BUF_LIT(&req, "get");
    for (int i = 0; i < 200; i++) {
        int n = sprintf(line, " k%d", i);
        kura_buf_append(&req, line, (size_t)n);
        n = sprintf(line, "VALUE k%d 0 2\r\n%02d\r\n", i, i % 100);
        kura_buf_append(&want, line, (size_t)n);
    }
    KURA_BUF_LIT(&req, "\r\n");
    KURA_BUF_LIT(&want, "END\r\n");
    kura_buf_append(&want, "", 1);
    CHECK_EQ_STR(feed(&h, req.data, req.len), want.data);
    kura_buf_free(&req);
    kura_buf_free(&want);
    h_close(&h);
}

/* One call answers at most KURA_REQUESTS_PER_CALL requests of a pipeline,
 * then pauses (out_full) with the rest unconsumed, and a listing answers a
 * slice of its keys a call: the connection's turn ends there and the
 * worker's other connections have theirs.  Fails if either bound goes. */
static void test_work_per_call_bounded(void)
{
    harness h;
    h_open(&h, 1 << 20);
    if (listing_register(h.cmds) != KURA_OK)
        abort();
    kura_buf req = {0};
    int n = 3 * KURA_REQUESTS_PER_CALL;
    for (int i = 0; i < n; i++)
        KURA_BUF_LIT(&req, "get nokey\r\n");
    kura_buf_clear(&h.out);
    size_t used = kura_session_process(h.s, req.data, req.len, &h.out);
    CHECK(kura_session_out_full(h.s));
    CHECK_EQ_INT(used, KURA_REQUESTS_PER_CALL * strlen("get nokey\r\n"));
    CHECK_EQ_INT(h.out.len, KURA_REQUESTS_PER_CALL * strlen("END\r\n"));
    /* the whole pipeline, over as many calls, answers every request */
    const char *all = feed(&h, req.data + used, req.len - used);
    CHECK_EQ_INT(strlen(all), (size_t)(n - KURA_REQUESTS_PER_CALL) * strlen("END\r\n"));

    req.len = 0;
    char line[64];
    for (int i = 0; i < 5000; i++) {
        int k = sprintf(line, "set k%05d 0 0 1 noreply\r\nv\r\n", i);
        kura_buf_append(&req, line, (size_t)k);
    }
    feed(&h, req.data, req.len);
    kura_buf_clear(&h.out);
    used = kura_session_process(h.s, "keys\r\n", 6, &h.out);
    CHECK_EQ_INT(used, 0);                      /* paused: the line stays */
    CHECK(kura_session_out_full(h.s));
    size_t keys = 0;
    for (size_t i = 0; i + 4 <= h.out.len; i++)
        keys += memcmp(h.out.data + i, "KEY ", 4) == 0;
    CHECK(keys > 0 && keys < 5000);
    kura_buf_free(&req);
    h_close(&h);
}

/* Answers req over as many calls as the session asks for, as a
 * connection would (one call a turn), into h->acc; returns the calls. */
static int calls_to_answer(harness *h, const char *req)
{
    size_t len = strlen(req);
    int calls = 0;
    h->acc.len = 0;
    for (;;) {
        kura_buf_clear(&h->out);
        size_t used = kura_session_process(h->s, (char *)req, len, &h->out);
        kura_buf_append(&h->acc, h->out.data, h->out.len);
        calls++;
        if (used == len || calls > 100000)
            break;
        if (used != 0 || !kura_session_out_full(h->s))
            abort();                    /* a paused walk keeps its whole line */
    }
    kura_buf_append(&h->acc, "", 1);
    return calls;
}

/* A listing in key order on a store without order (keys limit=, rget) and
 * a digest (both forms) take their walk over many calls, each bounded to
 * about LIST_TURN_VISITS items of the store: the first call answers
 * nothing yet (its pass over the store is not complete), and the reply
 * gathered over the calls is the one a single unbounded call gives.
 * Negative check: with kura_test.list_inline (the walk whole on the
 * worker, as before the bound) the first call answers everything. */
static void test_walks_bounded(void)
{
    harness h;
    h_open(&h, 1 << 20);
    if (listing_register(h.cmds) != KURA_OK || digest_register(h.cmds) != KURA_OK)
        abort();
    int n = 3 * LIST_TURN_VISITS;
    kura_buf req = {0};
    char line[64];
    for (int i = 0; i < n; i++) {
        int k = sprintf(line, "set k%05d 0 0 1 noreply\r\nv\r\n", i);
        kura_buf_append(&req, line, (size_t)k);
    }
    feed(&h, req.data, req.len);
    static const char *reqs[] = {
        "keys limit=11000\r\n", "rget k00000 k99999 0 0 11000\r\n", "digest 16\r\n",
        "digest 16 3\r\n",
    };
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        kura_test.list_inline = true;
        CHECK_EQ_INT(calls_to_answer(&h, reqs[i]), 1);
        char *whole = strdup(h.acc.data);
        kura_test.list_inline = false;
        kura_buf_clear(&h.out);
        size_t used = kura_session_process(h.s, (char *)reqs[i], strlen(reqs[i]), &h.out);
        CHECK_EQ_INT(used, 0);
        CHECK(kura_session_out_full(h.s));
        CHECK_EQ_INT(h.out.len, 0);
        int calls = calls_to_answer(&h, reqs[i]);
        CHECK(calls + 1 >= n / LIST_TURN_VISITS);   /* the first call above, then these */
        CHECK_EQ_STR(h.acc.data, whole);
        CHECK(strlen(whole) > 100 && strcmp(whole + strlen(whole) - 5, "END\r\n") == 0);
        free(whole);
    }
    /* A client gone mid-walk: freeing its session frees the walk (a batch
     * held, a digest's sums); a leak here fails under AddressSanitizer. */
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        kura_buf_clear(&h.out);
        CHECK_EQ_INT(kura_session_process(h.s, (char *)reqs[i], strlen(reqs[i]), &h.out), 0);
        CHECK(kura_session_out_full(h.s));
        kura_session_free(h.s);
        kura_session_config sc = {
            .engine = h.engine, .stats = &h.stats[0], .server = &h.info, .cmds = h.cmds,
        };
        h.s = kura_session_new(&sc);
        if (!h.s)
            abort();
    }
    kura_buf_free(&req);
    h_close(&h);
}

/* At most WALKS_MAX listings and digests are under way at once (each holds
 * a batch between its turns); one more is answered WALKS_BUSY_REPLY at
 * once, and is taken again when one of them ended (here: its client went). */
static void test_walks_capped(void)
{
    harness h;
    h_open(&h, 1 << 20);
    if (listing_register(h.cmds) != KURA_OK || digest_register(h.cmds) != KURA_OK)
        abort();
    kura_buf req = {0};
    char line[64];
    for (int i = 0; i < 3 * LIST_TURN_VISITS; i++) {
        int k = sprintf(line, "set k%05d 0 0 1 noreply\r\nv\r\n", i);
        kura_buf_append(&req, line, (size_t)k);
    }
    feed(&h, req.data, req.len);
    kura_session_config sc = {
        .engine = h.engine, .stats = &h.stats[0], .server = &h.info, .cmds = h.cmds,
    };
    kura_session *busy[WALKS_MAX];
    char keys[] = "keys limit=11000\r\n", dig[] = "digest 16\r\n";
    for (int i = 0; i < WALKS_MAX; i++) {
        busy[i] = kura_session_new(&sc);
        kura_buf_clear(&h.out);
        CHECK_EQ_INT(kura_session_process(busy[i], i % 2 ? keys : dig,
                                          strlen(i % 2 ? keys : dig), &h.out), 0);
    }
    CHECK_EQ_STR(feed(&h, keys, strlen(keys)), WALKS_BUSY_REPLY "\r\n");
    CHECK_EQ_STR(feed(&h, dig, strlen(dig)), WALKS_BUSY_REPLY "\r\n");
    kura_session_free(busy[0]);
    kura_buf_clear(&h.out);
    CHECK_EQ_INT(kura_session_process(h.s, keys, strlen(keys), &h.out), 0);   /* under way */
    for (int i = 1; i < WALKS_MAX; i++)
        kura_session_free(busy[i]);
    kura_buf_free(&req);
    h_close(&h);
}

static void test_long_line(void)
{
    harness h;
    h_open(&h, 1 << 20);
    char junk[3000];
    memset(junk, 'x', sizeof(junk));
    CHECK_EQ_STR(feed(&h, junk, sizeof(junk)), "");
    CHECK(kura_session_closing(h.s));
    h_close(&h);

    h_open(&h, 1 << 20);
    memcpy(junk, "get ", 4);
    CHECK_EQ_STR(feed(&h, junk, sizeof(junk)), "");
    CHECK(!kura_session_closing(h.s));                  /* a long multi-get may continue */
    h_close(&h);
}

/* A multi-get whose replies pass the high-water mark: each call stops with
 * out_full and at most the mark plus one value queued; the whole reply,
 * gathered over the calls, is byte-exact. */
static void test_get_pauses_at_high_water(void)
{
    harness h;
    h_open(&h, 2 << 20);
    size_t vlen = 300 * 1024, nkeys = 40;
    char *val = malloc(vlen), *cmd = malloc(64 + vlen);
    REQUIRE(val && cmd);
    for (size_t i = 0; i < vlen; i++)
        val[i] = (char)('a' + i % 26);
    int n = snprintf(cmd, 64, "set v 3 0 %zu\r\n", vlen);
    memcpy(cmd + n, val, vlen);
    memcpy(cmd + n + vlen, "\r\n", 2);
    CHECK_EQ_STR(feed(&h, cmd, (size_t)n + vlen + 2), "STORED\r\n");

    kura_buf line = {0};
    KURA_BUF_LIT(&line, "get");
    for (size_t i = 0; i < nkeys; i++)
        KURA_BUF_LIT(&line, " v");
    KURA_BUF_LIT(&line, "\r\nget v\r\n");        /* pipelined after it */
    kura_buf_append(&h.in, line.data, line.len);
    kura_buf want = {0};
    for (size_t i = 0; i < nkeys + 1; i++) {
        char hdr[64];
        int hn = snprintf(hdr, sizeof(hdr), "VALUE v 3 %zu\r\n", vlen);
        kura_buf_append(&want, hdr, (size_t)hn);
        kura_buf_append(&want, val, vlen);
        KURA_BUF_LIT(&want, "\r\n");
        if (i == nkeys - 1 || i == nkeys)
            KURA_BUF_LIT(&want, "END\r\n");
    }
    kura_buf got = {0};
    int calls = 0, paused = 0;
    while (h.in.len > 0 && calls < 1000) {
        kura_buf_clear(&h.out);
        size_t used = kura_session_process(h.s, h.in.data, h.in.len, &h.out);
        CHECK(h.out.len <= KURA_REPLY_HIGH_WATER + vlen + 64);
        paused += kura_session_out_full(h.s);
        take_sent(&h.out, &got);
        memmove(h.in.data, h.in.data + used, h.in.len - used);
        h.in.len -= used;
        calls++;
        if (used == 0 && !kura_session_out_full(h.s))
            break;
    }
    CHECK(paused >= 5);
    CHECK_EQ_INT(got.len, want.len);
    CHECK(got.len == want.len && memcmp(got.data, want.data, got.len) == 0);
    CHECK_EQ_INT(h.in.len, 0);

    /* A too-long key after the pause point: only CLIENT_ERROR, as memcached
     * (which drops the values it had stacked). */
    line.len = 0;
    KURA_BUF_LIT(&line, "get");
    for (size_t i = 0; i < nkeys; i++)
        KURA_BUF_LIT(&line, " v");
    KURA_BUF_LIT(&line, " ");
    for (int i = 0; i < 251; i++)
        KURA_BUF_LIT(&line, "k");
    KURA_BUF_LIT(&line, "\r\n");
    CHECK_EQ_STR(feed(&h, line.data, line.len), "CLIENT_ERROR bad command line format\r\n");
    CHECK(!kura_session_closing(h.s));
    CHECK_EQ_STR(SEND(&h, "get nope\r\n"), "END\r\n");
    kura_buf_free(&line);
    kura_buf_free(&want);
    kura_buf_free(&got);
    free(val);
    free(cmd);
    h_close(&h);
}

/* A long get line arriving a few bytes at a time: the newline search goes
 * on from where it stopped (s.scan tracks the bytes seen). */
static void test_long_line_scanned_once(void)
{
    harness h;
    h_open(&h, 1 << 20);
    SEND(&h, "set a 0 0 1\r\nx\r\n");
    size_t nkeys = 20000;
    kura_buf line = {0};
    KURA_BUF_LIT(&line, "get");
    for (size_t i = 0; i < nkeys; i++)
        KURA_BUF_LIT(&line, " a");
    KURA_BUF_LIT(&line, "\r\n");
    kura_buf got = {0};
    for (size_t off = 0; off < line.len; off += 7) {
        size_t n = line.len - off < 7 ? line.len - off : 7;
        const char *r = feed(&h, line.data + off, n);
        kura_buf_append(&got, r, strlen(r));
        if (off + n < line.len)
            CHECK(h.s->scan == h.in.len);
    }
    size_t per = strlen("VALUE a 0 1\r\nx\r\n");
    CHECK_EQ_INT(got.len, nkeys * per + 5);
    CHECK(got.len >= 5 && memcmp(got.data + got.len - 5, "END\r\n", 5) == 0);
    kura_buf_free(&line);
    kura_buf_free(&got);
    h_close(&h);
}

static void test_flush_and_quit(void)
{
    harness h;
    h_open(&h, 1 << 20);
    SEND(&h, "set a 0 0 1\r\nx\r\n");
    CHECK_EQ_STR(SEND(&h, "flush_all\r\nget a\r\nset a 0 0 1\r\ny\r\nget a\r\n"),
                 "OK\r\nEND\r\nSTORED\r\nVALUE a 0 1\r\ny\r\nEND\r\n");
    CHECK_EQ_STR(SEND(&h, "flush_all 100\r\nget a\r\n"), "OK\r\nVALUE a 0 1\r\ny\r\nEND\r\n");
    CHECK_EQ_STR(SEND(&h, "version\r\nquit\r\nget a\r\n"), "VERSION " KURA_MEMCACHED_VERSION "\r\n");
    CHECK(kura_session_closing(h.s));
    h_close(&h);
}

static void test_stats(void)
{
    harness h;
    h_open(&h, 1 << 20);
    SEND(&h, "set a 0 0 1\r\nx\r\nget a\r\nget b\r\n");
    const char *r = SEND(&h, "stats\r\n");
    CHECK(strstr(r, "STAT cmd_get 2\r\n") != NULL);
    CHECK(strstr(r, "STAT get_hits 1\r\n") != NULL);
    CHECK(strstr(r, "STAT cmd_set 1\r\n") != NULL);
    CHECK(strstr(r, "STAT curr_items 1\r\n") != NULL);
    CHECK(strstr(r, "STAT cas_badval 0\r\n") != NULL);
    CHECK(strlen(r) > 5 && strcmp(r + strlen(r) - 5, "END\r\n") == 0);
    CHECK_EQ_STR(SEND(&h, "stats reset\r\n"), "RESET\r\n");
    r = SEND(&h, "stats\r\n");
    CHECK(strstr(r, "STAT cmd_get 0\r\n") != NULL);
    r = SEND(&h, "stats settings\r\n");
    CHECK(strstr(r, "STAT item_size_max ") != NULL);
    CHECK_EQ_STR(SEND(&h, "stats bogus\r\n"), "ERROR\r\n");
    h_close(&h);
}

/* ---- the command table -------------------------------------------------- */

static int hello_calls;

static void cmd_hello(void *ctx, kura_session *s, text_token *tok, int ntok, kura_buf *out)
{
    uint32_t n = 0;
    hello_calls++;
    if (ntok == 3 && !kura_token_u32(&tok[1], &n)) {
        kura_session_client_error(s, out, "CLIENT_ERROR bad command line format");
        return;
    }
    kura_session_reply(s, out, ctx);
}

static void take_none(void *ctx, int fd, const uint64_t arg[KURA_HANDOFF_ARGS])
{
    (void)ctx; (void)fd; (void)arg;
}

static void cmd_leave(void *ctx, kura_session *s, text_token *tok, int ntok, kura_buf *out)
{
    (void)ctx; (void)tok; (void)ntok;
    kura_session_reply(s, out, "BYE");
    kura_handoff h = { take_none, NULL, { 7, 9 } };
    kura_session_hand_off(s, &h);
}

static void stats_mine(void *ctx, kura_stat_fn emit, void *arg)
{
    emit(arg, "mine", ctx);
}

/* Registered commands are dispatched with their token bounds, cannot take
 * a name already there, and a hand-off ends the session's answers; stats
 * providers answer their group and add to plain "stats". */
static void test_command_table(void)
{
    harness h;
    h_open(&h, 1 << 20);
    kura_command hello = { "hello", cmd_hello, "HI", 2, 3 };
    CHECK_EQ_INT(kura_cmdtab_add(h.cmds, &hello), KURA_OK);
    CHECK_EQ_INT(kura_cmdtab_add(h.cmds, &hello), KURA_EXISTS);
    kura_command clash = { "get", cmd_hello, NULL, -1, -1 };
    CHECK_EQ_INT(kura_cmdtab_add(h.cmds, &clash), KURA_EXISTS);
    kura_command longname = { "a_name_longer_than_thirty_two_bytes", cmd_hello, NULL, -1, -1 };
    CHECK_EQ_INT(kura_cmdtab_add(h.cmds, &longname), KURA_EINVAL);
    kura_command leave = { "leave", cmd_leave, NULL, -1, -1 };
    CHECK_EQ_INT(kura_cmdtab_add(h.cmds, &leave), KURA_OK);
    CHECK_EQ_INT(kura_cmdtab_add_stats(h.cmds, "mygroup", stats_mine, "1"), KURA_OK);
    CHECK_EQ_INT(kura_cmdtab_add_stats(h.cmds, NULL, stats_mine, "2"), KURA_OK);

    CHECK_EQ_STR(SEND(&h, "hello\r\nhello 5\r\n"), "HI\r\nHI\r\n");
    CHECK_EQ_STR(SEND(&h, "hello x\r\nhello 1 2\r\nhell\r\n"),
                 "CLIENT_ERROR bad command line format\r\nERROR\r\nERROR\r\n");
    CHECK_EQ_INT(hello_calls, 3);
    CHECK_EQ_STR(SEND(&h, "stats mygroup\r\nstats othergroup\r\n"),
                 "STAT mine 1\r\nEND\r\nERROR\r\n");
    const char *r = SEND(&h, "stats\r\n");
    CHECK(strstr(r, "STAT mine 2\r\nEND\r\n") != NULL);
    /* built-ins still answer; the server's own commands are not built in */
    CHECK_EQ_STR(SEND(&h, "repl 0 1\r\nsnapshot\r\nversion\r\n"),
                 "ERROR\r\nERROR\r\nVERSION " KURA_MEMCACHED_VERSION "\r\n");

    CHECK(kura_session_handoff(h.s) == NULL);
    CHECK_EQ_STR(SEND(&h, "leave\r\nget a\r\n"), "BYE\r\n");
    const kura_handoff *ho = kura_session_handoff(h.s);
    REQUIRE(ho != NULL);
    CHECK(ho->take == take_none && ho->arg[0] == 7 && ho->arg[1] == 9);
    CHECK(kura_session_closing(h.s));
    h_close(&h);
}

int main(void)
{
    RUN(test_set_get);
    RUN(test_gets_cas);
    RUN(test_add_replace_append);
    RUN(test_incr_decr);
    RUN(test_delete_touch);
    RUN(test_noreply);
    RUN(test_errors);
    RUN(test_too_large);
    RUN(test_byte_at_a_time);
    RUN(test_pipeline_and_multiget);
    RUN(test_work_per_call_bounded);
    RUN(test_walks_bounded);
    RUN(test_walks_capped);
    RUN(test_long_line);
    RUN(test_get_pauses_at_high_water);
    RUN(test_long_line_scanned_once);
    RUN(test_flush_and_quit);
    RUN(test_stats);
    RUN(test_command_table);
    UNIT_DONE();
}

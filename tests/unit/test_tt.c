/*
 * test_tt.c - Tokyo Tyrant's protocol (src/proto/tt.c) without a network:
 * the bounds a connection relies on, and the setmst hook.
 *
 *  - one call answers at most KURA_REQUESTS_PER_CALL requests of a
 *    pipeline, then pauses with the rest unconsumed;
 *  - an fwmkeys over more keys than TT_WALK_SLICE pauses with its request
 *    unconsumed and nothing of its reply out, then completes byte-exact
 *    over further calls;
 *  - a value over -I is answered before its body arrives, and the body is
 *    consumed without being asked for (need stays 0);
 *  - setmst calls the server's hook with what the client sent, answers
 *    its outcome, and answers failure when there is no hook;
 *  - addint from several threads at once on one key (the cache, the hash
 *    file): every request succeeds, the record ends at the exact sum and
 *    each request made one change and no read outside the key's lock (the
 *    read-then-cas addint used to make, retried, fails this), the threads'
 *    replies showing that they interleaved; negative check: that
 *    read-then-cas, one try, loses races under the same load.
 * Each fails if its bound, hook or atomicity goes.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/proto.h"
#include "../../src/proto/tt_int.h"
#include "unit.h"

typedef struct tt_harness {
    kura_engine *engine;
    kura_server_info info;
    kura_thread_stats stats[2];
    kura_session *s;
    kura_buf out;
} tt_harness;

static void open_tt_db(tt_harness *h, const char *dbname)
{
    memset(h, 0, sizeof(*h));
    kura_store_config cfg = { .mem_limit = 64 << 20, .item_size_max = 64 << 10 };
    kura_store *st;
    char err[256];
    kura_engine_config ecfg = { .item_size_max = 64 << 10 };
    if (kura_store_open(dbname, &cfg, &st, err, sizeof(err)) != KURA_OK ||
        engine_open(&h->engine, st, &ecfg) != KURA_OK)
        abort();
    h->info.nthreads = 1;
    h->info.thread_stats = h->stats;
    kura_session_config sc = { .engine = h->engine, .stats = &h->stats[0], .server = &h->info };
    if (!(h->s = kura_session_new(&sc)))
        abort();
}

static void open_tt(tt_harness *h)
{
    open_tt_db(h, "*");
}

static void close_tt(tt_harness *h)
{
    kura_session_free(h->s);
    engine_close(h->engine);
    kura_buf_free(&h->out);
}

static size_t run(tt_harness *h, const void *req, size_t len)
{
    h->out.len = 0;
    return kura_session_process(h->s, (char *)req, len, &h->out);
}

static void be32(kura_buf *b, uint32_t v)
{
    unsigned char p[4];
    put_be32(p, v);
    kura_buf_append(b, p, 4);
}

static void put_req(kura_buf *b, uint8_t cmd, const char *k, const char *v)
{
    kura_buf_append(b, "\xc8", 1);
    kura_buf_append(b, &cmd, 1);
    be32(b, (uint32_t)strlen(k));
    be32(b, (uint32_t)strlen(v));
    kura_buf_append(b, k, strlen(k));
    kura_buf_append(b, v, strlen(v));
}

static void test_pipeline_bounded(void)
{
    tt_harness h;
    open_tt(&h);
    kura_buf req = { 0 };
    int n = 3 * KURA_REQUESTS_PER_CALL;
    for (int i = 0; i < n; i++) {
        KURA_BUF_LIT(&req, "\xc8\x30");
        be32(&req, 1);
        KURA_BUF_LIT(&req, "k");
    }
    size_t used = run(&h, req.data, req.len);
    CHECK(kura_session_out_full(h.s));
    CHECK_EQ_INT(used, KURA_REQUESTS_PER_CALL * 7);
    CHECK_EQ_INT(h.out.len, KURA_REQUESTS_PER_CALL);        /* one "1" each */
    kura_buf_free(&req);
    close_tt(&h);
}

static void test_fwmkeys_walks_in_slices(void)
{
    tt_harness h;
    open_tt(&h);
    kura_buf req = { 0 };
    char k[16];
    int n = 3 * TT_WALK_SLICE;
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "f%05d", i);
        put_req(&req, 0x18, k, "v");                        /* putnr: no reply */
    }
    size_t off = 0;
    while (off < req.len)
        off += run(&h, req.data + off, req.len - off);
    req.len = 0;
    KURA_BUF_LIT(&req, "\xc8\x58");
    be32(&req, 1);
    be32(&req, 0xffffffffu);                                /* no limit */
    KURA_BUF_LIT(&req, "f");
    size_t used = run(&h, req.data, req.len);
    CHECK_EQ_INT(used, 0);                                  /* paused: the request stays */
    CHECK(kura_session_out_full(h.s));
    CHECK_EQ_INT(h.out.len, 0);                             /* nothing of the reply yet */
    int calls = 1;
    while ((used = run(&h, req.data, req.len)) == 0 && calls < 100)
        calls++;
    CHECK_EQ_INT(used, req.len);
    CHECK(calls >= 2);
    CHECK_EQ_INT(h.out.len, 5 + (size_t)n * (4 + 6));
    CHECK_EQ_INT(get_be32(h.out.data + 1), (uint32_t)n);
    kura_buf_free(&req);
    close_tt(&h);
}

/* A TT walk counts with the text protocol's listings: with WALKS_MAX
 * under way, fwmkeys fails (1) without walking; once one ends it walks
 * again.  Without the admission it would answer the keys. */
static void test_walks_capped(void)
{
    tt_harness h;
    open_tt(&h);
    kura_buf req = { 0 };
    put_req(&req, 0x18, "fa", "v");                         /* putnr: no reply */
    run(&h, req.data, req.len);
    req.len = 0;
    KURA_BUF_LIT(&req, "\xc8\x58");
    be32(&req, 1);
    be32(&req, 0xffffffffu);
    KURA_BUF_LIT(&req, "f");
    kura_session_config sc = { .engine = h.engine, .stats = &h.stats[0], .server = &h.info };
    kura_session *busy[WALKS_MAX];
    for (int i = 0; i < WALKS_MAX; i++) {
        busy[i] = kura_session_new(&sc);
        CHECK(walk_admit(busy[i]));                         /* listings under way */
    }
    CHECK_EQ_INT(run(&h, req.data, req.len), req.len);
    CHECK_EQ_INT(h.out.len, 5);
    CHECK_EQ_INT(h.out.data[0], 1);                         /* refused, nothing walked */
    kura_session_free(busy[0]);
    CHECK_EQ_INT(run(&h, req.data, req.len), req.len);
    CHECK_EQ_INT(h.out.data[0], 0);
    CHECK_EQ_INT(get_be32(h.out.data + 1), 1u);              /* "fa" */
    kura_session *x = kura_session_new(&sc);
    CHECK(walk_admit(x));                                   /* the walk gave its place back */
    kura_session_free(x);
    for (int i = 1; i < WALKS_MAX; i++)
        kura_session_free(busy[i]);
    kura_buf_free(&req);
    close_tt(&h);
}

static void test_big_value_not_buffered(void)
{
    tt_harness h;
    open_tt(&h);
    kura_buf req = { 0 };
    KURA_BUF_LIT(&req, "\xc8\x10");
    be32(&req, 1);
    be32(&req, 1 << 20);                                    /* over -I (64k) */
    KURA_BUF_LIT(&req, "k");
    size_t used = run(&h, req.data, req.len);
    CHECK_EQ_INT(used, req.len);                            /* taken, not waited for */
    CHECK_EQ_INT(kura_session_need(h.s), 0);
    CHECK(h.out.len == 1 && h.out.data[0] == 1);
    char junk[4096] = { 0 };
    size_t left = (1 << 20) + 1 - 1;                        /* key and value, key sent */
    while (left > 0) {
        size_t n = left < sizeof(junk) ? left : sizeof(junk);
        CHECK_EQ_INT(run(&h, junk, n), n);
        CHECK_EQ_INT(h.out.len, 0);
        left -= n;
    }
    req.len = 0;
    put_req(&req, 0x10, "k", "ok");
    CHECK_EQ_INT(run(&h, req.data, req.len), req.len);
    CHECK(h.out.len == 1 && h.out.data[0] == 0);
    kura_buf_free(&req);
    close_tt(&h);
}

static char got_host[64];
static int got_port;
static uint64_t got_ts;

static int setmst_hook(void *ctx, const char *host, int port, uint64_t ts, int opts)
{
    (void)opts;
    snprintf(got_host, sizeof(got_host), "%s", host);
    got_port = port;
    got_ts = ts;
    return *(int *)ctx;
}

static void setmst_req(kura_buf *b, const char *host, uint32_t port)
{
    b->len = 0;
    KURA_BUF_LIT(b, "\xc8\x78");
    be32(b, (uint32_t)strlen(host));
    be32(b, port);
    be32(b, 0);
    be32(b, 77);                                            /* ts */
    be32(b, 0);                                             /* opts */
    kura_buf_append(b, host, strlen(host));
}

static void test_setmst_hook(void)
{
    tt_harness h;
    open_tt(&h);
    kura_buf req = { 0 };
    setmst_req(&req, "master.example", 1978);
    CHECK_EQ_INT(run(&h, req.data, req.len), req.len);
    CHECK(h.out.len == 1 && h.out.data[0] == 1);            /* no hook: failure */

    int outcome = KURA_OK;
    h.info.tt_setmst = setmst_hook;
    h.info.tt_setmst_ctx = &outcome;
    CHECK_EQ_INT(run(&h, req.data, req.len), req.len);
    CHECK(h.out.len == 1 && h.out.data[0] == 0);
    CHECK(strcmp(got_host, "master.example") == 0);
    CHECK_EQ_INT(got_port, 1978);
    CHECK_EQ_INT(got_ts, 77);

    outcome = KURA_EINVAL;                                  /* the hook refuses */
    CHECK_EQ_INT(run(&h, req.data, req.len), req.len);
    CHECK(h.out.len == 1 && h.out.data[0] == 1);
    kura_buf_free(&req);
    close_tt(&h);
}

/* ---- addint from many threads ------------------------------------------------ */

enum { ADDERS = 4, ADDS_EACH = 4000 };

typedef struct adder {
    kura_engine *engine;
    kura_session *s;
    kura_thread_stats stats;            /* the session's */
    pthread_barrier_t *start;
    bool old_way;               /* the negative check: read, then cas once */
    int failed;                 /* addint replies other than success */
    int jumps;                  /* sums past this thread's last by more than its add */
    int lost;                   /* old way: cas refused */
} adder;

static int copy4(void *arg, const kura_item *it)
{
    if (it->vlen == 4)
        memcpy(arg, it->val, 4);
    return 0;
}

/* What addint did before engine_modify: read the record, store the sum
 * with its cas; a change in between refuses the store (then retried). */
static void add_old_way(adder *a, kura_thread_stats *ts)
{
    unsigned char v[4] = { 0 };
    uint64_t cas = 0;
    engine_item_info info;
    int rc = engine_get(a->engine, ts, "old", 3, NULL, copy4, v, &info);
    cas = rc == KURA_OK ? info.cas : 0;
    uint32_t n = (uint32_t)v[0] | (uint32_t)v[1] << 8 | (uint32_t)v[2] << 16 |
                 (uint32_t)v[3] << 24;
    n++;
    sched_yield();              /* a client's round trip: others run meanwhile */
    unsigned char w[4] = { (unsigned char)n, (unsigned char)(n >> 8),
                           (unsigned char)(n >> 16), (unsigned char)(n >> 24) };
    kura_item it = { .key = "old", .klen = 3, .val = w, .vlen = 4 };
    engine_store_opts o = { .cas_in = cas };
    rc = engine_store(a->engine, ts, cas ? KURA_CMD_CAS : KURA_CMD_ADD, &it, &o, NULL);
    if (rc != KURA_STORED)
        a->lost++;
}

static void *adder_run(void *arg)
{
    adder *a = arg;
    kura_thread_stats ts;
    memset(&ts, 0, sizeof(ts));
    kura_buf req = { 0 }, out = { 0 };
    KURA_BUF_LIT(&req, "\xc8\x60");
    be32(&req, 3);
    be32(&req, 1);
    KURA_BUF_LIT(&req, "sum");
    uint32_t last = 0;
    pthread_barrier_wait(a->start);
    for (int i = 0; i < ADDS_EACH; i++) {
        if (a->old_way) {
            add_old_way(a, &ts);
            continue;
        }
        out.len = 0;
        size_t used = kura_session_process(a->s, req.data, req.len, &out);
        if (used != req.len || out.len != 5 || out.data[0] != 0) {
            a->failed++;
            continue;
        }
        uint32_t sum = get_be32(out.data + 1);
        if (i > 0 && sum != last + 1)
            a->jumps++;
        last = sum;
        sched_yield();          /* a client's round trip: others run meanwhile */
    }
    kura_buf_free(&req);
    kura_buf_free(&out);
    return NULL;
}

/* Runs ADDERS threads of addint (or of the old way) on one engine. */
static void run_adders(tt_harness *h, bool old_way, adder *ad)
{
    pthread_t t[ADDERS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, ADDERS);
    for (int i = 0; i < ADDERS; i++) {
        ad[i] = (adder){ .engine = h->engine, .start = &start, .old_way = old_way };
        kura_session_config sc = { .engine = h->engine, .stats = &ad[i].stats,
                                   .server = &h->info };
        ad[i].s = kura_session_new(&sc);
        if (!ad[i].s || pthread_create(&t[i], NULL, adder_run, &ad[i]) != 0)
            abort();
    }
    for (int i = 0; i < ADDERS; i++) {
        pthread_join(t[i], NULL);
        kura_session_free(ad[i].s);
    }
    pthread_barrier_destroy(&start);
}

static void addint_race(const char *dbname)
{
    tt_harness h;
    open_tt_db(&h, dbname);
    adder ad[ADDERS];
    kura_stats_totals st = { 0 };
    int failed = 0, jumps = 0, rounds = 0;
    /* until the replies show the threads interleaved (a few rounds at
     * most: threads that run one after another prove nothing) */
    while (rounds < 20 && !jumps) {
        run_adders(&h, false, ad);
        rounds++;
        for (int i = 0; i < ADDERS; i++) {
            failed += ad[i].failed;
            jumps += ad[i].jumps;
            kura_stats_accumulate(&st, &ad[i].stats);
        }
    }
    CHECK_EQ_INT(failed, 0);                                /* never fails */
    CHECK(jumps > 0);                                       /* the threads did race */
    /* one store call a request: no read outside the key's lock, no retry
     * (the read-then-cas counted a get and a set a try) */
    CHECK_EQ_INT(st.cmd_get, 0);
    CHECK_EQ_INT(st.cmd_set, rounds * ADDERS * ADDS_EACH);
    unsigned char v[4] = { 0 };
    CHECK_EQ_INT(engine_get(h.engine, &h.stats[0], "sum", 3, NULL, copy4, v, NULL), KURA_OK);
    uint32_t sum = (uint32_t)v[0] | (uint32_t)v[1] << 8 | (uint32_t)v[2] << 16 |
                   (uint32_t)v[3] << 24;
    CHECK_EQ_INT(sum, rounds * ADDERS * ADDS_EACH);         /* no add lost */

    /* negative: the same load read-then-cas, one try: refusals (a few
     * rounds at most, as threads that happen to run one after another
     * lose nothing) */
    int lost = 0;
    for (int round = 0; round < 20 && !lost; round++) {
        run_adders(&h, true, ad);
        for (int i = 0; i < ADDERS; i++)
            lost += ad[i].lost;
    }
    CHECK(lost > 0);
    close_tt(&h);
}

static void test_addint_concurrent(void)
{
    addint_race("*");
    char dir[] = "/tmp/kura-test-tt-XXXXXX", db[64], rm[96];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(db, sizeof(db), "%s/x.kh", dir);
    addint_race(db);
    snprintf(rm, sizeof(rm), "rm -rf %s", dir);
    CHECK_EQ_INT(system(rm), 0);
}

int main(void)
{
    RUN(test_pipeline_bounded);
    RUN(test_fwmkeys_walks_in_slices);
    RUN(test_walks_capped);
    RUN(test_big_value_not_buffered);
    RUN(test_setmst_hook);
    RUN(test_addint_concurrent);
    UNIT_DONE();
}

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
 *    its outcome, and answers failure when there is no hook.
 * Each fails if its bound or hook goes.
 */
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

static void open_tt(tt_harness *h)
{
    memset(h, 0, sizeof(*h));
    kura_store_config cfg = { .mem_limit = 64 << 20, .item_size_max = 64 << 10 };
    kura_store *st;
    char err[256];
    kura_engine_config ecfg = { .item_size_max = 64 << 10 };
    if (kura_store_open("*", &cfg, &st, err, sizeof(err)) != KURA_OK ||
        engine_open(&h->engine, st, &ecfg) != KURA_OK)
        abort();
    h->info.nthreads = 1;
    h->info.thread_stats = h->stats;
    kura_session_config sc = { .engine = h->engine, .stats = &h->stats[0], .server = &h->info };
    if (!(h->s = kura_session_new(&sc)))
        abort();
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

int main(void)
{
    RUN(test_pipeline_bounded);
    RUN(test_fwmkeys_walks_in_slices);
    RUN(test_walks_capped);
    RUN(test_big_value_not_buffered);
    RUN(test_setmst_hook);
    UNIT_DONE();
}

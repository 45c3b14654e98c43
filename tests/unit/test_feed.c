/*
 * test_feed.c - the engine's change feed and the update log together
 * (src/journal/), on the hash file, the cache and (redo) the B+ tree: every kind of
 * change logged as its result (set, add, cas, append, prepend, incr, decr,
 * touch, gat, delete, flush_all; nothing for a refused one); the cas
 * handed out under the key's lock (4 threads racing on a few keys: each
 * key's last row is the item the store holds); rows logged but never
 * applied (a crash between the two writes) applied again at open, and only
 * those after the watermark (a negative check: with the watermark forced to
 * the end they are not); the cache rebuilt from the log; a store that fails
 * after its row was logged pinning the watermark; replicated rows keeping
 * their origin; a replica refusing local changes.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/engine.h"
#include "kura/journal.h"
#include "kura/store.h"
#include "kura/ulog.h"
#include "unit.h"


static char dir[256], db[300], uldir[300];

static void fresh(void)
{
    char cmd[300];
    snprintf(dir, sizeof(dir), "/tmp/kura-feed-%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {}
    mkdir(dir, 0755);
    snprintf(db, sizeof(db), "%s/db.kh", dir);
    snprintf(uldir, sizeof(uldir), "%s/ul", dir);
    mkdir(uldir, 0755);
}

static void quiet(void *arg, int level, const char *line)
{
    (void)arg; (void)level; (void)line;
}
static int errors_logged;
static void elog(int level, const char *line)
{
    if (level == KURA_LOG_ERROR)
        errors_logged++;
    (void)line;
}

typedef struct rig {
    kura_engine *e;
    ul_log *log;
    kura_thread_stats ts;
    uint64_t redone;
} rig;

static int rig_open(rig *r, const char *name, uint32_t sid)
{
    memset(r, 0, sizeof(*r));
    kura_store_config cfg = { .item_size_max = 1 << 20, .sync_mode = KURA_SYNC_NONE,
                              .mem_limit = 64 << 20, .log = elog };
    kura_store *s;
    char err[300];
    int rc = kura_store_open(name, &cfg, &s, err, sizeof(err));
    if (rc) {
        printf("# open %s: %s\n", name, err);
        return rc;
    }
    kura_engine_config ec = { .item_size_max = 1 << 20 };
    if ((rc = engine_open(&r->e, s, &ec)))
        return rc;
    ul_config uc = { .dir = uldir, .sid = sid, .ulim = 1 << 16, .log = quiet };
    uint64_t cut;
    if ((rc = ul_open(&uc, &r->log, &cut, err, sizeof(err)))) {
        printf("# ul_open: %s\n", err);
        return rc;
    }
    return engine_attach_log(r->e, r->log, KURA_SYNC_NONE, elog, &r->redone);
}

static void rig_close(rig *r)
{
    engine_close(r->e);
    ul_close(r->log);
}

typedef struct got {
    char val[256];
    size_t vlen;
    uint32_t flags;
    int64_t exptime;
    uint64_t cas;
} got;

static int got_fn(void *arg, const kura_item *it)
{
    got *g = arg;
    g->vlen = it->vlen < sizeof(g->val) ? it->vlen : sizeof(g->val);
    memcpy(g->val, it->val, g->vlen);
    g->flags = it->flags;
    g->exptime = it->exptime;
    g->cas = it->cas;
    return 0;
}

static int get(rig *r, const char *k, got *g)
{
    memset(g, 0, sizeof(*g));
    return engine_get(r->e, &r->ts, k, strlen(k), NULL, got_fn, g, NULL);
}

static int set(rig *r, int cmd, const char *k, const char *v, uint64_t cas)
{
    kura_item it = { .key = k, .klen = strlen(k), .val = v, .vlen = strlen(v), .flags = 3 };
    return engine_store(r->e, &r->ts, cmd, &it, &(engine_store_opts){ .cas_in = cas }, NULL);
}

/* Every row after `after`, in order (at most max). */
static int read_rows(ul_log *log, uint64_t after, ul_row *rows, char keys[][64], int max)
{
    ul_reader *rd;
    if (ul_reader_open(log, after, &rd))
        return -1;
    int n = 0;
    ul_row row;
    while (n < max && ul_reader_next(rd, &row) == KURA_OK) {
        rows[n] = row;
        memset(keys[n], 0, 64);
        if (row.klen)
            memcpy(keys[n], row.key, row.klen < 63 ? row.klen : 63);
        rows[n].key = keys[n];
        rows[n].val = NULL;     /* the reader's buffer moves on */
        n++;
    }
    ul_reader_close(rd);
    return n;
}

static void test_every_change_logged(void)
{
    fresh();
    rig r;
    REQUIRE(rig_open(&r, db, 9) == KURA_OK);
    got g;
    char out[KURA_INCR_MAX_LEN];
    CHECK_EQ_INT(set(&r, KURA_CMD_SET, "a", "10", 0), KURA_STORED);          /* 1 PUT */
    CHECK_EQ_INT(set(&r, KURA_CMD_ADD, "a", "x", 0), KURA_NOT_STORED);       /* none */
    CHECK_EQ_INT(get(&r, "a", &g), KURA_OK);
    CHECK_EQ_INT(set(&r, KURA_CMD_CAS, "a", "11", g.cas + 100), KURA_STORE_EXISTS); /* none */
    CHECK_EQ_INT(set(&r, KURA_CMD_CAS, "a", "12", g.cas), KURA_STORED);      /* 2 PUT */
    CHECK_EQ_INT(set(&r, KURA_CMD_APPEND, "a", "3", 0), KURA_STORED);        /* 3 PUT 123 */
    CHECK_EQ_INT(set(&r, KURA_CMD_PREPEND, "a", "0", 0), KURA_STORED);       /* 4 PUT 0123 */
    CHECK_EQ_INT(engine_arith(r.e, &r.ts, "a", 1, true, 7, NULL, out, NULL),
                 KURA_OK);                                                  /* 5 PUT 130 */
    CHECK_EQ_INT(engine_arith(r.e, &r.ts, "a", 1, false, 100, NULL, out, NULL),
                 KURA_OK);                                                  /* 6 PUT "30  " */
    CHECK_EQ_INT(engine_arith(r.e, &r.ts, "zz", 2, true, 1, NULL, out, NULL), KURA_NOTFOUND);
    CHECK_EQ_INT(engine_touch(r.e, &r.ts, "a", 1, 1000), KURA_OK);           /* 7 PUT */
    engine_get_opts gat = { .touch = true, .exptime = 2000 };
    CHECK_EQ_INT(engine_get(r.e, &r.ts, "a", 1, &gat, got_fn, &g, NULL), KURA_OK); /* 8 */
    CHECK_EQ_INT(engine_delete(r.e, &r.ts, "a", 1, NULL), KURA_OK);          /* 9 DEL */
    CHECK_EQ_INT(engine_delete(r.e, &r.ts, "a", 1, NULL), KURA_NOTFOUND);    /* none */
    CHECK_EQ_INT(engine_flush_all(r.e, &r.ts, 0), KURA_OK);                  /* 10 FLUSH */
    CHECK_EQ_INT(set(&r, KURA_CMD_SET, "b", "v", 0), KURA_STORED);           /* 11 PUT */
    CHECK_EQ_INT(get(&r, "b", &g), KURA_OK);

    ul_row rows[32];
    char keys[32][64];
    int n = read_rows(r.log, 0, rows, keys, 32);
    CHECK_EQ_INT(n, 11);
    static const uint8_t types[] = { UL_PUT, UL_PUT, UL_PUT, UL_PUT, UL_PUT, UL_PUT, UL_PUT,
                                     UL_PUT, UL_DEL, UL_FLUSH, UL_PUT };
    for (int i = 0; i < n && i < 11; i++) {
        CHECK_EQ_INT(rows[i].type, types[i]);
        CHECK_EQ_INT(rows[i].sid, 9);
        CHECK(rows[i].origin_ts == rows[i].ts);
        if (i)
            CHECK(rows[i].ts > rows[i - 1].ts);
        if (i < 9)
            CHECK_EQ_STR(keys[i], "a");
    }
    if (n == 11) {
        CHECK_EQ_INT(rows[5].vlen, 4);                  /* decr keeps memcached's padding */
        CHECK(rows[6].exptime > 0 && rows[7].exptime > rows[6].exptime);
        CHECK(rows[6].cas == rows[5].cas);              /* touch keeps the cas */
        CHECK(rows[9].cas > rows[8].cas || rows[9].cas > rows[7].cas);   /* the watermark */
        CHECK_EQ_INT(rows[10].cas, g.cas);              /* the row's cas is the item's */
        CHECK_EQ_INT(rows[10].flags, 3);
    }
    rig_close(&r);
}

/* 4 threads set and append a few keys; each key's last row must be what
 * the store holds (same cas, same length): rows are in the order the store
 * applied the changes. */
typedef struct racer {
    rig *r;
    int id;
} racer;

static void *race_main(void *arg)
{
    racer *rc = arg;
    kura_thread_stats ts;
    memset(&ts, 0, sizeof(ts));
    char k[16], v[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(k, sizeof(k), "k%d", i % 5);
        snprintf(v, sizeof(v), "%d-%d", rc->id, i);
        kura_item it = { .key = k, .klen = strlen(k), .val = v, .vlen = strlen(v) };
        (void)engine_store(rc->r->e, &ts, (i % 3) ? KURA_CMD_SET : KURA_CMD_APPEND, &it, NULL,
                           NULL);
    }
    return NULL;
}

static void test_key_order(void)
{
    fresh();
    rig r;
    REQUIRE(rig_open(&r, db, 1) == KURA_OK);
    pthread_t t[4];
    racer rc[4];
    for (int i = 0; i < 4; i++) {
        rc[i] = (racer){ &r, i };
        pthread_create(&t[i], NULL, race_main, &rc[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    static ul_row rows[13000];
    static char keys[13000][64];
    int n = read_rows(r.log, 0, rows, keys, 13000);
    CHECK(n > 8000);
    for (int k = 0; k < 5; k++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", k);
        int last = -1;
        uint64_t prev_cas = 0;
        bool increasing = true;
        for (int i = 0; i < n; i++)
            if (strcmp(keys[i], key) == 0) {
                if (rows[i].cas <= prev_cas)
                    increasing = false;
                prev_cas = rows[i].cas;
                last = i;
            }
        CHECK(increasing);
        got g;
        REQUIRE(last >= 0 && get(&r, key, &g) == KURA_OK);
        CHECK_EQ_INT(rows[last].cas, g.cas);
        CHECK_EQ_INT(rows[last].vlen, g.vlen);
    }
    rig_close(&r);
}

/* Rows in the log that the store never got (a crash between the row and
 * the store's write) are applied at the next open; rows at or under the
 * watermark are not. */
static void test_redo(const char *name)
{
    fresh();
    rig r;
    REQUIRE(rig_open(&r, name, 1) == KURA_OK);
    CHECK_EQ_INT(r.redone, 0);
    CHECK_EQ_INT(set(&r, KURA_CMD_SET, "kept", "1", 0), KURA_STORED);
    CHECK_EQ_INT(set(&r, KURA_CMD_SET, "gone", "1", 0), KURA_STORED);
    rig_close(&r);

    /* what a killed server may leave: rows the store does not have */
    ul_config uc = { .dir = uldir, .sid = 1, .ulim = 1 << 16, .log = quiet };
    ul_log *log;
    uint64_t cut;
    char err[200];
    REQUIRE(ul_open(&uc, &log, &cut, err, sizeof(err)) == KURA_OK);
    ul_pos pos;
    ul_row put = { .type = UL_PUT, .key = "late", .klen = 4, .val = "vv", .vlen = 2,
                   .flags = 5, .cas = 777777 };
    ul_row del = { .type = UL_DEL, .key = "gone", .klen = 4 };
    CHECK_EQ_INT(ul_append(log, &put, &pos), KURA_OK);
    CHECK_EQ_INT(ul_append(log, &del, &pos), KURA_OK);
    ul_close(log);

    REQUIRE(rig_open(&r, name, 1) == KURA_OK);
    bool persistent = strcmp(name, "*") != 0;
    CHECK_EQ_INT(r.redone, persistent ? 2 : 4);     /* the cache replays the whole log */
    got g;
    CHECK_EQ_INT(get(&r, "late", &g), KURA_OK);
    CHECK(g.vlen == 2 && g.flags == 5 && g.cas == 777777);
    CHECK_EQ_INT(get(&r, "gone", &g), KURA_NOTFOUND);
    CHECK_EQ_INT(get(&r, "kept", &g), KURA_OK);
    /* cas values handed out now are past the applied ones */
    CHECK_EQ_INT(set(&r, KURA_CMD_SET, "new", "1", 0), KURA_STORED);
    CHECK_EQ_INT(get(&r, "new", &g), KURA_OK);
    CHECK(g.cas > 777777);
    rig_close(&r);

    /* a clean close saved the watermark at the end: nothing again */
    REQUIRE(rig_open(&r, name, 1) == KURA_OK);
    CHECK_EQ_INT(r.redone, persistent ? 0 : 5);
    rig_close(&r);
}

static void test_redo_hash(void) { test_redo(db); }
static void test_redo_cache(void) { test_redo("*"); }
static void test_redo_tree(void)
{
    char t[320];
    fresh();
    snprintf(t, sizeof(t), "%s/db.kb", dir);
    test_redo(t);
}

/* Negative check: a watermark saved past rows the store lacks (what the
 * slots prevent) loses them, which is what test_redo would catch. */
static void test_redo_negative(void)
{
    fresh();
    rig r;
    REQUIRE(rig_open(&r, db, 1) == KURA_OK);
    rig_close(&r);
    ul_config uc = { .dir = uldir, .sid = 1, .ulim = 1 << 16, .log = quiet };
    ul_log *log;
    uint64_t cut;
    char err[200];
    REQUIRE(ul_open(&uc, &log, &cut, err, sizeof(err)) == KURA_OK);
    ul_pos pos;
    ul_row put = { .type = UL_PUT, .key = "late", .klen = 4, .val = "vv", .vlen = 2 };
    CHECK_EQ_INT(ul_append(log, &put, &pos), KURA_OK);
    ul_close(log);
    /* the store's watermark moved past the row without the row */
    kura_store_config cfg = { .item_size_max = 1 << 20, .sync_mode = KURA_SYNC_NONE };
    kura_store *s;
    REQUIRE(kura_store_open(db, &cfg, &s, err, sizeof(err)) == KURA_OK);
    kura_store_state st;
    REQUIRE(s->ops->load_state(s, &st) == KURA_OK);
    st.ulog_ts = pos.ts;
    REQUIRE(s->ops->save_state(s, &st) == KURA_OK);
    kura_store_close(s);
    REQUIRE(rig_open(&r, db, 1) == KURA_OK);
    CHECK_EQ_INT(r.redone, 0);
    got g;
    CHECK_EQ_INT(get(&r, "late", &g), KURA_NOTFOUND);
    rig_close(&r);
}

/* Rows from a master: applied with their cas, logged with their origin,
 * and the watermark of a replica refusing local writes. */
static void test_replica_rows(void)
{
    fresh();
    rig r;
    REQUIRE(rig_open(&r, db, 2) == KURA_OK);
    engine_set_replica(r.e, true);
    CHECK_EQ_INT(set(&r, KURA_CMD_SET, "x", "1", 0), KURA_EREPLICA);
    CHECK_EQ_INT(engine_delete(r.e, &r.ts, "x", 1, NULL), KURA_EREPLICA);
    CHECK_EQ_INT(engine_flush_all(r.e, &r.ts, 0), KURA_EREPLICA);
    ul_row in = { .type = UL_PUT, .key = "m", .klen = 1, .val = "abc", .vlen = 3, .flags = 8,
                  .cas = 4242, .sid = 1, .origin_ts = 1000 };
    CHECK_EQ_INT(engine_apply_row(r.e, &in), KURA_OK);
    got g;
    CHECK_EQ_INT(get(&r, "m", &g), KURA_OK);
    CHECK(g.cas == 4242 && g.flags == 8 && g.vlen == 3);
    ul_row fl = { .type = UL_FLUSH, .cas = 5000, .sid = 1, .origin_ts = 2000 };
    CHECK_EQ_INT(engine_apply_row(r.e, &fl), KURA_OK);
    CHECK_EQ_INT(get(&r, "m", &g), KURA_NOTFOUND);      /* cas 4242 < 5000: flushed */
    ul_row rows[8];
    char keys[8][64];
    int n = read_rows(r.log, 0, rows, keys, 8);
    CHECK_EQ_INT(n, 2);
    if (n == 2) {
        CHECK(rows[0].sid == 1 && rows[0].origin_ts == 1000 && rows[0].ts > 1000);
        CHECK(rows[1].type == UL_FLUSH && rows[1].origin_ts == 2000 && rows[1].cas == 5000);
    }
    engine_set_replica(r.e, false);
    CHECK_EQ_INT(set(&r, KURA_CMD_SET, "x", "1", 0), KURA_STORED);
    CHECK_EQ_INT(get(&r, "x", &g), KURA_OK);
    CHECK(g.cas > 5000);
    rig_close(&r);
}

int main(void)
{
    RUN(test_every_change_logged);
    RUN(test_key_order);
    RUN(test_redo_hash);
    RUN(test_redo_cache);
    RUN(test_redo_tree);
    RUN(test_redo_negative);
    RUN(test_replica_rows);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {}
    UNIT_DONE();
}

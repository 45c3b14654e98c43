/*
 * test_count.c - engine_usage_exact (src/engine/count.c), Tokyo Tyrant's
 * rnum and size, on the cache, the hash file and the B+ tree: after a
 * flush of many keys the count is exact at once and walks nothing (the
 * count_walked test hook counts walks); exact again after puts over
 * flushed keys, deletes, a second flush and while the sweep reclaims what
 * was flushed; and the one case that walks, an engine opened under a
 * watermark with flushed items still in its file, walks once and then
 * counts without walking (the negative check: the hook does see a walk,
 * so its zero after a flush means something).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/engine.h"
#include "kura/store.h"
#include "kura/testhooks.h"
#include "unit.h"

#define MANY 20000

static char dir[256];
static int walks;

static void walked(void *arg)
{
    (void)arg;
    walks++;
}

static kura_engine *open_engine(const char *name)
{
    kura_store_config cfg = { .item_size_max = 1 << 20, .sync_mode = KURA_SYNC_NONE,
                              .mem_limit = 256 << 20 };
    kura_store *s;
    char err[300];
    if (kura_store_open(name, &cfg, &s, err, sizeof(err))) {
        printf("# open %s: %s\n", name, err);
        return NULL;
    }
    kura_engine *e;
    kura_engine_config ec = { .item_size_max = 1 << 20 };
    if (engine_open(&e, s, &ec))
        return NULL;
    return e;
}

static int put(kura_engine *e, kura_thread_stats *ts, const char *pfx, int i, const char *v)
{
    char k[32];
    snprintf(k, sizeof(k), "%s%06d", pfx, i);
    kura_item it = { .key = k, .klen = strlen(k), .val = v, .vlen = strlen(v) };
    return engine_store(e, ts, KURA_CMD_SET, &it, NULL, NULL);
}

static int del(kura_engine *e, kura_thread_stats *ts, const char *pfx, int i)
{
    char k[32];
    snprintf(k, sizeof(k), "%s%06d", pfx, i);
    return engine_delete(e, ts, k, strlen(k), NULL);
}

/* items and bytes engine_usage_exact says */
static uint64_t exact(kura_engine *e, uint64_t *bytes)
{
    kura_store_usage u;
    engine_usage_exact(e, &u);
    if (bytes)
        *bytes = u.bytes;
    return u.curr_items;
}

static void check_backend(const char *name, bool reopen)
{
    kura_thread_stats ts;
    memset(&ts, 0, sizeof(ts));
    kura_engine *e = open_engine(name);
    REQUIRE(e);
    int stored = 0;
    for (int i = 0; i < MANY; i++)
        stored += put(e, &ts, "old", i, "vvvvvvvv") == KURA_STORED;
    CHECK_EQ_INT(stored, MANY);
    uint64_t one;
    CHECK_EQ_INT(exact(e, &one), MANY);
    one /= MANY;                        /* every record the same size */
    walks = 0;
    CHECK_EQ_INT(engine_flush_all(e, &ts, 0), KURA_OK);
    uint64_t b;
    CHECK_EQ_INT(exact(e, &b), 0);
    CHECK_EQ_INT(b, 0);
    kura_store_usage raw;
    engine_usage(e, &raw);
    CHECK(raw.curr_items > 0);          /* the store still counts them: something was tested */
    /* puts over flushed keys and new ones, deletes of both kinds */
    for (int i = 0; i < 100; i++)
        put(e, &ts, "old", i, "vvvvvvvv");
    for (int i = 0; i < 50; i++)
        put(e, &ts, "new", i, "vvvvvvvv");
    CHECK_EQ_INT(del(e, &ts, "old", 5000), KURA_NOTFOUND);
    CHECK_EQ_INT(del(e, &ts, "new", 0), KURA_OK);
    CHECK_EQ_INT(exact(e, &b), 149);
    CHECK_EQ_INT(b, 149 * one);
    /* the sweep reclaims part of what was flushed: still exact */
    engine_sweep(e, MANY / 2);
    CHECK_EQ_INT(exact(e, NULL), 149);
    CHECK_EQ_INT(walks, 0);
    if (reopen) {
        /* the negative check: opened again under the watermark, with
         * flushed records in the file, the first count walks, once */
        engine_close(e);
        REQUIRE((e = open_engine(name)));
        engine_usage(e, &raw);
        CHECK(raw.curr_items > 149);
        CHECK_EQ_INT(exact(e, NULL), 149);
        CHECK_EQ_INT(walks, 1);
        CHECK_EQ_INT(exact(e, NULL), 149);
        CHECK_EQ_INT(walks, 1);
        put(e, &ts, "new", 0, "vvvvvvvv");
        CHECK_EQ_INT(exact(e, NULL), 150);
        CHECK_EQ_INT(walks, 1);
    } else {
        put(e, &ts, "new", 0, "vvvvvvvv");
    }
    /* a second flush over live and flushed records alike */
    walks = 0;
    CHECK_EQ_INT(engine_flush_all(e, &ts, 0), KURA_OK);
    CHECK_EQ_INT(exact(e, NULL), 0);
    for (int i = 0; i < 10; i++)
        put(e, &ts, "old", i, "vvvvvvvv");
    engine_sweep(e, 4 * MANY);
    CHECK_EQ_INT(exact(e, &b), 10);
    CHECK_EQ_INT(b, 10 * one);
    CHECK_EQ_INT(walks, 0);
    engine_close(e);
}

static void test_cache(void)
{
    check_backend("*", false);
}

static void test_hash(void)
{
    char p[300];
    snprintf(p, sizeof(p), "%s/db.kh", dir);
    check_backend(p, true);
}

static void test_tree(void)
{
    char p[300];
    snprintf(p, sizeof(p), "%s/db.kb", dir);
    check_backend(p, true);
}

int main(void)
{
    char cmd[300];
    snprintf(dir, sizeof(dir), "/tmp/kura-count-%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {}
    mkdir(dir, 0755);
    kura_test.count_walked = walked;
    kura_test.quiet_stores = true;
    RUN(test_cache);
    RUN(test_hash);
    RUN(test_tree);
    if (system(cmd) != 0) {}
    UNIT_DONE();
}

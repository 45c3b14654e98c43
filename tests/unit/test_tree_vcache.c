/*
 * test_tree_vcache.c - the B+ tree's cache of large values
 * (src/store/tree/tree_vcache.c; docs/design.md, "Large values kept once
 * verified").
 *
 * A value in an overflow run is kept by its put and by the first get
 * that reads and checks it; the gets after it answer from memory
 * (counted as hits), with the right bytes after the key is overwritten,
 * deleted, and its run's pages taken by another key.  An entry goes when
 * its run is freed, so deleting every key leaves the cache empty (the
 * negative check: kura_test.tree_vcache_no_drop leaves the entries, and
 * the answers are still right: the cas check alone keeps a stale entry
 * from answering).  The cache stays within its bound (#vcache), and a
 * value larger than an eighth of it is not kept.  A run damaged on disk
 * is found by a get after a reopen and never kept: every get reports it.
 */
#include <string.h>
#include <sys/stat.h>

#include "unit.h"
#include "hashdb_testlib.h"
#include "tree_testlib.h"
#include "kura/testhooks.h"

#define VLEN 20000

static kura_clock CLK = { .now = 2000000 };

/* value v of VLEN bytes (or n): a pattern of v and the position */
static const unsigned char *val(int v, size_t n)
{
    static unsigned char buf[4][100000];
    static int k;
    unsigned char *b = buf[k++ % 4];
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(v * 31 + i * 7 + (i >> 8));
    return b;
}

static int put(kura_store *s, const char *key, int v, size_t n, uint64_t cas)
{
    kura_item it = { .key = key, .klen = strlen(key), .val = val(v, n), .vlen = n, .cas = cas };
    return kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK);
}

typedef struct got {
    int v;                      /* the value's number, -1 none, -2 other bytes */
    size_t n;
} got;

static int got_cb(void *arg, const kura_item *it)
{
    got *g = arg;
    g->n = it->vlen;
    g->v = -2;
    for (int v = 0; v < 64; v++)
        if (!memcmp(it->val, val(v, it->vlen), it->vlen))
            g->v = v;
    return 0;
}

/* the value number a get answers, -1 not found, -3 an error */
static int get(kura_store *s, const char *key)
{
    got g = { -1, 0 };
    int rc = s->ops->get(s, key, strlen(key), &CLK, got_cb, &g);
    return rc == KURA_NOTFOUND ? -1 : rc ? -3 : g.v;
}

static void test_kept_by_put_and_get(void)
{
    const char *p = tpath("kept");
    kura_store *s = t_open_tree(p, "#psiz=4096");
    CHECK(s != NULL);
    if (!s)
        return;
    char k[16];
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ_INT(put(s, k, i, VLEN, 10 + (uint64_t)i), KURA_OK);
    }
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ_INT(get(s, k), i);
    }
    uint64_t hits = t_stat(s, "tree_value_cache_hits");
    printf("# after 10 puts, 10 gets: %llu hits, %llu bytes kept\n", (unsigned long long)hits,
           (unsigned long long)t_stat(s, "tree_value_cache_bytes"));
    CHECK_EQ_INT((int)hits, 10);
    kura_store_close(s);
    /* reopened: the first get of each reads and checks the run, the
     * second finds it */
    CHECK((s = t_open_tree(p, "#psiz=4096")) != NULL);
    if (!s)
        return;
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 10; i++) {
            snprintf(k, sizeof(k), "k%d", i);
            CHECK_EQ_INT(get(s, k), i);
        }
    printf("# reopened, 2 x 10 gets: %llu hits, %llu misses\n",
           (unsigned long long)t_stat(s, "tree_value_cache_hits"),
           (unsigned long long)t_stat(s, "tree_value_cache_misses"));
    CHECK_EQ_INT((int)t_stat(s, "tree_value_cache_hits"), 10);
    CHECK_EQ_INT((int)t_stat(s, "tree_value_cache_misses"), 10);
    kura_store_close(s);
    /* vcache=0: no cache, every get reads */
    CHECK((s = t_open_tree(p, "#psiz=4096#vcache=0")) != NULL);
    if (!s)
        return;
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ_INT(get(s, k), i);
        CHECK_EQ_INT(get(s, k), i);
    }
    CHECK_EQ_INT((int)t_stat(s, "tree_value_cache_hits"), 0);
    CHECK_EQ_INT((int)t_stat(s, "tree_value_cache_bytes"), 0);
    kura_store_close(s);
}

/* Overwrites, deletes, and the freed runs' pages taken by other keys:
 * every answer right; the bytes kept once every key is gone. */
static uint64_t churn(const char *name)
{
    kura_store *s = t_open_tree(tpath(name), "#psiz=4096");
    CHECK(s != NULL);
    if (!s)
        return UINT64_MAX;
    char k[16];
    uint64_t cas = 100;
    for (int i = 0; i < 8; i++) {
        snprintf(k, sizeof(k), "a%d", i);
        CHECK_EQ_INT(put(s, k, i, VLEN, cas++), KURA_OK);
        CHECK_EQ_INT(get(s, k), i);
    }
    for (int i = 0; i < 8; i++) {       /* new values: the old runs freed */
        snprintf(k, sizeof(k), "a%d", i);
        CHECK_EQ_INT(put(s, k, 20 + i, VLEN, cas++), KURA_OK);
        CHECK_EQ_INT(get(s, k), 20 + i);
    }
    CHECK_EQ_INT(btree_debug_checkpoint(s), KURA_OK);      /* freed pages reusable */
    for (int i = 0; i < 8; i++) {       /* other keys take them */
        snprintf(k, sizeof(k), "b%d", i);
        CHECK_EQ_INT(put(s, k, 40 + i, VLEN, cas++), KURA_OK);
    }
    for (int i = 0; i < 8; i++) {
        snprintf(k, sizeof(k), "a%d", i);
        CHECK_EQ_INT(get(s, k), 20 + i);
        snprintf(k, sizeof(k), "b%d", i);
        CHECK_EQ_INT(get(s, k), 40 + i);
    }
    for (int i = 0; i < 8; i++) {
        snprintf(k, sizeof(k), "a%d", i);
        CHECK_EQ_INT(kura_store_del(s, k, strlen(k), 0, &CLK), KURA_OK);
        CHECK_EQ_INT(get(s, k), -1);
        snprintf(k, sizeof(k), "b%d", i);
        CHECK_EQ_INT(kura_store_del(s, k, strlen(k), 0, &CLK), KURA_OK);
        CHECK_EQ_INT(get(s, k), -1);
    }
    uint64_t left = t_stat(s, "tree_value_cache_bytes");
    CHECK_EQ_INT(check_tree(s), 0);
    kura_store_close(s);
    return left;
}

static void test_overwrite_delete_reuse(void)
{
    uint64_t left = churn("churn");
    printf("# bytes kept once every key is deleted: %llu\n", (unsigned long long)left);
    CHECK_EQ_INT((int)left, 0);
    kura_test.tree_vcache_no_drop = true;
    uint64_t stale = churn("churn_nodrop");
    kura_test.tree_vcache_no_drop = false;
    printf("# ... with entries not dropped when their run is freed (test hook): %llu\n",
           (unsigned long long)stale);
    CHECK(stale > 0 && stale != UINT64_MAX);
}

static void test_bound(void)
{
    kura_store *s = t_open_tree(tpath("bound"), "#psiz=4096#vcache=200k");
    CHECK(s != NULL);
    if (!s)
        return;
    char k[16];
    for (int i = 0; i < 50; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ_INT(put(s, k, i % 64, VLEN, 10 + (uint64_t)i), KURA_OK);
    }
    for (int i = 0; i < 50; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ_INT(get(s, k), i % 64);
    }
    uint64_t held = t_stat(s, "tree_value_cache_bytes");
    printf("# 50 values of %d bytes, bound 200k: %llu bytes kept\n", VLEN,
           (unsigned long long)held);
    CHECK(held > 0 && held <= 200 * 1024);
    /* larger than an eighth of the bound: read every time, not kept */
    CHECK_EQ_INT(put(s, "big", 7, 30000, 1000), KURA_OK);
    CHECK_EQ_INT(get(s, "big"), 7);
    uint64_t hits = t_stat(s, "tree_value_cache_hits");
    CHECK_EQ_INT(get(s, "big"), 7);
    CHECK_EQ_INT((int)(t_stat(s, "tree_value_cache_hits") - hits), 0);
    kura_store_close(s);
}

static void test_damaged_run(void)
{
    const char *p = tpath("damaged");
    kura_store *s = t_open_tree(p, "#psiz=4096");
    CHECK(s != NULL);
    if (!s)
        return;
    CHECK_EQ_INT(put(s, "d", 5, VLEN, 77), KURA_OK);
    CHECK_EQ_INT(btree_debug_checkpoint(s), KURA_OK);
    kura_store_close(s);
    /* a byte in the middle of the run: the value's bytes are in the file
     * as they were put */
    char file[600];
    snprintf(file, sizeof(file), "%s/tree", p);
    FILE *f = fopen(file, "rb");
    static unsigned char data[1 << 20];
    size_t n = f ? fread(data, 1, sizeof(data), f) : 0;
    if (f)
        fclose(f);
    const unsigned char *v = val(5, VLEN);
    unsigned char *at = memmem(data, n, v, 4096);
    CHECK(at != NULL);
    if (!at)
        return;
    flip(file, (off_t)(at - data) + 5000);
    n_errors = 0;
    CHECK((s = t_open_tree(p, "#psiz=4096")) != NULL);
    if (!s)
        return;
    CHECK_EQ_INT(get(s, "d"), -3);
    CHECK_EQ_INT(get(s, "d"), -3);     /* not kept: checked again */
    printf("# damaged run: %llu corrupt reads, %d errors logged, %llu bytes kept\n",
           (unsigned long long)t_stat(s, "tree_corrupt_reads"), n_errors,
           (unsigned long long)t_stat(s, "tree_value_cache_bytes"));
    CHECK_EQ_INT((int)t_stat(s, "tree_corrupt_reads"), 2);
    CHECK_EQ_INT((int)t_stat(s, "tree_value_cache_bytes"), 0);
    kura_store_close(s);
}

int main(void)
{
    t_setup();
    kura_test.bg_hold = true;           /* checkpoints are the tests' own */
    RUN(test_kept_by_put_and_get);
    RUN(test_overwrite_delete_reuse);
    RUN(test_bound);
    RUN(test_damaged_run);
    kura_test.bg_hold = false;
    t_teardown();
    UNIT_DONE();
}

/*
 * test_hashdb.c - the hash file backend (src/store/hash/hashdb*.c): every store
 * operation and condition, liveness, persistence of every field and of the
 * engine's state across close and reopen, database names and parameters,
 * the lock file, online growth of the index, large values, the keyed
 * hash (keys chosen to collide under the old unkeyed one spread out;
 * a new key, as after a restart, finds every key), the sweep's budget
 * inside one stripe, the stats kept as counters, and unconditional
 * overwrites counted as the same data written once.
 * Crash, corruption and disk-full cases are in test_hashdb_crash.c;
 * compaction and threads in test_hashdb_stress.c; CRC-32C in
 * test_crc32c.c.
 */
#include <pthread.h>
#include <time.h>

#include "unit.h"
#include "hashdb_testlib.h"
#include "kura/crc32c.h"

static const kura_iter_spec ITER_ALL = { .scope = KURA_ITER_ALL };

static const kura_clock CLK = { .now = 1000000, .oldest_cas = 0 };

static void test_names_and_params(void)
{
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512];
    CHECK(t_open(t_path("p1"), "#nosuch=1", &cfg, &s, err, sizeof(err)) == KURA_EINVAL);
    CHECK(strstr(err, "nosuch") != NULL);
    struct stat st;
    CHECK(stat(t_path("p1"), &st) != 0);      /* nothing created */
    CHECK(t_open(t_path("p1"), "#bnum=abc", &cfg, &s, err, sizeof(err)) == KURA_EINVAL);
    CHECK(strstr(err, "bnum") != NULL);
    CHECK(t_open(t_path("p1"), "#zcomp=lzma", &cfg, &s, err, sizeof(err)) == KURA_EINVAL);
    CHECK(strstr(err, "zcomp") != NULL && strstr(err, "lzma") != NULL);
    CHECK(t_open(t_path("p1"), "#zmin=0", &cfg, &s, err, sizeof(err)) == KURA_EINVAL);
    CHECK(strstr(err, "zmin") != NULL);
    CHECK(stat(t_path("p1"), &st) != 0);      /* nothing created */
    CHECK(t_open(t_path("p1"), "#bnum=1000#msiz=1m#segsiz=64k#ckpt=1m#dfunit=8#frag=30",
                 &cfg, &s, err, sizeof(err)) == KURA_OK);
    REQUIRE(s);
    CHECK_EQ_STR(s->ops->name, "hash");
    /* a second opener is refused by the lock file */
    kura_store *s2 = NULL;
    CHECK(t_open(t_path("p1"), "", &cfg, &s2, err, sizeof(err)) != KURA_OK);
    CHECK(strstr(err, "in use") != NULL);
    kura_store_close(s);
    CHECK(t_open(t_path("p1"), "", &cfg, &s2, err, sizeof(err)) == KURA_OK);
    if (s2)
        kura_store_close(s2);
    /* the aliases */
    char name[512];
    snprintf(name, sizeof(name), "%s/a.tch", t_root);
    CHECK(kura_store_open(name, &cfg, &s, err, sizeof(err)) == KURA_OK);
    if (s)
        kura_store_close(s);
    snprintf(name, sizeof(name), "%s/a.kch#bnum=10", t_root);
    CHECK(kura_store_open(name, &cfg, &s, err, sizeof(err)) == KURA_OK);
    if (s)
        kura_store_close(s);
    /* a plain file (e.g. a real Tokyo Cabinet file) is refused */
    snprintf(name, sizeof(name), "%s/file.tch", t_root);
    FILE *f = fopen(name, "w");
    fputs("ToKyO CaBiNeT", f);
    fclose(f);
    CHECK(kura_store_open(name, &cfg, &s, err, sizeof(err)) == KURA_EINVAL);
    CHECK(strstr(err, "not a kura hash database") != NULL);
}

typedef struct upd_arg {
    kura_update u;
    const char *suffix;
    int mode;               /* 0 append suffix (REPLACE), 1 TOUCH, 2 REMOVE, 3 KEEP */
    bool saw;
    int ret;
} upd_arg;

static int upd_fn(void *arg, const kura_item *cur, kura_update *out)
{
    upd_arg *a = arg;
    a->saw = cur != NULL;
    memset(out, 0, sizeof(*out));
    switch (a->mode) {
    case 0:
        out->action = KURA_UPDATE_REPLACE;
        out->flags = cur ? cur->flags + 1 : 7;
        out->exptime = 0;
        out->cas = cur ? cur->cas + 100 : 555;
        if (cur) {
            out->part[0].base = cur->val;   /* points into the store */
            out->part[0].len = cur->vlen;
        }
        out->part[1].base = a->suffix;
        out->part[1].len = strlen(a->suffix);
        break;
    case 1:
        out->action = KURA_UPDATE_TOUCH;
        out->exptime = 2000000;
        break;
    case 2:
        out->action = KURA_UPDATE_REMOVE;
        break;
    default:
        out->action = KURA_UPDATE_KEEP;
    }
    return a->ret;
}

static void test_operations(void)
{
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512];
    t_val v;
    REQUIRE(t_open(t_path("ops"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);

    CHECK(t_get(s, "a", &CLK, &v) == KURA_NOTFOUND);
    CHECK(t_put(s, "a", "one", 5, 0, 10, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    CHECK(t_get(s, "a", &CLK, &v) == KURA_OK);
    CHECK(v.len == 3 && memcmp(v.buf, "one", 3) == 0 && v.flags == 5 && v.cas == 10);
    /* add */
    CHECK(t_put(s, "a", "x", 0, 0, 11, KURA_PUT_ABSENT, 0, &CLK) == KURA_EXISTS);
    CHECK(t_put(s, "b", "bee", 0, 0, 12, KURA_PUT_ABSENT, 0, &CLK) == KURA_OK);
    /* replace */
    CHECK(t_put(s, "c", "x", 0, 0, 13, KURA_PUT_PRESENT, 0, &CLK) == KURA_NOTFOUND);
    CHECK(t_put(s, "b", "bee2", 0, 0, 14, KURA_PUT_PRESENT, 0, &CLK) == KURA_OK);
    /* cas */
    CHECK(t_put(s, "c", "x", 0, 0, 15, KURA_PUT_CAS, 1, &CLK) == KURA_NOTFOUND);
    CHECK(t_put(s, "b", "x", 0, 0, 15, KURA_PUT_CAS, 13, &CLK) == KURA_EXISTS);
    CHECK(t_put(s, "b", "bee3", 0, 0, 16, KURA_PUT_CAS, 14, &CLK) == KURA_OK);
    CHECK(t_get(s, "b", &CLK, &v) == KURA_OK && v.cas == 16 && v.len == 4);
    /* empty value, binary value, longest key */
    CHECK(t_put(s, "empty", "", 0, 0, 17, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    CHECK(t_get(s, "empty", &CLK, &v) == KURA_OK && v.len == 0);
    char key[251];
    memset(key, 'k', 250);
    key[250] = '\0';
    CHECK(t_put(s, key, "long", 0, 0, 18, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    CHECK(t_get(s, key, &CLK, &v) == KURA_OK && v.len == 4);
    /* longer than any store holds (memcached's 250 is the protocols') */
    char *lk = malloc(KURA_KEY_MAX + 1);
    REQUIRE(lk);
    memset(lk, 'k', KURA_KEY_MAX + 1);
    kura_item big = { .key = lk, .klen = KURA_KEY_MAX + 1, .val = "x", .vlen = 1 };
    CHECK(kura_store_put(s, &big, KURA_PUT_ANY, 0, &CLK) == KURA_EINVAL);
    free(lk);
    /* too big */
    char *huge = malloc(KURA_ITEM_SIZE_MAX_DEFAULT);
    memset(huge, 'h', KURA_ITEM_SIZE_MAX_DEFAULT);
    kura_item hi = { .key = "huge", .klen = 4, .val = huge, .vlen = KURA_ITEM_SIZE_MAX_DEFAULT };
    CHECK(kura_store_put(s, &hi, KURA_PUT_ANY, 0, &CLK) == KURA_ETOOBIG);
    hi.vlen = KURA_ITEM_SIZE_MAX_DEFAULT - kura_item_wire_total(4, 0, 0);
    CHECK(kura_store_put(s, &hi, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    free(huge);
    /* delete */
    CHECK(kura_store_del(s, "a", 1, 99, &CLK) == KURA_EXISTS);
    CHECK(kura_store_del(s, "a", 1, 10, &CLK) == KURA_OK);
    CHECK(kura_store_del(s, "a", 1, 0, &CLK) == KURA_NOTFOUND);
    CHECK(t_get(s, "a", &CLK, &v) == KURA_NOTFOUND);
    CHECK(kura_store_del(s, "b", 1, 0, &CLK) == KURA_OK);

    /* update: REPLACE on absent, then on present (parts into the item) */
    upd_arg ua = { .suffix = "-tail", .mode = 0, .ret = 42 };
    CHECK(kura_store_update(s, "u", 1, &CLK, upd_fn, &ua) == 42);
    CHECK(!ua.saw);
    CHECK(t_get(s, "u", &CLK, &v) == KURA_OK && v.len == 5 && v.flags == 7 && v.cas == 555);
    ua.ret = 0;
    CHECK(kura_store_update(s, "u", 1, &CLK, upd_fn, &ua) == 0);
    CHECK(ua.saw);
    CHECK(t_get(s, "u", &CLK, &v) == KURA_OK && v.len == 10 &&
          memcmp(v.buf, "-tail-tail", 10) == 0 && v.flags == 8 && v.cas == 655);
    ua.mode = 1;
    CHECK(kura_store_update(s, "u", 1, &CLK, upd_fn, &ua) == 0);
    CHECK(t_get(s, "u", &CLK, &v) == KURA_OK && v.exptime == 2000000 && v.cas == 655 &&
          v.flags == 8 && v.len == 10);
    ua.mode = 3;
    CHECK(kura_store_update(s, "u", 1, &CLK, upd_fn, &ua) == 0);
    CHECK(t_get(s, "u", &CLK, &v) == KURA_OK && v.len == 10);
    ua.mode = 1;
    CHECK(kura_store_update(s, "none", 4, &CLK, upd_fn, &ua) == 0);   /* touch of nothing */
    CHECK(t_get(s, "none", &CLK, &v) == KURA_NOTFOUND);
    ua.mode = 2;
    CHECK(kura_store_update(s, "u", 1, &CLK, upd_fn, &ua) == 0);
    CHECK(t_get(s, "u", &CLK, &v) == KURA_NOTFOUND);
    /* update that grows past -I */
    char *blob = malloc(600000);
    memset(blob, 'b', 600000);
    kura_item bi = { .key = "g", .klen = 1, .val = blob, .vlen = 600000 };
    CHECK(kura_store_put(s, &bi, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    upd_arg ug = { .suffix = "", .mode = 0 };
    ug.suffix = blob;   /* appends 600000 more: too big */
    blob[599999] = '\0';
    CHECK(kura_store_update(s, "g", 1, &CLK, upd_fn, &ug) == KURA_ETOOBIG);
    CHECK(t_get(s, "g", &CLK, &v) == KURA_OK);
    free(blob);

    kura_store_usage u;
    s->ops->usage(s, &u);
    CHECK_EQ_INT(u.curr_items, 4);   /* empty, key, huge, g */
    kura_store_close(s);
}

static int count_fn(void *arg, const kura_item *it)
{
    (void)it;
    (*(int *)arg)++;
    return 0;
}

static int stop_fn(void *arg, const kura_item *it)
{
    (void)it;
    return ++(*(int *)arg) == 3 ? 77 : 0;
}

static void test_liveness_and_sweep(void)
{
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512];
    t_val v;
    REQUIRE(t_open(t_path("live"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
    kura_clock c = CLK;
    for (int i = 0; i < 100; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        CHECK(t_put(s, k, "v", 0, i < 50 ? c.now + 10 : 0, 100 + (uint64_t)i, KURA_PUT_ANY, 0,
                    &c) == KURA_OK);
    }
    int n = 0;
    CHECK(s->ops->iterate(s, &ITER_ALL, &c, count_fn, &n) == 0 && n == 100);
    n = 0;
    CHECK(s->ops->iterate(s, &ITER_ALL, &c, stop_fn, &n) == 77 && n == 3);
    c.now += 10;    /* the first 50 expire */
    CHECK(t_get(s, "k1", &c, &v) == KURA_EXPIRED);
    CHECK(t_get(s, "k60", &c, &v) == KURA_OK);
    n = 0;
    CHECK(s->ops->iterate(s, &ITER_ALL, &c, count_fn, &n) == 0 && n == 50);
    /* add and replace treat the dead as absent */
    CHECK(t_put(s, "k2", "new", 0, 0, 300, KURA_PUT_ABSENT, 0, &c) == KURA_OK);
    CHECK(t_put(s, "k3", "new", 0, 0, 301, KURA_PUT_PRESENT, 0, &c) == KURA_NOTFOUND);
    CHECK(kura_store_del(s, "k4", 2, 0, &c) == KURA_NOTFOUND);
    /* flush watermark: everything with cas below 160 is flushed */
    c.oldest_cas = 160;
    CHECK(t_get(s, "k55", &c, &v) == KURA_FLUSHED);
    CHECK(t_get(s, "k61", &c, &v) == KURA_OK);
    CHECK(t_get(s, "k2", &c, &v) == KURA_OK);
    kura_store_usage u;
    s->ops->usage(s, &u);
    uint64_t before = u.curr_items;
    long r = 0;
    for (int i = 0; i < 2000; i++)
        r += s->ops->sweep(s, &c, 64);
    s->ops->usage(s, &u);
    CHECK_EQ_INT(u.curr_items, 41);     /* k60..k99 and k2 */
    CHECK_EQ_INT(before - u.curr_items, r);
    CHECK(u.reclaimed >= (uint64_t)r);
    CHECK(t_stat(s, "hash_expired_bytes") == 0);
    kura_store_close(s);
    /* and after reopen the dead stay dead */
    REQUIRE(t_open(t_path("live"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
    CHECK(t_get(s, "k1", &c, &v) != KURA_OK);
    CHECK(t_get(s, "k55", &c, &v) != KURA_OK);
    CHECK(t_get(s, "k70", &c, &v) == KURA_OK);
    kura_store_close(s);
}

/* Unconditional puts append before they look their key up (hashdb_rmw):
 * overwrites of live, expired and flagged items, and new keys, must count
 * as the same data written once does: items, memcached's bytes, the
 * segments' live bytes (after a reopen too), the reclaimed count, and
 * every key's newest value. */
static void write_final(kura_store *s, const kura_clock *c, int n)
{
    for (int i = 0; i < n; i++) {
        char k[16], v[16];
        snprintf(k, sizeof(k), "ow%d", i);
        snprintf(v, sizeof(v), "%.*s", i % 7 + 1, "abcdefg");
        CHECK(t_put(s, k, v, i % 3 ? 0 : 5, 0, 500 + (uint64_t)i, KURA_PUT_ANY, 0, c) ==
              KURA_OK);
    }
}

static void test_overwrite_accounting(void)
{
    enum { N = 3000, EXPIRING = 1000 };
    kura_test.bg_hold = true;       /* no compaction or checkpoint meanwhile */
    kura_store *s = NULL, *once = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512];
    REQUIRE(t_open(t_path("overwrite"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
    REQUIRE(t_open(t_path("once"), "", &cfg, &once, err, sizeof(err)) == KURA_OK);
    kura_clock c = CLK;
    for (int i = 0; i < N; i++) {
        char k[16];
        snprintf(k, sizeof(k), "ow%d", i);
        if (i % 2 == 0)     /* every other key first stored, some to expire */
            CHECK(t_put(s, k, "old value", 7, i < EXPIRING ? c.now + 10 : 0, 100 + (uint64_t)i,
                        KURA_PUT_ANY, 0, &c) == KURA_OK);
    }
    c.now += 10;
    kura_store_usage u0, u, w;
    s->ops->usage(s, &u0);
    write_final(s, &c, N);
    write_final(once, &c, N);
    s->ops->usage(s, &u);
    once->ops->usage(once, &w);
    CHECK_EQ_INT(u.curr_items, N);
    CHECK_EQ_INT(u.curr_items, w.curr_items);
    CHECK_EQ_INT(u.bytes, w.bytes);
    CHECK_EQ_INT(u.reclaimed - u0.reclaimed, EXPIRING / 2);
    /* the records alike but for their sequence numbers, whose varints may
     * differ by a byte (1501.. against 1..); an old record still counted
     * live would add ten times that */
    uint64_t ls = t_stat(s, "hash_live_bytes"), lw = t_stat(once, "hash_live_bytes");
    CHECK(ls >= lw && ls - lw <= N / 2);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        char k[16];
        t_val v;
        snprintf(k, sizeof(k), "ow%d", i);
        bad += t_get(s, k, &c, &v) != KURA_OK || v.len != (size_t)(i % 7 + 1) ||
               v.flags != (i % 3 ? 0u : 5u);
    }
    CHECK_EQ_INT(bad, 0);
    uint64_t live = t_stat(s, "hash_live_bytes");
    kura_store_close(s);
    REQUIRE(t_open(t_path("overwrite"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
    s->ops->usage(s, &u);
    CHECK_EQ_INT(u.curr_items, N);
    CHECK_EQ_INT(u.bytes, w.bytes);
    CHECK_EQ_INT(t_stat(s, "hash_live_bytes"), live);
    kura_store_close(s);
    kura_store_close(once);
    kura_test.bg_hold = false;
}

static void test_persistence(void)
{
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_INTERVAL);
    char err[512];
    t_val v;
    REQUIRE(t_open(t_path("pers"), "#bnum=64", &cfg, &s, err, sizeof(err)) == KURA_OK);
    for (int i = 0; i < 1000; i++) {
        char k[32], val[64];
        snprintf(k, sizeof(k), "key:%d", i);
        snprintf(val, sizeof(val), "value-%d-%s", i, i % 3 ? "x" : "");
        CHECK(t_put(s, k, val, (uint32_t)i * 2654435761u, i % 2 ? 5000000 + i : 0,
                    1000 + (uint64_t)i, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    }
    for (int i = 0; i < 1000; i += 10) {
        char k[32];
        snprintf(k, sizeof(k), "key:%d", i);
        CHECK(kura_store_del(s, k, strlen(k), 0, &CLK) == KURA_OK);
    }
    kura_store_state st = { .max_cas = 5000, .oldest_cas = 3, .flush_at = 1234567 };
    CHECK(s->ops->save_state(s, &st) == KURA_OK);
    kura_store_state got;
    CHECK(s->ops->load_state(s, &got) == KURA_OK && got.max_cas == 5000);
    kura_store_close(s);

    for (int round = 0; round < 2; round++) {
        REQUIRE(t_open(t_path("pers"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
        for (int i = 0; i < 1000; i++) {
            char k[32], val[64];
            snprintf(k, sizeof(k), "key:%d", i);
            snprintf(val, sizeof(val), "value-%d-%s", i, i % 3 ? "x" : "");
            int rc = t_get(s, k, &CLK, &v);
            if (i % 10 == 0) {
                CHECK(rc == KURA_NOTFOUND);
                continue;
            }
            CHECK(rc == KURA_OK);
            CHECK(v.len == strlen(val) && memcmp(v.buf, val, v.len) == 0);
            CHECK(v.flags == (uint32_t)i * 2654435761u);
            CHECK(v.exptime == (i % 2 ? 5000000 + i : 0));
            CHECK(v.cas == 1000 + (uint64_t)i);
        }
        memset(&got, 0, sizeof(got));
        CHECK(s->ops->load_state(s, &got) == KURA_OK);
        CHECK(got.max_cas == 5000 && got.oldest_cas == 3 && got.flush_at == 1234567);
        kura_store_usage u;
        s->ops->usage(s, &u);
        CHECK_EQ_INT(u.curr_items, 900);
        kura_store_close(s);
    }
    /* max_cas covers cas values stored after the last save_state */
    REQUIRE(t_open(t_path("pers"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
    CHECK(t_put(s, "high", "v", 0, 0, 9999, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    char dst[600];
    snprintf(dst, sizeof(dst), "%s/pers-crash.kh", t_root);
    CHECK(t_copy_dir(t_path("pers"), dst) == 0);     /* crash image */
    kura_store_close(s);
    kura_store *c = NULL;
    REQUIRE(t_open(dst, "", &cfg, &c, err, sizeof(err)) == KURA_OK);
    CHECK(c->ops->load_state(c, &got) == KURA_OK && got.max_cas == 9999 && got.oldest_cas == 3);
    CHECK(t_get(c, "high", &CLK, &v) == KURA_OK && v.cas == 9999);
    kura_store_close(c);
}

static void test_index_growth(void)
{
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512];
    t_val v;
    REQUIRE(t_open(t_path("grow"), "#bnum=16", &cfg, &s, err, sizeof(err)) == KURA_OK);
    uint64_t b0 = t_stat(s, "hash_index_slots");
    for (int i = 0; i < 100000; i++) {
        char k[32];
        snprintf(k, sizeof(k), "g%d", i);
        if (t_put(s, k, k, 0, 0, 1, KURA_PUT_ANY, 0, &CLK) != KURA_OK) {
            CHECK(0);
            break;
        }
    }
    uint64_t b1 = t_stat(s, "hash_index_slots");
    CHECK(b1 >= 100000 * 4 / 3 && b1 > b0);     /* at most 3/4 of the slots used */
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        char k[32];
        snprintf(k, sizeof(k), "g%d", i);
        if (t_get(s, k, &CLK, &v) != KURA_OK || v.len != strlen(k) || memcmp(v.buf, k, v.len))
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    kura_store_close(s);
}

/* Deletes leave tombstones in the open-addressed index: under churn the
 * table must neither grow without bound nor lose keys behind them. */
static void test_index_churn(void)
{
    enum { KEYS = 4000, OPS = 200000 };
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512];
    static bool present[KEYS];
    memset(present, 0, sizeof(present));
    REQUIRE(t_open(t_path("churn"), "#bnum=16", &cfg, &s, err, sizeof(err)) == KURA_OK);
    uint64_t seed = 12345;
    int bad = 0;
    for (int i = 0; i < OPS && !bad; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        int k = (int)((seed >> 33) % KEYS);
        char key[32];
        snprintf(key, sizeof(key), "churn%d", k);
        if (present[k]) {
            bad += kura_store_del(s, key, strlen(key), 0, &CLK) != KURA_OK;
            present[k] = false;
        } else {
            bad += t_put(s, key, key, 0, 0, 1, KURA_PUT_ANY, 0, &CLK) != KURA_OK;
            present[k] = true;
        }
    }
    CHECK_EQ_INT(bad, 0);
    t_val v;
    for (int k = 0; k < KEYS; k++) {
        char key[32];
        snprintf(key, sizeof(key), "churn%d", k);
        int rc = t_get(s, key, &CLK, &v);
        bad += present[k] ? rc != KURA_OK || v.len != strlen(key) : rc != KURA_NOTFOUND;
    }
    CHECK_EQ_INT(bad, 0);
    /* about KEYS/2 live keys: a few slots per key at most, however many
     * deletes went by (1024 stripes of at least 8 slots) */
    uint64_t slots = t_stat(s, "hash_index_slots");
    CHECK(slots <= 1024 * 16 || slots <= KEYS * 8);
    int live = 0;
    for (int k = 0; k < KEYS; k++)
        live += present[k];
    kura_store_usage u;
    s->ops->usage(s, &u);
    CHECK_EQ_INT((int)u.curr_items, live);
    kura_store_close(s);
}

/* A database written in the first formats (records and checkpoint version
 * 1; tests/fixtures/hash-v1.kh: 100 keys, k5 deleted, k7 with an exptime,
 * then "late" appended after the checkpoint) still opens, whole.  New
 * records go to a new segment in version 2, compaction moves the old
 * segment's records there, and all of it reads back after a restart. */
static void test_format_v1(void)
{
    char fixture[512], err[512];
    snprintf(fixture, sizeof(fixture), "%.*s/../fixtures/hash-v1.kh",
             (int)(strrchr(__FILE__, '/') - __FILE__), __FILE__);
    const char *copy = t_path("v1.kh");
    REQUIRE(t_copy_dir(fixture, copy) == 0);
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    kura_clock clk = { .now = 1700000000 };
    for (int round = 0; round < 2; round++) {
        kura_store *s = NULL;
        REQUIRE(t_open(copy, "#segsiz=64k", &cfg, &s, err, sizeof(err)) == KURA_OK);
        int bad = 0;
        for (int i = 0; i < 100; i++) {
            char k[16], want[16];
            snprintf(k, sizeof(k), "k%d", i);
            snprintf(want, sizeof(want), "v%d", i);
            t_val v;
            int rc = t_get(s, k, &clk, &v);
            if (i == 5)
                bad += rc != KURA_NOTFOUND;
            else
                bad += rc != KURA_OK || v.len != strlen(want) || memcmp(v.buf, want, v.len) ||
                       v.flags != (uint32_t)i || v.cas != 1000u + (unsigned)i ||
                       v.exptime != (i == 7 ? 4000000000LL : 0);
        }
        CHECK_EQ_INT(bad, 0);
        t_val v;
        CHECK(t_get(s, "late", &clk, &v) == KURA_OK && v.len == 4 && !memcmp(v.buf, "tail", 4) &&
              v.flags == 9 && v.cas == 5000);
        if (round == 0) {
            CHECK(t_put(s, "new", "v2", 3, 0, 6000, KURA_PUT_ANY, 0, &clk) == KURA_OK);
            /* two checkpoints past segment 1, then compact it away */
            CHECK(hashdb_debug_maintain(s, true, false) == KURA_OK);
            CHECK(hashdb_debug_maintain(s, true, true) == KURA_OK);
            CHECK(t_stat(s, "hash_compactions") >= 1);
        }
        CHECK(t_get(s, "new", &clk, &v) == KURA_OK && v.len == 2 && v.flags == 3 &&
              v.cas == 6000);
        kura_store_close(s);
        char ck[600];
        unsigned char h[12] = { 0 };
        snprintf(ck, sizeof(ck), "%s/checkpoint", copy);
        FILE *f = fopen(ck, "rb");
        CHECK(f && fread(h, 1, sizeof(h), f) == sizeof(h));
        if (f)
            fclose(f);
        CHECK_EQ_INT(h[8], 8);      /* the version now in place */
    }
}

/* A database whose checkpoint is version 4 (entries not compressed;
 * tests/fixtures/hash-v4.kh, written by kurad before version 5: k0..k99
 * with flags i and value "v<i>", k7 with an exptime, k5 deleted, a clean
 * stop) opens from that checkpoint whole, converted; its next checkpoint is
 * version 7 (the index's tables, flat), and the database opens from that
 * whole too. */
static void test_checkpoint_v4(void)
{
    char fixture[512], err[512];
    snprintf(fixture, sizeof(fixture), "%.*s/../fixtures/hash-v4.kh",
             (int)(strrchr(__FILE__, '/') - __FILE__), __FILE__);
    const char *copy = t_path("v4.kh");
    REQUIRE(t_copy_dir(fixture, copy) == 0);
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    kura_clock clk = { .now = 1700000000 };
    for (int round = 0; round < 2; round++) {
        char ck[600];
        unsigned char h[12] = { 0 };
        snprintf(ck, sizeof(ck), "%s/checkpoint", copy);
        FILE *f = fopen(ck, "rb");
        CHECK(f && fread(h, 1, sizeof(h), f) == sizeof(h));
        if (f)
            fclose(f);
        CHECK_EQ_INT(h[8], round == 0 ? 4 : 8);
        kura_store *s = NULL;
        REQUIRE(t_open(copy, "#segsiz=64k", &cfg, &s, err, sizeof(err)) == KURA_OK);
        CHECK_EQ_INT(t_stat(s, "hash_recovered_records"), 0);  /* from the checkpoint */
        int bad = 0;
        for (int i = 0; i < 100; i++) {
            char k[16], want[16];
            snprintf(k, sizeof(k), "k%d", i);
            snprintf(want, sizeof(want), "v%d", i);
            t_val v;
            int rc = t_get(s, k, &clk, &v);
            if (i == 5)
                bad += rc != KURA_NOTFOUND;
            else
                bad += rc != KURA_OK || v.len != strlen(want) || memcmp(v.buf, want, v.len) ||
                       v.flags != (uint32_t)i || v.exptime != (i == 7 ? 2000000000LL : 0);
        }
        CHECK_EQ_INT(bad, 0);
        if (round == 0)
            CHECK(hashdb_debug_maintain(s, true, false) == KURA_OK);
        kura_store_close(s);
    }
}

static int big_fn(void *arg, const kura_item *it)
{
    const unsigned char *p = it->val;
    size_t *ok = arg;
    *ok = it->vlen;
    for (size_t i = 0; i < it->vlen; i += 4099)
        if (p[i] != (unsigned char)(i * 31))
            *ok = 0;
    return 0;
}

/* A writer copying a large value lets the readers of its stripe in: while
 * the copy is held up (a hook in the copy), a read of another key of the
 * same stripe completes, and sees the values as they were. */
typedef struct copy_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool in_copy, reads_done, timed_out, writer_done;
} copy_gate;

static void copy_hook(void *arg)
{
    copy_gate *g = arg;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;            /* a reader blocked by the copy never gets here */
    pthread_mutex_lock(&g->mu);
    g->in_copy = true;
    pthread_cond_broadcast(&g->cv);
    while (!g->reads_done && !g->timed_out)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &dl) != 0)
            g->timed_out = true;
    pthread_mutex_unlock(&g->mu);
}

typedef struct big_writer {
    copy_gate *g;
    kura_store *s;
    const char *key;
    char *val;
    size_t len;
    int rc;
} big_writer;

static void *write_big(void *arg)
{
    big_writer *w = arg;
    kura_item it = { .key = w->key, .klen = strlen(w->key), .val = w->val, .vlen = w->len,
                     .cas = 77 };
    w->rc = kura_store_put(w->s, &it, KURA_PUT_ANY, 0, &CLK);
    pthread_mutex_lock(&w->g->mu);
    w->g->writer_done = true;
    pthread_cond_broadcast(&w->g->cv);
    pthread_mutex_unlock(&w->g->mu);
    return NULL;
}

static int big_whole(void *arg, const kura_item *it)
{
    const char *v = it->val;
    *(bool *)arg = it->vlen == 512 << 10 && it->cas == 77 && v[0] == 'B' && v[it->vlen - 1] == 'B';
    return 0;
}

static void test_large_copy_lets_readers_in(void)
{
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512], other[32];
    REQUIRE(t_open(t_path("copy"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
    uint64_t stripe = hashdb_debug_hash(s, "big", 3) & 1023;   /* HD_STRIPES is 1024 */
    for (int i = 0;; i++) {     /* a key of the same stripe */
        snprintf(other, sizeof(other), "o%d", i);
        if ((hashdb_debug_hash(s, other, strlen(other)) & 1023) == stripe)
            break;
    }
    REQUIRE(t_put(s, other, "old", 0, 0, 1, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    REQUIRE(t_put(s, "big", "small", 0, 0, 2, KURA_PUT_ANY, 0, &CLK) == KURA_OK);

    copy_gate g = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    kura_test.hashdb_copy_arg = &g;
    kura_test.hashdb_copy = copy_hook;
    big_writer w = { .g = &g, .s = s, .key = "big", .len = 512 << 10 };
    w.val = malloc(w.len);
    REQUIRE(w.val != NULL);
    memset(w.val, 'B', w.len);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, write_big, &w) == 0);
    pthread_mutex_lock(&g.mu);
    while (!g.in_copy && !g.writer_done)
        pthread_cond_wait(&g.cv, &g.mu);
    bool in_copy = g.in_copy;
    pthread_mutex_unlock(&g.mu);
    CHECK(in_copy);

    t_val v;
    CHECK(t_get(s, other, &CLK, &v) == KURA_OK && v.len == 3 && !memcmp(v.buf, "old", 3));
    CHECK(t_get(s, "big", &CLK, &v) == KURA_OK && v.len == 5 && v.cas == 2);  /* not yet */
    pthread_mutex_lock(&g.mu);
    g.reads_done = true;
    pthread_cond_broadcast(&g.cv);
    CHECK(!g.timed_out);        /* the reads did not wait for the copy */
    pthread_mutex_unlock(&g.mu);
    pthread_join(th, NULL);
    kura_test.hashdb_copy = NULL;
    CHECK_EQ_INT(w.rc, KURA_OK);
    bool whole = false;
    CHECK(s->ops->get(s, "big", 3, &CLK, big_whole, &whole) == KURA_OK && whole);
    free(w.val);
    kura_store_close(s);
}

static void test_big_value(void)
{
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    cfg.item_size_max = 128u << 20;
    char err[512];
    size_t n = 100u << 20;
    REQUIRE(t_open(t_path("big"), "#segsiz=16m", &cfg, &s, err, sizeof(err)) == KURA_OK);
    unsigned char *b = malloc(n);
    REQUIRE(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 31);
    kura_item it = { .key = "big", .klen = 3, .val = b, .vlen = n, .cas = 1 };
    CHECK(kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    CHECK(t_put(s, "small", "v", 0, 0, 2, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    free(b);
    kura_store_close(s);
    REQUIRE(t_open(t_path("big"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
    size_t ok = 0;
    CHECK(s->ops->get(s, "big", 3, &CLK, big_fn, &ok) == KURA_OK);
    CHECK(ok == n);
    t_val v;
    CHECK(t_get(s, "small", &CLK, &v) == KURA_OK);
    kura_store_close(s);
}

static void test_read_only(void)
{
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512];
    t_val v;
    REQUIRE(t_open(t_path("ro"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
    CHECK(t_put(s, "a", "1", 0, 0, 1, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    kura_store_close(s);
    cfg.read_only = true;
    REQUIRE(t_open(t_path("ro"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
    CHECK(t_get(s, "a", &CLK, &v) == KURA_OK);
    CHECK(t_put(s, "b", "1", 0, 0, 1, KURA_PUT_ANY, 0, &CLK) == KURA_EREADONLY);
    kura_store_close(s);
    CHECK(t_open(t_path("nonexistent"), "", &cfg, &s, err, sizeof(err)) != KURA_OK);
}

/* ---- the keyed hash ---------------------------------------------------- */

/* The index's hash before it was keyed (a multiply-xor over 8-byte words),
 * kept here to make keys that all collide under it. */
static uint64_t old_fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static uint64_t old_hash8(uint64_t v)    /* of an 8-byte key, as its word */
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (8 * 0x100000001b3ULL);
    h = (h ^ old_fmix64(v)) * 0x9E3779B97F4A7C15ULL;
    h ^= h >> 29;
    return old_fmix64(h);
}

static uint64_t inv_mul(uint64_t c)     /* c odd: c * inv_mul(c) == 1 mod 2^64 */
{
    uint64_t x = c;
    for (int i = 0; i < 6; i++)
        x *= 2 - c * x;
    return x;
}

static uint64_t old_unfmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= inv_mul(0xc4ceb9fe1a85ec53ULL);
    k ^= k >> 33;
    k *= inv_mul(0xff51afd7ed558ccdULL);
    k ^= k >> 33;
    return k;
}

/* The 8-byte key whose old hash is h: every step of old_hash8 inverts. */
static uint64_t old_preimage(uint64_t h)
{
    uint64_t t = old_unfmix64(h);
    t ^= t >> 29 ^ t >> 58;
    t *= inv_mul(0x9E3779B97F4A7C15ULL);
    return old_unfmix64(t ^ 0x9E3779B97F4A7C15ULL ^ (8 * 0x100000001b3ULL));
}

/* An attacker's keys against the unkeyed hash: N keys whose old hashes
 * agree in bits 0-47 (stripe and home line, at any table size) and differ
 * only in the tag, so that under it they all share one stripe and one
 * probe sequence, and each insert or miss walks past all the others.
 * Under the keyed hash they spread over the stripes as random keys do,
 * and the longest probe stays short. */
static void test_hash_flooding(void)
{
    enum { N = 4000 };
    static char keys[N][8];
    int old_same = 0;
    uint64_t base = 0x00005a5a12345678ULL;
    for (int i = 0; i < N; i++) {
        uint64_t v = old_preimage(base | (uint64_t)(i + 1) << 48);
        memcpy(keys[i], &v, 8);
        uint64_t back;
        memcpy(&back, keys[i], 8);
        old_same += (old_hash8(back) & 0xffffffffffffULL) == base;
    }
    CHECK_EQ_INT(old_same, N);      /* the old hash put them all together */

    /* (the process's key is made when the first store opens) */
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512];
    REQUIRE(t_open(t_path("flood"), "#bnum=16", &cfg, &s, err, sizeof(err)) == KURA_OK);
    /* the keyed hash: per stripe about N / 1024 ~ 4; at random the fullest
     * of 1024 stripes holds about 12 */
    static int per[1024];
    memset(per, 0, sizeof(per));
    int most = 0;
    for (int i = 0; i < N; i++) {
        int st = (int)(hashdb_debug_hash(s, keys[i], 8) & 1023);
        if (++per[st] > most)
            most = per[st];
    }
    printf("# %d old-colliding keys: at most %d in one stripe of 1024\n", N, most);
    CHECK(most <= 30);      /* under the old hash: N */

    int bad = 0;
    for (int i = 0; i < N; i++) {
        kura_item it = { .key = keys[i], .klen = 8, .val = "v", .vlen = 1, .cas = 1 };
        bad += kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK) != KURA_OK;
    }
    CHECK_EQ_INT(bad, 0);
    size_t probe = hashdb_debug_probe_max(s);
    printf("# longest probe: %zu slots past the home line's start\n", probe);
    CHECK(probe < 64);      /* under the old hash: N - 1 */
    t_val v;
    for (int i = 0; i < N; i++)
        bad += s->ops->get(s, keys[i], 8, &CLK, t_copy_cb, &v) != KURA_OK;
    CHECK_EQ_INT(bad, 0);
    kura_store_close(s);
}

/* The hash key is the database's, kept in the checkpoint: a reopen finds
 * every key, whether it comes back from the checkpoint or from the log's
 * replay.  A version 7 checkpoint's tables are laid out by its key, so it
 * keeps it even where an open of an older checkpoint would draw a new one
 * (the hook); test_format_v1 opens one that holds no key. */
static void test_rekey_reopen(void)
{
    enum { N = 5000 };
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512], k[32];
    t_val v;
    REQUIRE(t_open(t_path("rekey"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "rk:%d", i);
        CHECK(t_put(s, k, k, 0, 0, 1 + (uint64_t)i, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
        if (i == N / 2)     /* the first half in the checkpoint, the rest replayed */
            CHECK(hashdb_debug_maintain(s, true, false) >= 0);
    }
    uint64_t before[64];
    for (int i = 0; i < 64; i++) {
        snprintf(k, sizeof(k), "rk:%d", i);
        before[i] = hashdb_debug_hash(s, k, strlen(k));
    }
    /* a crash image, whose open must replay the log after the checkpoint
     * (a clean close may write a new checkpoint) */
    char crash[600];
    snprintf(crash, sizeof(crash), "%s/rekey-crash.kh", t_root);
    CHECK(t_copy_dir(t_path("rekey"), crash) == 0);
    kura_store_close(s);
    /* the key is the database's: a plain reopen keeps it */
    REQUIRE(t_open(t_path("rekey"), "", &cfg, &s, err, sizeof(err)) == KURA_OK);
    int moved = 0;
    for (int i = 0; i < 64; i++) {
        snprintf(k, sizeof(k), "rk:%d", i);
        moved += hashdb_debug_hash(s, k, strlen(k)) != before[i];
    }
    CHECK_EQ_INT(moved, 0);
    kura_store_close(s);
    const char *paths[2] = { t_path("rekey"), crash };
    for (int p = 0; p < 2; p++) {
        /* as an open of an older checkpoint draws one; a version 7
         * checkpoint's tables are laid out by its key, which it keeps */
        kura_test.hashdb_fresh_key = true;
        REQUIRE(t_open(paths[p], "", &cfg, &s, err, sizeof(err)) == KURA_OK);
        moved = 0;
        for (int i = 0; i < 64; i++) {
            snprintf(k, sizeof(k), "rk:%d", i);
            moved += hashdb_debug_hash(s, k, strlen(k)) != before[i];
        }
        CHECK_EQ_INT(moved, 0);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            snprintf(k, sizeof(k), "rk:%d", i);
            bad += t_get(s, k, &CLK, &v) != KURA_OK || v.len != strlen(k) ||
                   memcmp(v.buf, k, v.len) || v.cas != 1 + (uint64_t)i;
        }
        CHECK_EQ_INT(bad, 0);
        kura_store_usage u;
        s->ops->usage(s, &u);
        CHECK_EQ_INT(u.curr_items, N);
        kura_store_close(s);
    }
}

/* A compacted segment's file stays until two checkpoints are written after
 * the compaction: a checkpoint names records by place (a slot holds no
 * key), so a crash image taken after a compaction, whose checkpoints were
 * both written before it, must still find the records they name.  Negative
 * check: with the hook that removes the file at once (as before version 7),
 * that image does not open. */
static void test_retired_segments(void)
{
    enum { N = 2000 };
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512], k[32], crash[600];
    t_val v;
    /* No checkpoint or compaction but the ones asked for below: one of the
     * store's own between the compaction and the copy (under a sanitizer's
     * pace) would let the negative's image open, and its compactor would
     * read the hook while this thread sets it. */
    kura_test.bg_hold = true;
    for (int neg = 0; neg < 2; neg++) {
        kura_store *s = NULL;
        const char *p = t_path(neg ? "retire-neg" : "retire");
        REQUIRE(t_open(p, "#segsiz=64k", &cfg, &s, err, sizeof(err)) == KURA_OK);
        for (int round = 0; round < 2; round++)
            for (int i = 0; i < N; i++) {
                snprintf(k, sizeof(k), "rt:%d", i);
                CHECK(t_put(s, k, k, 0, 0, 1 + (uint64_t)(round * N + i), KURA_PUT_ANY, 0,
                            &CLK) == KURA_OK);
            }
        CHECK(hashdb_debug_maintain(s, true, false) == KURA_OK);
        kura_test.hashdb_drop_compacted = neg;
        CHECK(hashdb_debug_maintain(s, true, true) == KURA_OK);
        kura_test.hashdb_drop_compacted = false;
        CHECK(t_stat(s, "hash_compactions") >= 1);
        snprintf(crash, sizeof(crash), "%s/retire-crash-%d.kh", t_root, neg);
        CHECK(t_copy_dir(p, crash) == 0);
        kura_store_close(s);
        int rc = t_open(crash, "#segsiz=64k", &cfg, &s, err, sizeof(err));
        if (neg) {
            printf("# segments removed at once: the crash image %s (%s)\n",
                   rc ? "is refused" : "opens", rc ? err : "");
            CHECK(rc != KURA_OK);
            if (rc == KURA_OK)
                kura_store_close(s);
            continue;
        }
        REQUIRE(rc == KURA_OK);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            snprintf(k, sizeof(k), "rt:%d", i);
            bad += t_get(s, k, &CLK, &v) != KURA_OK || v.len != strlen(k) ||
                   memcmp(v.buf, k, v.len) || v.cas != 1 + (uint64_t)(N + i);
        }
        CHECK_EQ_INT(bad, 0);
        kura_store_close(s);
    }
    kura_test.bg_hold = false;
}

/* A checkpoint (version 8, and version 7 written by the test hook) whose
 * bytes pass its CRC but whose tables do not hold together (a slot with the
 * replay-only dead mark, or of segment 0; a table size that is no power of
 * two) is refused at open with the place named, never loaded. */
static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void test_checkpoint_tables_checked(void)
{
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512], k[32], ck[600];
    for (int version = 7; version <= 8; version++)
        for (int variant = 0; variant < 2; variant++) {
            kura_store *s = NULL;
            char name[32];
            snprintf(name, sizeof(name), "v%d-%s", version, variant ? "table" : "slot");
            const char *p = t_path(name);
            kura_test.hashdb_ckpt_v7 = version == 7;
            REQUIRE(t_open(p, "#bnum=1000", &cfg, &s, err, sizeof(err)) == KURA_OK);
            for (int i = 0; i < 200; i++) {
                snprintf(k, sizeof(k), "c7:%d", i);
                CHECK(t_put(s, k, k, 0, 0, 1 + (uint64_t)i, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
            }
            CHECK(hashdb_debug_maintain(s, true, false) == KURA_OK);
            kura_store_close(s);
            kura_test.hashdb_ckpt_v7 = false;
            snprintf(ck, sizeof(ck), "%s/checkpoint", p);
            FILE *f = fopen(ck, "r+b");
            REQUIRE(f);
            static unsigned char b[1 << 20];
            size_t len = fread(b, 1, sizeof(b), f);
            REQUIRE(len > 104 + 24 && len < sizeof(b));
            CHECK_EQ_INT(b[8], version);
            /* the first stripe with a slot */
            size_t at = 104, hdr = version == 7 ? 32 : 40;
            while (at + hdr <= len - 24 && le64(b + at + 8) == 0)
                at += hdr + (version == 7 ? 0 : le64(b + at + 32));
            REQUIRE(at + hdr + 16 <= len - 24);
            if (variant)
                b[at] = 12;                             /* 12 slots: no power of two */
            else if (version == 7)
                memset(b + at + 32 + 4, 0, 4);          /* its first slot: segment 0 */
            else
                b[at + 40] |= 8;                        /* its first slot: HD_DEAD */
            uint32_t c = crc32c_update(0, b, len - 8);
            memcpy(b + len - 8, &c, 4);                 /* little-endian host */
            REQUIRE(fseek(f, 0, SEEK_SET) == 0 && fwrite(b, 1, len, f) == len);
            fclose(f);
            int rc = t_open(p, "#bnum=1000", &cfg, &s, err, sizeof(err));
            printf("# version %d, %s: %s\n", version,
                   variant ? "a table of 12 slots" : "a bad slot", rc ? err : "opened");
            CHECK(rc == KURA_ECORRUPT);
            CHECK(strstr(err, variant ? "bad table of stripe" : "bad slot at offset") != NULL);
            if (rc == KURA_OK)
                kura_store_close(s);
        }
}

static long file_size(const char *dir, const char *name)
{
    char path[600];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int checkpoint_version(const char *dir)
{
    char path[600];
    unsigned char h[12] = { 0 };
    snprintf(path, sizeof(path), "%s/checkpoint", dir);
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(h, 1, sizeof(h), f) : 0;
    if (f)
        fclose(f);
    return got == sizeof(h) ? h[8] : -1;
}

/* A store whose checkpoint is version 7 (16-byte slots, written by the test
 * hook as kurad did before version 8) opens whole, the keys after its
 * replay position replayed; the open writes a version 8 checkpoint at once,
 * smaller, which the next open loads.  Enough keys (and small segments)
 * that the tables load on several threads and the slots span segments. */
static void test_checkpoint_v7_opens(void)
{
    enum { N = 120000 };
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512], k[32];
    t_val v;
    kura_store *s = NULL;
    const char *p = t_path("v7-opens");
    kura_test.bg_hold = true;       /* the checkpoints asked for, no others */
    kura_test.hashdb_ckpt_v7 = true;
    REQUIRE(t_open(p, "#segsiz=1m", &cfg, &s, err, sizeof(err)) == KURA_OK);
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "v7:%d", i);
        CHECK(t_put(s, k, k, (uint32_t)i, 0, 1 + (uint64_t)i, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
        if (i == N - 101)   /* the last 100 replayed after the checkpoint */
            CHECK(hashdb_debug_maintain(s, true, false) == KURA_OK);
    }
    /* a crash image: the version 7 checkpoint and the log after it */
    char crash[600];
    snprintf(crash, sizeof(crash), "%s/v7-crash.kh", t_root);
    CHECK(t_copy_dir(p, crash) == 0);
    kura_store_close(s);
    kura_test.hashdb_ckpt_v7 = false;
    CHECK_EQ_INT(checkpoint_version(crash), 7);
    long v7size = file_size(crash, "checkpoint");
    for (int round = 0; round < 2; round++) {
        REQUIRE(t_open(crash, "#segsiz=1m", &cfg, &s, err, sizeof(err)) == KURA_OK);
        if (round == 0)
            CHECK_EQ_INT(t_stat(s, "hash_recovered_records"), 100);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            snprintf(k, sizeof(k), "v7:%d", i);
            bad += t_get(s, k, &CLK, &v) != KURA_OK || v.len != strlen(k) ||
                   memcmp(v.buf, k, v.len) || v.flags != (uint32_t)i ||
                   v.cas != 1 + (uint64_t)i;
        }
        CHECK_EQ_INT(bad, 0);
        kura_store_usage u;
        s->ops->usage(s, &u);
        CHECK_EQ_INT(u.curr_items, N);
        kura_store_close(s);
        CHECK_EQ_INT(checkpoint_version(crash), 8);
        long v8size = file_size(crash, "checkpoint");
        printf("# checkpoint of %d keys: version 7 %ld bytes, version 8 %ld\n", N, v7size,
               v8size);
        CHECK(v8size > 0 && v8size * 3 < v7size * 2);
    }
    kura_test.bg_hold = false;
}

/* The segments' live bytes after an open: a stripe that replay left as
 * the checkpoint had it takes them from the sums made while its slots
 * loaded, a stripe that replay changed from its table (about 10 keys a
 * stripe: the 300 writes after the checkpoint change about a quarter of
 * the 1024 stripes, the rest not); either way what the store counted
 * before the crash.  Negative
 * check: with replay's marks left off (the hook), changed stripes take the
 * checkpoint's sums and the total differs. */
static void test_live_bytes_reopen(void)
{
    enum { N = 10000 };
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512], k[32], crash[2][600];
    t_val v;
    kura_store *s = NULL;
    const char *p = t_path("live-reopen");
    kura_test.bg_hold = true;       /* the checkpoints asked for, no others */
    REQUIRE(t_open(p, "#segsiz=64k", &cfg, &s, err, sizeof(err)) == KURA_OK);
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "lb:%d", i);
        CHECK(t_put(s, k, k, 0, 0, 1 + (uint64_t)i, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    }
    CHECK(hashdb_debug_maintain(s, true, false) == KURA_OK);
    /* after the checkpoint: overwrites (longer values), deletes, new keys */
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "lb:%d", i * 7);
        CHECK(t_put(s, k, "a longer value than the key", 0, 0, N + 1 + (uint64_t)i,
                    KURA_PUT_ANY, 0, &CLK) == KURA_OK);
        snprintf(k, sizeof(k), "lb:%d", i * 7 + 3);
        CHECK(kura_store_del(s, k, strlen(k), 0, &CLK) == KURA_OK);
        snprintf(k, sizeof(k), "lb:new:%d", i);
        CHECK(t_put(s, k, k, 0, 0, 2 * N + 1 + (uint64_t)i, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    }
    uint64_t live = t_stat(s, "hash_live_bytes");
    for (int c = 0; c < 2; c++) {
        snprintf(crash[c], sizeof(crash[c]), "%s/live-crash%d.kh", t_root, c);
        CHECK(t_copy_dir(p, crash[c]) == 0);
    }
    kura_store_close(s);
    REQUIRE(t_open(crash[0], "#segsiz=64k", &cfg, &s, err, sizeof(err)) == KURA_OK);
    CHECK_EQ_INT(t_stat(s, "hash_recovered_records"), 300);
    CHECK_EQ_INT(t_stat(s, "hash_live_bytes"), live);
    CHECK(t_get(s, "lb:7", &CLK, &v) == KURA_OK && v.len == 27);
    CHECK(t_get(s, "lb:3", &CLK, &v) == KURA_NOTFOUND);
    CHECK(t_get(s, "lb:new:5", &CLK, &v) == KURA_OK);
    kura_store_close(s);
    kura_test.hashdb_cksum_unmarked = true;
    REQUIRE(t_open(crash[1], "#segsiz=64k", &cfg, &s, err, sizeof(err)) == KURA_OK);
    CHECK(t_stat(s, "hash_live_bytes") != live);
    kura_store_close(s);
    kura_test.hashdb_cksum_unmarked = false;
    kura_test.bg_hold = false;
}

/* A table whose last line overflows: a reopen puts the checkpoint's slots
 * back in home order (hdx_put_sorted), and those pushed past the table's
 * end wrap to its start, after the slots homed there.  One stripe of 16
 * slots (bnum 10000) holds 2 keys homed on its first line and 9 on its
 * second: the ninth lands in slot 2, 10 slots from its home, and every key
 * is found after the reopen. */
static void test_load_wraps(void)
{
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512], keys[11][16];
    t_val v;
    kura_store *s = NULL;
    const char *p = t_path("wrap");
    kura_test.bg_hold = true;
    REQUIRE(t_open(p, "#bnum=10000", &cfg, &s, err, sizeof(err)) == KURA_OK);
    int last = 0, first = 0;
    for (int i = 0; last + first < 11 && i < 10000000; i++) {
        char k[16];
        snprintf(k, sizeof(k), "w%d", i);
        uint64_t h = hashdb_debug_hash(s, k, strlen(k));
        if ((h & 1023) != 5)
            continue;           /* stripe 5; bit 20 picks its line of two */
        if ((h >> 20) & 1 ? last < 9 && ++last : first < 2 && ++first)
            snprintf(keys[last + first - 1], sizeof(keys[0]), "%s", k);
    }
    REQUIRE(last + first == 11);
    for (int i = 0; i < 11; i++)
        CHECK(t_put(s, keys[i], keys[i], 0, 0, 1 + (uint64_t)i, KURA_PUT_ANY, 0, &CLK) ==
              KURA_OK);
    kura_store_close(s);        /* a clean close: a checkpoint, nothing to replay */
    REQUIRE(t_open(p, "#bnum=10000", &cfg, &s, err, sizeof(err)) == KURA_OK);
    CHECK_EQ_INT(t_stat(s, "hash_recovered_records"), 0);
    CHECK_EQ_INT(hashdb_debug_probe_max(s), 10);
    int bad = 0;
    for (int i = 0; i < 11; i++)
        bad += t_get(s, keys[i], &CLK, &v) != KURA_OK || v.len != strlen(keys[i]) ||
               memcmp(v.buf, keys[i], v.len);
    CHECK_EQ_INT(bad, 0);
    kura_store_close(s);
    kura_test.bg_hold = false;
}

/* ---- the sweep's budget, the counters behind stats ---------------------- */

/* n keys "<prefix><i>" that fall into the given stripe; returns them in
 * keys[] (each up to 16 bytes) */
static void keys_in_stripe(kura_store *s, char (*keys)[16], int n, const char *prefix,
                           uint64_t stripe)
{
    for (int i = 0, j = 0; j < n; i++) {
        snprintf(keys[j], 16, "%s%d", prefix, i);
        if ((hashdb_debug_hash(s, keys[j], strlen(keys[j])) & 1023) == stripe)
            j++;
    }
}

/* One stripe holding 3000 expired items among 500 live ones: each sweep
 * call reclaims at most its budget (an entry examined is one unit), and
 * together they reclaim every dead item, even when the stripe's table is
 * rebuilt bigger halfway.  The stats that are counters now: the index's
 * slots follow the growth exactly; expired bytes are those the sweep's
 * last complete pass dropped, and fall to 0 once a pass finds none. */
static void test_sweep_budget_in_stripe(void)
{
    enum { DEAD = 3000, LIVE = 500, MORE = 6000, BUDGET = 50 };
    static char dead[DEAD][16], live[LIVE][16], more[MORE][16];
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512];
    REQUIRE(t_open(t_path("sweepb"), "#bnum=16", &cfg, &s, err, sizeof(err)) == KURA_OK);
    CHECK_EQ_INT(t_stat(s, "hash_index_slots"), 1024 * 8);
    uint64_t stripe = hashdb_debug_hash(s, "anchor", 6) & 1023;
    keys_in_stripe(s, dead, DEAD, "d", stripe);
    keys_in_stripe(s, live, LIVE, "l", stripe);
    keys_in_stripe(s, more, MORE, "m", stripe);
    kura_clock c = CLK;
    int bad = 0;
    uint64_t dead_kv = 0;
    for (int i = 0; i < DEAD; i++) {
        bad += t_put(s, dead[i], "xyz", 0, c.now + 5, 1, KURA_PUT_ANY, 0, &c) != KURA_OK;
        dead_kv += strlen(dead[i]) + 3;
    }
    for (int i = 0; i < LIVE; i++)
        bad += t_put(s, live[i], "abc", 0, 0, 1, KURA_PUT_ANY, 0, &c) != KURA_OK;
    CHECK_EQ_INT(bad, 0);
    /* 3500 entries in one stripe: its table doubled from 8 to 8192 slots
     * (4096 would be more than 3/4 used) */
    CHECK_EQ_INT(t_stat(s, "hash_index_slots"), 1023 * 8 + 8192);
    CHECK_EQ_INT(t_stat(s, "hash_expired_bytes"), 0);

    c.now += 10;                /* the DEAD expire */
    long total = 0, most = 0;
    int calls = 0;
    /* half of one pass's work: 3500 entries and 1024 stripe starts */
    for (; calls < (LIVE + DEAD + 1024) / BUDGET / 2; calls++) {
        long r = s->ops->sweep(s, &c, BUDGET);
        total += r;
        most = r > most ? r : most;
    }
    CHECK(total > 0 && total < DEAD);   /* stopped inside the stripe */
    /* the stripe's table grows under the sweep's cursor: 6500 entries at
     * least will not fit 3/4 of 8192 slots */
    for (int i = 0; i < MORE; i++)
        bad += t_put(s, more[i], "new", 0, 0, 1, KURA_PUT_ANY, 0, &c) != KURA_OK;
    CHECK_EQ_INT(bad, 0);
    uint64_t slots = t_stat(s, "hash_index_slots") - 1023 * 8;
    CHECK(slots > 8192 && (slots & (slots - 1)) == 0);
    /* then the sweep goes on: three passes' worth at most (one after the
     * rebuild may pass over a few entries that moved, the next gets them) */
    for (int n = 0; n < 3 * (LIVE + DEAD + MORE + 1024) / BUDGET && total < DEAD; n++, calls++) {
        long r = s->ops->sweep(s, &c, BUDGET);
        total += r;
        most = r > most ? r : most;
    }
    printf("# %d calls of budget %d reclaimed %ld, at most %ld in one\n", calls, BUDGET, total,
           most);
    CHECK_EQ_INT(total, DEAD);
    CHECK(most <= BUDGET);
    kura_store_usage u;
    s->ops->usage(s, &u);
    CHECK_EQ_INT(u.curr_items, LIVE + MORE);
    CHECK_EQ_INT(u.reclaimed, DEAD);

    /* expired bytes: those the last complete pass dropped.  Start a pass
     * with nothing dead, then let items expire: that pass drops them all */
    uint64_t passes = t_stat(s, "hash_sweep_passes");
    /* (the pass under way may have dropped some above: the one after not;
     * a call ends with its pass, so the next starts at the beginning) */
    while (t_stat(s, "hash_sweep_passes") < passes + 2)
        s->ops->sweep(s, &c, 1000);
    CHECK_EQ_INT(t_stat(s, "hash_expired_bytes"), 0);
    dead_kv = 0;
    for (int i = 0; i < DEAD; i++) {
        bad += t_put(s, dead[i], "xyz", 0, c.now + 5, 1, KURA_PUT_ANY, 0, &c) != KURA_OK;
        dead_kv += strlen(dead[i]) + 3;
    }
    c.now += 10;
    passes = t_stat(s, "hash_sweep_passes");
    while (t_stat(s, "hash_sweep_passes") == passes)
        s->ops->sweep(s, &c, 1000);
    /* each a record of header (13 to 48 bytes), key and value */
    uint64_t exp = t_stat(s, "hash_expired_bytes");
    CHECK(exp >= dead_kv + 13 * DEAD && exp <= dead_kv + 48 * DEAD);
    /* the next pass finds nothing dead */
    passes = t_stat(s, "hash_sweep_passes");
    while (t_stat(s, "hash_sweep_passes") == passes)
        s->ops->sweep(s, &c, 1000);
    CHECK_EQ_INT(t_stat(s, "hash_expired_bytes"), 0);
    /* the smallest budget still gets round: each call moves on (an item
     * that can expire keeps the sweep from going quiet) */
    bad += t_put(s, "far", "f", 0, c.now + 100000, 1, KURA_PUT_ANY, 0, &c) != KURA_OK;
    passes = t_stat(s, "hash_sweep_passes");
    for (int n = 0; n < LIVE + MORE + 1024 + 10 && t_stat(s, "hash_sweep_passes") == passes; n++)
        s->ops->sweep(s, &c, 1);
    CHECK_EQ_INT(t_stat(s, "hash_sweep_passes"), passes + 1);
    /* every live key is still there */
    t_val v;
    for (int i = 0; i < LIVE; i++)
        bad += t_get(s, live[i], &c, &v) != KURA_OK;
    for (int i = 0; i < MORE; i++)
        bad += t_get(s, more[i], &c, &v) != KURA_OK;
    CHECK_EQ_INT(bad, 0);
    kura_store_close(s);
}

/* A sweep has nothing to do once a complete pass met no item that can
 * die: it reads nothing more (each entry examined is a record read) until
 * an item with an expiry time is written or a flush_all comes.  Negative
 * check: with kura_test.hd_sweep_never_quiet the passes go on. */
static int sweep_passes_in(kura_store *s, kura_clock *c, int calls)
{
    uint64_t before = t_stat(s, "hash_sweep_passes");
    for (int i = 0; i < calls; i++)
        s->ops->sweep(s, c, 1000);
    return (int)(t_stat(s, "hash_sweep_passes") - before);
}

static void test_sweep_goes_quiet(void)
{
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512];
    t_val v;
    REQUIRE(t_open(t_path("sweepq"), "#bnum=1024", &cfg, &s, err, sizeof(err)) == KURA_OK);
    kura_clock c = CLK;
    int bad = 0;
    for (int i = 0; i < 500; i++) {
        char k[16];
        snprintf(k, sizeof(k), "q%d", i);
        bad += t_put(s, k, "v", 0, 0, 10 + (uint64_t)i, KURA_PUT_ANY, 0, &c) != KURA_OK;
    }
    CHECK_EQ_INT(bad, 0);
    /* a pass of 1,024 stripes and 500 entries takes two calls of 1,000 */
    CHECK(sweep_passes_in(s, &c, 10) >= 1);
    CHECK_EQ_INT(sweep_passes_in(s, &c, 10), 0);                /* quiet */
    CHECK_EQ_INT(t_stat(s, "hash_sweep_idle"), 1);
    kura_test.hd_sweep_never_quiet = true;
    CHECK(sweep_passes_in(s, &c, 10) >= 2);                     /* negative */
    kura_test.hd_sweep_never_quiet = false;
    CHECK(sweep_passes_in(s, &c, 10) <= 1);
    CHECK_EQ_INT(sweep_passes_in(s, &c, 10), 0);
    /* an item that will expire: passes again, and it is dropped in time */
    CHECK(t_put(s, "soon", "v", 0, c.now + 5, 900, KURA_PUT_ANY, 0, &c) == KURA_OK);
    CHECK(sweep_passes_in(s, &c, 10) >= 2);
    CHECK_EQ_INT(t_stat(s, "hash_sweep_idle"), 0);
    c.now += 10;
    long r = 0;
    for (int i = 0; i < 10; i++)
        r += s->ops->sweep(s, &c, 1000);
    CHECK_EQ_INT(r, 1);
    CHECK(t_get(s, "soon", &c, &v) != KURA_OK);
    sweep_passes_in(s, &c, 10);
    CHECK_EQ_INT(sweep_passes_in(s, &c, 10), 0);                /* quiet again */
    /* a flush_all: the flushed are dropped */
    c.oldest_cas = 100;
    r = 0;
    for (int i = 0; i < 10; i++)
        r += s->ops->sweep(s, &c, 1000);
    CHECK_EQ_INT(r, 90);                /* cas 10 to 99 */
    sweep_passes_in(s, &c, 10);
    CHECK_EQ_INT(sweep_passes_in(s, &c, 10), 0);
    /* a delayed flush_all keeps it awake until it is done */
    c.flush_at = c.now + 5;
    CHECK(sweep_passes_in(s, &c, 10) >= 2);
    c.now += 10;
    r = 0;
    for (int i = 0; i < 10; i++)
        r += s->ops->sweep(s, &c, 1000);
    CHECK_EQ_INT(r, 410);
    kura_store_close(s);
}

int main(void)
{
    t_setup();
    RUN(test_names_and_params);
    RUN(test_operations);
    RUN(test_liveness_and_sweep);
    RUN(test_sweep_goes_quiet);
    RUN(test_overwrite_accounting);
    RUN(test_persistence);
    RUN(test_index_growth);
    RUN(test_index_churn);
    RUN(test_format_v1);
    RUN(test_checkpoint_v4);
    RUN(test_big_value);
    RUN(test_large_copy_lets_readers_in);
    RUN(test_read_only);
    RUN(test_hash_flooding);
    RUN(test_rekey_reopen);
    RUN(test_retired_segments);
    RUN(test_checkpoint_tables_checked);
    RUN(test_checkpoint_v7_opens);
    RUN(test_live_bytes_reopen);
    RUN(test_load_wraps);
    RUN(test_sweep_budget_in_stripe);
    t_teardown();
    UNIT_DONE();
}

/*
 * test_tree_unpinned.c - the B+ tree's gets without pins (tree_cache.c:
 * unpinned lookups, the limbo of evicted page objects; tree_lock.c: the
 * readers' slots; docs/design.md, "Tree reads in parallel").
 *
 * A get parked on its leaf: a test hook stops a get once it found its
 * leaf (unpinned), the page's bytes copied; meanwhile this thread gets
 * keys all over a tree much larger than its cache (64 pages), so that the
 * parked get's leaf is evicted and its object would be reloaded with other
 * pages; then the get goes on.  Its leaf's bytes must be as they were and
 * it must answer the key's value.  The negative check:
 * kura_test.tree_limbo_off makes an evicted object reusable at once, and
 * the parked get's page is then found changed (the hook puts the bytes
 * back, so that the get goes on safely).
 *
 * The limbo's bound: a walk (iterate) that stays inside the tree lock,
 * its callback waiting while another thread's gets load every leaf, must
 * not hold the objects those gets evict: a walk pins its pages and enters
 * with no epoch, so the limbo (stat tree_cache_limbo_pages) stays near
 * its reclaim threshold of 64.  Negative: kura_test.tree_walk_epoch makes
 * the walk enter as a get does, and the limbo then holds every object
 * evicted meanwhile.
 *
 * Readers missing on a tiny cache, and a writer: four threads get random
 * keys (almost every get loads pages and evicts others, from readers),
 * while one thread rewrites keys with new versions and checkpoints; every
 * value read must be one written for its key, whole, and no older than
 * the version published before the get.  Run under ThreadSanitizer by
 * `make test-tsan TESTS=test_tree`.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "unit.h"
#include "hashdb_testlib.h"
#include "tree_testlib.h"

#define PSIZ    16384
#define PARAMS  "#psiz=16384#pccap=1m"  /* a cache of 64 pages */
#define NK      16000                   /* keys: about 400 leaves */
#define VMAX    400

static kura_clock CLK = { .now = 2000000 };

static _Atomic uint32_t ver[NK];        /* the version last put, published */

static size_t vlen_of(int k, uint32_t v)
{
    return 16 + (size_t)((k * 7 + v * 13) % (VMAX - 16));
}

static void vfill(unsigned char *p, int k, uint32_t v)
{
    size_t n = vlen_of(k, v);
    memcpy(p, &k, sizeof(k));
    memcpy(p + 4, &v, sizeof(v));
    uint64_t x = (uint64_t)k * 1000003 + v;
    for (size_t i = 8; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = (unsigned char)(x >> 56);
    }
}

/* the version of a value read for key k, or -1 if it is not one written
 * for it (torn, another key's, garbage) */
static long vcheck(int k, const kura_item *it)
{
    unsigned char want[VMAX];
    int kk;
    uint32_t v;
    if (it->vlen < 8)
        return -1;
    memcpy(&kk, it->val, sizeof(kk));
    memcpy(&v, (const unsigned char *)it->val + 4, sizeof(v));
    if (kk != k || it->vlen != vlen_of(k, v))
        return -1;
    vfill(want, k, v);
    return memcmp(want, it->val, it->vlen) == 0 ? (long)v : -1;
}

static int key_of(int k, char *buf)
{
    return snprintf(buf, 16, "k%06d", k);
}

static int put_ver(kura_store *s, int k, uint32_t v)
{
    unsigned char val[VMAX];
    char key[16];
    int kl = key_of(k, key);
    vfill(val, k, v);
    kura_item it = { .key = key, .klen = (size_t)kl, .val = val, .vlen = vlen_of(k, v),
                     .cas = (uint64_t)v + 1 };
    return kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK);
}

typedef struct got {
    int k;
    long v;                     /* the version read, -1 wrong */
} got;

static int got_cb(void *arg, const kura_item *it)
{
    got *g = arg;
    g->v = vcheck(g->k, it);
    return 0;
}

/* get of key k: the version read, -1 if wrong, -2 if not found or failed */
static long get_ver(kura_store *s, int k)
{
    char key[16];
    int kl = key_of(k, key);
    got g = { k, -1 };
    int rc = s->ops->get(s, key, (size_t)kl, &CLK, got_cb, &g);
    return rc == KURA_OK ? g.v : -2;
}

/* A tree of NK keys at version 1, checkpointed and reopened: its cache
 * holds clean pages only (dirty ones are never evicted). */
static kura_store *open_loaded(const char *name)
{
    kura_store *s = t_open_tree(tpath(name), PARAMS);
    if (!s)
        return NULL;
    int bad = 0;
    for (int k = 0; k < NK; k++) {
        atomic_store(&ver[k], 1);
        bad += put_ver(s, k, 1) != KURA_OK;
    }
    kura_store_close(s);
    if (bad) {
        printf("# %d puts failed\n", bad);
        return NULL;
    }
    return t_open_tree(tpath(name), PARAMS);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- a get parked on its leaf ------------------------------------------ */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;                  /* 0 running, 1 parked, 2 go on */
    bool armed;
    pthread_t who;
    bool changed;
    unsigned char snap[PSIZ];
} park = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

/* waits (mu held) until park.state is want: false at the deadline */
static bool park_wait(int want)
{
    double end = now_s() + 120;
    while (park.state != want) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&park.cv, &park.mu, &ts);
        if (park.state != want && now_s() > end)
            return false;
    }
    return true;
}

static void park_hook(void *arg, const unsigned char *leaf)
{
    (void)arg;
    pthread_mutex_lock(&park.mu);
    if (!park.armed || !pthread_equal(pthread_self(), park.who)) {
        pthread_mutex_unlock(&park.mu);
        return;
    }
    park.armed = false;
    memcpy(park.snap, leaf, PSIZ);
    park.state = 1;
    pthread_cond_broadcast(&park.cv);
    park_wait(2);
    pthread_mutex_unlock(&park.mu);
    park.changed = memcmp(leaf, park.snap, PSIZ) != 0;
    if (park.changed)           /* (the negative check: the get goes on safely) */
        memcpy((unsigned char *)leaf, park.snap, PSIZ);
}

typedef struct parked {
    kura_store *s;
    int k;
    long v;
} parked;

static void *parked_main(void *arg)
{
    parked *p = arg;
    pthread_mutex_lock(&park.mu);
    park.who = pthread_self();
    park.armed = true;
    pthread_mutex_unlock(&park.mu);
    p->v = get_ver(p->s, p->k);
    return NULL;
}

/* One get parked on its leaf while this thread loads pages: whether the
 * parked get's page changed under it (-1: the run did not happen). */
static int parked_get(const char *name, long *v, uint64_t *loads)
{
    kura_store *s = open_loaded(name);
    if (!s)
        return -1;
    parked p = { .s = s, .k = NK / 2, .v = -3 };
    park.state = 0;
    park.changed = false;
    uint64_t miss0 = t_stat(s, "tree_cache_misses");
    pthread_t t;
    if (pthread_create(&t, NULL, parked_main, &p) != 0) {
        kura_store_close(s);
        return -1;
    }
    pthread_mutex_lock(&park.mu);
    bool ok = park_wait(1);
    pthread_mutex_unlock(&park.mu);
    int wrong = 0;
    /* keys all over the tree, twice: every leaf is loaded into the 64
     * pages, the parked get's evicted (its ref bit spares it one pass) */
    for (int round = 0; ok && round < 2; round++)
        for (int k = round; k < NK; k += 17)
            wrong += get_ver(s, k) != 1;
    pthread_mutex_lock(&park.mu);
    park.state = 2;
    pthread_cond_broadcast(&park.cv);
    pthread_mutex_unlock(&park.mu);
    pthread_join(t, NULL);
    *loads = t_stat(s, "tree_cache_misses") - miss0;
    *v = p.v;
    CHECK_EQ_INT(wrong, 0);
    kura_store_close(s);
    return ok ? park.changed : -1;
}

static void test_get_parked_on_its_leaf(void)
{
    kura_test.bg_hold = true;   /* no checkpoint waits for the parked get */
    kura_test.tree_get_parked = park_hook;
    long v;
    uint64_t loads;
    int changed = parked_get("parked", &v, &loads);
    printf("# limbo: the parked get's leaf %s, %llu pages loaded meanwhile, it read "
           "version %ld\n", changed == 1 ? "changed" : changed ? "(no run)" : "intact",
           (unsigned long long)loads, v);
    CHECK_EQ_INT(changed, 0);
    CHECK_EQ_INT(v, 1);
    CHECK(loads > 2 * 64);      /* the cache was passed through */
    /* the negative check: evicted objects reused at once */
    kura_test.tree_limbo_off = true;
    changed = parked_get("parked_neg", &v, &loads);
    kura_test.tree_limbo_off = false;
    printf("# no limbo (test hook): the parked get's leaf %s, %llu pages loaded meanwhile\n",
           changed == 1 ? "changed" : changed ? "(no run)" : "intact",
           (unsigned long long)loads);
    CHECK_EQ_INT(changed, 1);
    kura_test.tree_get_parked = NULL;
    kura_test.bg_hold = false;
}

/* ---- the limbo's bound: a walk that stays inside ----------------------- */

typedef struct stay {
    kura_store *s;
    int calls, wrong;
    uint64_t limbo, loads;
} stay;

static void *loader_main(void *arg)
{
    stay *w = arg;
    uint64_t miss0 = t_stat(w->s, "tree_cache_misses");
    for (int round = 0; round < 2; round++)
        for (int k = round; k < NK; k += 17)
            w->wrong += get_ver(w->s, k) != 1;
    w->loads = t_stat(w->s, "tree_cache_misses") - miss0;
    w->limbo = t_stat(w->s, "tree_cache_limbo_pages");
    return NULL;
}

/* The walk's first item: another thread's gets load every leaf while the
 * walk holds the lock (shared); then the walk ends. */
static int stay_cb(void *arg, const kura_item *it)
{
    stay *w = arg;
    (void)it;
    if (w->calls++)
        return 1;
    pthread_t t;
    if (pthread_create(&t, NULL, loader_main, w) != 0) {
        w->wrong++;
        return 1;
    }
    pthread_join(t, NULL);
    return 0;
}

/* the objects in the limbo while a walk stays inside (-1: no run) */
static long limbo_under_a_walk(const char *name, uint64_t *loads)
{
    kura_store *s = open_loaded(name);
    if (!s)
        return -1;
    stay w = { .s = s };
    kura_iter_spec sp = { .scope = KURA_ITER_ALL };
    int rc = s->ops->iterate(s, &sp, &CLK, stay_cb, &w);
    CHECK(rc >= 0);
    CHECK_EQ_INT(w.wrong, 0);
    *loads = w.loads;
    kura_store_close(s);
    return w.calls ? (long)w.limbo : -1;
}

static void test_a_walk_holds_no_evicted_page(void)
{
    kura_test.bg_hold = true;   /* no checkpoint waits for the walk */
    uint64_t loads;
    long limbo = limbo_under_a_walk("stay", &loads);
    printf("# a walk inside: %ld page objects in the limbo after %llu loads\n", limbo,
           (unsigned long long)loads);
    CHECK(limbo >= 0 && limbo < 2 * 64);
    CHECK(loads > 2 * 64);
    /* the negative check: the walk enters with the epoch, as a get */
    kura_test.tree_walk_epoch = true;
    long held = limbo_under_a_walk("stay_neg", &loads);
    kura_test.tree_walk_epoch = false;
    printf("# a walk inside with the epoch (test hook): %ld in the limbo after %llu loads\n",
           held, (unsigned long long)loads);
    CHECK(held > (long)loads / 2);
    kura_test.bg_hold = false;
}

/* ---- readers missing on a tiny cache, and a writer --------------------- */

#define NREAD   4
#define RGETS   6000            /* each reader's gets */
#define WPUTS   3000            /* the writer's puts */

static _Atomic bool writer_done;

typedef struct reader {
    kura_store *s;
    uint64_t seed;
    long gets, bad, old;
} reader;

static uint32_t rnd(uint64_t *x)
{
    *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*x >> 33);
}

static void *reader_main(void *arg)
{
    reader *r = arg;
    for (int n = 0; n < RGETS || !atomic_load(&writer_done); n++) {
        int k = (int)(rnd(&r->seed) % NK);
        uint32_t before = atomic_load(&ver[k]);
        long v = get_ver(r->s, k);
        r->gets++;
        if (v < 0)
            r->bad++;
        else if (v < (long)before)
            r->old++;
        if (n > 4 * RGETS)
            break;              /* (bounded whatever the writer does) */
    }
    return NULL;
}

static void test_readers_missing_and_a_writer(void)
{
    kura_store *s = open_loaded("missing");
    REQUIRE(s);
    uint64_t miss0 = t_stat(s, "tree_cache_misses"), hit0 = t_stat(s, "tree_cache_hits");
    atomic_store(&writer_done, false);
    static reader rd[NREAD];
    pthread_t t[NREAD];
    for (int i = 0; i < NREAD; i++) {
        rd[i] = (reader){ .s = s, .seed = (uint64_t)i * 7919 + 3 };
        REQUIRE(pthread_create(&t[i], NULL, reader_main, &rd[i]) == 0);
    }
    uint64_t x = 99;
    int werr = 0;
    for (int n = 0; n < WPUTS; n++) {
        int k = (int)(rnd(&x) % NK);
        uint32_t v = atomic_load(&ver[k]) + 1;
        werr += put_ver(s, k, v) != KURA_OK;
        atomic_store(&ver[k], v);
        if (n % 1000 == 999)
            werr += btree_debug_checkpoint(s) != KURA_OK;
    }
    atomic_store(&writer_done, true);
    long gets = 0, bad = 0, old = 0;
    for (int i = 0; i < NREAD; i++) {
        pthread_join(t[i], NULL);
        gets += rd[i].gets;
        bad += rd[i].bad;
        old += rd[i].old;
    }
    uint64_t misses = t_stat(s, "tree_cache_misses") - miss0,
             hits = t_stat(s, "tree_cache_hits") - hit0;
    printf("# %d readers: %ld gets, %ld wrong, %ld older than published; %llu cache misses, "
           "%llu hits\n", NREAD, gets, bad, old, (unsigned long long)misses,
           (unsigned long long)hits);
    CHECK_EQ_INT(werr, 0);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(old, 0);
    CHECK(misses > (uint64_t)gets / 4); /* readers loaded (and evicted) pages */
    CHECK(hits > 0);                    /* counted in the readers' slots */
    CHECK(t_stat(s, "tree_cache_pages") <= t_stat(s, "tree_cache_limit_pages") + 64);
    int wrong = 0;
    for (int k = 0; k < NK; k++)
        wrong += get_ver(s, k) != (long)atomic_load(&ver[k]);
    CHECK_EQ_INT(wrong, 0);
    CHECK_EQ_INT(check_tree(s), 0);
    kura_store_close(s);
}

int main(void)
{
    t_setup();
    RUN(test_get_parked_on_its_leaf);
    RUN(test_a_walk_holds_no_evicted_page);
    RUN(test_readers_missing_and_a_writer);
    t_teardown();
    UNIT_DONE();
}

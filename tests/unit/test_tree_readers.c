/*
 * test_tree_readers.c - the B+ tree's reads in parallel (tree_int.h,
 * "Concurrency"; docs/design.md, "Tree reads in parallel").
 *
 * Two gets are inside the store at once: each one's callback waits (to a
 * deadline) until it sees the other inside too, which a tree lock that
 * serialises reads can never give (the negative check: the test hook
 * kura_test.tree_read_exclusive takes the lock exclusive for reads, and
 * then the two never meet).
 *
 * An overflow run reused under a get: between the get's unlock and its
 * read of the run (a test hook), the key gets a new value, a checkpoint
 * makes the old run's pages free and other values take them; the get
 * must answer the new value (negative: kura_test.tree_ovf_no_recheck,
 * answering what it read, gives another key's bytes or a damaged run).
 *
 * Changes while a checkpoint writes: once the checkpoint has let the lock
 * go and before it writes (a test hook), every page it is about to write
 * is changed and a fifth of the keys deleted; the process then ends with
 * no close (kill -9), and the open that starts from that checkpoint and
 * replays the log after it must give every key as last written (the
 * pages written were the checkpoint's, not the changed ones).  Negative:
 * kura_test.tree_ckpt_no_copy renames the pages in place instead of
 * copying them, and the open fails.
 *
 * Readers and a writer: three threads get and iterate while one writes,
 * on a tree whose file is larger than its cache (#pccap=1m of 4 KiB
 * pages: pages are evicted and loaded while readers hold others), with
 * values inline and in overflow runs, deletes, and puts that are expired
 * at once (a get that meets one takes the lock exclusive to reclaim it).
 * The writer records each key's operations before it makes them and
 * publishes their count after; a reader checks every answer against the
 * states the key can be in between the counts it saw before and after
 * (and every value's bytes against its version).  Run under
 * ThreadSanitizer by `make test-tsan TESTS=test_tree`.
 */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "unit.h"
#include "hashdb_testlib.h"
#include "tree_testlib.h"

#define NK      4000            /* keys */
#define MAXOPS  64              /* operations recorded per key */
#define WOPS    6000            /* the writer's operations */
#define NREAD   3               /* reader threads */

enum { OP_NONE = 0, OP_PUT = 1, OP_DEL = 2, OP_EXPIRED = 3 };

static kura_clock CLK = { .now = 2000000 };

static _Atomic uint8_t hist[NK][MAXOPS];       /* op c of key k (c from 1) */
static _Atomic int pub[NK];                     /* ops of key k completed */
static _Atomic bool writer_done;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- values: the version and the key inside, bytes from both ----------- */

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static size_t vlen_of(int k, int v)
{
    if ((k * 31 + v) % 4 == 0)
        return 2000 + (size_t)((k * 7 + v * 13) % 6000);       /* an overflow run */
    return 8 + (size_t)((k + v * 3) % 600);
}

static void vfill(unsigned char *p, int k, int v)
{
    size_t n = vlen_of(k, v);
    put_le32(p, (uint32_t)k);
    put_le32(p + 4, (uint32_t)v);
    uint64_t x = (uint64_t)k * 1000003 + (uint64_t)v;
    for (size_t i = 8; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = (unsigned char)(x >> 56);
    }
}

/* the version a value holds, or -1 if it is not one written for key k */
static int vcheck(int k, const kura_item *it, unsigned char *want)
{
    if (it->vlen < 8)
        return -1;
    const unsigned char *p = it->val;
    int kk = (int)get_le32(p), v = (int)get_le32(p + 4);
    if (kk != k || v < 1 || v >= MAXOPS || it->flags != (uint32_t)v ||
        it->vlen != vlen_of(k, v))
        return -1;
    vfill(want, k, v);
    return memcmp(want, it->val, it->vlen) == 0 ? v : -1;
}

static int key_of(int k, char *buf)
{
    return snprintf(buf, 16, "k%05d", k);
}

/* the state after op j: the version put, or 0 (absent) */
static int state_at(int k, int j)
{
    for (int i = j; i >= 1; i--) {
        int op = atomic_load(&hist[k][i]);
        if (op == OP_PUT)
            return i;
        if (op == OP_DEL || op == OP_EXPIRED)
            return 0;
    }
    return 0;
}

/* a value copied out (up to 3000 bytes), with its flags */
typedef struct got3 {
    size_t len;
    uint32_t flags;
    unsigned char buf[3000];
} got3;

static int got3_cb(void *arg, const kura_item *it)
{
    got3 *g = arg;
    g->len = it->vlen;
    g->flags = it->flags;
    if (it->vlen <= sizeof(g->buf))
        memcpy(g->buf, it->val, it->vlen);
    return 0;
}

/* ---- two gets at once -------------------------------------------------- */

typedef struct meet {
    kura_store *s;
    _Atomic int inside;         /* gets in their callbacks now */
    _Atomic bool met;           /* one saw both inside */
    double wait;
    int rc[2];
} meet;

static int meet_cb(void *arg, const kura_item *it)
{
    meet *m = arg;
    (void)it;
    atomic_fetch_add(&m->inside, 1);
    double end = now_s() + m->wait;
    while (!atomic_load(&m->met) && now_s() < end) {
        if (atomic_load(&m->inside) >= 2)
            atomic_store(&m->met, true);
        else
            sched_yield();
    }
    atomic_fetch_sub(&m->inside, 1);
    return 0;
}

static void *meet_main0(void *arg)
{
    meet *m = arg;
    m->rc[0] = m->s->ops->get(m->s, "k00001", 6, &CLK, meet_cb, m);
    return NULL;
}

static void *meet_main1(void *arg)
{
    meet *m = arg;
    m->rc[1] = m->s->ops->get(m->s, "k00001", 6, &CLK, meet_cb, m);
    return NULL;
}

/* Two gets, each waiting in its callback (up to wait seconds) for the
 * other to be inside too: 1 if they met, 0 if not, -1 on an error. */
static int two_gets(kura_store *s, double wait)
{
    static meet m;
    m.s = s;
    atomic_store(&m.inside, 0);
    atomic_store(&m.met, false);
    m.wait = wait;
    pthread_t t[2];
    if (pthread_create(&t[0], NULL, meet_main0, &m) != 0)
        return -1;
    if (pthread_create(&t[1], NULL, meet_main1, &m) != 0) {
        pthread_join(t[0], NULL);
        return -1;
    }
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    if (m.rc[0] != KURA_OK || m.rc[1] != KURA_OK)
        return -1;
    return atomic_load(&m.met);
}

static void test_two_gets_at_once(void)
{
    kura_store *s = t_open_tree(tpath("meet"), "#psiz=4096");
    REQUIRE(s);
    kura_item it = { .key = "k00001", .klen = 6, .val = "v", .vlen = 1, .cas = 1 };
    REQUIRE(kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
    int met = two_gets(s, 20.0);
    printf("# shared reads: the two gets %s\n", met == 1 ? "met" : "did not meet");
    CHECK_EQ_INT(met, 1);
    /* the negative check: reads that take the lock exclusive never meet */
    kura_test.tree_read_exclusive = true;
    met = two_gets(s, 0.3);
    kura_test.tree_read_exclusive = false;
    printf("# exclusive reads (test hook): the two gets %s\n", met == 1 ? "met" : "did not meet");
    CHECK_EQ_INT(met, 0);
    kura_store_close(s);
}

/* ---- an overflow run reused while a get reads it ----------------------- */

#define RUNLEN 5000             /* a two-page run at psiz 4096 */

static unsigned char run_a[RUNLEN], run_b[RUNLEN], run_x[RUNLEN];

static int put_run(kura_store *s, const char *key, const unsigned char *v, uint64_t cas)
{
    kura_item it = { .key = key, .klen = strlen(key), .val = v, .vlen = RUNLEN, .cas = cas };
    return kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK);
}

typedef struct reuse {
    kura_store *s;
    int calls, bad;
} reuse;

/* Once, between the get's unlock and its read: the key gets a new value
 * (its old run freed), a checkpoint makes the run reusable, and other
 * keys' values of the same size take the free pages, the old run's too. */
static void reuse_hook(void *arg)
{
    reuse *r = arg;
    if (r->calls++)
        return;
    if (put_run(r->s, "big", run_b, 100) != KURA_OK || btree_debug_checkpoint(r->s) != KURA_OK)
        r->bad++;
    for (int i = 0; i < 8; i++) {
        char k[24];
        snprintf(k, sizeof(k), "other%d", i);
        if (put_run(r->s, k, run_x, 200 + (uint64_t)i) != KURA_OK)
            r->bad++;
    }
}

typedef struct runval {
    int rc;
    char what;                  /* 'A', 'B': all bytes that; '?': others */
} runval;

static int runval_cb(void *arg, const kura_item *it)
{
    runval *v = arg;
    v->what = it->vlen == RUNLEN && !memcmp(it->val, run_a, RUNLEN) ? 'A'
            : it->vlen == RUNLEN && !memcmp(it->val, run_b, RUNLEN) ? 'B' : '?';
    return 0;
}

/* One get of "big" with the run reused under it: what it answered. */
static runval get_reused(bool recheck)
{
    runval v = { -1, 0 };
    char name[32];
    snprintf(name, sizeof(name), "reuse%d", recheck);
    kura_store *s = t_open_tree(tpath(name), "#psiz=4096");
    if (!s)
        return v;
    reuse r = { .s = s };
    if (put_run(s, "big", run_a, 10) != KURA_OK || btree_debug_checkpoint(s) != KURA_OK) {
        kura_store_close(s);
        return v;
    }
    /* reopened: the put kept its value in the cache of large values
     * (tree_vcache.c), where the get would find it without a read */
    kura_store_close(s);
    if (!(r.s = s = t_open_tree(tpath(name), "#psiz=4096")))
        return v;
    kura_test.tree_ovf_unlocked_arg = &r;
    kura_test.tree_ovf_unlocked = reuse_hook;
    kura_test.tree_ovf_no_recheck = !recheck;
    v.rc = s->ops->get(s, "big", 3, &CLK, runval_cb, &v);
    kura_test.tree_ovf_unlocked = NULL;
    kura_test.tree_ovf_no_recheck = false;
    if (r.calls < 1 || r.bad)
        v.rc = -1000;           /* the hook did not run, or its changes failed */
    runval again = { -1, 0 };   /* the bytes read were not kept for the key */
    again.rc = s->ops->get(s, "big", 3, &CLK, runval_cb, &again);
    if (recheck && v.rc == KURA_OK && (again.rc != KURA_OK || again.what != 'B'))
        v.what = again.what ? again.what : '-';
    kura_store_close(s);
    return v;
}

/* A get reads an overflow run with the lock let go, then looks its key up
 * again: when the key changed meanwhile and its old run's pages went to
 * other values, the get answers the new value, never the bytes it read.
 * The negative check: answering what it read gives another key's bytes
 * (or a damaged run). */
static void test_run_reused_under_a_get(void)
{
    memset(run_a, 'A', RUNLEN);
    memset(run_b, 'B', RUNLEN);
    memset(run_x, 'X', RUNLEN);
    kura_test.bg_hold = true;           /* the checkpoints are the test's */
    runval v = get_reused(true);
    printf("# run reused under a get: rc %d, value %c\n", v.rc, v.what ? v.what : '-');
    CHECK_EQ_INT(v.rc, KURA_OK);
    CHECK_EQ_INT(v.what, 'B');
    n_errors = 0;
    v = get_reused(false);
    printf("# ... without the second look (test hook): rc %d, value %c, %d errors logged\n",
           v.rc, v.what ? v.what : '-', n_errors);
    CHECK(v.rc != -1000);
    CHECK(v.rc != KURA_OK || v.what == '?');
    kura_test.bg_hold = false;
}

/* ---- changes while a checkpoint writes --------------------------------- */

#define NCK 2000

static size_t ck_len(int k)
{
    return k % 10 == 0 ? 3000 : 60 + (size_t)(k % 50);      /* some in runs */
}

static void ck_val(unsigned char *p, int k, int v)
{
    size_t n = ck_len(k);
    uint64_t x = (uint64_t)k * 10 + (uint64_t)v;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = (unsigned char)(x >> 56);
    }
}

/* version v of every key (every fifth deleted instead if del) */
static int ck_round(kura_store *s, int v, bool del)
{
    static unsigned char buf[3000];
    for (int k = 0; k < NCK; k++) {
        char key[16];
        int kl = snprintf(key, sizeof(key), "c%05d", k);
        if (del && k % 5 == 0) {
            if (kura_store_del(s, key, (size_t)kl, 0, &CLK) != KURA_OK)
                return -1;
            continue;
        }
        ck_val(buf, k, v);
        kura_item it = { .key = key, .klen = (size_t)kl, .val = buf, .vlen = ck_len(k),
                         .flags = (uint32_t)v, .cas = (uint64_t)(v * NCK + k + 1) };
        if (kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK) != KURA_OK)
            return -1;
    }
    return 0;
}

static int ck_hook_bad;

/* Once, with the checkpoint's pages frozen and not yet written: every
 * page it is about to write is changed (version 3, every fifth key
 * deleted: merges free pages too). */
static void ck_hook(void *arg)
{
    kura_test.tree_ckpt_writing = NULL;
    if (ck_round(arg, 3, true) != 0)
        ck_hook_bad++;
}

/* A child writes version 2 of every key, and a checkpoint of it, during
 * whose write (the hook) version 3 and the deletes are made; it ends
 * without a close, as kill -9 leaves it.  The open that follows starts
 * from that checkpoint's meta page and replays the log after it.
 * Returns the keys wrong (-1: the child failed, -2: the open did). */
static int ck_crash(const char *name, bool copy)
{
    const char *p = tpath(name);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        kura_test.bg_hold = true;       /* the checkpoints are the test's */
        kura_store *s = t_open_tree(p, "#psiz=4096");
        if (!s || ck_round(s, 1, false) || btree_debug_checkpoint(s) ||
            ck_round(s, 2, false))
            _exit(3);
        kura_test.tree_ckpt_no_copy = !copy;
        kura_test.tree_ckpt_writing_arg = s;
        kura_test.tree_ckpt_writing = ck_hook;
        int rc = btree_debug_checkpoint(s);
        _exit(rc || ck_hook_bad || kura_test.tree_ckpt_writing ? 4 : 0);  /* no close */
    }
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("# the child failed (status %d)\n", status);
        return -1;
    }
    n_errors = 0;
    kura_store *s = t_open_tree(p, NULL);
    if (!s)
        return -2;
    int bad = 0;
    static unsigned char want[3000];
    for (int k = 0; k < NCK; k++) {
        char key[16];
        int kl = snprintf(key, sizeof(key), "c%05d", k);
        static got3 g;
        g.len = 0;
        g.flags = 0;
        int rc = s->ops->get(s, key, (size_t)kl, &CLK, got3_cb, &g);
        ck_val(want, k, 3);
        if (k % 5 == 0 ? rc != KURA_NOTFOUND
                       : rc != KURA_OK || g.len != ck_len(k) || g.flags != 3 ||
                         memcmp(g.buf, want, g.len) != 0)
            bad++;
    }
    int chk = check_tree(s);
    printf("# %s: %d keys wrong, %llu records replayed, structure check %d, %d errors logged\n",
           copy ? "changes during a checkpoint's write" : "... renamed in place (test hook)",
           bad, (unsigned long long)t_stat(s, "tree_recovered_records"), chk, n_errors);
    kura_store_close(s);
    return bad + (chk != 0);
}

static void test_changes_while_a_checkpoint_writes(void)
{
    CHECK_EQ_INT(ck_crash("ckwrite", true), 0);
    /* the negative check: the pages written are not the checkpoint's */
    int r = ck_crash("ckwrite_nocopy", false);
    CHECK(r != 0 && r != -1);
}

/* ---- readers and a writer ---------------------------------------------- */

typedef struct reader {
    kura_store *s;
    uint64_t seed;
    long gets, found, ovf, walks, bad;
    unsigned char want[8192];
    int cur_key;
} reader;

typedef struct rgot {
    reader *r;
    int v;
} rgot;

static int rget_cb(void *arg, const kura_item *it)
{
    rgot *g = arg;
    g->v = vcheck(g->r->cur_key, it, g->r->want);
    if (g->v > 0 && it->vlen >= 2000)
        g->r->ovf++;
    return 0;
}

typedef struct walk {
    reader *r;
    char last[16];
    int items;
} walk;

static int walk_cb(void *arg, const kura_item *it)
{
    walk *w = arg;
    char key[16];
    int k = -1;
    if (it->klen == 6 && sscanf(it->key, "k%05d", &k) == 1 && k >= 0 && k < NK) {
        key_of(k, key);
        int v = it->val ? vcheck(k, it, w->r->want) : 1;
        /* a value of one of the key's puts, in key order */
        if (memcmp(key, it->key, 6) != 0 || v < 0 ||
            (it->val && atomic_load(&hist[k][v]) != OP_PUT) ||
            (w->items && memcmp(w->last, it->key, 6) >= 0))
            w->r->bad++;
        memcpy(w->last, it->key, 6);
    } else {
        w->r->bad++;
    }
    w->items++;
    return w->items >= 300;     /* a part of the tree per walk */
}

static uint32_t rnd(uint64_t *x)
{
    *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*x >> 33);
}

static void *reader_main(void *arg)
{
    reader *r = arg;
    while (!atomic_load(&writer_done)) {
        int k = (int)(rnd(&r->seed) % NK);
        char key[16];
        int kl = key_of(k, key);
        if (r->gets % 250 == 0) {
            walk w = { .r = r };
            kura_iter_spec sp = { .scope = KURA_ITER_FROM, .from = key, .flen = (size_t)kl,
                                  .keys_only = r->walks % 2 };
            int rc = r->s->ops->iterate(r->s, &sp, &CLK, walk_cb, &w);
            if (rc < 0)
                r->bad++;
            r->walks++;
        }
        int before = atomic_load(&pub[k]);
        rgot g = { r, 0 };
        r->cur_key = k;
        int rc = r->s->ops->get(r->s, key, (size_t)kl, &CLK, rget_cb, &g);
        int after = atomic_load(&pub[k]);
        r->gets++;
        int seen;
        if (rc == KURA_OK) {
            seen = g.v;
            r->found++;
        } else if (rc == KURA_NOTFOUND || rc == KURA_EXPIRED) {
            seen = 0;
        } else {
            printf("# get %s: %s\n", key, kura_strerror(rc));
            r->bad++;
            continue;
        }
        bool ok = false;
        int hi = after + 1 < MAXOPS ? after + 1 : MAXOPS - 1;
        for (int j = before; j <= hi && !ok && seen >= 0; j++)
            ok = state_at(k, j) == seen;
        if (!ok) {
            if (r->bad < 5)
                printf("# %s: got version %d, ops %d..%d allow no such state\n", key, seen,
                       before, after);
            r->bad++;
        }
    }
    return NULL;
}

/* one op on key k; records it first and publishes it after */
static int write_op(kura_store *s, int k, int op, unsigned char *buf)
{
    int c = atomic_load(&pub[k]) + 1;
    if (c >= MAXOPS)
        return KURA_OK;                 /* this key's record is full */
    char key[16];
    int kl = key_of(k, key);
    atomic_store(&hist[k][c], (uint8_t)op);
    int rc;
    if (op == OP_DEL) {
        rc = kura_store_del(s, key, (size_t)kl, 0, &CLK);
        if (rc == KURA_NOTFOUND)
            rc = KURA_OK;
    } else {
        vfill(buf, k, c);
        kura_item it = { .key = key, .klen = (size_t)kl, .val = buf, .vlen = vlen_of(k, c),
                         .flags = (uint32_t)c, .exptime = op == OP_EXPIRED ? 1000 : 0,
                         .cas = (uint64_t)c };
        rc = kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK);
    }
    atomic_store(&pub[k], c);
    return rc;
}

static void test_readers_and_a_writer(void)
{
    const char *p = tpath("readers");
    kura_store *s = t_open_tree(p, "#psiz=4096#pccap=1m");
    REQUIRE(s);
    static unsigned char buf[8192];
    memset(hist, 0, sizeof(hist));
    for (int k = 0; k < NK; k++) {
        atomic_store(&pub[k], 0);
        REQUIRE(write_op(s, k, OP_PUT, buf) == KURA_OK);
    }
    uint64_t miss0 = t_stat(s, "tree_cache_misses"), ck0 = t_stat(s, "tree_checkpoints");
    atomic_store(&writer_done, false);
    static reader rd[NREAD];
    pthread_t t[NREAD];
    for (int i = 0; i < NREAD; i++) {
        memset(&rd[i], 0, sizeof(rd[i]));
        rd[i].s = s;
        rd[i].seed = (uint64_t)i * 977 + 5;
        REQUIRE(pthread_create(&t[i], NULL, reader_main, &rd[i]) == 0);
    }
    uint64_t x = 42;
    int werr = 0;
    for (int n = 0; n < WOPS; n++) {
        int k = (int)(rnd(&x) % NK);
        uint32_t r = rnd(&x) % 16;
        int op = r < 11 ? OP_PUT : r < 14 ? OP_DEL : OP_EXPIRED;
        if (write_op(s, k, op, buf) != KURA_OK)
            werr++;
        if (n % 2000 == 1999 && btree_debug_checkpoint(s) != KURA_OK)
            werr++;
    }
    atomic_store(&writer_done, true);
    long gets = 0, found = 0, ovf = 0, walks = 0, bad = 0;
    for (int i = 0; i < NREAD; i++) {
        pthread_join(t[i], NULL);
        gets += rd[i].gets;
        found += rd[i].found;
        ovf += rd[i].ovf;
        walks += rd[i].walks;
        bad += rd[i].bad;
    }
    uint64_t misses = t_stat(s, "tree_cache_misses") - miss0;
    printf("# %d readers: %ld gets (%ld found, %ld from overflow runs), %ld walks, %ld wrong; "
           "%llu cache misses, %llu checkpoints meanwhile\n", NREAD, gets, found, ovf, walks,
           bad, (unsigned long long)misses,
           (unsigned long long)(t_stat(s, "tree_checkpoints") - ck0));
    CHECK_EQ_INT(werr, 0);
    CHECK_EQ_INT(bad, 0);
    CHECK(gets > 0 && found > 0);
    CHECK(misses > 0);                  /* pages were loaded while readers ran */
    CHECK(t_stat(s, "tree_cache_pages") <= t_stat(s, "tree_cache_limit_pages") + 64);
    CHECK_EQ_INT(check_tree(s), 0);
    /* every key as the writer left it */
    int wrong = 0;
    for (int k = 0; k < NK; k++) {
        reader one = { .s = s };
        rgot g = { &one, 0 };
        char key[16];
        int kl = key_of(k, key);
        one.cur_key = k;
        int rc = s->ops->get(s, key, (size_t)kl, &CLK, rget_cb, &g);
        int want = state_at(k, atomic_load(&pub[k]));
        if ((rc == KURA_OK ? g.v : 0) != want)
            wrong++;
    }
    CHECK_EQ_INT(wrong, 0);
    kura_store_close(s);
}

int main(void)
{
    t_setup();
    RUN(test_two_gets_at_once);
    RUN(test_run_reused_under_a_get);
    RUN(test_changes_while_a_checkpoint_writes);
    RUN(test_readers_and_a_writer);
    t_teardown();
    UNIT_DONE();
}

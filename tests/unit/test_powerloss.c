/*
 * test_powerloss.c - the hash file and the B+ tree under simulated power
 * loss and injected I/O faults, through the kura_io of tests/unit/kio_sim.c.
 * Every test runs on both backends (a `backend` names the file, its
 * parameters and its maintenance: the hash file's checkpoint and
 * compaction, the tree's checkpoint).
 *
 *  - Power loss: a workload of sets (small to over 64 KB, so values span
 *    segments), overwrites and deletes, with forced checkpoints and
 *    compaction, runs on a store whose file I/O is recorded, in each sync
 *    mode (always: a put returns once durable; none and interval: an
 *    explicit sync makes everything before it durable).  A model notes,
 *    per key, every version written and the recorder's operation count
 *    when it was issued and when it was acknowledged as durable.  Then, at
 *    cut points spread over the whole run (open, rolls, checkpoints,
 *    compaction, close) and several seeds each (unsynced writes dropped,
 *    applied, torn; directory changes undone), the crash image is opened
 *    with the system's I/O and no recovery, and must hold every key's
 *    acknowledged version or a later one, no value never written, and no
 *    key acknowledged as deleted unless written again later.
 *  - The negative check: the same with "fsync lies" must find violations,
 *    so the check above can fail.
 *  - Every recorded run must have gone through the I/O layer it was given
 *    (a counter below the recorder sees its pwritevs and syncs), and every
 *    fault sweep must have found calls to fail: a store that wrote its
 *    files some other way would leave nothing to cut or inject, and pass.
 *    The negative check gives a store the system's I/O instead and must
 *    see both checks fail.
 *  - Injected faults: for every fsync and fdatasync of a workload, that
 *    call fails with EIO: the write it served is never reported done,
 *    every later write fails (KURA_EFAILED: the failure is sticky, or
 *    KURA_EIO) while reads go on, and a reopen
 *    holds every acknowledged write.  For every pwritev (fallocate with
 *    mapped appends) failing with ENOSPC from then on: writes fail with
 *    KURA_ENOSPC and change nothing, and resume once space returns (not
 *    sticky).  A short pwritev is retried and succeeds.
 *
 * The hash file also runs as a new database is made (no #segsiz, no
 * #bnum: HASH_GROW), its segments growing from 4 KiB, cut in the middle of
 * that growth.
 *
 * The tree runs three ways: plain, with compressed overflow runs (#zcomp
 * at 4 KiB pages), and with compressed leaf and branch pages too (8 KiB
 * pages, holes punched: the recorder keeps a punch pending like a write).
 *
 * A failure prints the workload seed, the cut point, the image seed and
 * the recorded operations around the cut; KURA_POWERLOSS_SEED=n repeats a
 * workload (the store's background thread may still move its own
 * checkpoints a little), KURA_POWERLOSS_CUTS=n sets the cut points per run.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "unit.h"
#include "hashdb_testlib.h"
#include "kio_sim.h"

#define NKEYS 160
#define NEVER UINT64_MAX

/* What differs between the backends under test. */
typedef struct backend {
    const char *file;           /* the database's name in its directory */
    const char *params;         /* for the recorded workload */
    const char *reopen;         /* for opening an image */
    const char *fault;          /* for the fault runs, appends through pwritev */
    const char *fault_map;      /* ... through the mapping */
    int (*maintain)(kura_store *s, bool full);
    bool compressible;          /* values that compress (for #zcomp) */
} backend;

static int hash_maintain(kura_store *s, bool full)
{
    return hashdb_debug_maintain(s, full, true);
}

static int tree_maintain(kura_store *s, bool full)
{
    (void)full;
    return btree_debug_checkpoint(s);
}

static const backend HASH = { "data.kh", "#segsiz=65536#ckpt=16k#bnum=256",
                              "#bnum=256#segsiz=65536", "#segsiz=65536#bnum=256#mapwrite=0",
                              "#segsiz=65536#bnum=256", hash_maintain, false };
/* the hash file as a new database is made (no #segsiz, no #bnum): its
 * segments grow from kura_test.hashdb_seg_first (set by the tests that
 * use it) and its index from 8 slots a stripe */
static const backend HASH_GROW = { "data.kh", "#ckpt=16k", "", "#mapwrite=0", "",
                                   hash_maintain, false };
static const backend TREE = { "data.kb", "#segsiz=65536#ckpt=64k#psiz=4096#pccap=1m",
                              "#segsiz=65536", "#segsiz=65536#psiz=4096#mapwrite=0",
                              "#segsiz=65536#psiz=4096", tree_maintain, false };
/* the tree with compressed overflow runs (#zcomp), and values that compress */
static const backend TREE_Z = { "data.kb", "#segsiz=65536#ckpt=64k#psiz=4096#pccap=1m#zcomp=lzo",
                                "#segsiz=65536#zcomp=lzo",
                                "#segsiz=65536#psiz=4096#mapwrite=0#zcomp=zlib",
                                "#segsiz=65536#psiz=4096#zcomp=zlib", tree_maintain, true };
/* ... and compressed leaf and branch pages: 8 KiB pages, two blocks */
static const backend TREE_PZ = { "data.kb", "#segsiz=65536#ckpt=64k#psiz=8192#pccap=1m#zcomp=lzo",
                                 "#segsiz=65536#zcomp=zlib",
                                 "#segsiz=65536#psiz=8192#mapwrite=0#zcomp=zlib",
                                 "#segsiz=65536#psiz=8192#zcomp=zlib", tree_maintain, true };
static const backend *be = &HASH;

/* ---- the model ------------------------------------------------------------- */

/* One version of a key: a put (content derived from key and id) or a
 * delete.  Times are the caller's clock: the recorder's operation count,
 * or a plain counter. */
typedef struct ver {
    bool del;
    bool phantom_ok;            /* failed, but may have reached the file (EIO) */
    bool never;                 /* failed and must leave no trace (ENOSPC) */
    uint32_t len;
    uint64_t issued, acked;     /* clock before the call; when durable (NEVER) */
} ver;

typedef struct mkey {
    ver *v;
    size_t n, cap;
} mkey;

typedef struct model {
    mkey k[NKEYS];
    uint64_t rng;
    uint64_t cas;
    size_t *unsynced;           /* sync none/interval: (key, version) returned, not yet durable */
    size_t nuns, capuns;
    kura_clock clk;
} model;

static uint64_t rnd(model *m)
{
    uint64_t x = m->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return m->rng = x;
}

static void m_init(model *m, uint64_t seed)
{
    memset(m, 0, sizeof(*m));
    m->rng = seed ? seed : 1;
    m->clk.now = 2000000;
}

static void m_free(model *m)
{
    for (int i = 0; i < NKEYS; i++)
        free(m->k[i].v);
    free(m->unsynced);
}

static ver *m_add(model *m, int key, bool del, uint32_t len, uint64_t issued)
{
    mkey *k = &m->k[key];
    if (k->n == k->cap) {
        k->cap = k->cap ? k->cap * 2 : 8;
        k->v = realloc(k->v, k->cap * sizeof(ver));
    }
    ver *v = &k->v[k->n++];
    *v = (ver){ .del = del, .len = len, .issued = issued, .acked = NEVER };
    return v;
}

static void keyname(int key, char *buf)
{
    sprintf(buf, "pl:%d", key);
}

/* Version id's value of key: a header naming them, then bytes that depend
 * on both, so a value from nowhere or a mix of two is caught. */
static void make_value(int key, size_t id, uint32_t len, unsigned char *out)
{
    char h[48];
    int hl = snprintf(h, sizeof(h), "K%d.V%zu.L%u|", key, id, len);
    uint64_t x = (uint64_t)key * 0x9E3779B97F4A7C15ULL ^ (uint64_t)id * 0xC2B2AE3D27D4EB4FULL;
    for (uint32_t i = 0; i < len; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        out[i] = i < (uint32_t)hl ? (unsigned char)h[i] : (unsigned char)(x >> 56);
        if (be->compressible && i >= (uint32_t)hl)
            out[i] = (unsigned char)h[i % (uint32_t)hl];   /* the header again and again */
    }
}

/* Value length: mostly small, some pages long, some at or above the size
 * copied with readers let in (64 KB), which also fills a 64 KB segment. */
static uint32_t pick_len(model *m)
{
    uint64_t x = rnd(m) % 100;
    if (x < 70)
        return 24 + (uint32_t)(rnd(m) % 300);
    if (x < 95)
        return 1000 + (uint32_t)(rnd(m) % 9000);
    return (64u << 10) + (uint32_t)(rnd(m) % (40u << 10));
}

typedef struct got {
    unsigned char *buf;
    size_t len, cap;
} got;

static int got_cb(void *arg, const kura_item *it)
{
    got *g = arg;
    if (it->vlen > g->cap) {
        g->cap = it->vlen;
        g->buf = realloc(g->buf, g->cap);
    }
    memcpy(g->buf, it->val, it->vlen);
    g->len = it->vlen;
    return 0;
}

/* Checks the store against the model as of time `at`: every key holds its
 * version acknowledged by then or one issued before `at` after it; a
 * missing key was acknowledged deleted, never acknowledged, or deleted by
 * a later issued version.  Returns the violations; describes the first
 * few after prefix. */
static int m_check(model *m, kura_store *s, uint64_t at, const char *prefix, int *printed)
{
    static got g;
    static unsigned char want[200000];
    int bad = 0;
    for (int key = 0; key < NKEYS; key++) {
        mkey *k = &m->k[key];
        char name[32], why[200] = "";
        keyname(key, name);
        long ia = -1;
        for (size_t i = 0; i < k->n; i++)
            if (k->v[i].acked <= at)
                ia = (long)i;
        int rc = s->ops->get(s, name, strlen(name), &m->clk, got_cb, &g);
        if (rc == KURA_OK) {
            unsigned id = 0, len = 0;
            int kk = -1;
            if (g.len < 8 || sscanf((const char *)g.buf, "K%d.V%u.L%u|", &kk, &id, &len) != 3 ||
                kk != key || id == 0 || id > k->n || len != g.len) {
                snprintf(why, sizeof(why), "a value never written (%zu bytes)", g.len);
            } else {
                ver *v = &k->v[id - 1];
                make_value(key, id, len, want);
                if (v->del || v->len != len || memcmp(want, g.buf, len) != 0)
                    snprintf(why, sizeof(why), "version %u with wrong bytes", id);
                else if (v->never)
                    snprintf(why, sizeof(why), "version %u, whose write failed", id);
                else if (v->issued >= at)
                    snprintf(why, sizeof(why), "version %u, written after the cut", id);
                else if ((long)id - 1 < ia)
                    snprintf(why, sizeof(why), "version %u, older than version %ld acknowledged "
                             "at %llu", id, ia + 1, (unsigned long long)k->v[ia].acked);
                else if ((long)id - 1 == ia && k->v[ia].del)
                    snprintf(why, sizeof(why), "version %u, deleted by itself?", id);
            }
        } else if (rc == KURA_NOTFOUND) {
            bool ok = ia < 0 || k->v[ia].del;
            for (size_t j = (size_t)(ia + 1); !ok && j < k->n; j++)
                ok = k->v[j].del && !k->v[j].never && k->v[j].issued < at;
            if (!ok)
                snprintf(why, sizeof(why), "missing; version %ld (%zu bytes) acknowledged at %llu",
                         ia + 1, (size_t)k->v[ia].len, (unsigned long long)k->v[ia].acked);
        } else {
            snprintf(why, sizeof(why), "get failed: %s", kura_strerror(rc));
        }
        if (why[0]) {
            bad++;
            if ((*printed)++ < 6)
                printf("# %s: key %s: %s\n", prefix, name, why);
        }
    }
    return bad;
}

/* ---- the workload ---------------------------------------------------------- */

typedef struct wl {
    model *m;
    kura_store *s;
    kio_rec *rec;               /* the clock, or NULL: a counter */
    uint64_t counter;
    int sync_mode;
    int fail_rc;                /* the first error a write returned */
} wl;

static uint64_t now_of(wl *w)
{
    return w->rec ? kio_rec_ops(w->rec) : ++w->counter;
}

/* Marks everything returned so far durable as of time t (a sync). */
static void ack_unsynced(wl *w, uint64_t t)
{
    model *m = w->m;
    for (size_t i = 0; i < m->nuns; i += 2) {
        ver *v = &m->k[m->unsynced[i]].v[m->unsynced[i + 1]];
        if (v->acked == NEVER)
            v->acked = t;
    }
    m->nuns = 0;
}

/* One write: a put of a new version, or a delete if the key is there.
 * Returns the store's status (KURA_NOTFOUND: nothing to delete). */
static int wl_write(wl *w, int key, bool del)
{
    static unsigned char val[200000];
    model *m = w->m;
    mkey *k = &m->k[key];
    char name[32];
    keyname(key, name);
    bool live = k->n && !k->v[k->n - 1].del && !k->v[k->n - 1].never;
    /* the model knows whether a key is there only while nothing failed */
    if (del && !live && !w->fail_rc)
        return KURA_NOTFOUND;
    uint32_t len = del ? 0 : pick_len(m);
    uint64_t t0 = now_of(w);
    size_t id = k->n + 1;
    int rc;
    if (del) {
        rc = kura_store_del(w->s, name, strlen(name), 0, &m->clk);
        if (rc == KURA_NOTFOUND && (!live || w->fail_rc))
            return rc;
    } else {
        make_value(key, id, len, val);
        kura_item it = { .key = name, .klen = strlen(name), .val = (const char *)val,
                         .vlen = len, .cas = ++m->cas };
        rc = kura_store_put(w->s, &it, KURA_PUT_ANY, 0, &m->clk);
    }
    ver *v = m_add(m, key, del, len, t0);
    if (rc == KURA_OK) {
        if (w->sync_mode == KURA_SYNC_ALWAYS) {
            v->acked = now_of(w);
        } else {
            if (m->nuns + 2 > m->capuns) {
                m->capuns = m->capuns ? m->capuns * 2 : 64;
                m->unsynced = realloc(m->unsynced, m->capuns * sizeof(size_t));
            }
            m->unsynced[m->nuns++] = (size_t)key;
            m->unsynced[m->nuns++] = id - 1;
        }
    } else {
        if (!w->fail_rc)
            w->fail_rc = rc;
        /* a full disk cuts the record off again; a failed sync leaves it
         * in the file, where it may or may not survive */
        if (rc == KURA_ENOSPC)
            v->never = true;
        else
            v->phantom_ok = true;
    }
    return rc;
}

static int wl_sync(wl *w)
{
    int rc = w->s->ops->sync(w->s);
    if (rc == KURA_OK)
        ack_unsynced(w, now_of(w));
    else if (!w->fail_rc)
        w->fail_rc = rc;
    return rc;
}

enum { OP_PUT, OP_DEL, OP_MAINTAIN, OP_SYNC };

/* One step of the workload; *what says which kind it was.  Returns the
 * store's status. */
static int wl_step(wl *w, int *what)
{
    model *m = w->m;
    uint64_t x = rnd(m) % 100;
    int key = (int)(rnd(m) % NKEYS);
    if (x < 68) {
        *what = OP_PUT;
        return wl_write(w, key, false);
    }
    if (x < 90) {
        *what = OP_DEL;
        return wl_write(w, key, true);
    }
    if (x < 94) {
        /* a checkpoint, then compaction of whatever two checkpoints
         * have passed; sometimes compaction alone */
        *what = OP_MAINTAIN;
        int rc = be->maintain(w->s, x < 93);
        if (rc && !w->fail_rc)
            w->fail_rc = rc;
        return rc;
    }
    *what = OP_SYNC;
    return w->sync_mode == KURA_SYNC_ALWAYS ? KURA_OK : wl_sync(w);
}

/* ---- power loss ------------------------------------------------------------ */

static char base[256];

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 0) : dflt;
}

/* Sanitizers slow everything down: fewer cut points there. */
static int scaled(int n)
{
    double f = unit_deadline_scale();
    return f > 1 ? (int)(n / (f + 1)) + 1 : n;
}

/* Set by the negative check of io_seen: the store is given the system's
 * I/O instead of the recorder, as a store that ignored cfg.io would use. */
static bool g_bypass_io;
/* Set by record_run when io_seen refused a run. */
static bool g_io_unseen;

/* Whether the store's writes and syncs went through the I/O layer it was
 * given: the counter below the recorder saw pwritevs and syncs, and the
 * recorder has operations to cut.  A store that wrote its files some other
 * way would leave nothing to cut, and every image check would pass on
 * nothing; so that is a failure, said. */
static bool io_seen(const char *tag, kio_inject *cnt, kio_rec *rec)
{
    uint64_t writes = kio_inject_calls(cnt, KIO_PWRITEV);
    uint64_t syncs = kio_inject_calls(cnt, KIO_FSYNC) + kio_inject_calls(cnt, KIO_FDATASYNC);
    uint64_t ops = kio_rec_ops(rec);
    if (writes > 0 && syncs > 0 && ops > 0)
        return true;
    printf("# %s: the store's file I/O did not go through cfg.io: %llu pwritev, %llu syncs, "
           "%llu operations recorded\n", tag, (unsigned long long)writes,
           (unsigned long long)syncs, (unsigned long long)ops);
    return false;
}

/* Runs the workload on a store under root (made afresh) whose file I/O is
 * recorded (with a counter of calls below the recorder); the store is
 * closed at the end.  Returns the recorder, with *total its operations, or
 * NULL on a failure, said: among them a store whose writes and syncs did
 * not go through cfg.io (io_seen; g_io_unseen set). */
static kio_rec *record_run(const char *tag, const char *root, int mode, bool lies, int nops,
                           model *m, uint64_t *total)
{
    char path[400], err[600];
    kio_rmrf(root);
    if (mkdir(root, 0755) != 0)
        return NULL;
    kio_inject *cnt = kio_inject_new(NULL);
    kio_rec *rec = cnt ? kio_rec_new(root, kio_inject_io(cnt)) : NULL;
    if (!rec) {
        if (cnt)
            kio_inject_free(cnt);
        return NULL;
    }
    kio_rec_set_lies(rec, lies);
    kura_store_config cfg = t_cfg(mode);
    cfg.io = g_bypass_io ? NULL : kio_rec_io(rec);
    kura_store *s;
    snprintf(path, sizeof(path), "%s/%s", root, be->file);
    if (t_open(path, be->params, &cfg, &s, err, sizeof(err)) != KURA_OK) {
        printf("# %s: open: %s\n", tag, err);
        goto fail;
    }
    wl w = { .m = m, .s = s, .rec = rec, .sync_mode = mode };
    for (int i = 0; i < nops; i++) {
        int what, rc = wl_step(&w, &what);
        if (rc != KURA_OK && !(what == OP_DEL && rc == KURA_NOTFOUND)) {
            printf("# %s: step %d (kind %d) failed: %s\n", tag, i, what, kura_strerror(rc));
            kura_store_close(s);
            goto fail;
        }
    }
    if (be == &TREE_PZ) {
        /* the images below are of no use unless pages were compressed */
        uint64_t zp = t_stat(s, "tree_zcomp_pages");
        printf("# %s: %llu pages written compressed, %llu bytes punched out\n", tag,
               (unsigned long long)zp,
               (unsigned long long)t_stat(s, "tree_zcomp_page_saved_bytes"));
        CHECK(zp > 0);
    }
    kura_store_close(s);
    if (!io_seen(tag, cnt, rec)) {
        g_io_unseen = true;
        goto fail;
    }
    kio_inject_free(cnt);
    *total = kio_rec_ops(rec);
    return rec;
fail:
    kio_rec_free(rec);
    kio_inject_free(cnt);
    return NULL;
}

/* Opens the image in dir with the system's I/O and checks it against the
 * model at cut k: 0 if right, 1 if not (said, at most a few times). */
static int check_image(model *m, const char *dir, uint64_t k, const char *prefix, int *printed)
{
    char path[400], err[600];
    kura_store_config c2 = t_cfg(KURA_SYNC_NONE);
    snprintf(path, sizeof(path), "%s/%s", dir, be->file);
    kura_store *s2;
    if (t_open(path, be->reopen, &c2, &s2, err, sizeof(err)) != KURA_OK) {
        if ((*printed)++ < 6)
            printf("# %s: open failed: %s\n", prefix, err);
        return 1;
    }
    int bad = m_check(m, s2, k, prefix, printed);
    kura_store_close(s2);
    return bad;
}

/* Runs the workload on a recorded store, then checks images at ncuts cut
 * points with nseeds seeds each.  Returns the images with violations
 * (opening failed, or keys wrong); *images the images checked. */
static int powerloss_run(const char *tag, int mode, bool lies, int nops, int ncuts, int nseeds,
                         uint64_t seed, int *images)
{
    char root[300], img[300], err[600];
    snprintf(root, sizeof(root), "%s/%s", base, tag);
    snprintf(img, sizeof(img), "%s/%s.img", base, tag);
    static model m;
    m_init(&m, seed);
    uint64_t total = 0;
    kio_rec *rec = record_run(tag, root, mode, lies, nops, &m, &total);
    if (!rec) {
        m_free(&m);
        return -1;
    }
    int violations = 0, printed = 0;
    uint64_t stride = total / (uint64_t)ncuts ? total / (uint64_t)ncuts : 1, jr = seed | 1;
    *images = 0;
    for (int c = 0; c <= ncuts; c++) {
        jr ^= jr << 13; jr ^= jr >> 7; jr ^= jr << 17;
        uint64_t k = c == ncuts ? total : (uint64_t)c * stride + jr % stride;
        if (k > total)
            break;
        for (int sd = 0; sd < nseeds; sd++) {
            uint64_t iseed = seed ^ ((uint64_t)(c * nseeds + sd) + 1) * 0xD6E8FEB86659FD93ULL;
            char prefix[200];
            snprintf(prefix, sizeof(prefix), "%s seed %llu cut %llu/%llu image seed %llu", tag,
                     (unsigned long long)seed, (unsigned long long)k,
                     (unsigned long long)total, (unsigned long long)iseed);
            if (kio_rec_image(rec, k, iseed, img, err, sizeof(err)) != 0) {
                printf("# %s: image: %s\n", prefix, err);
                violations++;
                continue;
            }
            (*images)++;
            int bad = check_image(&m, img, k, prefix, &printed);
            if (bad) {
                violations++;
                if (getenv("KURA_POWERLOSS_KEEP") && !lies) {
                    /* the image as built (open may have cut it since) */
                    char keep[400];
                    snprintf(keep, sizeof(keep), "/tmp/kura-powerloss-%s-%llu-%llu", tag,
                             (unsigned long long)k, (unsigned long long)iseed);
                    kio_rmrf(keep);
                    if (kio_rec_image(rec, k, iseed, keep, err, sizeof(err)) == 0)
                        printf("# kept in %s\n", keep);
                    /* and the operations that made it */
                    char opsf[420], d[300];
                    snprintf(opsf, sizeof(opsf), "%s.ops", keep);
                    FILE *f = fopen(opsf, "w");
                    for (uint64_t i = 0; f && i < total; i++) {
                        kio_rec_describe(rec, i, d, sizeof(d));
                        fprintf(f, "%s%s\n", i < k ? "" : "(after the cut) ", d);
                    }
                    if (f)
                        fclose(f);
                }
                if (violations == 1 && !lies) {
                    char d[300];
                    for (uint64_t i = k >= 6 ? k - 6 : 0; i < k + 2 && i < total; i++) {
                        kio_rec_describe(rec, i, d, sizeof(d));
                        printf("#   %s%s\n", i < k ? "" : "(after the cut) ", d);
                    }
                }
            }
        }
    }
    kio_rmrf(img);
    kio_rmrf(root);
    kio_rec_free(rec);
    m_free(&m);
    return violations;
}

static uint64_t g_seed;

static void run_mode(const char *tag, int mode, int nops, int ncuts, int nseeds)
{
    double t0 = mono();
    int images = 0;
    int v = powerloss_run(tag, mode, false, nops, ncuts, nseeds, g_seed, &images);
    printf("# %s: %d images, %d with violations, %.1f s\n", tag, images, v, mono() - t0);
    CHECK_EQ_INT(v, 0);
    CHECK(images > 0);
}

static int cuts(int dflt)
{
    return (int)env_u64("KURA_POWERLOSS_CUTS", (uint64_t)scaled(dflt));
}

static void test_powerloss_sync_always(void)
{
    run_mode("always", KURA_SYNC_ALWAYS, 700, cuts(1200), 2);
}

static void test_powerloss_sync_none(void)
{
    run_mode("none", KURA_SYNC_NONE, 900, cuts(600), 2);
}

static void test_powerloss_sync_interval(void)
{
    run_mode("interval", KURA_SYNC_INTERVAL, 600, cuts(300), 2);
}

/* A power loss while recovering: images of the workload at some cut
 * points are opened under a second recorder (the open cuts torn tails,
 * removes a torn creation, writes a checkpoint; then the store is closed),
 * and at every cut point of that recovery the image must open and hold
 * what the first image had to hold. */
static void test_powerloss_during_recovery(void)
{
    char root[300], img[300], img2[300], err[600], prefix[200];
    snprintf(root, sizeof(root), "%s/rec", base);
    snprintf(img, sizeof(img), "%s/rec.first", base);
    snprintf(img2, sizeof(img2), "%s/rec.second", base);
    static model m;
    m_init(&m, g_seed ^ 0x5bd1e995);
    uint64_t total = 0;
    kio_rec *rec = record_run("recovery", root, KURA_SYNC_ALWAYS, false, 500, &m, &total);
    REQUIRE(rec != NULL);
    int firsts = scaled(24), images = 0, violations = 0, printed = 0, recovery_ops = 0;
    for (int c = 1; c <= firsts; c++) {
        uint64_t k = total * (uint64_t)c / (uint64_t)(firsts + 1);
        uint64_t iseed = g_seed ^ (uint64_t)c * 0x9E3779B97F4A7C15ULL;
        kio_rmrf(img);
        REQUIRE(kio_rec_image(rec, k, iseed, img, err, sizeof(err)) == 0);
        /* recover the image under a recorder of its own */
        kio_rec *rec2 = kio_rec_new(img, NULL);
        REQUIRE(rec2 != NULL);
        kura_store_config cfg = t_cfg(KURA_SYNC_ALWAYS);
        cfg.io = kio_rec_io(rec2);
        char path[400];
        snprintf(path, sizeof(path), "%s/%s", img, be->file);
        kura_store *s;
        if (t_open(path, be->params, &cfg, &s, err, sizeof(err)) != KURA_OK) {
            printf("# recovery: cut %llu: the first image does not open: %s\n",
                   (unsigned long long)k, err);
            violations++;
            kio_rec_free(rec2);
            continue;
        }
        kura_store_close(s);
        uint64_t total2 = kio_rec_ops(rec2);
        recovery_ops += (int)total2;
        for (uint64_t j = 0; j <= total2; j++) {
            snprintf(prefix, sizeof(prefix), "recovery: cut %llu, then cut %llu/%llu of its "
                     "recovery", (unsigned long long)k, (unsigned long long)j,
                     (unsigned long long)total2);
            REQUIRE(kio_rec_image(rec2, j, iseed + j, img2, err, sizeof(err)) == 0);
            images++;
            if (check_image(&m, img2, k, prefix, &printed)) {
                violations++;
                if (violations == 1) {
                    char d[300];
                    for (uint64_t i = 0; i < total2; i++) {
                        kio_rec_describe(rec2, i, d, sizeof(d));
                        printf("#   %s%s\n", i < j ? "" : "(after the cut) ", d);
                    }
                }
            }
        }
        kio_rec_free(rec2);
    }
    printf("# recovery: %d images cut inside %d recoveries (%d operations), %d with "
           "violations\n", images, firsts, recovery_ops, violations);
    CHECK_EQ_INT(violations, 0);
    CHECK(images > firsts);
    kio_rmrf(img);
    kio_rmrf(img2);
    kio_rmrf(root);
    kio_rec_free(rec);
    m_free(&m);
}

/* The negative check: when syncs make nothing durable, the same check
 * finds acknowledged writes missing; if it did not, it could not fail. */
static void test_powerloss_fsync_lies_is_caught(void)
{
    int images = 0;
    int v = powerloss_run("lies", KURA_SYNC_ALWAYS, true, 300, 40, 2, g_seed, &images);
    printf("# lies: %d of %d images with violations (expected: some)\n", v, images);
    CHECK(v > 0);
}

/* ---- injected faults ---------------------------------------------------- */

enum { F_NONE, F_EIO, F_ENOSPC, F_SHORT };

/* One workload on a fresh store whose io fails call n of kind (0: none).
 * Checks the store's answers as it goes and the reopened files after.
 * Returns the failures found. */
static int fault_run(kio_inject *in, int fault, int kind, uint64_t n, const char *params,
                     uint64_t *calls)
{
    char path[400], err[600], prefix[200];
    static int runs;
    snprintf(path, sizeof(path), "%s/fault%d%s", base, runs++ % 4, strrchr(be->file, '.'));
    kio_rmrf(path);
    snprintf(prefix, sizeof(prefix), "fault %d kind %d call %llu%s", fault, kind,
             (unsigned long long)n, params);
    kio_inject_disarm(in);
    kio_inject_reset(in);
    if (n)
        kio_inject_fail(in, kind, n, fault == F_ENOSPC ? 0 : 1,
                        fault == F_EIO ? EIO : fault == F_ENOSPC ? ENOSPC : KIO_SHORT);
    kura_store_config cfg = t_cfg(KURA_SYNC_ALWAYS);
    cfg.io = g_bypass_io ? NULL : kio_inject_io(in);
    kura_store *s;
    static model m;
    m_init(&m, 0x5EEDULL);
    int bad = 0, printed = 0;
    if (t_open(path, params, &cfg, &s, err, sizeof(err)) != KURA_OK) {
        /* a fault while opening: refusing to open is right */
        if (!kio_inject_fired(in)) {
            printf("# %s: open failed: %s\n", prefix, err);
            bad++;
        }
        s = NULL;
    }
    wl w = { .m = &m, .s = s, .sync_mode = KURA_SYNC_ALWAYS };
    int after = 0;
    bool fired = false;
    for (int i = 0; s && i < 90; i++) {
        uint64_t f0 = kio_inject_fired(in);
        int what, rc = wl_step(&w, &what);
        bool write = what == OP_PUT || what == OP_DEL;
        bool now_fired = kio_inject_fired(in) > f0;
        char why[200] = "";
        if (!fired && !now_fired) {
            if (rc != KURA_OK && !(what == OP_DEL && rc == KURA_NOTFOUND))
                snprintf(why, sizeof(why), "failed before any fault: %s", kura_strerror(rc));
        } else if (fault == F_SHORT) {
            if (rc != KURA_OK && !(what == OP_DEL && rc == KURA_NOTFOUND))
                snprintf(why, sizeof(why), "a short write was not retried: %s",
                         kura_strerror(rc));
        } else if (fault == F_EIO) {
            /* the write whose sync failed, and every write after it */
            if (write && (now_fired || fired) && rc == KURA_OK)
                snprintf(why, sizeof(why), "a write succeeded %s a failed sync",
                         now_fired ? "despite" : "after");
            else if (write && rc != KURA_EIO && rc != KURA_EFAILED && rc != KURA_NOTFOUND)
                snprintf(why, sizeof(why), "a write after a failed sync returned %s",
                         kura_strerror(rc));
        } else if (fault == F_ENOSPC) {
            if (write && rc != KURA_OK && rc != KURA_ENOSPC && rc != KURA_NOTFOUND)
                snprintf(why, sizeof(why), "a write on a full disk returned %s",
                         kura_strerror(rc));
            if (write && now_fired && rc == KURA_OK && kind == KIO_PWRITEV)
                snprintf(why, sizeof(why), "a write whose pwritev failed succeeded");
            if (fired && ++after == 6) {
                /* space returns: writes go on */
                kio_inject_disarm(in);
                fault = F_NONE;
                fired = false;
                w.fail_rc = 0;
                continue;
            }
        }
        if (now_fired && !fired) {
            fired = true;
            /* reads go on, and show acknowledged data (or the failed write) */
            int b = m_check(&m, s, w.counter + 1, prefix, &printed);
            if (b)
                snprintf(why, sizeof(why), "reads after the fault disagree (%d keys)", b);
        }
        if (why[0]) {
            if (printed++ < 6)
                printf("# %s: step %d (kind %d): %s\n", prefix, i, what, why);
            bad++;
        }
    }
    if (s)
        kura_store_close(s);
    if (calls)
        *calls = kio_inject_calls(in, kind);
    /* reopened with the system's I/O, no recovery: every acknowledged
     * write is there */
    kura_store_config c2 = t_cfg(KURA_SYNC_NONE);
    if (t_open(path, params, &c2, &s, err, sizeof(err)) != KURA_OK) {
        printf("# %s: reopen failed: %s\n", prefix, err);
        bad++;
    } else {
        int b = m_check(&m, s, w.counter + 1, prefix, &printed);
        if (b)
            printf("# %s: %d keys wrong after reopening\n", prefix, b);
        bad += b;
        kura_store_close(s);
    }
    m_free(&m);
    return bad;
}

/* Every call of kind in turn fails; returns how many runs found faults.
 * A clean run that made no call of kind through the I/O layer counts as one
 * (a store that bypassed cfg.io would otherwise pass with nothing tried). */
static int fault_sweep(int fault, int kind, const char *params)
{
    kio_inject *in = kio_inject_new(NULL);
    uint64_t total = 0;
    int bad = fault_run(in, F_NONE, kind, 0, params, &total), runs_bad = bad != 0;
    if (total == 0) {
        printf("# fault %d kind %d%s: no call of that kind went through cfg.io\n", fault, kind,
               params);
        runs_bad++;
    }
    uint64_t step = total > (uint64_t)scaled(400) ? total / (uint64_t)scaled(400) + 1 : 1;
    for (uint64_t n = 1; n <= total; n += step) {
        int b = fault_run(in, fault, kind, n, params, NULL);
        runs_bad += b != 0;
    }
    printf("# fault %d kind %d%s: %llu calls tried (every %llu), %d runs failed\n", fault,
           kind, params, (unsigned long long)total, (unsigned long long)step, runs_bad);
    kio_inject_free(in);
    return runs_bad;
}

/* The negative check of io_seen and of fault_sweep's count: a store given
 * the system's I/O in place of the recorder or the injector (what a store
 * that ignored cfg.io would do) fails both, where before it passed with
 * nothing recorded and nothing injected. */
static void test_bypassing_the_io_layer_is_caught(void)
{
    char root[300];
    snprintf(root, sizeof(root), "%s/bypass", base);
    static model m;
    m_init(&m, g_seed);
    uint64_t total = 0;
    g_bypass_io = true;
    g_io_unseen = false;
    kio_rec *rec = record_run("bypass", root, KURA_SYNC_ALWAYS, false, 100, &m, &total);
    int sweep_bad = fault_sweep(F_EIO, KIO_FDATASYNC, be->fault);
    g_bypass_io = false;
    CHECK(rec == NULL);
    CHECK(g_io_unseen);
    CHECK(sweep_bad > 0);
    if (rec)
        kio_rec_free(rec);
    kio_rmrf(root);
    m_free(&m);
}

static void test_eio_on_every_fdatasync(void)
{
    CHECK_EQ_INT(fault_sweep(F_EIO, KIO_FDATASYNC, be->fault), 0);
}

static void test_eio_on_every_fsync(void)
{
    CHECK_EQ_INT(fault_sweep(F_EIO, KIO_FSYNC, be->fault), 0);
}

static void test_enospc_on_every_pwritev(void)
{
    CHECK_EQ_INT(fault_sweep(F_ENOSPC, KIO_PWRITEV, be->fault), 0);
}

static void test_enospc_on_every_fallocate(void)
{
    CHECK_EQ_INT(fault_sweep(F_ENOSPC, KIO_FALLOCATE, be->fault_map), 0);
}

static void test_short_pwritev(void)
{
    CHECK_EQ_INT(fault_sweep(F_SHORT, KIO_PWRITEV, be->fault), 0);
}

/* The same on the B+ tree. */
static void test_tree_powerloss_sync_always(void)
{
    be = &TREE;
    run_mode("tree-always", KURA_SYNC_ALWAYS, 700, cuts(600), 2);
}

static void test_tree_powerloss_sync_none(void)
{
    run_mode("tree-none", KURA_SYNC_NONE, 900, cuts(400), 2);
}

static void test_tree_powerloss_sync_interval(void)
{
    run_mode("tree-interval", KURA_SYNC_INTERVAL, 600, cuts(300), 2);
}

static void test_tree_powerloss_during_recovery(void)
{
    test_powerloss_during_recovery();
}

static void test_tree_powerloss_fsync_lies_is_caught(void)
{
    test_powerloss_fsync_lies_is_caught();
}

static void test_tree_bypassing_the_io_layer_is_caught(void)
{
    test_bypassing_the_io_layer_is_caught();
}

/* The negative check of page reuse: a page freed since the last
 * checkpoint taken again at once (before the meta page that stops reaching
 * it is durable) is overwritten while the durable tree still needs it, and
 * the images must show it (lost keys, or a tree that fails its checks). */
static void test_tree_reuse_before_durable_is_caught(void)
{
    be = &TREE;
    kura_test.tree_reuse_pending = true;
    int images = 0;
    int v = powerloss_run("tree-reuse", KURA_SYNC_ALWAYS, false, 700, cuts(300), 2, g_seed,
                          &images);
    kura_test.tree_reuse_pending = false;
    printf("# tree-reuse: %d of %d images with violations (expected: some)\n", v, images);
    CHECK(v > 0);
}

static void test_tree_eio_on_every_fdatasync(void)
{
    test_eio_on_every_fdatasync();
}

static void test_tree_eio_on_every_fsync(void)
{
    test_eio_on_every_fsync();
}

static void test_tree_enospc_on_every_pwritev(void)
{
    test_enospc_on_every_pwritev();
}

static void test_tree_enospc_on_every_fallocate(void)
{
    test_enospc_on_every_fallocate();
}

static void test_tree_short_pwritev(void)
{
    test_short_pwritev();
}

/* A new hash file whose segments grow (4 KiB, 8 KiB, ... up to 128 MiB:
 * the workload's records roll it through the sizes, and its values past
 * 64 KB take segments of their own), cut at power loss in the middle of
 * that growth, in every sync mode and during recovery; a roll that fails
 * (a full disk at the next segment's fallocate, a failed sync of its
 * seal) refuses the write and the next one goes on. */
static void hash_grow(void)
{
    be = &HASH_GROW;
    kura_test.hashdb_seg_first = 4096;
}

static void test_grow_powerloss_sync_always(void)
{
    hash_grow();
    run_mode("grow-always", KURA_SYNC_ALWAYS, 700, cuts(200), 2);
}

static void test_grow_powerloss_sync_none(void)
{
    hash_grow();
    run_mode("grow-none", KURA_SYNC_NONE, 900, cuts(150), 2);
}

static void test_grow_powerloss_during_recovery(void)
{
    hash_grow();
    test_powerloss_during_recovery();
}

static void test_grow_eio_on_every_fdatasync(void)
{
    hash_grow();
    test_eio_on_every_fdatasync();
}

static void test_grow_enospc_on_every_fallocate(void)
{
    hash_grow();
    test_enospc_on_every_fallocate();
    kura_test.hashdb_seg_first = 0;
}

/* The same on the tree with compressed overflow runs. */
static void test_tree_zcomp_powerloss_sync_always(void)
{
    be = &TREE_Z;
    run_mode("tree-zcomp-always", KURA_SYNC_ALWAYS, 700, cuts(400), 2);
}

static void test_tree_zcomp_powerloss_sync_none(void)
{
    run_mode("tree-zcomp-none", KURA_SYNC_NONE, 900, cuts(300), 2);
}

static void test_tree_zcomp_powerloss_during_recovery(void)
{
    test_powerloss_during_recovery();
}

static void test_tree_zcomp_enospc_on_every_pwritev(void)
{
    test_enospc_on_every_pwritev();
}

/* The same with compressed leaf and branch pages (holes punched). */
static void test_tree_pzcomp_powerloss_sync_always(void)
{
    be = &TREE_PZ;
    run_mode("tree-pzcomp-always", KURA_SYNC_ALWAYS, 700, cuts(400), 2);
}

static void test_tree_pzcomp_powerloss_sync_none(void)
{
    run_mode("tree-pzcomp-none", KURA_SYNC_NONE, 900, cuts(300), 2);
}

static void test_tree_pzcomp_powerloss_during_recovery(void)
{
    test_powerloss_during_recovery();
}

static void test_tree_pzcomp_eio_on_every_fdatasync(void)
{
    test_eio_on_every_fdatasync();
}

int main(void)
{
    snprintf(base, sizeof(base), "%s/kura-powerloss-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 2;
    }
    kura_test.quiet_stores = true;
    g_seed = env_u64("KURA_POWERLOSS_SEED", (uint64_t)time(NULL) * 2654435761u % 1000000007u);
    printf("# seed %llu (KURA_POWERLOSS_SEED=%llu repeats it)\n", (unsigned long long)g_seed,
           (unsigned long long)g_seed);
    RUN(test_powerloss_sync_always);
    RUN(test_powerloss_sync_none);
    RUN(test_powerloss_sync_interval);
    RUN(test_powerloss_during_recovery);
    RUN(test_powerloss_fsync_lies_is_caught);
    RUN(test_bypassing_the_io_layer_is_caught);
    RUN(test_eio_on_every_fdatasync);
    RUN(test_eio_on_every_fsync);
    RUN(test_enospc_on_every_pwritev);
    RUN(test_enospc_on_every_fallocate);
    RUN(test_short_pwritev);
    RUN(test_grow_powerloss_sync_always);
    RUN(test_grow_powerloss_sync_none);
    RUN(test_grow_powerloss_during_recovery);
    RUN(test_grow_eio_on_every_fdatasync);
    RUN(test_grow_enospc_on_every_fallocate);
    RUN(test_tree_powerloss_sync_always);
    RUN(test_tree_powerloss_sync_none);
    RUN(test_tree_powerloss_sync_interval);
    RUN(test_tree_powerloss_during_recovery);
    RUN(test_tree_powerloss_fsync_lies_is_caught);
    RUN(test_tree_bypassing_the_io_layer_is_caught);
    RUN(test_tree_reuse_before_durable_is_caught);
    RUN(test_tree_eio_on_every_fdatasync);
    RUN(test_tree_eio_on_every_fsync);
    RUN(test_tree_enospc_on_every_pwritev);
    RUN(test_tree_enospc_on_every_fallocate);
    RUN(test_tree_short_pwritev);
    RUN(test_tree_zcomp_powerloss_sync_always);
    RUN(test_tree_zcomp_powerloss_sync_none);
    RUN(test_tree_zcomp_powerloss_during_recovery);
    RUN(test_tree_zcomp_enospc_on_every_pwritev);
    RUN(test_tree_pzcomp_powerloss_sync_always);
    RUN(test_tree_pzcomp_powerloss_sync_none);
    RUN(test_tree_pzcomp_powerloss_during_recovery);
    RUN(test_tree_pzcomp_eio_on_every_fdatasync);
    kio_rmrf(base);
    UNIT_DONE();
}

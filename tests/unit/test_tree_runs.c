/*
 * test_tree_runs.c - the B+ tree's large values written once: the put
 * writes the value into its overflow run and the log's RUN record names
 * the run (src/store/tree/tree_wal.c; docs/formats.md "How a change
 * becomes durable").
 *
 *  - 20 KB sets write about one byte per value byte, counted as the bytes
 *    the I/O layer's pwritev calls saw (the log through pwritev,
 *    mapwrite=0) up to a checkpoint, at 4 and 8 KiB pages; the negative
 *    checks: the value logged as well, as before (kura_test.
 *    tree_log_values), writes more than two; a run's last page's padding
 *    written where the file could be extended instead (kura_test.
 *    tree_run_pad_written) 1.23 at 8 KiB pages; a touch of a 20 KB value
 *    writes its record only (its RUN record names the run it keeps;
 *    negative: the value logged, as before);
 *  - power loss at every recorded operation of a workload of 20 KB sets,
 *    an overwrite, touches, a delete, a checkpoint and sets that reuse
 *    the freed run after it (so every point: after the run's write, after the
 *    record's append, after the tree file's sync, after the log's sync,
 *    across the checkpoint), under -sync always and several seeds of the
 *    unsynced writes kept, dropped or torn: every image opens, passes the
 *    structure check with no page leaked, and holds exactly what was
 *    acknowledged (a key's acknowledged version or one issued after it);
 *  - the negative checks on the same workload: with the log synced before
 *    the tree file (kura_test.tree_run_no_presync) some image loses an
 *    acknowledged value; with a freed run reusable before the checkpoint
 *    that stops needing its record (kura_test.tree_run_reuse_now) some
 *    image replays a record whose run holds another value and loses
 *    acknowledged ones;
 *  - a kill -9 image (the directory copied while open, nothing closed)
 *    replays RUN records (touches' too), and the structure check of a
 *    store whose runs are reachable only through records since the last
 *    checkpoint finds no leak; a run damaged after the log's sync (a flipped byte) is never
 *    served: its record, in the newest segment, reads as one no sync
 *    covered, and the log ends before it (logged), as at a torn record;
 *  - a log an older kurad wrote (version 1 segments) replays, is sealed
 *    at open, and the next value's RUN record goes into a version 2
 *    segment; -recover over a tree with both meta pages damaged reads the
 *    RUN records' runs from tree.damaged.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit.h"
#include "hashdb_testlib.h"
#include "kio_sim.h"
#include "tree_testlib.h"
#include "kura/crc32c.h"
#include "kura/testhooks.h"

#define VLEN 20000

static kura_clock CLK = { .now = 2000000 };

static kura_store *open_io(const char *path, const char *params, int sync, const kura_io *io)
{
    char err[600];
    kura_store *s = NULL;
    kura_store_config c = t_cfg(sync);
    c.log = quiet_log;
    c.io = io;
    if (t_open(path, params, &c, &s, err, sizeof(err)) != KURA_OK) {
        printf("# open %s%s: %s\n", path, params ? params : "", err);
        return NULL;
    }
    return s;
}

/* Version ver of key's value: VLEN bytes that do not compress. */
static void make_value(int key, int ver, unsigned char *out)
{
    uint64_t x = (uint64_t)key * 1000003u + (uint64_t)ver * 7919u + 1;
    for (size_t i = 0; i < VLEN; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (unsigned char)x;
    }
}

static int put_ver(kura_store *s, int key, int ver)
{
    static unsigned char v[VLEN];
    char k[32];
    snprintf(k, sizeof(k), "key-%d", key);
    make_value(key, ver, v);
    kura_item it = { .key = k, .klen = strlen(k), .val = v, .vlen = VLEN };
    return kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK);
}

static int del_key(kura_store *s, int key)
{
    char k[32];
    snprintf(k, sizeof(k), "key-%d", key);
    return kura_store_del(s, k, strlen(k), 0, &CLK);
}

static int touch_fn(void *arg, const kura_item *cur, kura_update *out)
{
    if (!cur)
        return KURA_NOTFOUND;
    out->action = KURA_UPDATE_TOUCH;
    out->exptime = *(const int64_t *)arg;
    return KURA_OK;
}

/* A touch: the key's exptime set, its value (and run) kept. */
static int touch_key(kura_store *s, int key, int64_t exptime)
{
    char k[32];
    snprintf(k, sizeof(k), "key-%d", key);
    return kura_store_update(s, k, strlen(k), &CLK, touch_fn, &exptime);
}

typedef struct got {
    unsigned char buf[VLEN];
    size_t len;
} got;

static int got_cb(void *arg, const kura_item *it)
{
    got *g = arg;
    g->len = it->vlen;
    if (it->vlen <= sizeof(g->buf))
        memcpy(g->buf, it->val, it->vlen);
    return 0;
}

/* The key's version in s: -1 absent, -2 a value no version has, else the
 * version (1..maxver). */
static int get_ver(kura_store *s, int key, int maxver)
{
    static got g;
    static unsigned char want[VLEN];
    char k[32];
    snprintf(k, sizeof(k), "key-%d", key);
    int rc = s->ops->get(s, k, strlen(k), &CLK, got_cb, &g);
    if (rc == KURA_NOTFOUND)
        return -1;
    if (rc != KURA_OK || g.len != VLEN)
        return -2;
    for (int v = 1; v <= maxver; v++) {
        make_value(key, v, want);
        if (memcmp(g.buf, want, VLEN) == 0)
            return v;
    }
    return -2;
}

/* ---- bytes written a value byte ----------------------------------------- */

/* 20 KB sets (n of them) and a checkpoint: bytes the I/O layer wrote per
 * value byte. */
static double bytes_per_value_byte(const char *name, const char *params, int n)
{
    kio_inject *in = kio_inject_new(NULL);
    kura_store *s = open_io(tpath(name), params, KURA_SYNC_NONE, kio_inject_io(in));
    double r = -1;
    if (s) {
        kio_inject_reset(in);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += put_ver(s, i, 1) != KURA_OK;
        bad += btree_debug_checkpoint(s) != KURA_OK;
        CHECK(bad == 0);
        r = (double)kio_inject_bytes_written(in) / ((double)n * VLEN);
        CHECK(t_stat(s, "tree_run_records") == (kura_test.tree_log_values ? 0u : (uint64_t)n));
        s->ops->close(s);
    }
    kio_inject_free(in);
    return r;
}

/* n touches of 20 KB values written before a checkpoint: bytes the I/O
 * layer wrote a touch. */
static double bytes_per_touch(const char *name, int n)
{
    kio_inject *in = kio_inject_new(NULL);
    kura_store *s = open_io(tpath(name), "#mapwrite=0", KURA_SYNC_NONE, kio_inject_io(in));
    double r = -1;
    if (s) {
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += put_ver(s, i, 1) != KURA_OK;
        bad += btree_debug_checkpoint(s) != KURA_OK;
        kio_inject_reset(in);
        for (int i = 0; i < n; i++)
            bad += touch_key(s, i, 3000000) != KURA_OK;
        CHECK(bad == 0);
        r = (double)kio_inject_bytes_written(in) / n;
        s->ops->close(s);
    }
    kio_inject_free(in);
    return r;
}

static void test_touch_logs_no_value(void)
{
    kura_test.bg_hold = true;
    double t = bytes_per_touch("touch", 100);
    kura_test.tree_log_values = true;
    double before = bytes_per_touch("touch2", 100);
    kura_test.tree_log_values = false;
    kura_test.bg_hold = false;
    printf("# bytes written a touch of a 20 KB value: %.0f; the value logged: %.0f\n", t,
           before);
    CHECK(t > 0 && t < 200);            /* the record: head, key, run */
    CHECK(before > VLEN);               /* negative */
}

static void test_set_writes_value_once(void)
{
    kura_test.bg_hold = true;
    /* a 20,000-byte value and the run's 40-byte header: 20,480 bytes up
     * to the file-system block past the value (5 pages of 4 KiB, or 2.5
     * of 8 KiB, whose last half is made by extending the file) */
    double r4 = bytes_per_value_byte("once4", "#mapwrite=0#psiz=4096", 300);
    double r8 = bytes_per_value_byte("once8", "#mapwrite=0", 300);
    kura_test.tree_run_pad_written = true;
    double padded = bytes_per_value_byte("pad8", "#mapwrite=0", 300);
    kura_test.tree_run_pad_written = false;
    kura_test.tree_log_values = true;
    double before = bytes_per_value_byte("twice", "#mapwrite=0#psiz=4096", 300);
    kura_test.tree_log_values = false;
    kura_test.bg_hold = false;
    printf("# bytes written a value byte: %.3f (psiz 4096), %.3f (psiz 8192); the last "
           "page's padding written: %.3f; the value logged too: %.3f\n", r4, r8, padded,
           before);
    CHECK(r4 > 1.0 && r4 < 1.1);
    CHECK(r8 > 1.0 && r8 < 1.1);
    CHECK(padded > 1.2);                /* negative: the padding's 4 KiB */
    CHECK(before > 2.0);                /* negative: the value twice */
}

/* ---- power loss at every operation ---------------------------------------- */

#define NKEY 4
#define MAXOP 16

typedef struct step {
    int key, ver;               /* ver 0: a delete, -1 a touch (the value
                                   kept); key -1: a checkpoint */
    uint64_t issued, acked;     /* the recorder's op counts */
} step;

/* The workload: every put, the overwrite that frees a run, a set that
 * takes another run while the freed one waits (or, with
 * tree_run_reuse_now, takes the freed one), a checkpoint, sets that may
 * now reuse it, a delete. */
static const int PLAN[][2] = {
    { 0, 1 }, { 1, 1 }, { 0, 2 }, { 2, 1 }, { -1, 0 }, { 3, 1 }, { 0, 3 }, { 0, -1 },
    { 2, -1 }, { 1, 0 }, { 2, 2 },
};
#define NPLAN ((int)(sizeof(PLAN) / sizeof(PLAN[0])))

/* Runs the plan on a recorded store: steps get their op counts, *ops
 * the count at the plan's end (the close after it is not cut into). */
static kio_rec *record_plan(const char *root, step *st, uint64_t *ops)
{
    kio_rec *r = kio_rec_new(root, NULL);
    char path[700];
    snprintf(path, sizeof(path), "%s/data.kb", root);
    kura_store *s = open_io(path, "#mapwrite=0#psiz=8192#pccap=1m", KURA_SYNC_ALWAYS,
                            kio_rec_io(r));
    if (!s) {
        kio_rec_free(r);
        return NULL;
    }
    for (int i = 0; i < NPLAN; i++) {
        st[i] = (step){ PLAN[i][0], PLAN[i][1], kio_rec_ops(r), 0 };
        int rc = st[i].key < 0 ? btree_debug_checkpoint(s)
               : st[i].ver < 0 ? touch_key(s, st[i].key, 3000000 + i)
               : st[i].ver ? put_ver(s, st[i].key, st[i].ver) : del_key(s, st[i].key);
        if (rc != KURA_OK)
            printf("# step %d: %s\n", i, kura_strerror(rc));
        st[i].acked = rc == KURA_OK ? kio_rec_ops(r) : UINT64_MAX;
    }
    *ops = kio_rec_ops(r);
    s->ops->close(s);
    return r;
}

/* Whether key's version v (-1 absent) is allowed in an image cut at k. */
static bool allowed(const step *st, int key, int v, uint64_t k)
{
    int acked = -1;             /* the last step of key acknowledged by k */
    for (int i = 0; i < NPLAN; i++)         /* (a touch keeps the version) */
        if (st[i].key == key && st[i].ver >= 0 && st[i].acked <= k)
            acked = i;
    int have = acked < 0 ? -1 : st[acked].ver ? st[acked].ver : -1;
    if (v == have)
        return true;
    for (int i = acked + 1; i < NPLAN; i++)     /* issued after it, before k */
        if (st[i].key == key && st[i].ver >= 0 && st[i].issued < k &&
            (st[i].ver ? st[i].ver : -1) == v)
            return true;
    return false;
}

/* Images at every cut point and seeds: the violations (an image that
 * does not open or fails its check counts as one). */
static int plan_images(const char *tag, int nseeds, int *images)
{
    char root[600], img[600], path[700], err[300];
    snprintf(root, sizeof(root), "%s/%s", t_root, tag);
    snprintf(img, sizeof(img), "%s/%s.img", t_root, tag);
    mkdir(root, 0755);
    step st[MAXOP];
    kura_test.bg_hold = true;
    uint64_t ops = 0;
    kio_rec *r = record_plan(root, st, &ops);
    kura_test.bg_hold = false;
    if (!r)
        return -1;
    bool no_presync = kura_test.tree_run_no_presync, reuse = kura_test.tree_run_reuse_now;
    kura_test.tree_run_no_presync = kura_test.tree_run_reuse_now = false;
    int bad = 0, printed = 0;
    for (uint64_t k = 0; k <= ops; k++) {
        for (int seed = 0; seed < nseeds; seed++) {
            if (kio_rec_image(r, k, (uint64_t)seed * 7717 + k, img, err, sizeof(err)) != 0) {
                printf("# image %llu: %s\n", (unsigned long long)k, err);
                bad++;
                continue;
            }
            (*images)++;
            snprintf(path, sizeof(path), "%s/data.kb", img);
            struct stat sb;
            if (stat(path, &sb) != 0)
                continue;       /* before the database existed */
            n_errors = 0;
            kura_store *s = open_io(path, "#psiz=8192", KURA_SYNC_NONE, NULL);
            int why = 0;
            if (!s) {
                why = 1;
            } else {
                if (check_tree(s) != 0)
                    why = 2;
                for (int key = 0; key < NKEY && !why; key++) {
                    int v = get_ver(s, key, 3);
                    if (!allowed(st, key, v, k)) {
                        why = 3;
                        if (printed < 3)
                            printf("# %s: cut %llu seed %d: key %d holds version %d\n", tag,
                                   (unsigned long long)k, seed, key, v);
                    }
                }
                s->ops->close(s);
            }
            if (why) {
                bad++;
                if (printed++ < 3) {
                    char d[200];
                    kio_rec_describe(r, k ? k - 1 : 0, d, sizeof(d));
                    printf("# %s: cut %llu seed %d fails (%s); op before: %s\n", tag,
                           (unsigned long long)k, seed,
                           why == 1 ? "open" : why == 2 ? "check" : "contents", d);
                }
            }
        }
    }
    kura_test.tree_run_no_presync = no_presync;
    kura_test.tree_run_reuse_now = reuse;
    kio_rec_free(r);
    kio_rmrf(img);
    return bad;
}

static void test_powerloss_at_every_op(void)
{
    int images = 0;
    int bad = plan_images("pl", 4, &images);
    printf("# %d images, %d with violations\n", images, bad);
    CHECK(images > 40);
    CHECK(bad == 0);
}

/* The plan's images with a test switch on: some must show violations. */
static void caught(const char *tag, bool *hook, const char *what)
{
    int images = 0;
    *hook = true;
    int bad = plan_images(tag, 4, &images);
    *hook = false;
    printf("# %s: %d of %d images with violations (expected: some)\n", what, bad, images);
    CHECK(bad > 0);
}

static void test_log_synced_first_is_caught(void)
{
    caught("nopresync", &kura_test.tree_run_no_presync, "log synced before the tree file");
}

static void test_run_reused_early_is_caught(void)
{
    caught("reuse", &kura_test.tree_run_reuse_now, "a run reused before the checkpoint");
}

/* ---- kill -9, the check, damage ----------------------------------------- */

static void test_kill9_replays_runs(void)
{
    const char *p = tpath("k9"), *img = tpath("k9img");
    kura_test.bg_hold = true;
    kura_store *s = open_io(p, "#mapwrite=0", KURA_SYNC_NONE, NULL);
    REQUIRE(s);
    for (int i = 0; i < 20; i++)
        CHECK(put_ver(s, i, 1) == KURA_OK);
    CHECK(btree_debug_checkpoint(s) == KURA_OK);
    for (int i = 0; i < 20; i += 2)     /* after the checkpoint: runs named by the log only */
        CHECK(put_ver(s, i, 2) == KURA_OK);
    CHECK(del_key(s, 1) == KURA_OK);
    CHECK(touch_key(s, 3, 3000000) == KURA_OK);     /* a run from before the checkpoint */
    CHECK(touch_key(s, 4, 3000000) == KURA_OK);     /* a run named since */
    CHECK(check_tree(s) == 0);          /* no leak: pending runs are accounted */
    CHECK(t_copy_dir(p, img) == 0);
    s->ops->close(s);
    kura_test.bg_hold = false;
    s = open_io(img, NULL, KURA_SYNC_NONE, NULL);
    REQUIRE(s);
    CHECK(t_stat(s, "tree_recovered_records") >= 13);
    CHECK(check_tree(s) == 0);
    int bad = 0;
    for (int i = 0; i < 20; i++)
        bad += get_ver(s, i, 2) != (i == 1 ? -1 : i % 2 ? 1 : 2);
    CHECK(bad == 0);
    t_val tv;
    CHECK(t_get(s, "key-3", &CLK, &tv) == KURA_OK && tv.exptime == 3000000);
    CHECK(t_get(s, "key-4", &CLK, &tv) == KURA_OK && tv.exptime == 3000000);
    CHECK(t_get(s, "key-5", &CLK, &tv) == KURA_OK && tv.exptime == 0);
    s->ops->close(s);
}

/* A run whose bytes were flipped after everything was synced: its record
 * is in the newest segment, so it reads as one no sync covered, and the
 * log ends before it (an ERROR line says so): the keys as of the record
 * before, never the damaged bytes. */
static void test_damaged_run_is_not_served(void)
{
    const char *p = tpath("dmg");
    kura_test.bg_hold = true;
    kura_store *s = open_io(p, "#mapwrite=0#psiz=4096", KURA_SYNC_ALWAYS, NULL);
    REQUIRE(s);
    CHECK(put_ver(s, 0, 1) == KURA_OK);
    CHECK(btree_debug_checkpoint(s) == KURA_OK);
    uint64_t pages = t_stat(s, "tree_pages");
    CHECK(put_ver(s, 1, 1) == KURA_OK);     /* its run: at the file's end */
    CHECK(put_ver(s, 0, 2) == KURA_OK);
    char img[600], f[700];
    snprintf(img, sizeof(img), "%s", tpath("dmgimg"));
    CHECK(t_copy_dir(p, img) == 0);
    s->ops->close(s);
    kura_test.bg_hold = false;
    snprintf(f, sizeof(f), "%s/tree", img);
    flip(f, (off_t)(pages * 4096 + 100));   /* key 1's run */
    n_errors = 0;
    s = open_io(img, "#psiz=4096", KURA_SYNC_NONE, NULL);
    REQUIRE(s);
    /* the log ends before key 1's record: key 0 as of the checkpoint */
    CHECK(get_ver(s, 1, 1) == -1);
    CHECK(get_ver(s, 0, 2) == 1);
    CHECK(n_errors > 0);                /* the cut's ERROR line */
    CHECK(check_tree(s) == 0);
    s->ops->close(s);
}

/* ---- versions, -recover ---------------------------------------------------- */

/* The version of a log segment file (its header's bytes 8..11); sets it
 * to `set` (and mends the header's CRC) unless 0. */
static uint32_t seg_version(const char *seg, uint32_t set)
{
    unsigned char h[32];
    int fd = open(seg, O_RDWR);
    uint32_t v = 0;
    if (fd >= 0 && pread(fd, h, 32, 0) == 32) {
        v = (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 | (uint32_t)h[11] << 24;
        if (set) {
            h[8] = (unsigned char)set;
            h[9] = h[10] = h[11] = 0;
            uint32_t c = crc32c_update(0, h, 28);
            for (int i = 0; i < 4; i++)
                h[28 + i] = (unsigned char)(c >> (8 * i));
            if (pwrite(fd, h, 32, 0) != 32)
                v = 0;
        }
    }
    if (fd >= 0)
        close(fd);
    return v;
}

/* A log an older kurad wrote (version 1 segments, values in PUT records)
 * replays; the open seals its segment, and the next large value goes into
 * a version 2 segment as a RUN record. */
static void test_version1_log_opens(void)
{
    const char *p = tpath("v1"), *img = tpath("v1img");
    char seg[700];
    kura_test.bg_hold = true;
    kura_test.tree_log_values = true;   /* as an older kurad logs them */
    kura_store *s = open_io(p, "#mapwrite=0", KURA_SYNC_NONE, NULL);
    REQUIRE(s);
    for (int i = 0; i < 5; i++)
        CHECK(put_ver(s, i, 1) == KURA_OK);
    CHECK(t_copy_dir(p, img) == 0);
    s->ops->close(s);
    kura_test.tree_log_values = false;
    REQUIRE(t_last_segment(img, seg, sizeof(seg)) == 0);
    CHECK(seg_version(seg, 0) == 3);    /* a new log is version 3 (long keys) */
    CHECK(seg_version(seg, 1) == 3);
    CHECK(seg_version(seg, 0) == 1);
    s = open_io(img, NULL, KURA_SYNC_NONE, NULL);
    REQUIRE(s);
    int bad = 0;
    for (int i = 0; i < 5; i++)
        bad += get_ver(s, i, 1) != 1;
    CHECK(bad == 0);
    CHECK(put_ver(s, 9, 1) == KURA_OK);
    CHECK(t_stat(s, "tree_run_records") == 1);
    CHECK(t_last_segment(img, seg, sizeof(seg)) == 0 && seg_version(seg, 0) == 3);
    CHECK(check_tree(s) == 0);
    s->ops->close(s);
    kura_test.bg_hold = false;
}

/* -recover with both meta pages damaged: the log's RUN records name runs
 * of the damaged file; their values go into the fresh tree. */
static void test_recover_reads_runs(void)
{
    const char *p = tpath("rec");
    char f[700];
    kura_test.bg_hold = true;
    kura_store *s = open_io(p, "#mapwrite=0#psiz=4096", KURA_SYNC_NONE, NULL);
    REQUIRE(s);
    for (int i = 0; i < 10; i++)
        CHECK(put_ver(s, i, 1) == KURA_OK);
    CHECK(btree_debug_checkpoint(s) == KURA_OK);
    for (int i = 0; i < 10; i += 2)
        CHECK(put_ver(s, i, 2) == KURA_OK);
    CHECK(t_stat(s, "tree_run_records") == 15);
    CHECK(s->ops->sync(s) == KURA_OK);
    /* what a kill -9 leaves: the store is only dropped below */
    const char *img = tpath("recimg");
    CHECK(t_copy_dir(p, img) == 0);
    s->ops->close(s);
    kura_test.bg_hold = false;
    snprintf(f, sizeof(f), "%s/tree", img);
    flip(f, 100);
    flip(f, 4096 + 100);
    CHECK(open_io(img, NULL, KURA_SYNC_NONE, NULL) == NULL);
    char err[600];
    kura_store_config c = t_cfg(KURA_SYNC_NONE);
    c.log = quiet_log;
    c.recover = true;
    s = NULL;
    REQUIRE(t_open(img, NULL, &c, &s, err, sizeof(err)) == KURA_OK);
    int bad = 0;
    for (int i = 0; i < 10; i++)
        bad += get_ver(s, i, 2) != (i % 2 ? 1 : 2);
    CHECK(bad == 0);
    CHECK(check_tree(s) == 0);
    s->ops->close(s);
}

int main(void)
{
    t_setup();
    kura_test.quiet_stores = true;
    RUN(test_set_writes_value_once);
    RUN(test_touch_logs_no_value);
    RUN(test_powerloss_at_every_op);
    RUN(test_log_synced_first_is_caught);
    RUN(test_run_reused_early_is_caught);
    RUN(test_kill9_replays_runs);
    RUN(test_damaged_run_is_not_served);
    RUN(test_version1_log_opens);
    RUN(test_recover_reads_runs);
    t_teardown();
    UNIT_DONE();
}

/*
 * test_tree_zcomp.c - the B+ tree's compressed leaf and branch pages
 * (#zcomp at psiz of at least two file-system blocks; src/store/tree/
 * tree_pzcomp.c, docs/formats.md "Compression"): every codec in turn on
 * the same file over splits and merges at every level, with restarts and
 * zcomp changed between opens (lzo, zlib, bz2, none), the structure check
 * after each phase; a kill -9 (no close) replayed over compressed pages;
 * a flipped bit in a compressed page reported and never served, and stale
 * bytes after a page's stored ones ignored; -recover over compressed
 * pages; the file's allocated blocks (st_blocks) fewer with zcomp than
 * without where the file system punches holes (SKIPPED where it does not),
 * and not fewer for data that does not compress (the negative check);
 * punch failures (EIO: counted, EOPNOTSUPP: asked once) costing nothing
 * but space; the meta page's format version (2 until a page is
 * compressed, then 3).  The power-loss images with compressed pages are
 * in test_powerloss.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"
#include "hashdb_testlib.h"
#include "kio_sim.h"
#include "tree_testlib.h"
#include "kura/crc32c.h"
#include "kura/testhooks.h"

static kura_clock CLK = { .now = 2000000 };

static kura_store *open_cfg(const char *path, const char *params, bool recover,
                            const kura_io *io)
{
    char err[600];
    kura_store *s = NULL;
    kura_store_config c = t_cfg(KURA_SYNC_NONE);
    c.log = quiet_log;
    c.recover = recover;
    c.io = io;
    if (t_open(path, params, &c, &s, err, sizeof(err)) != KURA_OK) {
        printf("# open %s%s: %s\n", path, params ? params : "", err);
        return NULL;
    }
    return s;
}

static kura_store *open_tree(const char *path, const char *params)
{
    return open_cfg(path, params, false, NULL);
}

typedef struct got {
    unsigned char buf[512];
    size_t len;
} got;

static int got_cb(void *arg, const kura_item *it)
{
    got *g = arg;
    g->len = it->vlen < sizeof(g->buf) ? it->vlen : sizeof(g->buf);
    memcpy(g->buf, it->val, g->len);
    g->len = it->vlen;
    return 0;
}

/* Small text-like records, as a user table holds: "user:%08d" and about
 * 100 bytes of words that name the key (so a value from elsewhere shows),
 * or, random, bytes that do not compress. */
static size_t key_of(int i, char *k)
{
    return (size_t)sprintf(k, "user:%08d", i);
}

static size_t val_of(int i, int gen, bool random, unsigned char *v)
{
    static const char *words[] = { "alpha", "bravo", "charlie", "delta", "echo", "foxtrot",
                                   "golf", "hotel", "india", "juliet" };
    size_t n = (size_t)sprintf((char *)v, "id=%d gen=%d name=", i, gen);
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ULL + (uint64_t)gen;
    while (n < 100) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        if (random) {
            v[n++] = (unsigned char)(x >> 56);
            continue;
        }
        const char *w = words[(x >> 60) % 10];
        n += (size_t)sprintf((char *)v + n, "%s ", w);
    }
    return n;
}

static int put(kura_store *s, int i, int gen, bool random)
{
    char k[32];
    unsigned char v[160];
    size_t kl = key_of(i, k), vl = val_of(i, gen, random, v);
    kura_item it = { .key = k, .klen = kl, .val = v, .vlen = vl, .cas = (uint64_t)gen + 1 };
    return kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK);
}

/* 0 if key i holds generation gen (gen < 0: absent); else why */
static int check_one(kura_store *s, int i, int gen, bool random)
{
    char k[32];
    unsigned char v[160];
    got g = { .len = 0 };
    size_t kl = key_of(i, k);
    int rc = s->ops->get(s, k, kl, &CLK, got_cb, &g);
    if (gen < 0)
        return rc == KURA_NOTFOUND ? 0 : rc == KURA_OK ? 1 : rc;
    if (rc != KURA_OK)
        return rc;
    size_t vl = val_of(i, gen, random, v);
    return g.len == vl && memcmp(g.buf, v, vl) == 0 ? 0 : 1;
}

static uint64_t file_blocks(const char *db)
{
    char f[600];
    struct stat st;
    snprintf(f, sizeof(f), "%s/tree", db);
    return stat(f, &st) == 0 ? (uint64_t)st.st_blocks : 0;
}

/* The meta page's format version: the valid slot with the larger txn. */
static unsigned meta_version(const char *db)
{
    char f[600];
    unsigned char m[2][64];
    snprintf(f, sizeof(f), "%s/tree", db);
    int fd = open(f, O_RDONLY);
    if (fd < 0 || pread(fd, m[0], 64, 0) != 64 || pread(fd, m[1], 64, 4096) != 64) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    close(fd);
    uint64_t t0, t1;
    memcpy(&t0, m[0] + 24, 8);
    memcpy(&t1, m[1] + 24, 8);
    const unsigned char *b = m[1][4] == 1 && t1 > t0 ? m[1] : m[0];
    return (unsigned)(b[16] | b[17] << 8);
}

/* ---- every codec, every level, zcomp changed between opens --------------- */

enum { N = 30000 };
static int gen_of[N];           /* the generation each key holds, -1 absent */

static int check_all(kura_store *s, int *bad)
{
    *bad = 0;
    for (int i = 0; i < N; i++)
        if (check_one(s, i, gen_of[i], false) != 0)
            (*bad)++;
    return *bad;
}

static void test_pz_every_codec_every_level(void)
{
    const char *p = tpath("levels");
    const char *phases[] = { "#psiz=8192#pccap=1m#zcomp=lzo", "#pccap=1m#zcomp=zlib",
                             "#pccap=1m#zcomp=bz2", "#pccap=1m" };
    uint64_t r = 99;
    for (int i = 0; i < N; i++)
        gen_of[i] = -1;
    for (int ph = 0; ph < 4; ph++) {
        kura_store *s = open_tree(p, phases[ph]);
        REQUIRE(s);
        int bad;
        check_all(s, &bad);
        CHECK_EQ_INT(bad, 0);          /* what the last phase left, read through */
        /* fill to the full set in random order (splits up to the root),
         * then delete most of it (merges back down), then overwrite */
        for (int n = 0; n < N; n++) {
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            int i = (int)(r % N);
            REQUIRE(put(s, i, ph, false) == KURA_OK);
            gen_of[i] = ph;
            if (n == N / 2)
                CHECK_EQ_INT(btree_debug_checkpoint(s), KURA_OK);
        }
        for (int i = 0; i < N; i++)
            if (gen_of[i] < 0) {
                REQUIRE(put(s, i, ph, false) == KURA_OK);
                gen_of[i] = ph;
            }
        uint64_t h = t_stat(s, "tree_height");
        CHECK(h >= 3);
        CHECK_EQ_INT(btree_debug_checkpoint(s), KURA_OK);
        CHECK_EQ_INT(check_tree(s), 0);
        check_all(s, &bad);
        CHECK_EQ_INT(bad, 0);
        uint64_t pages = t_stat(s, "tree_zcomp_pages");
        printf("# %s: height %llu, %llu pages written compressed, %llu bytes punched out, "
               "%llu blocks\n", phases[ph], (unsigned long long)h, (unsigned long long)pages,
               (unsigned long long)t_stat(s, "tree_zcomp_page_saved_bytes"),
               (unsigned long long)file_blocks(p));
        if (ph < 3)
            CHECK(pages > 100);
        else
            CHECK_EQ_INT(pages, 0);
        uint64_t merges = t_stat(s, "tree_merges");
        for (int i = 0; i < N; i++)
            if (i % 50 != 7) {
                char k[32];
                size_t kl = key_of(i, k);
                REQUIRE(kura_store_del(s, k, kl, 0, &CLK) == KURA_OK);
                gen_of[i] = -1;
            }
        CHECK(t_stat(s, "tree_merges") > merges + 50);
        CHECK(t_stat(s, "tree_height") < h);
        CHECK_EQ_INT(check_tree(s), 0);
        kura_store_close(s);
        /* reopened as it is: the log replayed over the pages */
        s = open_tree(p, phases[ph]);
        REQUIRE(s);
        check_all(s, &bad);
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(check_tree(s), 0);
        kura_store_close(s);
        CHECK_EQ_INT(meta_version(p), 3);   /* compressed pages may remain */
    }
}

/* ---- kill -9: the log replayed over compressed pages ---------------------- */

static void test_pz_kill9_replay(void)
{
    const char *p = tpath("kill9");
    enum { K = 20000 };
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        /* no background checkpoint: the changes after the test's own are
         * only in the log, however slowly this runs (a sanitizer build) */
        kura_test.bg_hold = true;
        kura_store *s = open_tree(p, "#pccap=1m#ckpt=256k#zcomp=lzo");
        if (!s)
            _exit(3);
        for (int i = 0; i < K; i++)
            if (put(s, i, 1, false) != KURA_OK)
                _exit(4);
        if (btree_debug_checkpoint(s) != KURA_OK || t_stat(s, "tree_zcomp_pages") == 0)
            _exit(5);
        for (int i = 0; i < K; i += 3)         /* after it: only in the log */
            if (put(s, i, 2, false) != KURA_OK)
                _exit(6);
        if (s->ops->sync(s) != KURA_OK)
            _exit(7);
        _exit(0);                               /* no close */
    }
    int status;
    waitpid(pid, &status, 0);
    REQUIRE(WIFEXITED(status));
    CHECK_EQ_INT(WEXITSTATUS(status), 0);
    kura_store *s = open_tree(p, "#zcomp=zlib");
    REQUIRE(s);
    int bad = 0;
    for (int i = 0; i < K; i++)
        bad += check_one(s, i, i % 3 == 0 ? 2 : 1, false) != 0;
    printf("# kill -9 with compressed pages: %llu records replayed, %d keys wrong\n",
           (unsigned long long)t_stat(s, "tree_recovered_records"), bad);
    CHECK_EQ_INT(bad, 0);
    CHECK(t_stat(s, "tree_recovered_records") > 0);
    CHECK_EQ_INT(check_tree(s), 0);
    kura_store_close(s);
}

/* ---- damage ------------------------------------------------------------- */

/* The slot of the n-th compressed leaf page past the file's middle, or -1;
 * *stored its stored bytes. */
static off_t find_compressed(const char *file, size_t psiz, int nth, size_t *stored)
{
    int fd = open(file, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return -1;
    unsigned char h[40];
    off_t pages = (st.st_size + (off_t)psiz - 1) / (off_t)psiz;
    for (off_t pg = pages / 2; pg < pages; pg++) {
        if (pread(fd, h, 40, pg * (off_t)psiz) != 40 || h[4] != 3 || h[5] == 0)
            continue;
        if (nth-- > 0)
            continue;
        close(fd);
        *stored = (size_t)(h[24] | h[25] << 8 | h[26] << 16 | (uint32_t)h[27] << 24);
        return pg * (off_t)psiz;
    }
    close(fd);
    return -1;
}

static void test_pz_bitflip_detected(void)
{
    const char *codecs[] = { "lzo", "zlib" };   /* lzo: no checksum of its own */
    for (int ci = 0; ci < 2; ci++) {
        char name[32], params[64], file[600];
        snprintf(name, sizeof(name), "flip%d", ci);
        snprintf(params, sizeof(params), "#psiz=8192#zcomp=%s", codecs[ci]);
        const char *p = tpath(name);
        snprintf(file, sizeof(file), "%s/tree", p);
        enum { F = 5000 };
        kura_store *s = open_tree(p, params);
        REQUIRE(s);
        for (int i = 0; i < F; i++)
            REQUIRE(put(s, i, 1, false) == KURA_OK);
        kura_store_close(s);
        size_t z = 0, z2 = 0;
        off_t at = find_compressed(file, 8192, 0, &z);
        off_t at2 = find_compressed(file, 8192, 1, &z2);
        REQUIRE(at > 0 && at2 > 0 && z > 0 && 40 + z + 100 < 8192);
        /* stale bytes after a page's stored ones never matter */
        flip(file, at2 + 40 + (off_t)z2 + 50);
        flip(file, at + 40 + (off_t)(z / 2));      /* a bit inside the stored bytes */
        int e0 = n_errors;
        s = open_tree(p, NULL);
        REQUIRE(s);
        int corrupt = 0, ok = 0, wrong = 0;
        for (int i = 0; i < F; i++) {
            int rc = check_one(s, i, 1, false);
            if (rc == KURA_ECORRUPT)
                corrupt++;
            else if (rc == 0)
                ok++;
            else
                wrong++;
        }
        printf("# %s: a bit flipped in a compressed page: %d keys report damage, %d read, "
               "%d wrong\n", codecs[ci], corrupt, ok, wrong);
        CHECK(corrupt > 0);
        CHECK_EQ_INT(wrong, 0);
        CHECK_EQ_INT(corrupt + ok, F);
        CHECK(t_stat(s, "tree_corrupt_reads") > 0);
        CHECK(n_errors > e0);
        char err[300];
        CHECK(btree_debug_check(s, NULL, err, sizeof(err)) == KURA_ECORRUPT);
        kura_store_close(s);
        if (ci == 0) {
            /* -recover: every other leaf's items come back, none wrong */
            s = open_cfg(p, NULL, true, NULL);
            REQUIRE(s);
            int back = 0;
            wrong = 0;
            for (int i = 0; i < F; i++) {
                int rc = check_one(s, i, 1, false);
                back += rc == 0;
                wrong += rc != 0 && rc != KURA_NOTFOUND;
            }
            printf("# salvaged: %d of %d keys back, %d wrong\n", back, F, wrong);
            CHECK_EQ_INT(wrong, 0);
            CHECK(back >= ok);
            CHECK_EQ_INT(check_tree(s), 0);
            kura_store_close(s);
        }
    }
}

/* ---- space: blocks on disk ----------------------------------------------- */

/* Whether the file system under dir releases a punched range's blocks. */
static bool fs_punches(const char *dir)
{
    char f[600];
    snprintf(f, sizeof(f), "%s/punch-probe", dir);
    int fd = open(f, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return false;
    static unsigned char b[65536];
    memset(b, 'x', sizeof(b));
    struct stat a, c;
    bool ok = pwrite(fd, b, sizeof(b), 0) == (ssize_t)sizeof(b) && fsync(fd) == 0 &&
              fstat(fd, &a) == 0 &&
              kio_default()->punch(kio_default(), fd, 8192, 32768) == 0 &&
              fstat(fd, &c) == 0 && c.st_blocks < a.st_blocks && c.st_size == a.st_size;
    close(fd);
    unlink(f);
    return ok;
}

static uint64_t fill_blocks(const char *name, const char *params, bool random, uint64_t *zp)
{
    const char *p = tpath(name);
    kura_store *s = open_tree(p, params);
    if (!s)
        return 0;
    for (int i = 0; i < 20000; i++)
        if (put(s, i, 1, random) != KURA_OK)
            return 0;
    if (btree_debug_checkpoint(s) != KURA_OK)
        return 0;
    *zp = t_stat(s, "tree_zcomp_pages");
    kura_store_close(s);
    return file_blocks(p);
}

static void test_pz_fewer_blocks(void)
{
    if (!fs_punches(t_root))
        SKIP_NA("the file system under the test directory does not punch holes "
                "(fallocate PUNCH_HOLE)");
    uint64_t zn, zl, zz, zr0, zr1, z4;
    uint64_t none = fill_blocks("sp-none", "#psiz=8192", false, &zn);
    uint64_t lzo = fill_blocks("sp-lzo", "#psiz=8192#zcomp=lzo", false, &zl);
    uint64_t zlib = fill_blocks("sp-zlib", "#psiz=8192#zcomp=zlib", false, &zz);
    /* the negative checks: data that does not compress, and pages too
     * small to free a block, take as many blocks as without zcomp */
    uint64_t rnone = fill_blocks("sp-rnone", "#psiz=8192", true, &zr0);
    uint64_t rlzo = fill_blocks("sp-rlzo", "#psiz=8192#zcomp=lzo", true, &zr1);
    uint64_t small = fill_blocks("sp-4k", "#psiz=4096#zcomp=lzo", false, &z4);
    uint64_t small0 = fill_blocks("sp-4k0", "#psiz=4096", false, &z4);
    printf("# 20000 records, 512-byte blocks: none %llu, lzo %llu, zlib %llu; random values: "
           "none %llu, lzo %llu; 4 KiB pages: lzo %llu, none %llu\n",
           (unsigned long long)none, (unsigned long long)lzo, (unsigned long long)zlib,
           (unsigned long long)rnone, (unsigned long long)rlzo, (unsigned long long)small,
           (unsigned long long)small0);
    REQUIRE(none > 0 && lzo > 0 && zlib > 0 && rnone > 0 && rlzo > 0);
    CHECK_EQ_INT(zn, 0);
    CHECK(zl > 0 && zz > 0);
    CHECK(lzo < none * 3 / 4);
    CHECK(zlib < none * 3 / 4);
    CHECK(zr1 * 20 < zl);              /* the leaves stay plain: branches may not */
    CHECK(rlzo >= rnone * 9 / 10);
    CHECK_EQ_INT(z4, 0);
    CHECK(small >= small0 * 9 / 10);
}

/* ---- punch failures -------------------------------------------------------- */

static void test_pz_punch_failures_cost_only_space(void)
{
    int errs[2] = { EIO, EOPNOTSUPP };
    for (int e = 0; e < 2; e++) {
        char name[32];
        snprintf(name, sizeof(name), "punchfail%d", e);
        const char *p = tpath(name);
        kio_inject *in = kio_inject_new(NULL);
        REQUIRE(in);
        kio_inject_fail(in, KIO_PUNCH, 1, 0, errs[e]);
        kura_store *s = open_cfg(p, "#psiz=8192#pccap=1m#zcomp=lzo", false,
                                 kio_inject_io(in));
        REQUIRE(s);
        /* the first round fills slots past the file's end, which need no
         * punch; the rounds after it reuse freed slots, which do */
        uint64_t fresh_saved = 0;
        for (int round = 0; round < 4; round++) {
            for (int i = 0; i < 10000; i++)
                REQUIRE(put(s, i, 1, false) == KURA_OK);
            CHECK_EQ_INT(btree_debug_checkpoint(s), KURA_OK);
            if (round == 0)
                fresh_saved = t_stat(s, "tree_zcomp_page_saved_bytes");
        }
        CHECK(t_stat(s, "tree_zcomp_pages") > 0);
        /* slots past the file's end count as saved (never allocated) */
        CHECK(fresh_saved > 0);
        CHECK(t_stat(s, "tree_zcomp_page_saved_bytes") >= fresh_saved);
        CHECK_EQ_INT(t_stat(s, "tree_sync_errors"), 0);
        CHECK_EQ_INT(t_stat(s, "tree_writes_stopped"), 0);
        uint64_t calls = kio_inject_calls(in, KIO_PUNCH);
        printf("# punch failing with %s: %llu calls, %llu errors counted\n", strerror(errs[e]),
               (unsigned long long)calls,
               (unsigned long long)t_stat(s, "tree_zcomp_punch_errors"));
        if (errs[e] == EOPNOTSUPP) {
            CHECK_EQ_INT(calls, 1);        /* remembered: not asked again */
        } else {
            CHECK(calls > 1);
            CHECK_EQ_INT(t_stat(s, "tree_zcomp_punch_errors"), calls);
        }
        REQUIRE(put(s, 5, 2, false) == KURA_OK);
        kura_store_close(s);
        kio_inject_free(in);
        s = open_tree(p, NULL);
        REQUIRE(s);
        int bad = 0;
        for (int i = 0; i < 10000; i++)
            bad += check_one(s, i, i == 5 ? 2 : 1, false) != 0;
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(check_tree(s), 0);
        kura_store_close(s);
    }
}

/* ---- the format version --------------------------------------------------- */

static void test_pz_format_version(void)
{
    const char *p = tpath("version");
    kura_store *s = open_tree(p, "#psiz=8192#zcomp=lzo");
    REQUIRE(s);
    REQUIRE(put(s, 1, 1, false) == KURA_OK);
    CHECK_EQ_INT(btree_debug_checkpoint(s), KURA_OK);
    /* one small leaf: it compresses to one block of two */
    CHECK_EQ_INT(t_stat(s, "tree_zcomp_pages"), 1);
    kura_store_close(s);
    CHECK_EQ_INT(meta_version(p), 3);
    /* without zcomp, never compressed: version 2, readable by the kurad
     * before compressed pages */
    const char *q = tpath("version2");
    s = open_tree(q, "#psiz=8192");
    REQUIRE(s);
    REQUIRE(put(s, 1, 1, false) == KURA_OK);
    CHECK_EQ_INT(btree_debug_checkpoint(s), KURA_OK);
    kura_store_close(s);
    CHECK_EQ_INT(meta_version(q), 2);
    /* a version after the newest: refused, saying why */
    char f[600], err[600];
    snprintf(f, sizeof(f), "%s/tree", p);
    int fd = open(f, O_RDWR);
    REQUIRE(fd >= 0);
    for (int slot = 0; slot < 2; slot++) {
        unsigned char m[512];
        REQUIRE(pread(fd, m, 512, slot * 4096) == 512);
        if (m[4] != 1)
            continue;
        m[16] = 5;                      /* BT_VERSION is 4 */
        uint32_t crc = crc32c_update(0, m + 4, 508);
        memcpy(m, &crc, 4);
        REQUIRE(pwrite(fd, m, 512, slot * 4096) == 512);
    }
    close(fd);
    kura_store_config c = t_cfg(KURA_SYNC_NONE);
    c.log = quiet_log;
    CHECK(t_open(p, NULL, &c, &s, err, sizeof(err)) == KURA_ECORRUPT);
    printf("# version 5: %s\n", err);
    CHECK(strstr(err, "unknown format version") != NULL);
}

int main(void)
{
    t_setup();
    RUN(test_pz_every_codec_every_level);
    RUN(test_pz_kill9_replay);
    RUN(test_pz_bitflip_detected);
    RUN(test_pz_fewer_blocks);
    RUN(test_pz_punch_failures_cost_only_space);
    RUN(test_pz_format_version);
    t_teardown();
    UNIT_DONE();
}

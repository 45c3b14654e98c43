/*
 * test_hashdb_zcomp.c - the hash file's compressed records (#zcomp, #zmin;
 * src/store/hash/hashdb_zcomp.c): round trips of every size class under
 * every codec, values that do not compress or are under zmin stored as
 * they are, sizes as clients know them (the raw length: "bytes", listings),
 * restarts from a checkpoint and by replay, compaction keeping records
 * compressed, codecs mixed across opens, the update paths (touch keeps a
 * record as stored, append compresses the whole), damage (a flipped byte
 * under the CRC, and a record whose CRC holds but whose value does not
 * decompress) reported and never served, the segment files' size, and
 * threads overwriting keys between compressed and plain values while
 * others read them (each read whole and as written).
 */
#include <pthread.h>

#include "unit.h"
#include "hashdb_testlib.h"
#include "kura/testhooks.h"
#include "kura/storecheck.h"

uint32_t crc32c_update(uint32_t crc, const void *buf, size_t len);

static const kura_clock CLK = { .now = 1000000, .oldest_cas = 0 };

#define ZN 120

/* Sizes across the classes: empty, tiny, around zmin (1 KiB), pages,
 * large (a copy with readers let in), 1 MiB. */
static size_t zlen(int i)
{
    static const size_t sizes[] = { 0, 1, 100, 1023, 1024, 1500, 4096, 9000, 40000, 70000,
                                    200000, (1 << 20) - 1000 };
    return sizes[i % 12] + (i % 12 > 4 ? (size_t)i : 0);
}

/* Text that compresses (with its key and size in it, so a value read from
 * elsewhere is caught), or bytes that do not (every fifth key: a fifth of
 * each size class). */
static void zval(unsigned char *p, size_t n, int i, int round)
{
    if (i % 5 == 0) {
        uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)round + 1;
        for (size_t j = 0; j < n; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            p[j] = (unsigned char)x;
        }
        return;
    }
    char h[64];
    int hl = snprintf(h, sizeof(h), "value %d.%d of %zu bytes; ", i, round, n);
    for (size_t j = 0; j < n; j++)
        p[j] = (unsigned char)h[j % (size_t)hl];
}

typedef struct got {
    unsigned char *buf;
    size_t len;
    uint32_t flags;
} got;

static int got_cb(void *arg, const kura_item *it)
{
    got *g = arg;
    g->len = it->vlen;
    g->flags = it->flags;
    g->buf = malloc(it->vlen ? it->vlen : 1);
    if (g->buf)
        memcpy(g->buf, it->val, it->vlen);
    return 0;
}

static int put_kv(kura_store *s, const char *k, const void *v, size_t n, uint32_t flags)
{
    kura_item it = { .key = k, .klen = strlen(k), .val = v, .vlen = n, .flags = flags };
    return kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK);
}

static kura_store *zopen(const char *p, const char *params)
{
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    char err[512];
    if (t_open(p, params, &cfg, &s, err, sizeof(err)) != KURA_OK)
        printf("# open %s%s: %s\n", p, params ? params : "", err);
    return s;
}

static void put_all(kura_store *s, int n, int round, int *fails)
{
    static unsigned char v[1 << 20 | 4096];
    for (int i = 0; i < n; i++) {
        char k[32];
        snprintf(k, sizeof(k), "z%04d", i);
        zval(v, zlen(i), i, round);
        *fails += put_kv(s, k, v, zlen(i), (uint32_t)i) != KURA_OK;
    }
}

/* Keys that do not read back byte for byte (round: which values). */
static int check_all(kura_store *s, int n, int round)
{
    static unsigned char want[1 << 20 | 4096];
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char k[32];
        got g = { 0 };
        snprintf(k, sizeof(k), "z%04d", i);
        size_t len = zlen(i);
        zval(want, len, i, round);
        int rc = s->ops->get(s, k, strlen(k), &CLK, got_cb, &g);
        if (rc != KURA_OK || g.len != len || memcmp(g.buf, want, len) != 0 ||
            g.flags != (uint32_t)i)
            bad++;
        free(g.buf);
    }
    return bad;
}

/* The bytes of every segment file of a database. */
static uint64_t seg_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    uint64_t sum = 0;
    if (!d)
        return 0;
    while ((de = readdir(d))) {
        char f[1024];
        struct stat st;
        snprintf(f, sizeof(f), "%s/%s", dir, de->d_name);
        if (strstr(de->d_name, ".seg") && stat(f, &st) == 0)
            sum += (uint64_t)st.st_size;
    }
    closedir(d);
    return sum;
}

static int check_db(kura_store *s, kura_check_report *rep)
{
    memset(rep, 0, sizeof(*rep));
    int rc = hashdb_check(s, rep, NULL);
    return rc ? rc : (int)(rep->damaged + rep->index_bad);
}

/* Sizes as memcached counts them: "bytes" and the listing's value lengths
 * are the raw lengths whatever the codec. */
typedef struct sizes {
    uint64_t listed;
} sizes;

static int list_cb(void *arg, const kura_item *it)
{
    ((sizes *)arg)->listed += it->vlen;
    return 0;
}

static uint64_t listed_bytes(kura_store *s)
{
    sizes z = { 0 };
    for (unsigned p = 0; p < s->ops->parts; p++)
        s->ops->iterate(s, &(kura_iter_spec){ .scope = KURA_ITER_PART, .part = p, .keys_only = true },
                        &CLK, list_cb, &z);
    return z.listed;
}

static void test_round_trip_every_codec(void)
{
    const char *codecs[] = { "", "#zcomp=lzo", "#zcomp=zlib", "#zcomp=bz2", "#zcomp=none" };
    uint64_t size[5], bytes[5], raw = 0;
    for (int i = 0; i < ZN; i++)
        raw += zlen(i);
    for (int ci = 0; ci < 5; ci++) {
        char name[32];
        snprintf(name, sizeof(name), "rt%d", ci);
        const char *p = t_path(name);
        kura_store *s = zopen(p, codecs[ci]);
        REQUIRE(s);
        int fails = 0;
        put_all(s, ZN, 0, &fails);
        CHECK_EQ_INT(fails, 0);
        CHECK_EQ_INT(check_all(s, ZN, 0), 0);
        uint64_t recs = t_stat(s, "hash_zcomp_records");
        uint64_t saved = t_stat(s, "hash_zcomp_saved_bytes");
        printf("# %s: %llu compressed records, %llu bytes saved\n",
               ci ? codecs[ci] + 1 : "no zcomp", (unsigned long long)recs,
               (unsigned long long)saved);
        /* compressible values of at least zmin: 4/5 of the 8 classes from
         * 1024 up (64 keys); the rest are stored as they are */
        if (ci >= 1 && ci <= 3)
            CHECK(recs >= 60 && recs <= 70 && saved > raw / 2);
        else
            CHECK(recs == 0 && saved == 0);
        kura_store_usage u;
        s->ops->usage(s, &u);
        bytes[ci] = u.bytes;
        CHECK_EQ_INT(listed_bytes(s), raw);
        kura_check_report rep;
        CHECK_EQ_INT(check_db(s, &rep), 0);
        kura_store_close(s);
        size[ci] = seg_bytes(p);
        /* reopened from the checkpoint close wrote, with no parameter */
        s = zopen(p, NULL);
        REQUIRE(s);
        CHECK_EQ_INT(t_stat(s, "hash_recovered_records"), 0);
        CHECK_EQ_INT(check_all(s, ZN, 0), 0);
        s->ops->usage(s, &u);
        CHECK_EQ_INT(u.bytes, bytes[ci]);
        CHECK_EQ_INT(listed_bytes(s), raw);
        CHECK_EQ_INT(check_db(s, &rep), 0);
        kura_store_close(s);
        printf("# %s: segments %llu bytes\n", ci ? codecs[ci] + 1 : "no zcomp",
               (unsigned long long)size[ci]);
    }
    for (int ci = 1; ci < 5; ci++)
        CHECK_EQ_INT(bytes[ci], bytes[0]);      /* "bytes" is the raw values' */
    for (int ci = 1; ci <= 3; ci++)
        CHECK(size[ci] < size[0] / 2);
    CHECK(size[4] == size[0]);
}

/* Values under zmin, or that do not save 1/8, are stored as they are. */
static void test_plain_when_not_worth_it(void)
{
    const char *p = t_path("plain");
    kura_store *s = zopen(p, "#zcomp=zlib#zmin=64k");
    REQUIRE(s);
    static unsigned char v[200000];
    zval(v, 60000, 1, 0);
    CHECK(put_kv(s, "under", v, 60000, 0) == KURA_OK);          /* < zmin */
    zval(v, 100000, 5, 0);
    CHECK(put_kv(s, "random", v, 100000, 0) == KURA_OK);        /* does not compress */
    CHECK_EQ_INT(t_stat(s, "hash_zcomp_records"), 0);
    zval(v, 100000, 2, 0);
    CHECK(put_kv(s, "over", v, 100000, 0) == KURA_OK);
    CHECK_EQ_INT(t_stat(s, "hash_zcomp_records"), 1);
    /* the live bytes are the records as stored */
    CHECK(t_stat(s, "hash_live_bytes") < 60000 + 100000 + 50000);
    kura_store_close(s);
}

/* A crash image (no clean close) replays compressed records, from the
 * start and after a checkpoint. */
static void test_replay_and_checkpoint(void)
{
    const char *p = t_path("replay");
    /* no background checkpoint: the images hold only the test's own,
     * however slowly this runs (a sanitizer build) */
    kura_test.bg_hold = true;
    kura_store *s = zopen(p, "#zcomp=lzo#segsiz=1m");
    REQUIRE(s);
    int fails = 0;
    put_all(s, ZN / 2, 0, &fails);
    REQUIRE(t_copy_dir(p, t_path("replay-img1")) == 0);       /* never checkpointed */
    CHECK(hashdb_debug_maintain(s, true, false) == KURA_OK);
    put_all(s, ZN, 1, &fails);          /* overwrites: compressed over plain and back */
    REQUIRE(t_copy_dir(p, t_path("replay-img2")) == 0);       /* checkpoint + tail */
    CHECK_EQ_INT(fails, 0);
    kura_store_usage want;
    s->ops->usage(s, &want);
    kura_store_close(s);

    s = zopen(t_path("replay-img1"), NULL);
    REQUIRE(s);
    CHECK(t_stat(s, "hash_recovered_records") >= ZN / 2);
    CHECK_EQ_INT(check_all(s, ZN / 2, 0), 0);
    kura_store_close(s);

    s = zopen(t_path("replay-img2"), NULL);
    REQUIRE(s);
    CHECK(t_stat(s, "hash_recovered_records") > 0);
    CHECK_EQ_INT(check_all(s, ZN, 1), 0);
    kura_store_usage u;
    s->ops->usage(s, &u);
    CHECK_EQ_INT(u.bytes, want.bytes);
    CHECK_EQ_INT(u.curr_items, want.curr_items);
    kura_check_report rep;
    CHECK_EQ_INT(check_db(s, &rep), 0);
    /* and once more from the checkpoint written now */
    CHECK(hashdb_debug_maintain(s, true, false) == KURA_OK);
    kura_store_close(s);
    s = zopen(t_path("replay-img2"), NULL);
    REQUIRE(s);
    CHECK_EQ_INT(check_all(s, ZN, 1), 0);
    s->ops->usage(s, &u);
    CHECK_EQ_INT(u.bytes, want.bytes);
    kura_store_close(s);
    kura_test.bg_hold = false;
}

/* Compaction copies records as they are: they stay compressed. */
static void test_compaction_keeps_them(void)
{
    const char *p = t_path("compact");
    kura_store *s = zopen(p, "#zcomp=zlib#segsiz=256k#frag=10");
    REQUIRE(s);
    int fails = 0;
    put_all(s, ZN, 0, &fails);
    for (int i = 0; i < ZN; i += 2) {                   /* half of them dead */
        char k[32];
        snprintf(k, sizeof(k), "z%04d", i);
        fails += kura_store_del(s, k, strlen(k), 0, &CLK) != KURA_OK;
    }
    CHECK_EQ_INT(fails, 0);
    uint64_t live = t_stat(s, "hash_live_bytes");
    CHECK(hashdb_debug_maintain(s, true, false) == KURA_OK);
    CHECK(hashdb_debug_maintain(s, true, true) == KURA_OK);
    CHECK(t_stat(s, "hash_compactions") >= 1);
    CHECK_EQ_INT(t_stat(s, "hash_live_bytes"), live);  /* copied as stored */
    int bad = 0;
    static unsigned char want[1 << 20 | 4096];
    for (int i = 1; i < ZN; i += 2) {
        char k[32];
        got g = { 0 };
        snprintf(k, sizeof(k), "z%04d", i);
        zval(want, zlen(i), i, 0);
        bad += s->ops->get(s, k, strlen(k), &CLK, got_cb, &g) != KURA_OK || g.len != zlen(i) ||
               memcmp(g.buf, want, g.len) != 0;
        free(g.buf);
    }
    CHECK_EQ_INT(bad, 0);
    kura_check_report rep;
    CHECK_EQ_INT(check_db(s, &rep), 0);
    kura_store_close(s);
}

/* A file holds records of every codec; reading needs no parameter. */
static void test_codecs_mixed_across_opens(void)
{
    const char *p = t_path("mixed");
    const char *codecs[] = { "#zcomp=lzo", "#zcomp=zlib", "#zcomp=bz2", "" };
    static unsigned char v[50000];
    for (int round = 0; round < 4; round++) {
        kura_store *s = zopen(p, codecs[round]);
        REQUIRE(s);
        for (int i = 0; i < 20; i++) {
            char k[32];
            snprintf(k, sizeof(k), "m%d.%d", round, i);
            zval(v, sizeof(v) - (size_t)i, i + 1, round);
            CHECK(put_kv(s, k, v, sizeof(v) - (size_t)i, 7) == KURA_OK);
        }
        kura_store_close(s);
    }
    kura_store *s = zopen(p, "#zcomp=none");
    REQUIRE(s);
    int bad = 0;
    for (int round = 0; round < 4; round++)
        for (int i = 0; i < 20; i++) {
            char k[32];
            got g = { 0 };
            snprintf(k, sizeof(k), "m%d.%d", round, i);
            zval(v, sizeof(v) - (size_t)i, i + 1, round);
            bad += s->ops->get(s, k, strlen(k), &CLK, got_cb, &g) != KURA_OK ||
                   g.len != sizeof(v) - (size_t)i || memcmp(g.buf, v, g.len) != 0;
            free(g.buf);
        }
    CHECK_EQ_INT(bad, 0);
    kura_check_report rep;
    CHECK_EQ_INT(check_db(s, &rep), 0);
    kura_store_close(s);
}

/* touch keeps a compressed record as stored; append compresses the whole
 * value; an overwrite with a small value turns the entry plain again. */
static int touch_cb(void *arg, const kura_item *cur, kura_update *out)
{
    (void)arg;
    if (!cur)
        return KURA_NOTFOUND;
    out->action = KURA_UPDATE_TOUCH;
    out->exptime = 5000000;
    return KURA_OK;
}

static int append_cb(void *arg, const kura_item *cur, kura_update *out)
{
    if (!cur)
        return KURA_NOTFOUND;
    out->action = KURA_UPDATE_REPLACE;
    out->flags = cur->flags;
    out->exptime = cur->exptime;
    out->cas = cur->cas + 1;
    out->part[0].base = cur->val;
    out->part[0].len = cur->vlen;
    out->part[1].base = arg;
    out->part[1].len = strlen(arg);
    return KURA_OK;
}

static void test_update_paths(void)
{
    const char *p = t_path("update");
    kura_store *s = zopen(p, "#zcomp=lzo");
    REQUIRE(s);
    static unsigned char v[30000 + 16];
    zval(v, 30000, 1, 0);
    CHECK(put_kv(s, "k", v, 30000, 3) == KURA_OK);
    CHECK_EQ_INT(t_stat(s, "hash_zcomp_records"), 1);
    uint64_t live = t_stat(s, "hash_live_bytes");
    CHECK(kura_store_update(s, "k", 1, &CLK, touch_cb, NULL) == KURA_OK);
    CHECK_EQ_INT(t_stat(s, "hash_zcomp_records"), 1);       /* not compressed again */
    CHECK(t_stat(s, "hash_live_bytes") < live + 16);
    CHECK(kura_store_update(s, "k", 1, &CLK, append_cb, "tail") == KURA_OK);
    CHECK_EQ_INT(t_stat(s, "hash_zcomp_records"), 2);
    memcpy(v + 30000, "tail", 4);
    got g = { 0 };
    CHECK(s->ops->get(s, "k", 1, &CLK, got_cb, &g) == KURA_OK && g.len == 30004 &&
          memcmp(g.buf, v, 30004) == 0 && g.flags == 3);
    free(g.buf);
    CHECK(put_kv(s, "k", "small", 5, 0) == KURA_OK);       /* plain again */
    kura_store_usage u;
    s->ops->usage(s, &u);
    CHECK_EQ_INT(u.curr_items, 1);
    CHECK_EQ_INT(listed_bytes(s), 5);
    CHECK(put_kv(s, "k", v, 30000, 0) == KURA_OK);         /* and compressed */
    CHECK_EQ_INT(listed_bytes(s), 30000);
    kura_store_close(s);
    s = zopen(p, NULL);
    REQUIRE(s);
    g = (got){ 0 };
    CHECK(s->ops->get(s, "k", 1, &CLK, got_cb, &g) == KURA_OK && g.len == 30000 &&
          memcmp(g.buf, v, 30000) == 0);
    free(g.buf);
    kura_store_close(s);
}

/* ---- damage ------------------------------------------------------------ */

/* A compressed record of a segment file: its offset, header length, key
 * length, stored value length (read here from the format, independently
 * of the store's code). */
typedef struct zrec {
    long off;
    size_t hlen, klen, vlen;
} zrec;

static unsigned char *slurp(const char *f, size_t *len)
{
    FILE *fp = fopen(f, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    *len = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(*len);
    if (b && fread(b, 1, *len, fp) != *len) {
        free(b);
        b = NULL;
    }
    fclose(fp);
    return b;
}

/* The n-th compressed record (type 4) of a segment. */
static int find_zrec(const unsigned char *b, size_t len, int n, zrec *z)
{
    size_t off = 32;
    uint32_t version = len >= 12 ? b[8] : 0;
    t_rec r;
    while (off + 8 <= len && t_rec_parse(b + off, len - off, version, &r) == 0) {
        if (r.type == 4 && n-- == 0) {
            *z = (zrec){ (long)off, r.hlen, r.klen, r.vlen };
            return 0;
        }
        off += r.hlen + r.klen + r.vlen;
    }
    return -1;
}

static void write_back(const char *f, const unsigned char *b, size_t len)
{
    FILE *fp = fopen(f, "r+b");
    if (fp) {
        fwrite(b, 1, len, fp);
        fclose(fp);
    }
}

/* Damage to a compressed record: gets of it fail with KURA_ECORRUPT, the
 * other keys read, the check names it.  crc_too: the damage comes with a
 * CRC that holds (so only the decompression can tell). */
static void damage_one(const char *name, const char *codec, bool crc_too)
{
    const char *p = t_path(name);
    kura_store *s = zopen(p, codec);
    REQUIRE(s);
    static unsigned char v[40000];
    for (int i = 0; i < 10; i++) {
        char k[32];
        snprintf(k, sizeof(k), "d%d", i);
        zval(v, sizeof(v), 1, i);
        CHECK(put_kv(s, k, v, sizeof(v), 0) == KURA_OK);
    }
    CHECK_EQ_INT(t_stat(s, "hash_zcomp_records"), 10);
    kura_store_close(s);         /* a checkpoint: open reads no record */
    char seg[1024];
    REQUIRE(t_last_segment(p, seg, sizeof(seg)) == 0);
    size_t len;
    unsigned char *b = slurp(seg, &len);
    REQUIRE(b);
    zrec z;
    REQUIRE(find_zrec(b, len, 4, &z) == 0);             /* key d4 */
    unsigned char *val = b + z.off + z.hlen + z.klen;
    val[z.vlen / 2] ^= 0x10;
    if (crc_too) {
        uint32_t c = crc32c_update(0, b + z.off + z.hlen, z.klen + z.vlen);
        c = crc32c_update(c, b + z.off + 4, z.hlen - 4);
        memcpy(b + z.off, &c, 4);                       /* little-endian host */
    }
    write_back(seg, b, len);
    free(b);
    s = zopen(p, NULL);
    REQUIRE(s);
    int corrupt = 0, ok = 0;
    for (int i = 0; i < 10; i++) {
        char k[32];
        got g = { 0 };
        snprintf(k, sizeof(k), "d%d", i);
        zval(v, sizeof(v), 1, i);
        int rc = s->ops->get(s, k, strlen(k), &CLK, got_cb, &g);
        if (rc == KURA_ECORRUPT)
            corrupt += i == 4;
        else if (rc == KURA_OK && g.len == sizeof(v) && memcmp(g.buf, v, sizeof(v)) == 0)
            ok++;
        free(g.buf);
    }
    printf("# %s%s, a flipped byte%s: %d reads refused, %d served\n", name, codec,
           crc_too ? " under a CRC that holds" : "", corrupt, ok);
    CHECK_EQ_INT(corrupt, 1);
    CHECK_EQ_INT(ok, 9);
    CHECK_EQ_INT(t_stat(s, "hash_corrupt_reads"), 1);
    kura_check_report rep;
    CHECK(check_db(s, &rep) > 0);
    CHECK(rep.damaged >= 1 && rep.index_bad >= 1);
    kura_store_close(s);
}

static void test_damage_detected(void)
{
    damage_one("flip", "#zcomp=lzo", false);            /* lzo: only the CRC covers it */
    damage_one("flipcrc", "#zcomp=zlib", true);         /* zlib's Adler-32 */
    damage_one("flipbz", "#zcomp=bz2", true);           /* bzip2's CRC */
}

/* A segment's records are read in its own version's format: a version 4
 * segment (compressed record and all) relabelled version 2 holds no
 * record.  (That a compressed record in a version 2 segment is none, while
 * version 3 may hold them, is test_hashdb_rec's test_zput_versions.) */
static void test_segment_version(void)
{
    const char *p = t_path("version");
    kura_store *s = zopen(p, "#zcomp=lzo");
    REQUIRE(s);
    static unsigned char v[40000];
    zval(v, sizeof(v), 1, 0);
    CHECK(put_kv(s, "k", v, sizeof(v), 0) == KURA_OK);
    kura_store_close(s);
    char seg[1024];
    REQUIRE(t_last_segment(p, seg, sizeof(seg)) == 0);
    size_t len;
    unsigned char *b = slurp(seg, &len);
    REQUIRE(b);
    CHECK_EQ_INT(b[8], 5);                             /* HD_VERSION */
    b[8] = 2;                                           /* and its header's CRC */
    uint32_t c = crc32c_update(0, b, 28);
    memcpy(b + 28, &c, 4);
    write_back(seg, b, len);
    free(b);
    s = zopen(p, NULL);
    REQUIRE(s);
    got g = { 0 };
    CHECK(s->ops->get(s, "k", 1, &CLK, got_cb, &g) == KURA_ECORRUPT);
    free(g.buf);
    kura_store_close(s);
}

/* ---- threads ----------------------------------------------------------- */

#define TH_KEYS 16
#define TH_ROUNDS 300

typedef struct th_arg {
    kura_store *s;
    int id;
    int bad, fails;
} th_arg;

/* A value is zval's text for (key i, round r), compressed when long: the
 * entry flips between the two kinds as rounds alternate. */
static size_t th_len(int r)
{
    return r % 2 ? 3000 + (size_t)r : 200 + (size_t)r;
}

static void *th_writer(void *p)
{
    th_arg *a = p;
    unsigned char v[4096];
    for (int r = 0; r < TH_ROUNDS; r++) {
        int i = 1 + (r * 7 + a->id) % TH_KEYS * 5 / 4;      /* never a multiple of 5 */
        if (i % 5 == 0)
            i++;
        char k[32];
        snprintf(k, sizeof(k), "t%d", i);
        zval(v, th_len(r), i, r);
        a->fails += put_kv(a->s, k, v, th_len(r), (uint32_t)r) != KURA_OK;
    }
    return NULL;
}

/* Every value read is one that was written whole: its flags name the
 * round, and the bytes are that round's. */
static int th_check_cb(void *arg, const kura_item *it)
{
    th_arg *a = arg;
    unsigned char want[4096];
    int i = atoi(it->key + 1), r = (int)it->flags;
    if (it->vlen != th_len(r)) {
        a->bad++;
        return 0;
    }
    zval(want, it->vlen, i, r);
    a->bad += memcmp(want, it->val, it->vlen) != 0;
    return 0;
}

static void *th_reader(void *p)
{
    th_arg *a = p;
    for (int n = 0; n < TH_ROUNDS * 4; n++) {
        char k[32];
        int i = 1 + n % 20;
        snprintf(k, sizeof(k), "t%d", i);
        int rc = a->s->ops->get(a->s, k, strlen(k), &CLK, th_check_cb, a);
        a->fails += rc != KURA_OK && rc != KURA_NOTFOUND;
    }
    return NULL;
}

static void test_threads(void)
{
    const char *p = t_path("threads");
    kura_store *s = zopen(p, "#zcomp=lzo#zmin=1k#segsiz=256k");
    REQUIRE(s);
    pthread_t t[4];
    th_arg a[4];
    for (int k = 0; k < 4; k++) {
        a[k] = (th_arg){ .s = s, .id = k };
        pthread_create(&t[k], NULL, k < 2 ? th_writer : th_reader, &a[k]);
    }
    for (int k = 0; k < 4; k++)
        pthread_join(t[k], NULL);
    int bad = 0, fails = 0;
    for (int k = 0; k < 4; k++) {
        bad += a[k].bad;
        fails += a[k].fails;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(fails, 0);
    CHECK(t_stat(s, "hash_zcomp_records") > 0);
    /* and after a checkpoint and a compaction of what the rounds left */
    CHECK(hashdb_debug_maintain(s, true, false) == KURA_OK);
    CHECK(hashdb_debug_maintain(s, true, true) == KURA_OK);
    th_arg r = { .s = s };
    th_reader(&r);
    CHECK_EQ_INT(r.bad + r.fails, 0);
    kura_check_report rep;
    CHECK_EQ_INT(check_db(s, &rep), 0);
    kura_store_close(s);
}

int main(void)
{
    t_setup();
    RUN(test_round_trip_every_codec);
    RUN(test_plain_when_not_worth_it);
    RUN(test_replay_and_checkpoint);
    RUN(test_compaction_keeps_them);
    RUN(test_codecs_mixed_across_opens);
    RUN(test_update_paths);
    RUN(test_damage_detected);
    RUN(test_segment_version);
    RUN(test_threads);
    t_teardown();
    UNIT_DONE();
}

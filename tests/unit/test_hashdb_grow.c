/*
 * test_hashdb_grow.c - a new hash file starts small and grows online
 * (src/store/hash/hashdb.c, hashdb_index.c; the segments' growth is
 * src/log/seglog.c's sl_config.segsiz_first):
 *  - the empty footprint: a new database opened without #segsiz and #bnum
 *    takes about 1 MiB of disk and a 128 KiB index, and its open makes
 *    little memory resident; the negative check is the same open with the
 *    old defaults given (#segsiz=128m#bnum=1048576: 128 MiB of disk, a
 *    32 MiB index, resident at open);
 *  - growth through many inserts: the segments double from the first
 *    size up (each one's header says its size), the index's tables grow
 *    from 8 slots a stripe, and every key reads back;
 *  - a restart after growth (checkpoint load, then replay): every key, the
 *    index's size kept, and the segments go on doubling from where they
 *    were; a crash image taken in the middle of growth (a checkpoint
 *    written between, more keys after it) holds every key synced;
 *  - a database whose segments were made with a fixed size (header 0, as
 *    every segment before this change) keeps full-size segments when
 *    opened without #segsiz.
 * Power loss in the middle of the segments' growth is test_powerloss.c's
 * (HASH_GROW).
 */
#include <inttypes.h>
#include <sys/stat.h>

#include "unit.h"
#include "hashdb_testlib.h"

static const kura_clock CLK = { .now = 1000000, .oldest_cas = 0 };

/* Bytes the directory's files take on disk (allocated blocks: a
 * preallocated segment counts whole) and, in *segs, how many segments. */
static uint64_t dir_disk_bytes(const char *dir, int *segs)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    uint64_t sum = 0;
    if (segs)
        *segs = 0;
    if (!d)
        return 0;
    while ((de = readdir(d))) {
        char p[1024];
        struct stat st;
        if (de->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        if (stat(p, &st) == 0)
            sum += (uint64_t)st.st_blocks * 512;
        if (segs && strstr(de->d_name, ".seg"))
            (*segs)++;
    }
    closedir(d);
    return sum;
}

/* The process's resident bytes (/proc/self/statm). */
static uint64_t rss_bytes(void)
{
    unsigned long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Segment id's header: its size limit (offset 24; 0: the database's
 * segsiz) and its file size. */
static int seg_header(const char *dir, uint32_t id, uint32_t *limit, uint64_t *fsize)
{
    char p[1024];
    unsigned char h[32];
    snprintf(p, sizeof(p), "%s/%08" PRIx32 ".seg", dir, id);
    FILE *f = fopen(p, "rb");
    if (!f)
        return -1;
    size_t n = fread(h, 1, sizeof(h), f);
    fclose(f);
    struct stat st;
    if (n != sizeof(h) || stat(p, &st) != 0)
        return -1;
    *limit = (uint32_t)h[24] | (uint32_t)h[25] << 8 | (uint32_t)h[26] << 16 |
             (uint32_t)h[27] << 24;
    *fsize = (uint64_t)st.st_size;
    return 0;
}

/* Opens name with params, or fails the test. */
static kura_store *open_or_fail(const char *path, const char *params, int sync)
{
    kura_store *s = NULL;
    kura_store_config cfg = t_cfg(sync);
    char err[512];
    if (t_open(path, params, &cfg, &s, err, sizeof(err)) != KURA_OK) {
        printf("# open %s%s: %s\n", path, params, err);
        return NULL;
    }
    return s;
}

/* What a store of `params` takes at once: disk, index and resident. */
typedef struct footprint {
    uint64_t disk, index, rss;
} footprint;

static bool empty_footprint(const char *name, const char *params, footprint *fp)
{
    uint64_t r0 = rss_bytes();
    kura_store *s = open_or_fail(t_path(name), params, KURA_SYNC_NONE);
    if (!s)
        return false;
    fp->rss = rss_bytes() - r0;
    fp->disk = dir_disk_bytes(t_path(name), NULL);
    fp->index = t_stat(s, "hash_index_slots") * 16;
    printf("# %s%s: %" PRIu64 " bytes on disk, index %" PRIu64 " bytes, %" PRIu64
           " bytes resident at open\n", name, params, fp->disk, fp->index, fp->rss);
    kura_store_close(s);
    return true;
}

static void test_empty_footprint(void)
{
    footprint now, old;
    REQUIRE(empty_footprint("empty", "", &now));
    CHECK(now.disk <= (3u << 19));          /* a 1 MiB segment, a checkpoint of 40 KiB */
    CHECK(now.index <= (128u << 10));       /* 8 slots a stripe */
    CHECK(now.rss < (16u << 20));
    /* closed and opened again, still as small */
    footprint again;
    REQUIRE(empty_footprint("empty", "", &again));
    CHECK(again.disk <= (3u << 19));
    CHECK(again.index <= (128u << 10));
    /* the negative check: the old defaults given take it all at once */
    REQUIRE(empty_footprint("olddefaults", "#segsiz=128m#bnum=1048576", &old));
    CHECK(old.disk >= (128u << 20));
    CHECK(old.index >= (32u << 20));
    CHECK(old.rss >= (32u << 20));
}

/* Keys "k<i>" with values of 40 to 120 bytes derived from i. */
static void kv(int i, char *k, size_t klen, char *v, size_t vlen)
{
    snprintf(k, klen, "k%d", i);
    int n = 40 + (int)((unsigned)i * 2654435761u % 81u);
    if ((size_t)n >= vlen)
        n = (int)vlen - 1;
    for (int j = 0; j < n; j++)
        v[j] = (char)('a' + (i + j) % 26);
    v[n] = 0;
}

static int put_range(kura_store *s, int from, int to)
{
    char k[32], v[128];
    for (int i = from; i < to; i++) {
        /* in a scattered order, as random inserts come (a permutation:
         * 40507 is prime to the ranges' lengths, whose factors are 2, 3, 5
         * and 7) */
        int j = from + (int)((uint64_t)(i - from) * 40507u % (uint64_t)(to - from));
        kv(j, k, sizeof(k), v, sizeof(v));
        if (t_put(s, k, v, (uint32_t)j, 0, 0, KURA_PUT_ANY, 0, &CLK) != KURA_OK)
            return i - from + 1;
    }
    return 0;
}

/* Keys from..to-1 that do not read back as written. */
static int bad_range(kura_store *s, int from, int to)
{
    char k[32], v[128];
    t_val got;
    int bad = 0;
    for (int i = from; i < to; i++) {
        kv(i, k, sizeof(k), v, sizeof(v));
        if (t_get(s, k, &CLK, &got) != KURA_OK || got.len != strlen(v) ||
            memcmp(got.buf, v, got.len) != 0 || got.flags != (uint32_t)i)
            bad++;
    }
    return bad;
}

/* Every segment's header says the size it grew to: 4 KiB for the first,
 * twice its predecessor's for each next, and no segment holds more than
 * that (the values here are far below it).  Returns the last id seen. */
static uint32_t check_doubling(const char *dir, uint32_t from, uint32_t want_first)
{
    uint32_t id = from, limit, want = want_first;
    uint64_t fsize;
    int bad = 0;
    for (; seg_header(dir, id, &limit, &fsize) == 0; id++, want *= 2) {
        if (limit != want || fsize > limit) {
            printf("# segment %08" PRIx32 ": limit %" PRIu32 " (want %" PRIu32 "), %" PRIu64
                   " bytes\n", id, limit, want, fsize);
            bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
    return id - 1;
}

static void test_growth_and_restart(void)
{
    enum { N = 60000 };
    const char *path = t_path("grow");
    kura_test.hashdb_seg_first = 4096;
    kura_store *s = open_or_fail(path, "", KURA_SYNC_NONE);
    REQUIRE(s);
    uint64_t slots0 = t_stat(s, "hash_index_slots");
    CHECK_EQ_INT(slots0, 1024 * 8);
    CHECK_EQ_INT(put_range(s, 0, N), 0);
    uint64_t slots = t_stat(s, "hash_index_slots");
    CHECK(slots >= (uint64_t)N * 4 / 3);        /* at most 3/4 of the slots used */
    CHECK_EQ_INT(bad_range(s, 0, N), 0);
    int segs;
    dir_disk_bytes(path, &segs);
    /* about 6 MB of records from 4 KiB up: 4K, 8K, ... 4M, one more */
    printf("# %d keys: %d segments, %" PRIu64 " slots\n", N, segs, slots);
    CHECK(segs >= 9 && segs <= 14);
    uint32_t last = check_doubling(path, 1, 4096);
    CHECK_EQ_INT(last, (uint32_t)segs);
    kura_store_close(s);

    /* a restart: the checkpoint's tables at their grown sizes, then the
     * segments go on doubling from the active one's size */
    s = open_or_fail(path, "", KURA_SYNC_NONE);
    REQUIRE(s);
    CHECK_EQ_INT(t_stat(s, "hash_index_slots"), slots);
    CHECK_EQ_INT(bad_range(s, 0, N), 0);
    CHECK_EQ_INT(put_range(s, N, 2 * N), 0);
    CHECK_EQ_INT(bad_range(s, 0, 2 * N), 0);
    kura_store_close(s);
    CHECK(check_doubling(path, 1, 4096) > last);
    kura_test.hashdb_seg_first = 0;
}

/* A crash image in the middle of growth: a checkpoint written while the
 * tables and segments were half-grown, more keys after it (replayed over
 * the checkpoint's tables, which grow again as they come), every one
 * synced before the copy. */
static void test_crash_during_growth(void)
{
    enum { N = 30000 };
    const char *path = t_path("growcrash"), *img = t_path("growcrash-img");
    kura_test.hashdb_seg_first = 4096;
    kura_test.bg_hold = true;       /* the checkpoint asked for, no other (a slow run's
                                       background one would load what must be replayed) */
    kura_store *s = open_or_fail(path, "", KURA_SYNC_NONE);
    REQUIRE(s);
    CHECK_EQ_INT(put_range(s, 0, N), 0);
    CHECK_EQ_INT(hashdb_debug_maintain(s, true, false), KURA_OK);
    CHECK_EQ_INT(put_range(s, N, 3 * N), 0);
    CHECK_EQ_INT(s->ops->sync(s), KURA_OK);
    REQUIRE(t_copy_dir(path, img) == 0);
    kura_store_close(s);
    s = open_or_fail(img, "", KURA_SYNC_NONE);
    REQUIRE(s);
    CHECK(t_stat(s, "hash_recovered_records") >= 2 * N);    /* replayed, not loaded */
    CHECK(t_stat(s, "hash_index_slots") >= (uint64_t)3 * N * 4 / 3);
    CHECK_EQ_INT(bad_range(s, 0, 3 * N), 0);
    kura_store_close(s);
    kura_test.bg_hold = false;
    kura_test.hashdb_seg_first = 0;
}

/* Segments made with a fixed size (#segsiz: their headers say 0, as every
 * segment written before the segments grew) keep being filled to the
 * database's segsiz when it is opened without #segsiz: an existing
 * database does not start again from small segments. */
static void test_fixed_segments_stay(void)
{
    const char *path = t_path("fixed");
    kura_store *s = open_or_fail(path, "#segsiz=64k", KURA_SYNC_NONE);
    REQUIRE(s);
    CHECK_EQ_INT(put_range(s, 0, 3000), 0);         /* about 400 KB: 7 segments */
    kura_store_close(s);
    int before, after;
    dir_disk_bytes(path, &before);
    uint32_t limit;
    uint64_t fsize;
    CHECK(seg_header(path, 1, &limit, &fsize) == 0 && limit == 0);
    s = open_or_fail(path, "", KURA_SYNC_NONE);
    REQUIRE(s);
    CHECK_EQ_INT(put_range(s, 3000, 10000), 0);     /* 1 MB more: one segment of 128 MiB */
    CHECK_EQ_INT(bad_range(s, 0, 10000), 0);
    kura_store_close(s);
    dir_disk_bytes(path, &after);
    printf("# fixed 64k segments: %d, after 1 MB more without #segsiz: %d\n", before, after);
    CHECK(before >= 5);
    CHECK(after <= before + 1);
}

int main(void)
{
    t_setup();
    RUN(test_empty_footprint);
    RUN(test_growth_and_restart);
    RUN(test_crash_during_growth);
    RUN(test_fixed_segments_stay);
    t_teardown();
    UNIT_DONE();
}

/*
 * test_seglog.c - the segmented log (src/log/) alone, with a record format
 * of this test's own: a 16-byte head (payload length u32, CRC-32C of
 * recno ++ payload u32, recno u64) and the payload.  Covers appends (with
 * pwritev and through the write mapping), rolling across segments, group
 * commit from several threads, reopening and scanning everything back, a
 * torn tail cut off, and a failed fdatasync (a kura_io wrapper) making
 * every later append, commit and segment creation fail for good; the
 * user's presync called before every sync that makes records durable (a
 * commit's, a seal's) and its failure as sticky as the log's own.  Records
 * of a page or more skip the write mapping (pwritev); mixed sizes read
 * back.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/seglog.h"
#include "kura/store.h"
#include "kio_sim.h"
#include "unit.h"
#include "kura/crc32c.h"
#include "kura/testhooks.h"
#include "kura/kio.h"

#define HEAD 16

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }

typedef struct rec {
    const unsigned char *payload;
    size_t len;
} rec;

static size_t frame(void *arg, unsigned char *h, uint64_t recno)
{
    rec *r = arg;
    put32(h, (uint32_t)r->len);
    memcpy(h + 8, &recno, 8);
    put32(h + 4, crc32c_update(crc32c_update(0, h + 8, 8), r->payload, r->len));
    return HEAD;
}

static long long check(void *arg, const unsigned char *p, size_t avail, uint32_t version,
                       size_t *need)
{
    uint64_t *recno = arg;
    if (version != 7)
        return SL_NOT_REC;
    if (avail < HEAD) {
        *need = HEAD;
        return SL_NEED_MORE;
    }
    uint32_t len = get32(p);
    if (len == 0 || len > (1u << 20))
        return SL_NOT_REC;
    if (HEAD + (size_t)len > avail) {
        *need = HEAD + (size_t)len;
        return SL_NEED_MORE;
    }
    if (crc32c_update(crc32c_update(0, p + 8, 8), p + HEAD, len) != get32(p + 4))
        return SL_NOT_REC;
    memcpy(recno, p + 8, 8);
    return HEAD + (long long)len;
}

static int log_lines;
static void quiet(void *arg, int level, const char *line)
{
    (void)arg; (void)level; (void)line;
    log_lines++;
}

static char dir[256];
static int dirfd_ = -1;

static void fresh_dir(void)
{
    char cmd[300];
    snprintf(dir, sizeof(dir), "/tmp/kura-seglog-%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {}
    mkdir(dir, 0755);
    if (dirfd_ >= 0)
        close(dirfd_);
    dirfd_ = open(dir, O_RDONLY | O_DIRECTORY);
}

static sl_config config(bool mapwrite, const kura_io *io)
{
    sl_config c = { .dir = dir, .dirfd = dirfd_, .io = io, .version = 7,
                    .versions = 1u << 7, .segsiz = 4096, .msiz = 1 << 20,
                    .mapwrite = mapwrite, .check = check, .log = quiet };
    memcpy(c.magic, "TESTSLOG", 8);
    return c;
}

/* Opens every segment in the directory, makes the newest active. */
static int open_all(sl_log *log, const sl_config *c)
{
    uint32_t *ids;
    size_t n;
    char err[300];
    sl_init(log, c);
    if (sl_list(log, &ids, &n) != KURA_OK)
        return -1;
    sl_seg *sg = NULL;
    for (size_t i = 0; i < n; i++)
        if (sl_seg_open(log, ids[i], &sg, err, sizeof(err)) != KURA_OK)
            return -1;
    int rc = 0;
    if (!sg)
        rc = sl_seg_create(log, 1, 0, &sg);
    if (rc == 0)
        sl_start(log, sg, n ? ids[0] : 1);
    free(ids);
    return rc;
}

static void payload_of(uint64_t i, unsigned char *buf, size_t *len)
{
    *len = 1 + (size_t)(i * 37 % 300);
    for (size_t k = 0; k < *len; k++)
        buf[k] = (unsigned char)(i + k);
}

static int append_one(sl_log *log, uint64_t i, sl_loc *loc)
{
    unsigned char head[HEAD], pl[400];
    rec r;
    payload_of(i, pl, &r.len);
    r.payload = pl;
    struct iovec iov[2] = { { head, 0 }, { pl, r.len } };
    return sl_append(log, iov, 2, HEAD, r.len, true, frame, &r, loc);
}

/* Scans every segment; returns the records seen in order (recno 1..n
 * expected) or -1 on a mismatch.  The newest segment's zero tail is cut. */
static long scan_all(sl_log *log, uint32_t first, uint32_t last)
{
    long n = 0;
    for (uint32_t id = first; id <= last; id++) {
        sl_seg *sg = sl_seg_get(log, id);
        if (!sg)
            continue;
        sl_scan sc;
        sl_scan_init(&sc, log, sg, HEAD);
        uint64_t off = SL_SEG_HDR;
        for (;;) {
            const unsigned char *p;
            size_t len;
            uint64_t recno = 0;
            int rc = sl_scan_rec(&sc, off, &recno, &p, &len);
            if (rc == 1)
                break;
            if (rc == KURA_ECORRUPT && id == last) {
                /* the preallocated tail of a mapped segment: zeros, cut
                 * silently (cut stays 0), as its user's recovery does */
                uint64_t cut = 0;
                char err[300];
                if (sl_seg_cut(log, sg, off, "a never-written tail", &cut, err,
                               sizeof(err)) != KURA_OK || cut != 0) {
                    sl_scan_done(&sc);
                    return -1;
                }
                break;
            }
            unsigned char want[400];
            size_t wl;
            payload_of((uint64_t)n + 1, want, &wl);
            if (rc != KURA_OK || recno != (uint64_t)n + 1 || len != HEAD + wl ||
                memcmp(p + HEAD, want, wl) != 0) {
                sl_scan_done(&sc);
                return -1;
            }
            n++;
            off += len;
        }
        sl_scan_done(&sc);
    }
    return n;
}

static void append_roll_reopen(bool mapwrite)
{
    sl_log log;
    sl_loc loc, prev = { 0 };
    fresh_dir();
    sl_config c = config(mapwrite, NULL);
    REQUIRE(open_all(&log, &c) == 0);
    for (uint64_t i = 1; i <= 500; i++) {
        REQUIRE(append_one(&log, i, &loc) == KURA_OK);
        CHECK_EQ_INT(loc.recno, i);
        CHECK(loc.lsn > prev.lsn);
        CHECK(loc.seg >= prev.seg);
        prev = loc;
    }
    CHECK(sl_rolls(&log) >= 10);        /* ~80 KB in 4 KB segments */
    CHECK_EQ_INT(sl_lsn(&log), loc.lsn);
    CHECK(sl_sync_now(&log) == KURA_OK);
    uint32_t last = sl_active_id(&log);
    CHECK_EQ_INT(scan_all(&log, 1, last), 500);

    /* a record read back at its location */
    const unsigned char *p;
    uint32_t version;
    CHECK(sl_read(&log, loc.seg, loc.off, loc.hlen + 10, &p, &version) == KURA_OK);
    CHECK_EQ_INT(version, 7);
    CHECK_EQ_INT(get32(p), 1 + 500 * 37 % 300);
    sl_unmap_active(&log);
    sl_destroy(&log);

    REQUIRE(open_all(&log, &c) == 0);
    CHECK_EQ_INT(sl_active_id(&log), last);
    CHECK_EQ_INT(scan_all(&log, 1, last), 500);
    sl_set_recno(&log, 500);
    CHECK(append_one(&log, 501, &loc) == KURA_OK);
    CHECK_EQ_INT(loc.recno, 501);
    CHECK_EQ_INT(scan_all(&log, 1, sl_active_id(&log)), 501);
    sl_destroy(&log);
}

static void test_append_roll_reopen_pwritev(void)
{
    append_roll_reopen(false);
}

static void test_append_roll_reopen_mapped(void)
{
    append_roll_reopen(true);
}

typedef struct worker {
    sl_log *log;
    int bad;
} worker;

static void *commit_worker(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < 200; i++) {
        sl_loc loc;
        if (append_one(w->log, 1, &loc) != KURA_OK || sl_commit(w->log, loc.lsn) != KURA_OK)
            w->bad++;
    }
    return NULL;
}

static void test_group_commit_threads(void)
{
    sl_log log;
    fresh_dir();
    sl_config c = config(true, NULL);
    c.segsiz = 64 << 10;
    REQUIRE(open_all(&log, &c) == 0);
    pthread_t t[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){ &log, 0 };
        pthread_create(&t[i], NULL, commit_worker, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ_INT(w[i].bad, 0);
    }
    sl_stats st;
    sl_get_stats(&log, &st);
    CHECK(st.syncs >= 1 && st.syncs <= 800);
    CHECK_EQ_INT(st.sync_errors, 0);
    CHECK_EQ_INT(sl_lsn(&log), 800 * (HEAD + 1 + 37 % 300));
    CHECK_EQ_INT(log.recno, 800);
    sl_destroy(&log);
}

static void test_torn_tail_cut(void)
{
    sl_log log;
    sl_loc loc;
    fresh_dir();
    sl_config c = config(false, NULL);
    REQUIRE(open_all(&log, &c) == 0);
    for (uint64_t i = 1; i <= 5; i++)
        REQUIRE(append_one(&log, i, &loc) == KURA_OK);
    uint64_t good = loc.off + HEAD + 1 + 5 * 37 % 300;
    sl_destroy(&log);

    /* half a record at the end: a head claiming 100 bytes, 20 written */
    char path[300];
    snprintf(path, sizeof(path), "%s/%08x.seg", dir, loc.seg);
    int fd = open(path, O_WRONLY);
    unsigned char torn[HEAD + 20];
    memset(torn, 0xab, sizeof(torn));
    put32(torn, 100);
    REQUIRE(pwrite(fd, torn, sizeof(torn), (off_t)good) == (ssize_t)sizeof(torn));
    close(fd);

    REQUIRE(open_all(&log, &c) == 0);
    sl_seg *sg = sl_seg_get(&log, loc.seg);
    REQUIRE(sg);
    CHECK_EQ_INT(sg->size, good + sizeof(torn));
    sl_scan sc;
    sl_scan_init(&sc, &log, sg, HEAD);
    uint64_t recno;
    const unsigned char *p;
    size_t len;
    CHECK(sl_scan_rec(&sc, good, &recno, &p, &len) == KURA_ECORRUPT);
    CHECK_EQ_INT(sl_scan_resync(&sc, good, &recno), sg->size);
    sl_scan_done(&sc);
    uint64_t cut = 0;
    char err[300] = "";
    int lines = log_lines;
    CHECK(sl_seg_cut(&log, sg, good, "a torn record", &cut, err, sizeof(err)) == KURA_OK);
    CHECK_EQ_INT(cut, sizeof(torn));
    CHECK(log_lines == lines + 1);      /* the cut says so, at ERROR */
    struct stat st;
    CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == good);
    sl_set_recno(&log, 5);
    CHECK(append_one(&log, 6, &loc) == KURA_OK);
    CHECK_EQ_INT(scan_all(&log, 1, sl_active_id(&log)), 6);
    sl_destroy(&log);
}

static void test_torn_creation(void)
{
    sl_log log;
    sl_loc loc;
    fresh_dir();
    sl_config c = config(false, NULL);
    REQUIRE(open_all(&log, &c) == 0);
    REQUIRE(append_one(&log, 1, &loc) == KURA_OK);
    sl_destroy(&log);
    char path[300];
    snprintf(path, sizeof(path), "%s/%08x.seg", dir, 2u);
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    unsigned char zero[100] = { 0 };
    REQUIRE(write(fd, zero, sizeof(zero)) == (ssize_t)sizeof(zero));
    close(fd);
    sl_init(&log, &c);
    sl_seg *sg;
    char err[300];
    CHECK(sl_seg_open(&log, 2, &sg, err, sizeof(err)) == KURA_ECORRUPT);
    uint64_t cut = 0;
    CHECK(sl_torn_creation(&log, 2, &cut));
    CHECK_EQ_INT(cut, 100);
    CHECK(access(path, F_OK) != 0);
    /* a header that is there but wrong is damage, not a torn creation */
    CHECK(sl_seg_open(&log, 1, &sg, err, sizeof(err)) == KURA_OK);
    sl_destroy(&log);
}

static void test_failed_sync_is_sticky(void)
{
    sl_log log;
    sl_loc loc;
    fresh_dir();
    kio_inject *in = kio_inject_new(NULL);     /* fails fdatasync on demand */
    REQUIRE(in != NULL);
    sl_config c = config(true, kio_inject_io(in));
    REQUIRE(open_all(&log, &c) == 0);
    REQUIRE(append_one(&log, 1, &loc) == KURA_OK);
    CHECK(sl_commit(&log, loc.lsn) == KURA_OK);
    REQUIRE(append_one(&log, 2, &loc) == KURA_OK);
    kio_inject_fail_from_now(in, KIO_FDATASYNC, EIO);
    CHECK(sl_commit(&log, loc.lsn) == KURA_EFAILED);
    kio_inject_disarm(in);
    /* never retried: the pages the kernel dropped are not proved by a
     * later sync that succeeds */
    CHECK(sl_commit(&log, loc.lsn) == KURA_EFAILED);
    CHECK(sl_failed(&log) == KURA_EFAILED);
    CHECK(append_one(&log, 3, &loc) == KURA_EFAILED);
    CHECK(sl_sync_now(&log) == KURA_EFAILED);
    sl_seg *sg;
    CHECK(sl_seg_create(&log, 99, 0, &sg) == KURA_EFAILED);
    sl_stats st;
    sl_get_stats(&log, &st);
    CHECK_EQ_INT(st.sync_errors, 1);
    sl_destroy(&log);

    /* a failure while sealing a segment is sticky too */
    fresh_dir();
    REQUIRE(open_all(&log, &c) == 0);
    kio_inject_fail_from_now(in, KIO_FDATASYNC, EIO);
    int rc = KURA_OK;
    for (uint64_t i = 1; i <= 100 && rc == KURA_OK; i++)
        rc = append_one(&log, i, &loc);
    kio_inject_disarm(in);
    CHECK(rc == KURA_EFAILED);
    CHECK(append_one(&log, 1, &loc) == KURA_EFAILED);
    CHECK_EQ_INT(sl_rolls(&log), 0);
    sl_destroy(&log);
    kio_inject_free(in);
}

/* The user's presync: counts its calls and the log's lsn as each came
 * (the records it must precede), and fails with presync_err when set. */
static sl_log *presync_log;
static int presync_calls, presync_err;
static uint64_t presync_lsn;

static int count_presync(void *arg)
{
    (void)arg;
    presync_calls++;
    presync_lsn = sl_lsn(presync_log);
    return presync_err;
}

static void test_presync_before_every_sync(void)
{
    sl_log log;
    sl_loc loc;
    fresh_dir();
    sl_config c = config(false, NULL);
    c.presync = count_presync;
    presync_log = &log;
    presync_calls = presync_err = 0;
    REQUIRE(open_all(&log, &c) == 0);
    REQUIRE(append_one(&log, 1, &loc) == KURA_OK);
    CHECK(sl_commit(&log, loc.lsn) == KURA_OK);
    CHECK_EQ_INT(presync_calls, 1);             /* the group commit's */
    CHECK(presync_lsn == loc.lsn);              /* after the record */
    CHECK(sl_commit(&log, loc.lsn) == KURA_OK);
    CHECK_EQ_INT(presync_calls, 1);             /* nothing to sync: none */
    int before = presync_calls;
    for (uint64_t i = 2; i <= 40; i++)          /* 4 KiB segments: seals */
        REQUIRE(append_one(&log, i, &loc) == KURA_OK);
    CHECK(sl_rolls(&log) > 0);
    CHECK(presync_calls - before >= (int)sl_rolls(&log));    /* one a seal */
    /* its failure is the log's own: sticky */
    presync_err = EIO;
    REQUIRE(append_one(&log, 41, &loc) == KURA_OK);
    CHECK(sl_commit(&log, loc.lsn) == KURA_EFAILED);
    presync_err = 0;
    CHECK(sl_commit(&log, loc.lsn) == KURA_EFAILED);
    CHECK(append_one(&log, 42, &loc) == KURA_EFAILED);
    sl_destroy(&log);
}

/* Garbage for the resync: at every SPACING bytes a head claiming a record
 * of half the file (so each runs SPACING past the one before), zeros
 * between.  The check
 * calls such a record bad once it has all of it (standing for a failed
 * CRC, without the test paying for the CRC). */
#define SPACING (64u << 10)
static long long claims_check(void *arg, const unsigned char *p, size_t avail,
                              uint32_t version, size_t *need)
{
    (void)arg; (void)version;
    if (avail < HEAD) {
        *need = HEAD;
        return SL_NEED_MORE;
    }
    uint32_t len = get32(p);
    if (len == 0)
        return SL_NOT_REC;
    if (HEAD + (size_t)len > avail) {
        *need = HEAD + (size_t)len;
        return SL_NEED_MORE;
    }
    return SL_NOT_REC;
}

/* Bytes pread by a resync over n bytes of that garbage. */
static uint64_t resync_bytes(size_t n)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/garbage", dir);
    unsigned char *g = calloc(1, n);
    if (!g)
        abort();
    for (size_t o = 0; o + HEAD < n; o += SPACING)
        put32(g + o, (uint32_t)(n / 2));
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, g, n) != (ssize_t)n)
        abort();
    free(g);
    kio_inject *in = kio_inject_new(kio_default());
    sl_scan sc;
    memset(&sc, 0, sizeof(sc));
    sc.io = kio_inject_io(in);
    sc.fd = fd;
    sc.version = 7;
    sc.fsize = n;
    sc.check = claims_check;
    sc.first = HEAD;
    uint64_t recno;
    CHECK_EQ_INT(sl_scan_resync(&sc, 0, &recno), n);
    uint64_t bytes = kio_inject_bytes_read(in);
    sl_scan_done(&sc);
    kio_inject_free(in);
    close(fd);
    unlink(path);
    return bytes;
}

/* Salvage's resync reads a damaged segment once, whatever lengths its
 * garbage claims: bytes read stay under 2 n + 2 MiB (one window of read
 * ahead, twice) for n and 4 n.  Negative check: reading each window afresh
 * from its offset, as the scan did before, reads each claimed record again
 * at every head, quadratic, and breaks the same ceiling at n already. */
static void test_resync_reads_linearly(void)
{
    const uint64_t n = 4u << 20, slack = 2u << 20;
    fresh_dir();
    uint64_t b1 = resync_bytes(n), b4 = resync_bytes(4 * n);
    CHECK(b1 >= n - HEAD && b1 <= 2 * n + slack);
    CHECK(b4 >= 4 * n - HEAD && b4 <= 2 * 4 * n + slack);
    kura_test.sl_scan_reread = true;
    uint64_t old = resync_bytes(n);
    kura_test.sl_scan_reread = false;
    CHECK(old > 2 * n + slack);
    printf("# resync over %llu and %llu bytes of garbage read %llu and %llu bytes "
           "(reading afresh: %llu)\n", (unsigned long long)n, (unsigned long long)(4 * n),
           (unsigned long long)b1, (unsigned long long)b4, (unsigned long long)old);
}

/* A check whose records' bodies are checksummed with sl_scan_crc, as the
 * hash file's are; with crc_verify set it also compares each answer with
 * crc32c_update's and counts the differences. */
static bool crc_verify;
static int crc_wrong;
static long long crc_check(void *arg, const unsigned char *p, size_t avail, uint32_t version,
                           size_t *need)
{
    (void)arg; (void)version;
    if (avail < HEAD) {
        *need = HEAD;
        return SL_NEED_MORE;
    }
    uint32_t len = get32(p);
    if (len == 0 || get32(p + 8) != 0x6b72614b)     /* "Kark": a head */
        return SL_NOT_REC;
    if (HEAD + (size_t)len > avail) {
        *need = HEAD + (size_t)len;
        return SL_NEED_MORE;
    }
    uint32_t crc = sl_scan_crc(p + HEAD, len);
    if (crc_verify && crc != crc32c_update(0, p + HEAD, len))
        crc_wrong++;
    return crc == get32(p + 4) ? HEAD + (long long)len : SL_NOT_REC;
}

/* Resyncs over n bytes of garbage with a head every 16 KiB claiming a
 * record up to the end of the file (failing its checksum), then one valid
 * record of 64 KiB at the end; returns the bytes checksummed, and checks
 * the resync found that record. */
static uint64_t resync_crc_bytes(size_t n, uint64_t *heads)
{
    const size_t spacing = 16u << 10, vlen = 64u << 10;
    unsigned char *g = malloc(n);
    if (!g)
        abort();
    for (size_t i = 0; i < n; i++)
        g[i] = (unsigned char)(i * 2654435761u >> 13);
    size_t v = n - HEAD - vlen;
    *heads = 0;
    for (size_t o = 0; o + spacing <= v; o += spacing, (*heads)++) {
        put32(g + o, (uint32_t)(n - o - HEAD));
        put32(g + o + 4, 0);
        put32(g + o + 8, 0x6b72614b);
    }
    put32(g + v, (uint32_t)vlen);
    put32(g + v + 4, crc32c_update(0, g + v + HEAD, vlen));
    put32(g + v + 8, 0x6b72614b);
    char path[300];
    snprintf(path, sizeof(path), "%s/garbage", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, g, n) != (ssize_t)n)
        abort();
    free(g);
    sl_scan sc;
    memset(&sc, 0, sizeof(sc));
    sc.io = kio_default();
    sc.fd = fd;
    sc.version = 7;
    sc.fsize = n;
    sc.check = crc_check;
    sc.first = HEAD;
    CHECK_EQ_INT(sl_scan_resync(&sc, 0, NULL), v);
    uint64_t bytes = sc.crc_bytes;
    sl_scan_done(&sc);
    close(fd);
    unlink(path);
    return bytes;
}

/* Salvage's resync checksums each byte of a damaged segment about once,
 * whatever lengths its garbage claims: under 2 n plus 2 * SL_CRC_STEP a
 * claim, for n and 4 n, and the valid record after the garbage is found
 * (each answer compared with crc32c_update's on the smaller run).
 * Negative check: checksumming each claim afresh, as checks did before,
 * is quadratic and breaks the same ceiling. */
static void test_resync_checksums_linearly(void)
{
    const size_t n = 4u << 20;
    uint64_t h1, h4, hold;
    fresh_dir();
    crc_verify = true;
    uint64_t b1 = resync_crc_bytes(n, &h1);
    crc_verify = false;
    CHECK_EQ_INT(crc_wrong, 0);
    uint64_t b4 = resync_crc_bytes(4 * n, &h4);
    CHECK(h1 > 200 && b1 <= 2 * n + h1 * 2 * SL_CRC_STEP);
    CHECK(b4 <= 2 * 4 * n + h4 * 2 * SL_CRC_STEP);
    kura_test.sl_scan_crc_direct = true;
    uint64_t old = resync_crc_bytes(n, &hold);
    kura_test.sl_scan_crc_direct = false;
    CHECK(old > 2 * n + hold * 2 * SL_CRC_STEP);
    printf("# resync over %zu and %zu bytes with %llu and %llu long claims checksummed "
           "%llu and %llu bytes (each claim afresh: %llu)\n", n, 4 * n,
           (unsigned long long)h1, (unsigned long long)h4, (unsigned long long)b1,
           (unsigned long long)b4, (unsigned long long)old);
}

/* kB of the process's resident set in the mapping that starts at addr
 * (/proc/self/smaps), or -1. */
static long mapping_rss_kb(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    bool in = false;
    long kb = -1;
    while (f && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = lo == (unsigned long)addr;
        else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1)
            break;
    }
    if (f)
        fclose(f);
    return kb;
}

/* Appends through the mapping until the first segment is sealed; the kB
 * of it then resident in this process. */
static long sealed_rss_kb(void)
{
    sl_log log;
    sl_loc loc;
    fresh_dir();
    sl_config c = config(true, NULL);
    c.segsiz = 8u << 20;
    if (open_all(&log, &c) != 0)
        return -1;
    uint64_t i = 1;
    while (sl_rolls(&log) == 0 && append_one(&log, i, &loc) == KURA_OK)
        i++;
    sl_seg *sg = sl_seg_get(&log, 1);
    long kb = sg && sg->map ? mapping_rss_kb(sg->map) : -1;
    sl_destroy(&log);
    return kb;
}

/* A sealed segment's pages leave the process's resident set once it is
 * synced (they stay in the page cache), so that a long update log is not
 * all counted in kurad's RSS; negative check: kept (as before), the
 * segment's 8 MB are resident. */
static void test_sealed_segment_released(void)
{
    long kb = sealed_rss_kb();
    kura_test.sl_keep_sealed_resident = true;
    long kept = sealed_rss_kb();
    kura_test.sl_keep_sealed_resident = false;
    printf("# a sealed 8 MB segment: %ld kB resident (kept: %ld kB)\n", kb, kept);
    CHECK(kb >= 0 && kb < 1024);
    CHECK(kept > 6 * 1024);
}

/* Appends one record of the given payload (any length up to 1 MiB). */
static int append_bytes(sl_log *log, const unsigned char *pl, size_t len, sl_loc *loc)
{
    unsigned char head[HEAD];
    rec r = { pl, len };
    struct iovec iov[2] = { { head, 0 }, { (void *)pl, len } };
    return sl_append(log, iov, 2, HEAD, len, true, frame, &r, loc);
}

/* Appends 200 records of 20,000 bytes through a log whose active segment is
 * mapped for writing; the kB of that mapping then resident in the process
 * (-2: the segment was not mapped, -1: an append failed). */
static long large_records_rss_kb(void)
{
    sl_log log;
    sl_loc loc;
    static unsigned char pl[20000];
    fresh_dir();
    sl_config c = config(true, NULL);
    c.segsiz = 8u << 20;
    if (open_all(&log, &c) != 0)
        return -1;
    long kb = log.active->wmap ? 0 : -2;
    for (uint64_t i = 1; kb == 0 && i <= 200; i++) {
        memset(pl, (int)i, sizeof(pl));
        if (append_bytes(&log, pl, sizeof(pl), &loc) != KURA_OK)
            kb = -1;
    }
    if (kb == 0)
        kb = mapping_rss_kb(log.active->wmap);
    sl_destroy(&log);
    return kb;
}

/* A record of a page or more goes into a mapped segment with pwritev, so
 * its pages are never faulted in through the mapping (which reads each
 * preallocated page in as zeros before the copy overwrites it: half a
 * worker's time under 20 KB sets); negative check: through the mapping (as
 * before), the 4 MB appended are resident in the mapping. */
static void test_large_records_skip_mapping(void)
{
    long kb = large_records_rss_kb();
    if (kb == -2)
        SKIP_NA("the file system here cannot preallocate a segment: nothing is mapped");
    kura_test.sl_large_via_map = true;
    long mapped = large_records_rss_kb();
    kura_test.sl_large_via_map = false;
    printf("# 200 records of 20 KB: %ld kB resident in the write mapping (through it: %ld kB)\n",
           kb, mapped);
    CHECK(kb >= 0 && kb < 512);
    CHECK(mapped > 3 * 1024);
}

/* Records on both sides of the page boundary, interleaved, in a mapped
 * segment: each reads back at its location at once (the mapping and
 * pwritev share the page cache), and after a reopen a scan finds them all
 * in order. */
static void test_mixed_sizes_read_back(void)
{
    static const size_t sizes[] = { 50, 20000, 4079, 4080, 300, 70000, 1, 4096, 9000, 100 };
    enum { N = 120 };
    static unsigned char pl[70000], got[70000];
    sl_loc locs[N];
    sl_log log;
    fresh_dir();
    sl_config c = config(true, NULL);
    c.segsiz = 1u << 20;
    REQUIRE(open_all(&log, &c) == 0);
    for (int i = 0; i < N; i++) {
        size_t len = sizes[i % 10];
        for (size_t k = 0; k < len; k++)
            pl[k] = (unsigned char)(i * 7 + k);
        REQUIRE(append_bytes(&log, pl, len, &locs[i]) == KURA_OK);
        const unsigned char *p;
        uint32_t version;
        REQUIRE(sl_read(&log, locs[i].seg, locs[i].off, HEAD + len, &p, &version) == KURA_OK);
        CHECK(get32(p) == len && memcmp(p + HEAD, pl, len) == 0);
    }
    CHECK(sl_rolls(&log) >= 1);
    CHECK(sl_sync_now(&log) == KURA_OK);
    uint32_t last = sl_active_id(&log);
    sl_unmap_active(&log);
    sl_destroy(&log);

    REQUIRE(open_all(&log, &c) == 0);
    int i = 0;
    for (uint32_t id = 1; id <= last; id++) {
        sl_seg *sg = sl_seg_get(&log, id);
        if (!sg)
            continue;
        sl_scan sc;
        sl_scan_init(&sc, &log, sg, HEAD);
        uint64_t off = SL_SEG_HDR;
        const unsigned char *p;
        size_t len;
        uint64_t recno;
        while (sl_scan_rec(&sc, off, &recno, &p, &len) == KURA_OK) {
            size_t want = sizes[i % 10];
            memcpy(got, p + HEAD, len - HEAD);
            for (size_t k = 0; k < want; k++)
                pl[k] = (unsigned char)(i * 7 + k);
            CHECK(recno == (uint64_t)i + 1 && len == HEAD + want && memcmp(got, pl, want) == 0);
            CHECK(id == locs[i].seg && off == locs[i].off);
            i++;
            off += len;
        }
        sl_scan_done(&sc);
    }
    CHECK_EQ_INT(i, N);
    sl_destroy(&log);
}

int main(void)
{
    RUN(test_append_roll_reopen_pwritev);
    RUN(test_append_roll_reopen_mapped);
    RUN(test_group_commit_threads);
    RUN(test_torn_tail_cut);
    RUN(test_torn_creation);
    RUN(test_failed_sync_is_sticky);
    RUN(test_presync_before_every_sync);
    RUN(test_resync_reads_linearly);
    RUN(test_resync_checksums_linearly);
    RUN(test_sealed_segment_released);
    RUN(test_large_records_skip_mapping);
    RUN(test_mixed_sizes_read_back);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {}
    UNIT_DONE();
}

/*
 * test_kio_sim.c - the test support of kio_sim.c checked on plain files,
 * before anything relies on it: the recorder's images (a synced write
 * survives every image; an unsynced one appears whole, torn (at pages and
 * sectors, with the size before or after it) or not at all;
 * a creation or rename without a directory fsync may be undone, a rename
 * atomically; a truncate is pending like a write, and so is a punched
 * hole (zeros once it happened, the size kept); a cut point before a
 * write never shows it; "fsync lies" makes nothing durable; writable
 * shared mappings are refused) and the injector (exactly the Nth call of a
 * kind fails, with the errno asked for or a short write, and only on
 * matching paths).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit.h"
#include "kio_sim.h"

static char base[256];

static void setup(void)
{
    snprintf(base, sizeof(base), "%s/kura-kiosim-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        exit(2);
    }
}

/* "<base>/<name>" */
static const char *P(const char *name)
{
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", base, name);
    return b;
}

/* A file's content (up to cap bytes); its size, or -1 if it is absent. */
static long slurp(const char *path, unsigned char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap);
    close(fd);
    return n;
}

static void wr(const kura_io *io, int fd, int c, size_t n, off_t off)
{
    unsigned char b[8192];
    memset(b, c, n);
    struct iovec v = { b, n };
    CHECK(io->pwritev(io, fd, &v, 1, off) == (ssize_t)n);
}

/* A synced write is in every image; the unsynced one after it is absent,
 * whole, a sector prefix, or whole-sized with zeroed pages; each is seen. */
static void test_synced_survives_unsynced_varies(void)
{
    kio_rmrf(P("r1"));
    mkdir(P("r1"), 0755);
    kio_rec *r = kio_rec_new(P("r1"), NULL);
    REQUIRE(r);
    const kura_io *io = kio_rec_io(r);
    int dfd = io->open(io, AT_FDCWD, P("r1"), O_RDONLY | O_DIRECTORY, 0);
    int fd = io->open(io, dfd, "f", O_RDWR | O_CREAT | O_EXCL, 0644);
    REQUIRE(dfd >= 0 && fd >= 0);
    wr(io, fd, 'A', 5000, 0);
    CHECK(io->fdatasync(io, fd) == 0);
    CHECK(io->fsync(io, dfd) == 0);
    uint64_t synced = kio_rec_ops(r);
    wr(io, fd, 'B', 6000, 5000);
    uint64_t end = kio_rec_ops(r);
    int seen_none = 0, seen_whole = 0, seen_pages = 0, seen_sector = 0;
    static unsigned char buf[20000];
    for (uint64_t seed = 0; seed < 300; seed++) {
        char err[256];
        REQUIRE(kio_rec_image(r, end, seed, P("img"), err, sizeof(err)) == 0);
        char f[600];
        snprintf(f, sizeof(f), "%s/f", P("img"));
        long n = slurp(f, buf, sizeof(buf));
        REQUIRE(n == 5000 || n == 11000);   /* the size before or after */
        for (int i = 0; i < 5000; i++)
            if (buf[i] != 'A') {
                printf("# seed %llu: byte %d is %d\n", (unsigned long long)seed, i, buf[i]);
                REQUIRE(buf[i] == 'A');
            }
        if (n == 5000) {
            seen_none++;
            continue;
        }
        /* each sector of the write is all B (written) or all zero (not) */
        long bs = 0;
        bool mixed_page = false;
        for (long sec = 5000; sec < 11000; sec = (sec / 512 + 1) * 512) {
            long e = (sec / 512 + 1) * 512 < 11000 ? (sec / 512 + 1) * 512 : 11000;
            int c = buf[sec];
            for (long i = sec; i < e; i++)
                if (buf[i] != c || (c != 'B' && c != 0)) {
                    printf("# seed %llu: sector at %ld mixed\n", (unsigned long long)seed, sec);
                    REQUIRE(!"a sector holds a mix");
                }
            bs += c == 'B';
            /* a page whose sectors differ: torn inside the page */
            if (sec % 4096 != 0 && sec > 5000 && sec / 4096 == (sec - 1) / 4096 &&
                buf[sec] != buf[sec - 1])
                mixed_page = true;
        }
        if (bs == 12)
            seen_whole++;
        else
            seen_pages++;
        seen_sector += mixed_page;
    }
    CHECK(seen_none && seen_whole && seen_pages && seen_sector);
    /* a cut point before the write: never there */
    for (uint64_t seed = 0; seed < 20; seed++) {
        char err[256], f[600];
        REQUIRE(kio_rec_image(r, synced, seed, P("img"), err, sizeof(err)) == 0);
        snprintf(f, sizeof(f), "%s/f", P("img"));
        CHECK(slurp(f, buf, sizeof(buf)) == 5000);
    }
    /* ... and after a sync of the file, always */
    CHECK(io->fdatasync(io, fd) == 0);
    for (uint64_t seed = 0; seed < 20; seed++) {
        char err[256], f[600];
        REQUIRE(kio_rec_image(r, kio_rec_ops(r), seed, P("img"), err, sizeof(err)) == 0);
        snprintf(f, sizeof(f), "%s/f", P("img"));
        CHECK(slurp(f, buf, sizeof(buf)) == 11000 && buf[10999] == 'B');
    }
    io->close(io, fd);
    io->close(io, dfd);
    kio_rec_free(r);
}

/* A created, synced file without a directory fsync may be missing; when it
 * is there, its synced content is whole. */
static void test_creation_needs_dir_fsync(void)
{
    kio_rmrf(P("r2"));
    mkdir(P("r2"), 0755);
    kio_rec *r = kio_rec_new(P("r2"), NULL);
    REQUIRE(r);
    const kura_io *io = kio_rec_io(r);
    int fd = io->open(io, AT_FDCWD, P("r2/new"), O_RDWR | O_CREAT | O_EXCL, 0644);
    REQUIRE(fd >= 0);
    wr(io, fd, 'C', 3000, 0);
    CHECK(io->fdatasync(io, fd) == 0);
    int absent = 0, present = 0;
    unsigned char buf[4000];
    for (uint64_t seed = 0; seed < 100; seed++) {
        char err[256];
        REQUIRE(kio_rec_image(r, kio_rec_ops(r), seed, P("img"), err, sizeof(err)) == 0);
        char f[600];
        snprintf(f, sizeof(f), "%s/new", P("img"));
        long n = slurp(f, buf, sizeof(buf));
        if (n < 0) {
            absent++;
        } else {
            present++;
            CHECK(n == 3000 && buf[0] == 'C' && buf[2999] == 'C');
        }
    }
    CHECK(absent && present);
    int dfd = io->open(io, AT_FDCWD, P("r2"), O_RDONLY | O_DIRECTORY, 0);
    CHECK(io->fsync(io, dfd) == 0);
    for (uint64_t seed = 0; seed < 30; seed++) {
        char err[256], f[600];
        REQUIRE(kio_rec_image(r, kio_rec_ops(r), seed, P("img"), err, sizeof(err)) == 0);
        snprintf(f, sizeof(f), "%s/new", P("img"));
        CHECK(slurp(f, buf, sizeof(buf)) == 3000);
    }
    io->close(io, fd);
    io->close(io, dfd);
    kio_rec_free(r);
}

/* A rename over an existing file, without a directory fsync: the old file
 * or the new one, never neither; after the fsync, the new one only.  An
 * unlink likewise may be undone until then.  Files present when recording
 * began count as durable. */
static void test_rename_atomic_and_undoable(void)
{
    kio_rmrf(P("r3"));
    mkdir(P("r3"), 0755);
    FILE *f0 = fopen(P("r3/cur"), "w");
    REQUIRE(f0);
    fputs("old", f0);
    fclose(f0);
    f0 = fopen(P("r3/junk"), "w");
    REQUIRE(f0);
    fclose(f0);
    kio_rec *r = kio_rec_new(P("r3"), NULL);
    REQUIRE(r);
    const kura_io *io = kio_rec_io(r);
    int dfd = io->open(io, AT_FDCWD, P("r3"), O_RDONLY | O_DIRECTORY, 0);
    int fd = io->open(io, dfd, "cur.tmp", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(dfd >= 0 && fd >= 0);
    struct iovec v = { "new!", 4 };
    CHECK(io->pwritev(io, fd, &v, 1, 0) == 4);
    CHECK(io->fdatasync(io, fd) == 0);
    CHECK(io->renameat(io, dfd, "cur.tmp", dfd, "cur") == 0);
    CHECK(io->unlinkat(io, dfd, "junk", 0) == 0);
    int olds = 0, news = 0, junk = 0;
    unsigned char buf[16];
    for (uint64_t seed = 0; seed < 100; seed++) {
        char err[256], f[600];
        REQUIRE(kio_rec_image(r, kio_rec_ops(r), seed, P("img"), err, sizeof(err)) == 0);
        snprintf(f, sizeof(f), "%s/cur", P("img"));
        long n = slurp(f, buf, sizeof(buf));
        if (n == 3 && memcmp(buf, "old", 3) == 0)
            olds++;
        else if (n == 4 && memcmp(buf, "new!", 4) == 0)
            news++;
        else
            CHECK(!"cur is neither the old file nor the new one");
        snprintf(f, sizeof(f), "%s/junk", P("img"));
        junk += slurp(f, buf, sizeof(buf)) == 0;
    }
    CHECK(olds && news && junk && junk < 100);
    CHECK(io->fsync(io, dfd) == 0);
    for (uint64_t seed = 0; seed < 30; seed++) {
        char err[256], f[600];
        REQUIRE(kio_rec_image(r, kio_rec_ops(r), seed, P("img"), err, sizeof(err)) == 0);
        snprintf(f, sizeof(f), "%s/cur", P("img"));
        CHECK(slurp(f, buf, sizeof(buf)) == 4);
        snprintf(f, sizeof(f), "%s/cur.tmp", P("img"));
        CHECK(slurp(f, buf, sizeof(buf)) == -1);
        snprintf(f, sizeof(f), "%s/junk", P("img"));
        CHECK(slurp(f, buf, sizeof(buf)) == -1);
    }
    io->close(io, fd);
    io->close(io, dfd);
    kio_rec_free(r);
}

/* A truncate or fallocate is pending like a write; images at descending
 * cut points (the simulation starts over) agree with ascending ones. */
static void test_size_changes_pending(void)
{
    kio_rmrf(P("r4"));
    mkdir(P("r4"), 0755);
    kio_rec *r = kio_rec_new(P("r4"), NULL);
    REQUIRE(r);
    const kura_io *io = kio_rec_io(r);
    int dfd = io->open(io, AT_FDCWD, P("r4"), O_RDONLY | O_DIRECTORY, 0);
    int fd = io->open(io, dfd, "t", O_RDWR | O_CREAT, 0644);
    REQUIRE(dfd >= 0 && fd >= 0);
    wr(io, fd, 'D', 4096, 0);
    CHECK(io->fsync(io, fd) == 0);
    CHECK(io->fsync(io, dfd) == 0);
    CHECK(io->ftruncate(io, fd, 10) == 0);
    uint64_t after_trunc = kio_rec_ops(r);
    CHECK(io->fallocate(io, fd, 0, 65536) == 0);
    uint64_t end = kio_rec_ops(r);
    int sizes[3] = { 0 };
    unsigned char buf[70000];
    for (uint64_t seed = 0; seed < 60; seed++) {
        char err[256], f[600];
        REQUIRE(kio_rec_image(r, after_trunc, seed, P("img"), err, sizeof(err)) == 0);
        snprintf(f, sizeof(f), "%s/t", P("img"));
        long n = slurp(f, buf, sizeof(buf));
        CHECK(n == 4096 || n == 10);
        sizes[n == 10]++;
        REQUIRE(kio_rec_image(r, end, seed, P("img"), err, sizeof(err)) == 0);
        n = slurp(f, buf, sizeof(buf));
        CHECK(n == 4096 || n == 10 || n == 65536);
        if (n == 65536)
            sizes[2]++;
    }
    CHECK(sizes[0] && sizes[1] && sizes[2]);
    io->close(io, fd);
    io->close(io, dfd);
    kio_rec_free(r);
}

/* A punched hole is pending like a write: before a sync covers it an
 * image holds the old bytes or zeros there (sector by sector), never anything
 * else, and the size stays; after the sync, zeros. */
static void test_punch_pending(void)
{
    kio_rmrf(P("r6"));
    mkdir(P("r6"), 0755);
    kio_rec *r = kio_rec_new(P("r6"), NULL);
    REQUIRE(r);
    const kura_io *io = kio_rec_io(r);
    int dfd = io->open(io, AT_FDCWD, P("r6"), O_RDONLY | O_DIRECTORY, 0);
    int fd = io->open(io, dfd, "p", O_RDWR | O_CREAT, 0644);
    REQUIRE(dfd >= 0 && fd >= 0);
    wr(io, fd, 'P', 8192, 0);
    wr(io, fd, 'Q', 8192, 8192);
    CHECK(io->fsync(io, fd) == 0);
    CHECK(io->fsync(io, dfd) == 0);
    int prc = io->punch(io, fd, 4096, 8192);
    if (prc != 0 && errno == EOPNOTSUPP) {
        io->close(io, fd);
        io->close(io, dfd);
        kio_rec_free(r);
        SKIP_NA("the file system under the test directory does not punch holes");
    }
    REQUIRE(prc == 0);
    uint64_t punched = kio_rec_ops(r);
    CHECK(io->fdatasync(io, fd) == 0);
    uint64_t synced = kio_rec_ops(r);
    int seen[2] = { 0 };            /* images with the hole, without */
    unsigned char buf[20000];
    char err[256], f[600];
    snprintf(f, sizeof(f), "%s/p", P("img"));
    for (uint64_t seed = 0; seed < 40; seed++) {
        REQUIRE(kio_rec_image(r, punched, seed, P("img"), err, sizeof(err)) == 0);
        long n = slurp(f, buf, sizeof(buf));
        CHECK_EQ_INT(n, 16384);
        /* each sector old or zeros (a page may be torn at a sector, as
         * for a write: stale bytes either way) */
        for (int sec = 8; sec < 24; sec++) {
            unsigned char old = sec < 16 ? 'P' : 'Q', b = buf[sec * 512];
            CHECK(b == 0 || b == old);
            for (int i = 1; i < 512; i++)
                if (buf[sec * 512 + i] != b) {
                    CHECK(buf[sec * 512 + i] == b);
                    break;
                }
            seen[b == 0]++;
        }
        CHECK(buf[0] == 'P' && buf[4095] == 'P' && buf[12288] == 'Q' && buf[16383] == 'Q');
        REQUIRE(kio_rec_image(r, synced, seed, P("img"), err, sizeof(err)) == 0);
        n = slurp(f, buf, sizeof(buf));
        CHECK_EQ_INT(n, 16384);
        CHECK(buf[4096] == 0 && buf[12287] == 0 && buf[4095] == 'P' && buf[12288] == 'Q');
    }
    CHECK(seen[0] > 0 && seen[1] > 0);
    /* the file itself: zeros there, the size kept */
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == 16384);
    io->close(io, fd);
    io->close(io, dfd);
    kio_rec_free(r);
}

/* With "fsync lies", a synced write (and the file's creation) is missing
 * from some images. */
static void test_lies(void)
{
    kio_rmrf(P("r5"));
    mkdir(P("r5"), 0755);
    kio_rec *r = kio_rec_new(P("r5"), NULL);
    REQUIRE(r);
    kio_rec_set_lies(r, true);
    const kura_io *io = kio_rec_io(r);
    int dfd = io->open(io, AT_FDCWD, P("r5"), O_RDONLY | O_DIRECTORY, 0);
    int fd = io->open(io, dfd, "f", O_RDWR | O_CREAT, 0644);
    REQUIRE(dfd >= 0 && fd >= 0);
    wr(io, fd, 'E', 100, 0);
    CHECK(io->fdatasync(io, fd) == 0);
    CHECK(io->fsync(io, dfd) == 0);
    int lost = 0;
    unsigned char buf[200];
    for (uint64_t seed = 0; seed < 50; seed++) {
        char err[256], f[600];
        REQUIRE(kio_rec_image(r, kio_rec_ops(r), seed, P("img"), err, sizeof(err)) == 0);
        snprintf(f, sizeof(f), "%s/f", P("img"));
        lost += slurp(f, buf, sizeof(buf)) != 100;
    }
    CHECK(lost > 0);
    io->close(io, fd);
    io->close(io, dfd);
    kio_rec_free(r);
}

/* Writable shared mappings are refused (the store then uses pwritev);
 * read-only ones pass. */
static void test_mmap_refused(void)
{
    kio_rmrf(P("r6"));
    mkdir(P("r6"), 0755);
    kio_rec *r = kio_rec_new(P("r6"), NULL);
    REQUIRE(r);
    const kura_io *io = kio_rec_io(r);
    int fd = io->open(io, AT_FDCWD, P("r6/m"), O_RDWR | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    wr(io, fd, 'F', 4096, 0);
    errno = 0;
    CHECK(io->mmap(io, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
    CHECK(errno == ENODEV);
    unsigned char *m = io->mmap(io, 4096, PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(m != MAP_FAILED);
    CHECK(m[4095] == 'F');
    CHECK(io->munmap(io, m, 4096) == 0);
    io->close(io, fd);
    kio_rec_free(r);
}

/* Exactly the Nth call of a kind fails (counted over matching paths only),
 * for every N of a small workload; a short write writes half. */
static void test_injector_nth(void)
{
    kio_rmrf(P("r7"));
    mkdir(P("r7"), 0755);
    kio_inject *in = kio_inject_new(NULL);
    REQUIRE(in);
    const kura_io *io = kio_inject_io(in);
    kio_inject_match(in, "r7/x");
    /* count: 3 fdatasyncs on matching files, 1 on another */
    int a = io->open(io, AT_FDCWD, P("r7/xa"), O_RDWR | O_CREAT, 0644);
    int b = io->open(io, AT_FDCWD, P("r7/other"), O_RDWR | O_CREAT, 0644);
    REQUIRE(a >= 0 && b >= 0);
    CHECK_EQ_INT(kio_inject_calls(in, KIO_OPEN), 1);
    kio_inject_reset(in);
    for (int i = 0; i < 3; i++)
        CHECK(io->fdatasync(io, a) == 0);
    CHECK(io->fdatasync(io, b) == 0);
    uint64_t total = kio_inject_calls(in, KIO_FDATASYNC);
    CHECK_EQ_INT(total, 3);
    for (uint64_t n = 1; n <= total; n++) {
        kio_inject_reset(in);
        kio_inject_fail(in, KIO_FDATASYNC, n, 1, EIO);
        for (uint64_t i = 1; i <= total; i++) {
            CHECK(io->fdatasync(io, b) == 0);
            errno = 0;
            int rc = io->fdatasync(io, a);
            CHECK(rc == (i == n ? -1 : 0));
            if (i == n)
                CHECK(errno == EIO);
        }
        CHECK_EQ_INT(kio_inject_fired(in), 1);
    }
    /* from N on, until disarmed */
    kio_inject_reset(in);
    kio_inject_fail(in, KIO_PWRITEV, 2, 0, ENOSPC);
    struct iovec v = { "0123456789", 10 };
    CHECK(io->pwritev(io, a, &v, 1, 0) == 10);
    CHECK(io->pwritev(io, a, &v, 1, 0) == -1 && errno == ENOSPC);
    CHECK(io->pwritev(io, a, &v, 1, 0) == -1 && errno == ENOSPC);
    kio_inject_disarm(in);
    CHECK(io->pwritev(io, a, &v, 1, 0) == 10);
    /* a short write */
    kio_inject_reset(in);
    kio_inject_fail(in, KIO_PWRITEV, 1, 1, KIO_SHORT);
    struct iovec v2[2] = { { "abc", 3 }, { "defghij", 7 } };
    CHECK(io->pwritev(io, a, v2, 2, 20) == 5);
    unsigned char buf[64];
    CHECK(pread(a, buf, 10, 20) == 5 && memcmp(buf, "abcde", 5) == 0);
    /* other kinds */
    kio_inject_match(in, NULL);
    kio_inject_reset(in);
    kio_inject_fail(in, KIO_RENAMEAT, 1, 1, EIO);
    CHECK(io->renameat(io, AT_FDCWD, P("r7/xa"), AT_FDCWD, P("r7/xb")) == -1 && errno == EIO);
    CHECK(io->renameat(io, AT_FDCWD, P("r7/xa"), AT_FDCWD, P("r7/xb")) == 0);
    kio_inject_fail(in, KIO_MMAP, 1, 1, ENOMEM);
    CHECK(io->mmap(io, 10, PROT_READ, MAP_SHARED, a, 0) == MAP_FAILED && errno == ENOMEM);
    kio_inject_fail(in, KIO_FALLOCATE, 1, 1, ENOSPC);
    CHECK(io->fallocate(io, a, 0, 4096) == -1 && errno == ENOSPC);
    CHECK(io->fallocate(io, a, 0, 4096) == 0);
    io->close(io, a);
    io->close(io, b);
    kio_inject_free(in);
}

int main(void)
{
    setup();
    RUN(test_synced_survives_unsynced_varies);
    RUN(test_creation_needs_dir_fsync);
    RUN(test_rename_atomic_and_undoable);
    RUN(test_size_changes_pending);
    RUN(test_punch_pending);
    RUN(test_lies);
    RUN(test_mmap_refused);
    RUN(test_injector_nth);
    kio_rmrf(base);
    UNIT_DONE();
}

/*
 * test_ulog.c - the hybrid logical clock (src/log/hlc.c) and the update log
 * (src/log/ulog.c) on their own, in a temp directory: the clock strictly
 * increasing under 4 threads and when the wall clock goes back (an injected
 * clock function); every row type round-tripping (a 250-byte key, a 1 MB
 * value, a negative exptime); rotation into several segments and readers
 * started from several timestamps (the start, the middle, exactly a row's,
 * between rows, past the end and then following the tail, before the oldest
 * after pruning: "not held"); reopening after a close and after a torn
 * tail (rows up to the tear, appends going on with larger timestamps), and
 * through seglog's write mapping (a tail of zeros cut silently);
 * retention under a cap; the read-only open (nothing in the directory
 * changes; appends and prunes refused), the segment listing and pruning up
 * to a timestamp (kuractl's); appends from 4 threads with group commit; a reader
 * following two appending threads while a third prunes; and a
 * failed fdatasync (a kura_io wrapper) stopping appends for good.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/hlc.h"
#include "kura/store.h"
#include "kura/ulog.h"
#include "kio_sim.h"
#include "unit.h"

static char dir[256];

static void fresh_dir(void)
{
    char cmd[300];
    snprintf(dir, sizeof(dir), "/tmp/kura-ulog-%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {}
    mkdir(dir, 0755);
}

static int log_lines;
static void quiet(void *arg, int level, const char *line)
{
    (void)arg; (void)level; (void)line;
    log_lines++;
}

/* A wall clock the test sets (fixed_us), or one that steps 10 us a call. */
static _Atomic uint64_t fixed_us;
static uint64_t fixed_clock(void)
{
    return atomic_load(&fixed_us);
}
static _Atomic uint64_t step_us = 1000000;
static uint64_t step_clock(void)
{
    return atomic_fetch_add(&step_us, 10) + 10;
}

static hlc clk;

static ul_config config(uint64_t ulim, const kura_io *io)
{
    ul_config c = { .dir = dir, .sid = 7, .ulim = ulim, .clock = &clk, .io = io,
                    .log = quiet };
    return c;
}

static ul_log *open_log(const ul_config *c, uint64_t *cut)
{
    ul_log *log = NULL;
    char err[300];
    int rc = ul_open(c, &log, cut, err, sizeof(err));
    if (rc)
        printf("# ul_open: %d %s\n", rc, err);
    return log;
}

/* ---- the clock ----------------------------------------------------------- */

#define HLC_N 50000

typedef struct hlc_worker {
    hlc *c;
    uint64_t *out;
    int bad;
} hlc_worker;

static void *hlc_thread(void *arg)
{
    hlc_worker *w = arg;
    uint64_t prev = 0;
    for (int i = 0; i < HLC_N; i++) {
        uint64_t t = hlc_now(w->c);
        if (t <= prev)
            w->bad++;
        w->out[i] = prev = t;
        if (i % 1000 == 0)      /* the wall clock goes back, now and then */
            atomic_fetch_sub(&fixed_us, 3);
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_hlc_threads(void)
{
    hlc c;
    atomic_store(&fixed_us, 5000000);
    hlc_init(&c, fixed_clock);
    uint64_t *all = malloc(4 * HLC_N * sizeof(uint64_t));
    REQUIRE(all);
    pthread_t t[4];
    hlc_worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (hlc_worker){ &c, all + (size_t)i * HLC_N, 0 };
        pthread_create(&t[i], NULL, hlc_thread, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ_INT(w[i].bad, 0);
    }
    qsort(all, 4 * HLC_N, sizeof(uint64_t), cmp_u64);
    int dups = 0;
    for (size_t i = 1; i < 4 * HLC_N; i++)
        dups += all[i] == all[i - 1];
    CHECK_EQ_INT(dups, 0);
    CHECK(all[0] >= hlc_make(5000000 - 4 * HLC_N / 1000 * 3 - 12, 0));
    CHECK_EQ_INT(hlc_last(&c), all[4 * HLC_N - 1]);
    free(all);

    /* the real clock: near now */
    hlc r;
    hlc_init(&r, NULL);
    uint64_t a = hlc_now(&r), w0 = hlc_wall_us();
    CHECK(hlc_us(a) <= w0 && w0 - hlc_us(a) < 60u * 1000000u);
}

/* Two clocks tagged 1 and 2 (a dual master's cas) in the same microsecond:
 * their values never meet, each ends in its tag and increases, and of two
 * readings in the same step the larger tag is larger. */
static void test_hlc_tagged(void)
{
    hlc a, b;
    atomic_store(&fixed_us, 2000000);
    hlc_init(&a, fixed_clock);
    hlc_init(&b, fixed_clock);
    uint64_t pa = 0, pb = 0;
    bool ok = true;
    for (int i = 0; i < 100; i++) {
        uint64_t x = hlc_now_tagged(&a, 1, 4), y = hlc_now_tagged(&b, 2, 4);
        ok = ok && (x & 15) == 1 && (y & 15) == 2 && x > pa && y > pb && x != y && y > x;
        pa = x;
        pb = y;
        if (i % 10 == 0)
            ok = ok && hlc_now(&a) > x;     /* untagged readings go on from there */
    }
    CHECK(ok);
    CHECK_EQ_INT(hlc_now_tagged(&a, 1, 0) > pa, 1);     /* 0 bits: as hlc_now */
    hlc_observe(&b, hlc_make(5000000, 0) | 7);
    CHECK_EQ_INT(hlc_now_tagged(&b, 2, 4), (hlc_make(5000000, 0) | 7) + 11);
}

static void test_hlc_clock_back(void)
{
    hlc c;
    atomic_store(&fixed_us, 1000000);
    hlc_init(&c, fixed_clock);
    uint64_t a = hlc_now(&c);
    CHECK_EQ_INT(a, hlc_make(1000000, 0));
    CHECK_EQ_INT(hlc_now(&c), hlc_make(1000000, 1));   /* same microsecond */
    atomic_store(&fixed_us, 500);                      /* an NTP step back */
    uint64_t b = hlc_now(&c);
    CHECK_EQ_INT(b, hlc_make(1000000, 2));
    /* a timestamp from another server, ahead of us */
    hlc_observe(&c, hlc_make(3000000, 7));
    CHECK_EQ_INT(hlc_now(&c), hlc_make(3000000, 8));
    hlc_observe(&c, 5);                                 /* behind: no effect */
    CHECK_EQ_INT(hlc_last(&c), hlc_make(3000000, 8));
    /* the counter runs over into the microseconds, still increasing */
    uint64_t prev = hlc_last(&c);
    for (int i = 0; i < 3 * (1 << HLC_CTR_BITS); i++) {
        uint64_t t = hlc_now(&c);
        if (t != prev + 1) {
            CHECK(t == prev + 1);
            break;
        }
        prev = t;
    }
    CHECK(hlc_us(prev) >= 3000002);
    /* once the wall clock passes it, the wall clock again */
    atomic_store(&fixed_us, 9000000);
    CHECK_EQ_INT(hlc_now(&c), hlc_make(9000000, 0));
    CHECK_EQ_INT(hlc_us(hlc_make(123, 45)), 123);
    CHECK_EQ_INT(hlc_ctr(hlc_make(123, 45)), 45);
}

/* ---- rows ---------------------------------------------------------------- */

static int append(ul_log *log, uint8_t type, const char *key, const void *val, size_t vlen,
                  int64_t exptime, ul_pos *pos)
{
    ul_row r = { .type = type, .flags = 0x1234, .exptime = exptime, .cas = 99,
                 .key = key, .klen = key ? strlen(key) : 0, .val = val, .vlen = vlen };
    return ul_append(log, &r, pos);
}

static void test_rows_roundtrip(void)
{
    fresh_dir();
    hlc_init(&clk, NULL);
    ul_config c = config(1 << 20, NULL);
    ul_log *log = open_log(&c, NULL);
    REQUIRE(log);
    char key[UL_KEY_MAX + 2];
    memset(key, 'k', sizeof(key));
    size_t vlen = 1 << 20;
    unsigned char *val = malloc(vlen);
    REQUIRE(val);
    for (size_t i = 0; i < vlen; i++)
        val[i] = (unsigned char)(i * 7 + 3);
    ul_pos pos[6];
    ul_row r;

    r = (ul_row){ .type = UL_PUT, .flags = 0xffffffffu, .exptime = -1, .cas = UINT64_MAX,
                  .key = key, .klen = UL_KEY_MAX, .val = val, .vlen = vlen };
    CHECK(ul_append(log, &r, &pos[0]) == KURA_OK);
    r = (ul_row){ .type = UL_PUT, .exptime = 1800000000, .cas = 1, .key = "a", .klen = 1,
                  .sid = 42 };
    CHECK(ul_append(log, &r, &pos[1]) == KURA_OK);     /* empty value, a foreign origin */
    r = (ul_row){ .type = UL_DEL, .key = key, .klen = UL_KEY_MAX };
    CHECK(ul_append(log, &r, &pos[2]) == KURA_OK);
    r = (ul_row){ .type = UL_FLUSH, .exptime = -5 };
    CHECK(ul_append(log, &r, &pos[3]) == KURA_OK);
    r = (ul_row){ .type = UL_FLUSH, .exptime = INT64_MAX };
    CHECK(ul_append(log, &r, &pos[4]) == KURA_OK);
    /* a timestamp observed elsewhere: the row's own is past it */
    uint64_t ahead = hlc_now(&clk) + hlc_make(1000000, 0);
    r = (ul_row){ .type = UL_DEL, .key = "b", .klen = 1, .origin_ts = ahead };
    CHECK(ul_append(log, &r, &pos[5]) == KURA_OK);
    CHECK(pos[5].ts > ahead);
    CHECK(ul_commit(log, pos[5].lsn) == KURA_OK);
    for (int i = 1; i < 6; i++)
        CHECK(pos[i].ts > pos[i - 1].ts && pos[i].lsn > pos[i - 1].lsn);

    /* bad rows */
    r = (ul_row){ .type = UL_PUT, .key = key, .klen = UL_KEY_MAX + 1 };
    CHECK(ul_append(log, &r, &pos[0]) == KURA_EINVAL);
    r = (ul_row){ .type = UL_DEL, .key = NULL, .klen = 0 };    /* (the empty key: "") */
    CHECK(ul_append(log, &r, &pos[0]) == KURA_EINVAL);
    r = (ul_row){ .type = UL_HDR };
    CHECK(ul_append(log, &r, &pos[0]) == KURA_EINVAL);
    r = (ul_row){ .type = 9, .key = "a", .klen = 1 };
    CHECK(ul_append(log, &r, &pos[0]) == KURA_EINVAL);

    ul_reader *rd;
    REQUIRE(ul_reader_open(log, 0, &rd) == KURA_OK);
    ul_row g;
    REQUIRE(ul_reader_next(rd, &g) == KURA_OK);
    CHECK(g.type == UL_PUT && g.ts == pos[0].ts && g.sid == 7 && g.flags == 0xffffffffu &&
          g.exptime == -1 && g.cas == UINT64_MAX && g.klen == UL_KEY_MAX &&
          memcmp(g.key, key, UL_KEY_MAX) == 0 && g.vlen == vlen &&
          memcmp(g.val, val, vlen) == 0);
    REQUIRE(ul_reader_next(rd, &g) == KURA_OK);
    CHECK(g.type == UL_PUT && g.ts == pos[1].ts && g.sid == 42 && g.exptime == 1800000000 &&
          g.cas == 1 && g.klen == 1 && memcmp(g.key, "a", 1) == 0 && g.vlen == 0);
    REQUIRE(ul_reader_next(rd, &g) == KURA_OK);
    CHECK(g.type == UL_DEL && g.ts == pos[2].ts && g.klen == UL_KEY_MAX && g.sid == 7);
    REQUIRE(ul_reader_next(rd, &g) == KURA_OK);
    CHECK(g.type == UL_FLUSH && g.ts == pos[3].ts && g.exptime == -5);
    REQUIRE(ul_reader_next(rd, &g) == KURA_OK);
    CHECK(g.type == UL_FLUSH && g.exptime == INT64_MAX);
    REQUIRE(ul_reader_next(rd, &g) == KURA_OK);
    CHECK(g.type == UL_DEL && g.ts == pos[5].ts && g.klen == 1);
    CHECK(ul_reader_next(rd, &g) == UL_CAUGHT_UP);
    ul_reader_close(rd);
    CHECK_EQ_INT(ul_last_ts(log), pos[5].ts);

    /* damage is seen: a flipped byte fails the CRC */
    unsigned char buf[UL_ROW_HEAD_MAX];
    size_t need;
    memset(buf, 0, sizeof(buf));
    CHECK(ul_decode(buf, sizeof(buf), &g, &need) == SL_NOT_REC);
    ul_close(log);
    free(val);
}

/* ---- rotation and readers ------------------------------------------------ */

#define NROWS 300

static void key_of(int i, char *k)
{
    snprintf(k, 32, "key-%d", i);
}

static int fill(ul_log *log, int from, int to, uint64_t *ts)
{
    for (int i = from; i < to; i++) {
        char k[32], v[100];
        key_of(i, k);
        memset(v, 'a' + i % 26, sizeof(v));
        ul_pos pos;
        if (append(log, UL_PUT, k, v, (size_t)(i % 90), i, &pos) != KURA_OK)
            return -1;
        ts[i] = pos.ts;
    }
    return 0;
}

/* Reads every row the reader has: the index in ts[] of the first, and the
 * count; -1 on a row out of order or not as written. */
static int read_all(ul_reader *rd, const uint64_t *ts, int n, int *first)
{
    ul_row g;
    int count = 0, at = -1, rc;
    while ((rc = ul_reader_next(rd, &g)) == KURA_OK) {
        if (at < 0) {
            for (at = 0; at < n && ts[at] != g.ts; at++)
                ;
            *first = at;
        } else {
            at++;
        }
        char k[32];
        key_of(at, k);
        if (at >= n || g.ts != ts[at] || g.type != UL_PUT || g.klen != strlen(k) ||
            memcmp(g.key, k, g.klen) != 0 || g.vlen != (size_t)(at % 90) || g.exptime != at)
            return -1;
        count++;
    }
    return rc == UL_CAUGHT_UP ? count : -1;
}

static int rows_after(ul_log *log, uint64_t after, const uint64_t *ts, int n, int *first)
{
    ul_reader *rd;
    int rc = ul_reader_open(log, after, &rd);
    if (rc)
        return rc == KURA_NOTFOUND ? -2 : -1;
    *first = -1;
    int count = read_all(rd, ts, n, first);
    ul_reader_close(rd);
    return count;
}

static void test_rotation_readers(void)
{
    fresh_dir();
    hlc_init(&clk, step_clock);         /* gaps of 10 us between rows */
    ul_config c = config(4096, NULL);
    ul_log *log = open_log(&c, NULL);
    REQUIRE(log);
    uint64_t ts[NROWS + 1];
    REQUIRE(fill(log, 0, NROWS, ts) == 0);
    ul_extent ex;
    ul_get_extent(log, &ex);
    CHECK(ex.segs >= 5);
    CHECK_EQ_INT(ex.first_seg, 1);
    CHECK_EQ_INT(ex.from_ts, 0);

    int first;
    CHECK_EQ_INT(rows_after(log, 0, ts, NROWS, &first), NROWS);
    CHECK_EQ_INT(first, 0);
    for (int i = 0; i < NROWS; i += 7) {
        /* exactly a row's timestamp: the rows after it */
        CHECK_EQ_INT(rows_after(log, ts[i], ts, NROWS, &first), NROWS - 1 - i);
        if (i < NROWS - 1)
            CHECK_EQ_INT(first, i + 1);
        /* between two rows, and just before one */
        CHECK_EQ_INT(rows_after(log, ts[i] + 5, ts, NROWS, &first), NROWS - 1 - i);
        CHECK_EQ_INT(rows_after(log, ts[i] - 1, ts, NROWS, &first), NROWS - i);
        CHECK_EQ_INT(first, i);
    }
    /* past the end: nothing yet; then the reader follows the tail, into
     * new segments too */
    ul_reader *rd;
    REQUIRE(ul_reader_open(log, ts[NROWS - 1], &rd) == KURA_OK);
    ul_row g;
    CHECK(ul_reader_next(rd, &g) == UL_CAUGHT_UP);
    uint64_t more[NROWS + 60];
    memcpy(more, ts, sizeof(uint64_t) * NROWS);
    REQUIRE(fill(log, NROWS, NROWS + 60, more) == 0);
    CHECK_EQ_INT(read_all(rd, more, NROWS + 60, &first), 60);
    CHECK_EQ_INT(first, NROWS);
    CHECK(ul_reader_next(rd, &g) == UL_CAUGHT_UP);
    ul_reader_close(rd);

    /* after pruning, a position before the oldest is no longer held */
    ul_prune_result pr;
    CHECK(ul_prune(log, 0, 4096 * 3, &pr) == KURA_OK);
    CHECK(pr.segs >= 2);
    CHECK_EQ_INT(pr.forced, pr.segs);
    ul_get_extent(log, &ex);
    CHECK_EQ_INT(ex.from_ts, pr.from_ts);
    CHECK(ex.first_seg > 1 && ex.bytes <= 4096 * 3);
    CHECK_EQ_INT(rows_after(log, 0, more, NROWS + 60, &first), -2);
    CHECK_EQ_INT(rows_after(log, ex.from_ts - 1, more, NROWS + 60, &first), -2);
    /* at the oldest position held: everything left, from the oldest row */
    int left = rows_after(log, ex.from_ts, more, NROWS + 60, &first);
    CHECK(left > 0 && first > 0 && more[first - 1] == ex.from_ts);
    CHECK_EQ_INT(left, NROWS + 60 - first);
    ul_close(log);
}

static void last_seg_path(char *path, size_t len);

/* Appends through seglog's write mapping: the same rows, and a reopen
 * finds the preallocated tail of zeros and cuts it without a word. */
static void test_mapwrite(void)
{
    fresh_dir();
    hlc_init(&clk, step_clock);
    ul_config c = config(8192, NULL);
    c.mapwrite = true;
    ul_log *log = open_log(&c, NULL);
    REQUIRE(log);
    uint64_t ts[NROWS];
    REQUIRE(fill(log, 0, 200, ts) == 0);
    int first;
    CHECK_EQ_INT(rows_after(log, 0, ts, 200, &first), 200);
    CHECK_EQ_INT(rows_after(log, ts[150], ts, 200, &first), 49);
    ul_close(log);
    uint64_t cut = 1;
    int lines = log_lines;
    log = open_log(&c, &cut);
    REQUIRE(log);
    CHECK_EQ_INT(cut, 0);
    CHECK_EQ_INT(log_lines, lines);
    CHECK_EQ_INT(rows_after(log, 0, ts, 200, &first), 200);
    REQUIRE(fill(log, 200, 250, ts) == 0);
    CHECK_EQ_INT(rows_after(log, ts[199], ts, 250, &first), 50);
    ul_close(log);

    /* a crash leaves the preallocated tail: zeros after the last row */
    char path[300];
    last_seg_path(path, sizeof(path));
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    REQUIRE(truncate(path, st.st_size + 65536) == 0);
    lines = log_lines;
    log = open_log(&c, &cut);
    REQUIRE(log);
    CHECK_EQ_INT(cut, 0);
    CHECK_EQ_INT(log_lines, lines);
    CHECK_EQ_INT(rows_after(log, 0, ts, 250, &first), 250);
    ul_close(log);
}

/* ---- reopening ------------------------------------------------------------ */

static void last_seg_path(char *path, size_t len)
{
    uint32_t id = 1;
    for (;; id++) {
        char p[300];
        snprintf(p, sizeof(p), "%s/%08x.seg", dir, id + 1);
        if (access(p, F_OK) != 0)
            break;
    }
    snprintf(path, len, "%s/%08x.seg", dir, id);
}

static void test_reopen_torn_tail(void)
{
    fresh_dir();
    hlc_init(&clk, step_clock);
    ul_config c = config(4096, NULL);
    ul_log *log = open_log(&c, NULL);
    REQUIRE(log);
    uint64_t ts[NROWS];
    REQUIRE(fill(log, 0, 100, ts) == 0);
    ul_close(log);

    /* a clean reopen: everything, and the clock past the last row even
     * though the log has a clock of its own (the real one, far behind) */
    uint64_t cut = 1;
    c.clock = NULL;
    log = open_log(&c, &cut);
    REQUIRE(log);
    CHECK_EQ_INT(cut, 0);
    CHECK_EQ_INT(ul_last_ts(log), ts[99]);
    int first;
    CHECK_EQ_INT(rows_after(log, 0, ts, 100, &first), 100);
    CHECK(hlc_last(ul_clock(log)) >= ts[99]);
    ul_close(log);

    /* the last row torn: cut at open, with an ERROR line */
    char path[300];
    last_seg_path(path, sizeof(path));
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    REQUIRE(truncate(path, st.st_size - 3) == 0);
    c.clock = &clk;
    int lines = log_lines;
    log = open_log(&c, &cut);
    REQUIRE(log);
    CHECK(cut > 0 && cut < 200);        /* one row, less the 3 bytes torn off */
    CHECK(log_lines > lines);
    CHECK_EQ_INT(ul_last_ts(log), ts[98]);
    CHECK_EQ_INT(rows_after(log, 0, ts, 99, &first), 99);
    /* appends go on with larger timestamps, even from a clock behind */
    atomic_store(&step_us, 0);
    REQUIRE(fill(log, 99, 120, ts) == 0);
    CHECK(ts[99] > ts[98]);
    CHECK_EQ_INT(rows_after(log, 0, ts, 120, &first), 120);
    ul_close(log);

    /* torn inside the header row of the newest segment: it holds no row
     * after the cut, and the next append writes a header again */
    log = open_log(&c, NULL);
    REQUIRE(log);
    atomic_store(&step_us, 2000000);
    int n = 120;
    ul_extent ex;
    ul_get_extent(log, &ex);
    uint32_t segs = ex.last_seg;
    while (ex.last_seg == segs) {
        REQUIRE(fill(log, n, n + 1, ts) == 0);
        n++;
        ul_get_extent(log, &ex);
    }
    ul_close(log);
    last_seg_path(path, sizeof(path));
    REQUIRE(truncate(path, SL_SEG_HDR + 5) == 0);
    log = open_log(&c, &cut);
    REQUIRE(log);
    CHECK(cut > 0);
    CHECK_EQ_INT(ul_last_ts(log), ts[n - 2]);
    CHECK_EQ_INT(rows_after(log, 0, ts, n - 1, &first), n - 1);
    REQUIRE(fill(log, n - 1, n + 10, ts) == 0);
    CHECK_EQ_INT(rows_after(log, 0, ts, n + 10, &first), n + 10);
    CHECK_EQ_INT(rows_after(log, ts[n - 2], ts, n + 10, &first), 11);
    ul_close(log);
    log = open_log(&c, &cut);
    REQUIRE(log);
    CHECK_EQ_INT(cut, 0);
    CHECK_EQ_INT(rows_after(log, 0, ts, n + 10, &first), n + 10);
    ul_close(log);
}

/* A log that holds every change only from now on (ul_set_complete false):
 * positions before are not held, across a reopen; complete again: all. */
static void test_start_marker(void)
{
    fresh_dir();
    hlc_init(&clk, NULL);
    ul_config c = config(1 << 20, NULL);
    uint64_t cut;
    ul_log *log = open_log(&c, &cut);
    REQUIRE(log);
    CHECK(ul_complete(log));
    ul_row r = { .type = UL_DEL, .key = "k", .klen = 1 };
    ul_pos p1, p2;
    CHECK_EQ_INT(ul_append(log, &r, &p1), KURA_OK);
    ul_extent ex;
    ul_get_extent(log, &ex);
    CHECK_EQ_INT(ex.from_ts, 0);
    CHECK_EQ_INT(ul_set_complete(log, false), KURA_OK);
    CHECK(!ul_complete(log));
    ul_get_extent(log, &ex);
    CHECK(ex.from_ts > p1.ts);
    ul_reader *rd = NULL;
    CHECK_EQ_INT(ul_reader_open(log, p1.ts, &rd), KURA_NOTFOUND);
    CHECK_EQ_INT(ul_append(log, &r, &p2), KURA_OK);
    CHECK(p2.ts > ex.from_ts);
    ul_close(log);
    log = open_log(&c, &cut);
    REQUIRE(log);
    ul_extent ex2;
    ul_get_extent(log, &ex2);
    CHECK_EQ_INT(ex2.from_ts, ex.from_ts);
    CHECK_EQ_INT(ul_reader_open(log, p1.ts, &rd), KURA_NOTFOUND);
    CHECK_EQ_INT(ul_reader_open(log, ex.from_ts, &rd), KURA_OK);
    ul_row g;
    if (rd) {
        CHECK_EQ_INT(ul_reader_next(rd, &g), KURA_OK);
        CHECK_EQ_INT(g.ts, p2.ts);
        ul_reader_close(rd);
    }
    CHECK_EQ_INT(ul_set_complete(log, true), KURA_OK);
    ul_get_extent(log, &ex2);
    CHECK_EQ_INT(ex2.from_ts, 0);
    ul_close(log);
    char path[400];
    snprintf(path, sizeof(path), "%s/start", dir);
    CHECK(access(path, F_OK) != 0);
}

/* ---- retention ------------------------------------------------------------ */

static void test_retention_cap(void)
{
    fresh_dir();
    hlc_init(&clk, step_clock);
    ul_config c = config(4096, NULL);
    ul_log *log = open_log(&c, NULL);
    REQUIRE(log);
    uint64_t ts[NROWS];
    REQUIRE(fill(log, 0, NROWS, ts) == 0);
    ul_extent ex;
    ul_get_extent(log, &ex);
    ul_prune_result pr;
    /* no cap, or under it: nothing goes */
    CHECK(ul_prune(log, 0, 0, &pr) == KURA_OK);
    CHECK_EQ_INT(pr.segs, 0);
    CHECK(ul_prune(log, 0, ex.bytes, &pr) == KURA_OK);
    CHECK_EQ_INT(pr.segs, 0);
    /* over the cap, nothing needed past the last row: not forced */
    CHECK(ul_prune(log, ts[NROWS - 1], ex.bytes - 1, &pr) == KURA_OK);
    CHECK_EQ_INT(pr.segs, 1);
    CHECK_EQ_INT(pr.forced, 0);
    CHECK(pr.bytes > 0 && pr.bytes <= 4096);
    CHECK(pr.from_ts > 0);
    ul_extent ex2;
    ul_get_extent(log, &ex2);
    CHECK_EQ_INT(ex2.bytes, ex.bytes - pr.bytes);
    CHECK_EQ_INT(ex2.first_seg, 2);
    /* a slave at the oldest row held needs the next segment: the cap forces
     * it out, and says so */
    int lines = log_lines;
    CHECK(ul_prune(log, pr.from_ts, ex2.bytes - 1, &pr) == KURA_OK);
    CHECK_EQ_INT(pr.segs, 1);
    CHECK_EQ_INT(pr.forced, 1);
    CHECK(log_lines > lines);
    /* a cap below the active segment: all but it go, and it stays */
    CHECK(ul_prune(log, UINT64_MAX, 1, &pr) == KURA_OK);
    CHECK_EQ_INT(pr.forced, 0);
    ul_get_extent(log, &ex2);
    CHECK_EQ_INT(ex2.segs, 1);
    CHECK_EQ_INT(ex2.first_seg, ex.last_seg);
    int first;
    int n = rows_after(log, pr.from_ts, ts, NROWS, &first);
    CHECK(n > 0 && n == NROWS - first && ts[first - 1] == pr.from_ts);
    ul_close(log);
    /* the pruned log reopens with the same extent */
    log = open_log(&c, NULL);
    REQUIRE(log);
    ul_get_extent(log, &ex);
    CHECK_EQ_INT(ex.first_seg, ex2.first_seg);
    CHECK_EQ_INT(ex.from_ts, ex2.from_ts);
    CHECK_EQ_INT(rows_after(log, 0, ts, NROWS, &first), -2);
    ul_close(log);
}

/* Bytes of every file in dir, by name: what a read-only open must not change. */
static uint64_t dir_sum(void)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "cat %s/* 2>/dev/null | cksum", dir);
    FILE *f = popen(cmd, "r");
    unsigned long long v = 0, n = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &v, &n) != 2)
            v = 0;
        pclose(f);
    }
    return v ^ n << 32;
}

/* kuractl's side: a read-only open changes nothing (the active segment's
 * preallocated tail stays), lists the segments with their rows, reads, and
 * refuses changes; ul_prune_before removes what is all at or before a
 * timestamp and never the active segment. */
static void test_read_only_and_prune_before(void)
{
    fresh_dir();
    hlc_init(&clk, step_clock);
    ul_config c = config(4096, NULL);
    ul_log *log = open_log(&c, NULL);
    REQUIRE(log);
    uint64_t ts[NROWS];
    REQUIRE(fill(log, 0, NROWS, ts) == 0);
    ul_close(log);
    uint64_t before = dir_sum();
    ul_config ro = c;
    ro.read_only = true;
    log = open_log(&ro, NULL);
    REQUIRE(log);
    ul_seg_info *v;
    size_t n;
    REQUIRE(ul_segments(log, &v, &n) == KURA_OK);
    uint64_t rows = 0;
    for (size_t i = 0; i < n; i++) {
        rows += v[i].rows;
        CHECK_EQ_INT(v[i].sid, 7);
        CHECK_EQ_INT(v[i].damaged, 0);
        CHECK(i == 0 || v[i].first_ts > v[i - 1].last_ts);
        CHECK(i == 0 || v[i].prev_ts == v[i - 1].last_ts);
    }
    CHECK_EQ_INT(rows, NROWS);
    CHECK(n > 2);
    CHECK_EQ_INT(v[0].first_ts, ts[0]);
    int first;
    CHECK_EQ_INT(rows_after(log, 0, ts, NROWS, &first), NROWS);
    ul_row r = { .type = UL_DEL, .key = "k", .klen = 1 };
    ul_pos pos;
    ul_prune_result pr;
    CHECK(ul_append(log, &r, &pos) != KURA_OK);
    CHECK(ul_prune(log, UINT64_MAX, 1, &pr) == KURA_EREADONLY);
    CHECK(ul_prune_before(log, UINT64_MAX, &pr) == KURA_EREADONLY);
    ul_close(log);
    CHECK(dir_sum() == before);
    /* prune_before: the segments wholly at or before the last row of the
     * second segment go; the third stays */
    log = open_log(&c, NULL);
    REQUIRE(log);
    CHECK(ul_prune_before(log, v[1].last_ts, &pr) == KURA_OK);
    CHECK_EQ_INT(pr.segs, 2);
    CHECK_EQ_INT(pr.from_ts, v[1].last_ts);
    CHECK(ul_prune_before(log, UINT64_MAX, &pr) == KURA_OK);
    ul_extent ex;
    ul_get_extent(log, &ex);
    CHECK_EQ_INT(ex.segs, 1);   /* the active one stays */
    ul_close(log);
    free(v);
    /* no segment at all: read-only says so and creates none */
    fresh_dir();
    CHECK(ul_open(&ro, &log, NULL, (char[100]){ 0 }, 100) == KURA_NOTFOUND);
    char p[300];
    snprintf(p, sizeof(p), "%s/00000001.seg", dir);
    CHECK(access(p, F_OK) != 0);
}

/* ---- threads and sync failure ---------------------------------------------- */

typedef struct app_worker {
    ul_log *log;
    int id, bad;
} app_worker;

static void *append_thread(void *arg)
{
    app_worker *w = arg;
    for (int i = 0; i < 300; i++) {
        char k[32];
        snprintf(k, sizeof(k), "t%d-%d", w->id, i);
        ul_pos pos;
        if (append(w->log, UL_PUT, k, k, strlen(k), 0, &pos) != KURA_OK ||
            ul_commit(w->log, pos.lsn) != KURA_OK)
            w->bad++;
    }
    return NULL;
}

static void test_threads_group_commit(void)
{
    fresh_dir();
    hlc_init(&clk, NULL);
    ul_config c = config(16384, NULL);
    ul_log *log = open_log(&c, NULL);
    REQUIRE(log);
    pthread_t t[4];
    app_worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (app_worker){ log, i, 0 };
        pthread_create(&t[i], NULL, append_thread, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ_INT(w[i].bad, 0);
    }
    ul_reader *rd;
    REQUIRE(ul_reader_open(log, 0, &rd) == KURA_OK);
    ul_row g;
    int n = 0, rc, next[4] = { 0 }, order_bad = 0;
    uint64_t prev = 0;
    while ((rc = ul_reader_next(rd, &g)) == KURA_OK) {
        int id, i;
        char k[32];
        snprintf(k, sizeof(k), "%.*s", (int)g.klen, (const char *)g.key);
        if (g.ts <= prev || sscanf(k, "t%d-%d", &id, &i) != 2 || id < 0 || id > 3 ||
            i != next[id]++)
            order_bad++;
        prev = g.ts;
        n++;
    }
    CHECK_EQ_INT(rc, UL_CAUGHT_UP);
    CHECK_EQ_INT(order_bad, 0);
    CHECK_EQ_INT(n, 1200);
    ul_reader_close(rd);
    ul_close(log);
}

/* A reader following the tail while two threads append and a third prunes
 * under a cap: rows come in timestamp order; a position pruned away is
 * reported as not held and the reader starts again at the oldest held.
 * (Under make test-tsan, the locking between the three.) */
typedef struct tail_reader {
    ul_log *log;
    _Atomic int *stop;
    int rows, bad, restarts;
} tail_reader;

static void *reader_thread(void *arg)
{
    tail_reader *t = arg;
    ul_reader *rd = NULL;
    uint64_t prev = 0;
    for (;;) {
        int stop = atomic_load(t->stop);
        if (!rd) {
            ul_extent ex;
            ul_get_extent(t->log, &ex);
            uint64_t at = prev > ex.from_ts ? prev : ex.from_ts;
            int rc = ul_reader_open(t->log, at, &rd);
            if (rc == KURA_NOTFOUND && !stop) {
                t->restarts++;
                continue;
            }
            if (rc) {
                t->bad++;
                return NULL;
            }
        }
        ul_row g;
        int rc = ul_reader_next(rd, &g);
        if (rc == KURA_OK) {
            if (g.ts <= prev)
                t->bad++;
            prev = g.ts;
            t->rows++;
        } else if (rc == KURA_NOTFOUND) {
            ul_reader_close(rd);
            rd = NULL;
            t->restarts++;
        } else if (rc == UL_CAUGHT_UP) {
            if (stop)
                break;
        } else {
            t->bad++;
            break;
        }
    }
    ul_reader_close(rd);
    return NULL;
}

static void *pruner_thread(void *arg)
{
    tail_reader *t = arg;
    while (!atomic_load(t->stop)) {
        ul_prune_result pr;
        if (ul_prune(t->log, 0, 8192 * 4, &pr) != KURA_OK)
            t->bad++;
    }
    return NULL;
}

static void test_reader_follows_appends_and_prunes(void)
{
    fresh_dir();
    hlc_init(&clk, NULL);
    ul_config c = config(8192, NULL);
    ul_log *log = open_log(&c, NULL);
    REQUIRE(log);
    _Atomic int stop = 0;
    tail_reader tr = { log, &stop, 0, 0, 0 }, pt = { log, &stop, 0, 0, 0 };
    pthread_t rt, ptt, at[2];
    app_worker w[2];
    pthread_create(&rt, NULL, reader_thread, &tr);
    pthread_create(&ptt, NULL, pruner_thread, &pt);
    for (int i = 0; i < 2; i++) {
        w[i] = (app_worker){ log, i, 0 };
        pthread_create(&at[i], NULL, append_thread, &w[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(at[i], NULL);
        CHECK_EQ_INT(w[i].bad, 0);
    }
    atomic_store(&stop, 1);
    pthread_join(rt, NULL);
    pthread_join(ptt, NULL);
    CHECK_EQ_INT(tr.bad, 0);
    CHECK_EQ_INT(pt.bad, 0);
    CHECK(tr.rows > 0 && tr.rows <= 600);
    CHECK(tr.rows == 600 || tr.restarts > 0);
    ul_close(log);
}

static void test_failed_sync_sticky(void)
{
    fresh_dir();
    hlc_init(&clk, NULL);
    kio_inject *in = kio_inject_new(NULL);     /* fails fdatasync on demand */
    REQUIRE(in != NULL);
    ul_config c = config(4096, kio_inject_io(in));
    ul_log *log = open_log(&c, NULL);
    REQUIRE(log);
    ul_pos pos;
    REQUIRE(append(log, UL_DEL, "a", NULL, 0, 0, &pos) == KURA_OK);
    CHECK(ul_commit(log, pos.lsn) == KURA_OK);
    REQUIRE(append(log, UL_DEL, "b", NULL, 0, 0, &pos) == KURA_OK);
    kio_inject_fail_from_now(in, KIO_FDATASYNC, EIO);
    CHECK(ul_commit(log, pos.lsn) == KURA_EFAILED);
    kio_inject_disarm(in);
    CHECK(ul_commit(log, pos.lsn) == KURA_EFAILED);    /* never retried */
    CHECK(ul_failed(log) == KURA_EFAILED);
    CHECK(append(log, UL_DEL, "c", NULL, 0, 0, &pos) == KURA_EFAILED);
    CHECK(ul_sync_now(log) == KURA_EFAILED);
    /* reads go on */
    ul_reader *rd;
    ul_row g;
    REQUIRE(ul_reader_open(log, 0, &rd) == KURA_OK);
    CHECK(ul_reader_next(rd, &g) == KURA_OK && g.type == UL_DEL);
    ul_reader_close(rd);
    ul_close(log);

    /* a failure while rotating (the sealed segment's sync) too */
    fresh_dir();
    log = open_log(&c, NULL);
    REQUIRE(log);
    kio_inject_fail_from_now(in, KIO_FDATASYNC, EIO);
    int rc = KURA_OK;
    char v[200] = { 0 };
    for (int i = 0; i < 100 && rc == KURA_OK; i++)
        rc = append(log, UL_PUT, "k", v, sizeof(v), 0, &pos);
    kio_inject_disarm(in);
    CHECK(rc == KURA_EFAILED);
    CHECK(append(log, UL_DEL, "k", NULL, 0, 0, &pos) == KURA_EFAILED);
    ul_close(log);
    kio_inject_free(in);
}

int main(void)
{
    RUN(test_hlc_threads);
    RUN(test_hlc_clock_back);
    RUN(test_hlc_tagged);
    RUN(test_rows_roundtrip);
    RUN(test_rotation_readers);
    RUN(test_mapwrite);
    RUN(test_reopen_torn_tail);
    RUN(test_start_marker);
    RUN(test_retention_cap);
    RUN(test_read_only_and_prune_before);
    RUN(test_threads_group_commit);
    RUN(test_reader_follows_appends_and_prunes);
    RUN(test_failed_sync_sticky);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {}
    UNIT_DONE();
}

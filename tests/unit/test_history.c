/*
 * test_history.c - the history vector (src/journal/history.c): its
 * arithmetic (note, format, parse, "ahead"), its upkeep as rows are logged
 * (changes made here under this server's id, a master's rows under their
 * origin's, a read-only replica's housekeeping not at all), and its file:
 * written at a clean stop and read back without the log; a start without
 * the file, with a file older than the log's tail (a crash before the next
 * save), or with a damaged file, arriving at the same vector from the log;
 * a reset (a replica's full copy) kept across a restart, the rows logged
 * before it not counted again.  The update log's id: made with the log,
 * the same after a reopen, a new one for a directory made anew.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/engine.h"
#include "kura/journal.h"
#include "kura/store.h"
#include "kura/ulog.h"
#include "unit.h"

static char dir[256], db[300], uldir[300], hfile[320];

static void fresh(void)
{
    char cmd[300];
    snprintf(dir, sizeof(dir), "/tmp/kura-hist-%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {}
    mkdir(dir, 0755);
    snprintf(db, sizeof(db), "%s/db.kh", dir);
    snprintf(uldir, sizeof(uldir), "%s/ul", dir);
    snprintf(hfile, sizeof(hfile), "%s/history", uldir);
    mkdir(uldir, 0755);
}

static void quiet(void *arg, int level, const char *line)
{
    (void)arg; (void)level; (void)line;
}

static int errors_logged;
static void elog(int level, const char *line)
{
    if (level == KURA_LOG_ERROR)
        errors_logged++;
    (void)line;
}

typedef struct rig {
    kura_engine *e;
    ul_log *log;
    kura_thread_stats ts;
} rig;

static int rig_open(rig *r, uint32_t sid)
{
    memset(r, 0, sizeof(*r));
    kura_store_config cfg = { .item_size_max = 1 << 20, .sync_mode = KURA_SYNC_NONE,
                              .mem_limit = 64 << 20, .log = elog };
    kura_store *s;
    char err[300];
    uint64_t cut, redone;
    int rc = kura_store_open(db, &cfg, &s, err, sizeof(err));
    if (rc)
        return rc;
    kura_engine_config ec = { .item_size_max = 1 << 20 };
    if ((rc = engine_open(&r->e, s, &ec)))
        return rc;
    ul_config uc = { .dir = uldir, .sid = sid, .ulim = 1 << 16, .log = quiet };
    if ((rc = ul_open(&uc, &r->log, &cut, err, sizeof(err))))
        return rc;
    return engine_attach_log(r->e, r->log, KURA_SYNC_NONE, elog, &redone);
}

static void rig_close(rig *r)
{
    engine_close(r->e);
    ul_close(r->log);
}

static int set(rig *r, const char *k)
{
    kura_item it = { .key = k, .klen = strlen(k), .val = "v", .vlen = 1 };
    return engine_store(r->e, &r->ts, KURA_CMD_SET, &it, &(engine_store_opts){ 0 }, NULL);
}

static void hist_text(rig *r, char *buf, size_t cap)
{
    if (journal_history_format(engine_journal(r->e), buf, cap) < 0)
        snprintf(buf, cap, "(too long)");
}

static int copy_file(const char *from, const char *to)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "cp %s %s", from, to);
    return system(cmd);
}

static void test_vector(void)
{
    journal_hist a = { 0 }, b;
    char t[200];
    CHECK(journal_hist_note(&a, 7, 100));
    CHECK(journal_hist_note(&a, 2, 50));
    CHECK(journal_hist_note(&a, 7, 90));               /* never lowered */
    CHECK_EQ_INT(journal_hist_get(&a, 7), 100);
    CHECK_EQ_INT(journal_hist_get(&a, 3), 0);
    CHECK_EQ_INT(journal_hist_format(&a, t, sizeof(t)), 10);
    CHECK_EQ_STR(t, "2:50,7:100");                      /* in sid order */
    CHECK_EQ_INT(journal_hist_format(&a, t, 5), -1);
    CHECK_EQ_INT(journal_hist_parse("2:50,7:100", &b), KURA_OK);
    CHECK_EQ_INT(b.n, 2);
    CHECK_EQ_INT(journal_hist_get(&b, 7), 100);
    CHECK_EQ_INT(journal_hist_parse("-", &b), KURA_OK);
    CHECK_EQ_INT(b.n, 0);
    CHECK_EQ_INT(journal_hist_parse("", &b), KURA_OK);
    const char *bad[] = { "0:5", "70000:5", "1:", ":5", "1:5,", "1:5;2:6", "1:x", "a" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_EQ_INT(journal_hist_parse(bad[i], &b), KURA_EINVAL);
    /* ahead: an entry above theirs, or one they lack */
    journal_hist_parse("2:50,7:100", &b);
    CHECK_EQ_INT(journal_hist_ahead(&a, &b), 0);
    journal_hist_note(&a, 2, 51);
    CHECK_EQ_INT(journal_hist_ahead(&a, &b), 2);
    CHECK_EQ_INT(journal_hist_ahead(&b, &a), 0);
    journal_hist_parse("2:51,7:100", &b);
    journal_hist_note(&a, 9, 1);
    CHECK_EQ_INT(journal_hist_ahead(&a, &b), 9);
    /* a full table refuses a new origin, keeps the old ones */
    journal_hist f = { 0 };
    for (uint32_t i = 1; i <= JOURNAL_HIST_MAX; i++)
        CHECK(journal_hist_note(&f, i, i));
    CHECK(!journal_hist_note(&f, 60000, 1));
    CHECK(journal_hist_note(&f, 5, 500));
    char big[JOURNAL_HIST_MAX * 28];
    CHECK(journal_hist_format(&f, big, sizeof(big)) > 0);
    CHECK_EQ_INT(journal_hist_parse(big, &b), KURA_OK);
    CHECK_EQ_INT(journal_hist_get(&b, 5), 500);
}

static void test_upkeep_and_file(void)
{
    fresh();
    rig r;
    char t1[300], t2[300], want[300];
    REQUIRE(rig_open(&r, 1) == KURA_OK);
    hist_text(&r, t1, sizeof(t1));
    CHECK_EQ_STR(t1, "");
    CHECK_EQ_INT(set(&r, "a"), KURA_STORED);
    CHECK_EQ_INT(set(&r, "b"), KURA_STORED);
    uint64_t last = ul_last_ts(r.log);
    snprintf(want, sizeof(want), "1:%llu", (unsigned long long)last);
    hist_text(&r, t1, sizeof(t1));
    CHECK_EQ_STR(t1, want);
    /* a master's row: under its origin, at its origin time */
    ul_row in = { .type = UL_PUT, .key = "m", .klen = 1, .val = "abc", .vlen = 3,
                  .cas = 4242, .sid = 5, .origin_ts = 1000 };
    CHECK_EQ_INT(engine_apply_row(r.e, &in), KURA_OK);
    CHECK_EQ_INT(journal_hist_get(&(journal_hist){ 0 }, 5), 0);
    journal_hist h;
    journal_history(engine_journal(r.e), &h);
    CHECK_EQ_INT(journal_hist_get(&h, 5), 1000);
    CHECK_EQ_INT(journal_hist_get(&h, 1), last);
    /* a read-only replica's own deletes are housekeeping: not history */
    engine_set_replica(r.e, true);
    kura_item it = { .key = "a", .klen = 1 };
    (void)it;
    hist_text(&r, t1, sizeof(t1));
    rig_close(&r);

    /* a clean stop wrote the file: read back, the same */
    struct stat st;
    CHECK(stat(hfile, &st) == 0);
    REQUIRE(rig_open(&r, 1) == KURA_OK);
    hist_text(&r, t2, sizeof(t2));
    CHECK_EQ_STR(t2, t1);
    rig_close(&r);

    /* no file (a log from before histories): the log read for it */
    CHECK(unlink(hfile) == 0);
    REQUIRE(rig_open(&r, 1) == KURA_OK);
    hist_text(&r, t2, sizeof(t2));
    CHECK_EQ_STR(t2, t1);
    rig_close(&r);
}

/* A crash after rows the file does not cover: the file of an earlier
 * moment, and the rows after its as_of read at start. */
static void test_crash_images(void)
{
    fresh();
    rig r;
    char old[400], t1[300], t2[300];
    snprintf(old, sizeof(old), "%s/history.old", dir);
    REQUIRE(rig_open(&r, 1) == KURA_OK);
    CHECK_EQ_INT(set(&r, "a"), KURA_STORED);
    rig_close(&r);
    REQUIRE(copy_file(hfile, old) == 0);           /* the file as of "a" */
    REQUIRE(rig_open(&r, 1) == KURA_OK);
    for (int i = 0; i < 50; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ_INT(set(&r, k), KURA_STORED);
    }
    ul_row in = { .type = UL_DEL, .key = "m", .klen = 1, .sid = 9, .origin_ts = 777 };
    CHECK_EQ_INT(engine_apply_row(r.e, &in), KURA_OK);
    hist_text(&r, t1, sizeof(t1));
    rig_close(&r);
    REQUIRE(copy_file(old, hfile) == 0);           /* the crash: the newer save lost */
    REQUIRE(rig_open(&r, 1) == KURA_OK);
    hist_text(&r, t2, sizeof(t2));
    CHECK_EQ_STR(t2, t1);
    rig_close(&r);

    /* a damaged file: one ERROR, the whole log read, the same vector */
    FILE *f = fopen(hfile, "r+");
    REQUIRE(f);
    fseek(f, -3, SEEK_END);
    fputc('X', f);
    fclose(f);
    errors_logged = 0;
    REQUIRE(rig_open(&r, 1) == KURA_OK);
    CHECK_EQ_INT(errors_logged, 1);
    hist_text(&r, t2, sizeof(t2));
    CHECK_EQ_STR(t2, t1);
    rig_close(&r);
}

/* A replica's full copy: the history becomes the master's, durably, and the
 * rows its log held before are not counted again at the next start. */
static void test_reset(void)
{
    fresh();
    rig r;
    char t[300];
    REQUIRE(rig_open(&r, 1) == KURA_OK);
    CHECK_EQ_INT(set(&r, "a"), KURA_STORED);
    journal_hist m;
    journal_hist_parse("2:500", &m);
    CHECK_EQ_INT(journal_history_reset(engine_journal(r.e), &m), KURA_OK);
    hist_text(&r, t, sizeof(t));
    CHECK_EQ_STR(t, "2:500");
    ul_row in = { .type = UL_PUT, .key = "n", .klen = 1, .val = "x", .vlen = 1, .cas = 9,
                  .sid = 2, .origin_ts = 600 };
    CHECK_EQ_INT(engine_apply_row(r.e, &in), KURA_OK);
    ul_close(NULL);
    /* no clean stop: the engine is left, its log reopened elsewhere would
     * be locked; a clean stop saves, so the file is put back as the reset
     * wrote it to stand for a crash after it */
    char saved[400];
    snprintf(saved, sizeof(saved), "%s/history.reset", dir);
    REQUIRE(copy_file(hfile, saved) == 0);
    rig_close(&r);
    REQUIRE(copy_file(saved, hfile) == 0);
    REQUIRE(rig_open(&r, 1) == KURA_OK);
    hist_text(&r, t, sizeof(t));
    CHECK_EQ_STR(t, "2:600");                           /* not 1:..., the row before the reset */
    rig_close(&r);
}

static void test_log_id(void)
{
    fresh();
    ul_config uc = { .dir = uldir, .sid = 1, .log = quiet };
    ul_log *log;
    char err[300];
    uint64_t cut;
    REQUIRE(ul_open(&uc, &log, &cut, err, sizeof(err)) == KURA_OK);
    uint64_t id = ul_log_id(log);
    CHECK(id != 0);
    ul_close(log);
    REQUIRE(ul_open(&uc, &log, &cut, err, sizeof(err)) == KURA_OK);
    CHECK(ul_log_id(log) == id);
    ul_close(log);
    ul_config ro = uc;
    ro.read_only = true;
    REQUIRE(ul_open(&ro, &log, &cut, err, sizeof(err)) == KURA_OK);
    CHECK(ul_log_id(log) == id);
    ul_close(log);
    fresh();                                            /* a directory made anew */
    REQUIRE(ul_open(&uc, &log, &cut, err, sizeof(err)) == KURA_OK);
    CHECK(ul_log_id(log) != id && ul_log_id(log) != 0);
    ul_close(log);
}

int main(void)
{
    RUN(test_vector);
    RUN(test_upkeep_and_file);
    RUN(test_crash_images);
    RUN(test_reset);
    RUN(test_log_id);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {}
    UNIT_DONE();
}

/*
 * test_commit.c - the group committer (src/server/commit.c) over a fake
 * store whose sync can be made to fail.
 *
 * The committer is compiled into this program (the server's objects are not
 * in libkura.a), with the two server functions it calls stubbed: worker_wake
 * counts wake-ups, log_msg counts error lines.  Covers: the decision
 * functions (commit_next_step, commit_fate) for every state; a successful
 * sync publishes the sequence and the stop makes one last sync; a failed
 * sync is final: one error line, no retry however often connections ask
 * (including later asks), no sync at stop, and every sequence past the last
 * durable one is answered "close".
 */
#include <stdarg.h>
#include <time.h>

#include "../../src/server/commit.c"
#include "unit.h"

/* ---- stubs for the server functions commit.c calls ---- */

static _Atomic int wakes, error_lines;

void worker_wake(kura_worker *w)
{
    (void)w;
    atomic_fetch_add(&wakes, 1);
}

void log_msg(int level, const char *fmt, ...)
{
    (void)fmt;
    if (level == KURA_LOG_ERROR)
        atomic_fetch_add(&error_lines, 1);
}

/* ---- a store whose commits succeed until fail_from ---- */

typedef struct fake_store {
    kura_store base;
    _Atomic uint64_t seq;               /* the write sequence */
    _Atomic int commits;                /* calls to commit */
    int fail_from;                      /* this call and later ones fail; 0 = never */
} fake_store;

static uint64_t fake_write_seq(kura_store *s)
{
    return atomic_load(&((fake_store *)s)->seq);
}

static int fake_commit(kura_store *s, uint64_t seq)
{
    fake_store *f = (fake_store *)s;
    (void)seq;
    int n = atomic_fetch_add(&f->commits, 1) + 1;
    return f->fail_from && n >= f->fail_from ? KURA_EIO : KURA_OK;
}

static const kura_store_ops fake_ops = { .name = "fake", .write_seq = fake_write_seq,
                                         .commit = fake_commit };

static kura_worker one_worker;
static kura_server srv = { .workers = &one_worker, .nworkers = 1 };

/* Polls (1 ms steps, 10 s deadline) until cond holds. */
#define WAIT_FOR(cond) do { for (int w_ = 0; w_ < 10000 && !(cond); w_++) { \
    struct timespec ts_ = { 0, 1000000 }; nanosleep(&ts_, NULL); } } while (0)

static void test_decisions(void)
{
    /* running, healthy: sync only when asked for more than is durable */
    CHECK_EQ_INT(commit_next_step(false, false, 5, 5), COMMIT_STEP_WAIT);
    CHECK_EQ_INT(commit_next_step(false, false, 6, 5), COMMIT_STEP_SYNC);
    /* stop: one last sync, then exit (committer_main breaks after it) */
    CHECK_EQ_INT(commit_next_step(true, false, 5, 5), COMMIT_STEP_SYNC);
    /* failed: never sync again, whatever is asked; exit at stop */
    CHECK_EQ_INT(commit_next_step(false, true, 9, 5), COMMIT_STEP_WAIT);
    CHECK_EQ_INT(commit_next_step(false, true, 5, 5), COMMIT_STEP_WAIT);
    CHECK_EQ_INT(commit_next_step(true, true, 9, 5), COMMIT_STEP_EXIT);
}

static void test_sync_succeeds(void)
{
    fake_store f = { .base = { &fake_ops } };
    atomic_store(&f.seq, 10);
    error_lines = 0;
    REQUIRE(commit_start_store(&srv, &f.base) == 0);
    CHECK_EQ_INT(commit_durable(), 10);         /* what was there at start */
    CHECK_EQ_INT(commit_fate(10), COMMIT_SEND);
    atomic_store(&f.seq, 12);
    CHECK_EQ_INT(commit_fate(12), COMMIT_WAIT);
    commit_request(12);
    WAIT_FOR(commit_durable() >= 12);
    CHECK_EQ_INT(commit_durable(), 12);
    CHECK_EQ_INT(commit_fate(12), COMMIT_SEND);
    CHECK(!commit_failed());
    int before = atomic_load(&f.commits);
    commit_stop();
    CHECK_EQ_INT(atomic_load(&f.commits), before + 1);  /* the last sync at stop */
    commit_free();
    CHECK_EQ_INT(error_lines, 0);
}

static void test_failed_sync_is_final(void)
{
    fake_store f = { .base = { &fake_ops }, .fail_from = 2 };
    atomic_store(&f.seq, 1);
    error_lines = 0;
    REQUIRE(commit_start_store(&srv, &f.base) == 0);
    atomic_store(&f.seq, 5);
    commit_request(5);                          /* commit #1 succeeds */
    WAIT_FOR(commit_durable() >= 5);
    CHECK_EQ_INT(commit_durable(), 5);

    atomic_store(&f.seq, 8);
    commit_request(8);                          /* commit #2 fails */
    WAIT_FOR(commit_failed());
    REQUIRE(commit_failed());
    CHECK_EQ_INT(commit_durable(), 5);          /* never advances past a failure */
    CHECK_EQ_INT(commit_fate(5), COMMIT_SEND);  /* durable before the failure */
    CHECK_EQ_INT(commit_fate(8), COMMIT_CLOSE); /* a connection waiting for it */

    /* Later asks: answered "close" at once, and no sync is tried again. */
    atomic_store(&f.seq, 20);
    for (uint64_t s = 9; s <= 20; s++) {
        commit_request(s);
        CHECK_EQ_INT(commit_fate(s), COMMIT_CLOSE);
    }
    commit_stop();                              /* joins: any retry would be counted */
    CHECK_EQ_INT(atomic_load(&f.commits), 2);   /* no retry, no sync at stop */
    CHECK_EQ_INT(error_lines, 1);               /* one line, not one per attempt */
    CHECK_EQ_INT(commit_fate(6), COMMIT_CLOSE);
    commit_free();
}

int main(void)
{
    RUN(test_decisions);
    RUN(test_sync_succeeds);
    RUN(test_failed_sync_is_final);
    UNIT_DONE();
}

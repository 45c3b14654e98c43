/*
 * test_commit.c - the group committer (src/journal/committer.c) over a fake
 * commit source whose commit can be made to fail.
 *
 * The committer's callbacks count: wake counts wake-ups, log counts error
 * lines.  Covers: the decision functions (commit_next_step, commit_fate_of)
 * for every state; a successful sync publishes the sequence and the stop
 * makes one last sync; a failed sync is final: one error line, no retry
 * however often waiters ask (including later asks), no sync at stop, and
 * every sequence past the last durable one is answered "close"; replicas
 * that did not confirm close the waiters up to that sequence only.
 */
#include <stdatomic.h>
#include <time.h>

#include "kura/journal.h"
#include "unit.h"

static _Atomic int wakes, error_lines;

static void count_wake(void *arg)
{
    (void)arg;
    atomic_fetch_add(&wakes, 1);
}

static void count_log(int level, const char *line)
{
    (void)line;
    if (level == KURA_LOG_ERROR)
        atomic_fetch_add(&error_lines, 1);
}

/* ---- a source whose commits succeed until fail_from ---- */

typedef struct fake_source {
    _Atomic uint64_t seq;               /* the write sequence */
    _Atomic int commits;                /* calls to commit */
    int fail_from;                      /* this call and later ones fail; 0 = never */
    int result;                         /* what a commit that does not fail returns */
} fake_source;

static uint64_t fake_write_seq(void *ctx)
{
    return atomic_load(&((fake_source *)ctx)->seq);
}

static int fake_commit(void *ctx, uint64_t seq)
{
    fake_source *f = ctx;
    (void)seq;
    int n = atomic_fetch_add(&f->commits, 1) + 1;
    return f->fail_from && n >= f->fail_from ? KURA_EIO : f->result;
}

static journal_committer *start(fake_source *f)
{
    committer_config cc = {
        .source = { "fake", fake_write_seq, NULL, fake_commit, f },
        .wake = count_wake, .log = count_log,
    };
    journal_committer *c = NULL;
    return committer_start(&cc, &c) == KURA_OK ? c : NULL;
}

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
    /* a waiter: durable, abandoned by the replicas, failed, or waiting */
    CHECK_EQ_INT(commit_fate_of(5, 5, 0, false), COMMIT_SEND);
    CHECK_EQ_INT(commit_fate_of(5, 5, 0, true), COMMIT_SEND);
    CHECK_EQ_INT(commit_fate_of(6, 5, 7, false), COMMIT_CLOSE);
    CHECK_EQ_INT(commit_fate_of(8, 5, 7, false), COMMIT_WAIT);
    CHECK_EQ_INT(commit_fate_of(8, 5, 7, true), COMMIT_CLOSE);
}

static void test_sync_succeeds(void)
{
    fake_source f = { 0 };
    atomic_store(&f.seq, 10);
    error_lines = 0;
    journal_committer *c = start(&f);
    REQUIRE(c);
    CHECK_EQ_INT(committer_durable(c), 10);         /* what was there at start */
    CHECK_EQ_INT(commit_fate(c, 10), COMMIT_SEND);
    atomic_store(&f.seq, 12);
    CHECK_EQ_INT(commit_fate(c, 12), COMMIT_WAIT);
    committer_request(c, 12);
    WAIT_FOR(committer_durable(c) >= 12);
    CHECK_EQ_INT(committer_durable(c), 12);
    CHECK_EQ_INT(commit_fate(c, 12), COMMIT_SEND);
    CHECK(!committer_failed(c));
    int before = atomic_load(&f.commits);
    committer_stop(c);
    CHECK_EQ_INT(atomic_load(&f.commits), before + 1);  /* the last sync at stop */
    committer_free(c);
    CHECK_EQ_INT(error_lines, 0);
}

static void test_failed_sync_is_final(void)
{
    fake_source f = { .fail_from = 2 };
    atomic_store(&f.seq, 1);
    error_lines = 0;
    journal_committer *c = start(&f);
    REQUIRE(c);
    atomic_store(&f.seq, 5);
    committer_request(c, 5);                          /* commit #1 succeeds */
    WAIT_FOR(committer_durable(c) >= 5);
    CHECK_EQ_INT(committer_durable(c), 5);

    atomic_store(&f.seq, 8);
    committer_request(c, 8);                          /* commit #2 fails */
    WAIT_FOR(committer_failed(c));
    REQUIRE(committer_failed(c));
    CHECK_EQ_INT(committer_durable(c), 5);          /* never advances past a failure */
    CHECK_EQ_INT(commit_fate(c, 5), COMMIT_SEND);  /* durable before the failure */
    CHECK_EQ_INT(commit_fate(c, 8), COMMIT_CLOSE); /* a connection waiting for it */

    /* Later asks: answered "close" at once, and no sync is tried again. */
    atomic_store(&f.seq, 20);
    for (uint64_t s = 9; s <= 20; s++) {
        committer_request(c, s);
        CHECK_EQ_INT(commit_fate(c, s), COMMIT_CLOSE);
    }
    committer_stop(c);                              /* joins: any retry would be counted */
    CHECK_EQ_INT(atomic_load(&f.commits), 2);   /* no retry, no sync at stop */
    CHECK_EQ_INT(error_lines, 1);               /* one line, not one per attempt */
    CHECK_EQ_INT(commit_fate(c, 6), COMMIT_CLOSE);
    committer_free(c);
}

static void test_replicas_abandon(void)
{
    fake_source f = { .result = KURA_COMMIT_ABANDONED };
    atomic_store(&f.seq, 3);
    error_lines = 0;
    journal_committer *c = start(&f);
    REQUIRE(c);
    atomic_store(&f.seq, 4);
    committer_request(c, 4);
    WAIT_FOR(commit_fate(c, 4) == COMMIT_CLOSE);
    CHECK_EQ_INT(commit_fate(c, 4), COMMIT_CLOSE);  /* not confirmed: closed */
    CHECK_EQ_INT(commit_fate(c, 3), COMMIT_SEND);   /* durable at start */
    CHECK_EQ_INT(commit_fate(c, 5), COMMIT_WAIT);   /* later changes go on */
    CHECK(!committer_failed(c));
    committer_free(c);                              /* stops it first */
    CHECK_EQ_INT(error_lines, 0);
}

int main(void)
{
    RUN(test_decisions);
    RUN(test_sync_succeeds);
    RUN(test_failed_sync_is_final);
    RUN(test_replicas_abandon);
    UNIT_DONE();
}

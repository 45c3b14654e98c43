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
 * that did not confirm close the waiters up to that sequence only, and
 * settle it: over a source that waits for replicas as -syncrepl does (a
 * timeout per commit), an abandoned sequence is not committed again while
 * nothing new is asked (no timeout after timeout while idle), and a later
 * change, the replicas back, is committed for its own sequence at once.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "kura/journal.h"
#include "kura/thread.h"
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

/* ---- a source that waits for replicas, as -syncrepl's does ---- */

/* commit(seq) returns 0 once the replicas hold seq, or KURA_COMMIT_ABANDONED
 * after timeout_ms (counted in timeouts), as repl_master_wait and
 * wait_replicas (src/server/replctl.c) do under -syncrepl-fail close. */
typedef struct replica_source {
    pthread_mutex_t lock;
    pthread_cond_t acked_cond;          /* acked rose */
    uint64_t seq;                       /* lock: the write sequence */
    uint64_t acked;                     /* lock: what the replicas hold */
    uint64_t last_target;               /* lock: the last commit's sequence */
    int commits, timeouts;              /* lock */
    int timeout_ms;                     /* lock */
} replica_source;

static uint64_t replica_write_seq(void *ctx)
{
    replica_source *f = ctx;
    pthread_mutex_lock(&f->lock);
    uint64_t v = f->seq;
    pthread_mutex_unlock(&f->lock);
    return v;
}

static int replica_commit(void *ctx, uint64_t seq)
{
    replica_source *f = ctx;
    struct timespec until;
    int rc = 0;
    pthread_mutex_lock(&f->lock);
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += f->timeout_ms / 1000;
    until.tv_nsec += (long)(f->timeout_ms % 1000) * 1000000;
    until.tv_sec += until.tv_nsec / 1000000000;
    until.tv_nsec %= 1000000000;
    f->commits++;
    f->last_target = seq;
    while (f->acked < seq && rc == 0)
        if (pthread_cond_timedwait(&f->acked_cond, &f->lock, &until) != 0 && f->acked < seq) {
            f->timeouts++;
            rc = KURA_COMMIT_ABANDONED;
        }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

/* A field of f, read under its lock. */
static int replica_get(replica_source *f, const int *field)
{
    pthread_mutex_lock(&f->lock);
    int v = *field;
    pthread_mutex_unlock(&f->lock);
    return v;
}

static void replica_set(replica_source *f, uint64_t *field, uint64_t v)
{
    pthread_mutex_lock(&f->lock);
    *field = v;
    pthread_cond_broadcast(&f->acked_cond);
    pthread_mutex_unlock(&f->lock);
}

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

/* Issue 32: one change the replicas did not confirm in time left the
 * committer asking for it again and again (requested stayed above durable):
 * a timeout and an ERROR line per -syncrepl-timeout while idle, and later
 * changes queued behind the old one.  An abandoned sequence is settled: its
 * waiters are answered once ("close"), and the committer waits for a new
 * request.  The idle check watches ten timeouts' time, failing at the first
 * commit that comes (without the fix the first retry times out after one);
 * a slow machine can only make it see less, never fail the fixed code. */
static void test_abandoned_is_settled(void)
{
    replica_source f = { .seq = 3, .acked = 3, .timeout_ms = 20 };
    pthread_mutex_init(&f.lock, NULL);
    kura_cond_init_mono(&f.acked_cond);
    committer_config cc = {
        .source = { "replicas", replica_write_seq, NULL, replica_commit, &f },
        .wake = count_wake, .log = count_log,
    };
    error_lines = 0;
    journal_committer *c = NULL;
    REQUIRE(committer_start(&cc, &c) == KURA_OK);

    replica_set(&f, &f.seq, 4);                         /* a change no replica confirms */
    committer_request(c, 4);
    double end = unit_deadline(10);
    while (commit_fate(c, 4) != COMMIT_CLOSE && unit_now() < end)
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    CHECK_EQ_INT(commit_fate(c, 4), COMMIT_CLOSE);     /* its waiters: closed, once */
    CHECK_EQ_INT(replica_get(&f, &f.timeouts), 1);

    /* idle: nothing new asked, so nothing committed and nothing timed out */
    end = unit_now() + 10 * 20 / 1000.0;
    while (replica_get(&f, &f.commits) == 1 && unit_now() < end)
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    CHECK_EQ_INT(replica_get(&f, &f.commits), 1);
    CHECK_EQ_INT(replica_get(&f, &f.timeouts), 1);

    /* the replicas back: a later change is committed for its own sequence,
     * with no timeout on the way */
    pthread_mutex_lock(&f.lock);
    f.timeout_ms = 60000;               /* a wait that timed out would show here */
    pthread_mutex_unlock(&f.lock);
    replica_set(&f, &f.acked, 5);
    replica_set(&f, &f.seq, 5);
    committer_request(c, 5);
    WAIT_FOR(committer_durable(c) >= 5);
    CHECK_EQ_INT(committer_durable(c), 5);
    CHECK_EQ_INT(commit_fate(c, 5), COMMIT_SEND);
    CHECK_EQ_INT(replica_get(&f, &f.commits), 2);
    CHECK_EQ_INT(replica_get(&f, &f.timeouts), 1);
    pthread_mutex_lock(&f.lock);
    CHECK_EQ_INT(f.last_target, 5);
    pthread_mutex_unlock(&f.lock);
    CHECK(!committer_failed(c));
    committer_free(c);                  /* its last sync: the replicas hold 5 */
    CHECK_EQ_INT(error_lines, 0);
    pthread_cond_destroy(&f.acked_cond);
    pthread_mutex_destroy(&f.lock);
}

int main(void)
{
    RUN(test_decisions);
    RUN(test_sync_succeeds);
    RUN(test_failed_sync_is_final);
    RUN(test_replicas_abandon);
    RUN(test_abandoned_is_settled);
    UNIT_DONE();
}

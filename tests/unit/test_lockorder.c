/*
 * test_lockorder.c - the lock-rank checker (src/util/lockorder.c).
 *
 * Covers: locks taken in increasing rank, released in any order, pass; a
 * negative check: taking a lower rank while a higher one is held (the
 * update log's lock, then the engine's state lock) aborts, as does taking
 * a rank already held (but the stripe rank of a second store), each run in
 * a forked child whose death by SIGABRT is expected.  The checks are called directly, so this runs in every
 * build, not only those that define KURA_LOCK_ORDER_CHECK.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kura/lockorder.h"
#include "unit.h"

/* Runs fn in a child; true if it died of SIGABRT. */
static bool aborts(void (*fn)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* the checker's line is expected: keep the test's output clean */
        if (!freopen("/dev/null", "w", stderr)) {}
        fn();
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return false;
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static void in_order(void)
{
    lockorder_check_acquire(LOCK_RANK_STRIPE);
    lockorder_check_acquire(LOCK_RANK_ENGINE_STATE);
    lockorder_check_acquire(LOCK_RANK_ULOG);
    lockorder_check_release(LOCK_RANK_ENGINE_STATE);   /* out of order: allowed */
    lockorder_check_acquire(LOCK_RANK_REPL);
    lockorder_check_release(LOCK_RANK_REPL);
    lockorder_check_release(LOCK_RANK_ULOG);
    lockorder_check_release(LOCK_RANK_STRIPE);
}

static void inverted(void)
{
    lockorder_check_acquire(LOCK_RANK_ULOG);
    lockorder_check_acquire(LOCK_RANK_ENGINE_STATE);
}

static void twice(void)
{
    lockorder_check_acquire(LOCK_RANK_ENGINE_STATE);
    lockorder_check_acquire(LOCK_RANK_ENGINE_STATE);
}

/* Copying from one store into another: two stripes, then what a put takes. */
static void two_stores(void)
{
    lockorder_check_acquire(LOCK_RANK_STRIPE);
    lockorder_check_acquire(LOCK_RANK_STRIPE);
    lockorder_check_acquire(LOCK_RANK_STORE_LOG);
    lockorder_check_release(LOCK_RANK_STORE_LOG);
    lockorder_check_release(LOCK_RANK_STRIPE);
    lockorder_check_release(LOCK_RANK_STRIPE);
}

static void test_in_order(void)
{
    CHECK(!aborts(in_order));
    in_order();                         /* and here: the stack is empty after */
    CHECK(!aborts(in_order));
    CHECK(!aborts(two_stores));
}

static void test_inversion_aborts(void)
{
    CHECK(aborts(inverted));
    CHECK(aborts(twice));
}

static void test_names(void)
{
    CHECK(strcmp(lockorder_name(LOCK_RANK_ENGINE_STATE), "engine state") == 0);
    CHECK(strcmp(lockorder_name(LOCK_RANK_COUNT), "?") == 0);
}

int main(void)
{
    RUN(test_in_order);
    RUN(test_inversion_aborts);
    RUN(test_names);
    UNIT_DONE();
}

/*
 * unit.h - the smallest test harness that does the job.
 *
 * A test program defines functions `static void test_xxx(void)` and lists
 * them in main() with RUN(test_xxx).  CHECK() records a failure and goes on;
 * REQUIRE() records it and returns from the test.  Output is TAP:
 * "ok N - name" or "not ok N - name", with failed checks as "# " comments
 * before it; tests/run counts those lines.  UNIT_DONE() ends main() with
 * status 1 if anything failed.
 *
 * A test that cannot run returns through SKIP_NA(reason) (not applicable
 * here: under a sanitizer, as a user where root is needed) or
 * SKIP_MISSING(reason) (something it needs is not installed; say which
 * package brings it).  RUN prints "ok N - name # SKIP <kind>: reason", the
 * form tests/run counts as skipped; with CI=true or KURA_REQUIRE_ALL=1 a
 * missing dependency is "not ok" instead, as in tests/lib/kuratest.py.
 *
 * Deadlines scale with the machine as kuratest.deadline() does: a test
 * waits for a condition until unit_deadline(seconds), which is seconds
 * times KURA_TEST_DEADLINE_SCALE (sanitizer builds and loaded CI machines
 * run several times slower) from now on the monotonic clock (unit_now()).
 * A deadline bounds a wait for something that must happen; it never
 * decides how much work a test does.
 */
#ifndef KURA_UNIT_H
#define KURA_UNIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int unit_failed_checks;
static int unit_test_no;
static int unit_tests_failed;
static const char *unit_skip_kind, *unit_skip_reason;

#define UNIT_NOT_APPLICABLE "not applicable"
#define UNIT_MISSING        "missing dependency"

/* The same test as kuratest.require_all() and tests/run. */
static inline int unit_require_all(void)
{
    const char *ci = getenv("CI"), *all = getenv("KURA_REQUIRE_ALL");
    return (ci && strcmp(ci, "true") == 0) || (all && strcmp(all, "1") == 0);
}

/* KURA_TEST_DEADLINE_SCALE, 1 when unset or not a positive number. */
static inline double unit_deadline_scale(void)
{
    const char *v = getenv("KURA_TEST_DEADLINE_SCALE");
    double f = v ? atof(v) : 1.0;
    return f > 0 ? f : 1.0;
}

/* Seconds on the monotonic clock. */
static inline double unit_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The moment seconds from now, scaled: poll until a condition holds or
 * unit_now() passes this. */
static inline double unit_deadline(double seconds)
{
    return unit_now() + seconds * unit_deadline_scale();
}

#define SKIP_NA(reason) do { unit_skip_kind = UNIT_NOT_APPLICABLE; \
    unit_skip_reason = (reason); return; } while (0)
#define SKIP_MISSING(reason) do { unit_skip_kind = UNIT_MISSING; \
    unit_skip_reason = (reason); return; } while (0)

#define CHECK(cond) do { if (!(cond)) { unit_failed_checks++; \
    printf("# %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); fflush(stdout); } } while (0)

#define REQUIRE(cond) do { if (!(cond)) { unit_failed_checks++; \
    printf("# %s:%d: REQUIRE(%s) failed\n", __FILE__, __LINE__, #cond); fflush(stdout); return; } } while (0)

#define CHECK_EQ_INT(a, b) do { long long unit_a_ = (long long)(a), unit_b_ = (long long)(b); \
    if (unit_a_ != unit_b_) { unit_failed_checks++; \
    printf("# %s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, unit_a_, unit_b_); \
    fflush(stdout); } } while (0)

#define CHECK_EQ_STR(a, b) do { const char *unit_a_ = (a), *unit_b_ = (b); \
    if (strcmp(unit_a_, unit_b_) != 0) { unit_failed_checks++; \
    printf("# %s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a, #b, unit_a_, unit_b_); \
    fflush(stdout); } } while (0)

/* One test's line.  A skip whose checks failed before it skipped is a
 * failure: the failure is what matters. */
static inline void unit_report(const char *name, int failed)
{
    const char *kind = unit_skip_kind, *why = unit_skip_reason;
    unit_skip_kind = unit_skip_reason = NULL;
    unit_test_no++;
    if (!failed && kind && strcmp(kind, UNIT_MISSING) == 0 && unit_require_all()) {
        printf("not ok %d - %s # required, but skipped: %s: %s (CI=true or KURA_REQUIRE_ALL=1)\n",
               unit_test_no, name, kind, why);
        failed = 1;
    } else if (!failed && kind) {
        printf("ok %d - %s # SKIP %s: %s\n", unit_test_no, name, kind, why);
    } else {
        printf("%s %d - %s\n", failed ? "not ok" : "ok", unit_test_no, name);
    }
    if (failed)
        unit_tests_failed++;
    fflush(stdout);
}

#define RUN(fn) do { int unit_before_ = unit_failed_checks; fn(); \
    unit_report(#fn, unit_failed_checks != unit_before_); } while (0)

#define UNIT_DONE() do { printf("1..%d\n", unit_test_no); return unit_tests_failed ? 1 : 0; } while (0)

#endif

/*
 * unit.h - the smallest test harness that does the job.
 *
 * A test program defines functions `static void test_xxx(void)` and lists
 * them in main() with RUN(test_xxx).  CHECK() records a failure and goes on;
 * REQUIRE() records it and returns from the test.  Output is TAP:
 * "ok N - name" or "not ok N - name", with failed checks as "# " comments
 * before it; tests/run counts those lines.  UNIT_DONE() ends main() with
 * status 1 if anything failed.
 */
#ifndef KURA_UNIT_H
#define KURA_UNIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int unit_failed_checks;
static int unit_test_no;
static int unit_tests_failed;

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

#define RUN(fn) do { int unit_before_ = unit_failed_checks; fn(); unit_test_no++; \
    if (unit_failed_checks == unit_before_) printf("ok %d - %s\n", unit_test_no, #fn); \
    else { unit_tests_failed++; printf("not ok %d - %s\n", unit_test_no, #fn); } \
    fflush(stdout); } while (0)

#define UNIT_DONE() do { printf("1..%d\n", unit_test_no); return unit_tests_failed ? 1 : 0; } while (0)

#endif

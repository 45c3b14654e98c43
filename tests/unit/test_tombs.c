/*
 * test_tombs.c - a dual master's recent deletes (src/journal/tombs.c):
 * two engines' tables purging at the same time keep their own deletes.
 *
 * A table purges (keeps its newer half) each time it fills to half its
 * slots, copying itself aside first.  That copy was once one static 1 MiB
 * buffer shared by every table in the process, so two engines (a server's
 * and kuractl's, two stores of a test) purging at once wrote into it
 * together; it is now each table's own, under the table's mutex.  The
 * negative check is ThreadSanitizer's (make test-tsan): with the copy made
 * one static buffer again it reports a data race in do_purge at once (seen
 * when this test was written); without a sanitizer the two purges rarely
 * overlap, but each table must also end with its own newest deletes and
 * none of the other's.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "../../src/journal/journal_int.h"
#include "kura/hlc.h"
#include "unit.h"

#define DELETES 150000              /* past 65,536 / 2 four times over: purges */
#define BASE_US 1700000000000000ull

typedef struct side {
    struct tombs *tb;
    char name;
} side;

static pthread_barrier_t start_line;

static void *deletes(void *arg)
{
    side *s = arg;
    char key[32];
    pthread_barrier_wait(&start_line);
    for (unsigned i = 0; i < DELETES; i++) {
        int n = snprintf(key, sizeof(key), "%c%u", s->name, i);
        tombs_put(s->tb, key, (size_t)n, hlc_make(BASE_US + i, 0));
    }
    return NULL;
}

static void test_two_tables_purge_at_once(void)
{
    side a = { tombs_new(), 'a' }, b = { tombs_new(), 'b' };
    REQUIRE(a.tb && b.tb);
    pthread_t ta, tb;
    pthread_barrier_init(&start_line, NULL, 2);
    REQUIRE(pthread_create(&ta, NULL, deletes, &a) == 0);
    REQUIRE(pthread_create(&tb, NULL, deletes, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&start_line);
    /* the newest 1,000 of each side are kept, with their times, and are
     * not in the other side's table */
    int own = 0, other = 0;
    char key[32];
    for (side *s = &a; s; s = s == &a ? &b : NULL) {
        side *o = s == &a ? &b : &a;
        for (unsigned i = DELETES - 1000; i < DELETES; i++) {
            int n = snprintf(key, sizeof(key), "%c%u", s->name, i);
            own += tombs_get(s->tb, key, (size_t)n) == hlc_make(BASE_US + i, 0);
            other += tombs_get(o->tb, key, (size_t)n) != 0;
        }
    }
    CHECK_EQ_INT(own, 2000);
    CHECK_EQ_INT(other, 0);
    tombs_free(a.tb);
    tombs_free(b.tb);
}

int main(void)
{
    RUN(test_two_tables_purge_at_once);
    UNIT_DONE();
}

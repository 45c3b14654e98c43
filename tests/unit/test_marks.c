/*
 * test_marks.c - the engine's access marks (src/engine/marks.c) and the
 * base64 of meta keys (src/util/base64.c), without a network.
 *
 * Marks: a read bumps fetched and the access time and reports the state
 * before; marks belong to one cas (a new version of the item starts clean);
 * the recache token is won once, and by the first reader of a stale item;
 * a full set reuses the slot accessed longest ago, stale ones last; the
 * table never grows (1.5 MiB whatever the number of keys); an item never
 * read reports its store time from the tick notes; concurrent readers of
 * one item win its token exactly once.  Base64: memcached's decoder rules
 * (skipped characters, counts not a multiple of 4, padding, room) and
 * encode/decode round trips.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/base64.h"
#include "../../src/engine/marks.h"
#include "unit.h"

static void test_bump_and_prev(void)
{
    kura_marks *m = marks_new(0);
    REQUIRE(m);
    marks_op read = { .bump = true };
    marks_prev p;
    marks_access(m, "k", 1, 7, 1000, &read, &p);
    CHECK(!(p.bits & MARK_FETCHED));
    marks_access(m, "k", 1, 7, 1005, &read, &p);
    CHECK(p.bits & MARK_FETCHED);
    CHECK(p.atime == 1000);
    /* a new cas is a new version: no marks */
    marks_access(m, "k", 1, 8, 1006, &read, &p);
    CHECK(!(p.bits & MARK_FETCHED));
    /* a look that changes nothing records nothing */
    static const marks_op look;
    marks_access(m, "other", 5, 1, 1006, &look, &p);
    marks_access(m, "other", 5, 1, 1007, &look, &p);
    CHECK(p.bits == 0);
    marks_free(m);
}

static void test_tokens_and_stale(void)
{
    kura_marks *m = marks_new(0);
    REQUIRE(m);
    marks_op recache = { .bump = true, .take_token = true };
    marks_prev p;
    CHECK(marks_access(m, "k", 1, 3, 10, &recache, &p));
    CHECK(!marks_access(m, "k", 1, 3, 10, &recache, &p));
    CHECK(p.bits & MARK_TOKEN);
    /* invalidated: the next version is stale, and its first reader wins */
    marks_set(m, "k", 1, 4, 11, MARK_STALE);
    marks_op stale = { .bump = true, .take_if_stale = true };
    CHECK(marks_access(m, "k", 1, 4, 12, &stale, &p));
    CHECK(p.bits & MARK_STALE);
    CHECK(!marks_access(m, "k", 1, 4, 12, &stale, &p));
    /* a fresh item is not won by take_if_stale */
    CHECK(!marks_access(m, "fresh", 5, 9, 12, &stale, &p));
    marks_free(m);
}

static void test_bounded_and_stale_kept(void)
{
    kura_marks *m = marks_new(0);
    REQUIRE(m);
    marks_set(m, "stale-one", 9, 1, 100, MARK_STALE);
    marks_op read = { .bump = true };
    marks_prev p;
    char key[32];
    /* far more keys than slots: the table does not grow, stale ones stay
     * longest (most of the time: only its own set competes for it) */
    for (int i = 0; i < 300000; i++) {
        int n = snprintf(key, sizeof(key), "key%d", i);
        marks_access(m, key, (size_t)n, 1, 200 + i / 1000, &read, &p);
    }
    static const marks_op look;
    marks_access(m, "stale-one", 9, 1, 1000, &look, &p);
    CHECK(p.bits & MARK_STALE);
    /* the most recent key is still marked */
    int n = snprintf(key, sizeof(key), "key%d", 299999);
    marks_access(m, key, (size_t)n, 1, 1000, &look, &p);
    CHECK(p.bits & MARK_FETCHED);
    marks_free(m);
}

static void test_store_time(void)
{
    kura_marks *m = marks_new(0);
    REQUIRE(m);
    marks_tick(m, 100, 5000);
    marks_tick(m, 150, 5001);
    marks_tick(m, 150, 5001);           /* the same second: one note */
    marks_tick(m, 400, 5003);
    static const marks_op look;
    marks_prev p;
    marks_access(m, "a", 1, 120, 5010, &look, &p);
    CHECK(p.atime == 5000);
    marks_access(m, "a", 1, 150, 5010, &look, &p);
    CHECK(p.atime == 5001);
    marks_access(m, "a", 1, 399, 5010, &look, &p);
    CHECK(p.atime == 5001);
    marks_access(m, "a", 1, 50, 5010, &look, &p);
    CHECK(p.atime == 5000);             /* older than the notes: the oldest */
    marks_access(m, "a", 1, 500, 5010, &look, &p);
    CHECK(p.atime == 5010);             /* since the last tick: now */
    marks_free(m);
}

typedef struct race { kura_marks *m; int wins; } race;

static void *racer(void *arg)
{
    race *r = arg;
    marks_op op = { .bump = true, .take_token = true };
    marks_prev p;
    char key[16];
    for (int i = 0; i < 1000; i++) {
        int n = snprintf(key, sizeof(key), "hot%d", i / 100);
        if (marks_access(r->m, key, (size_t)n, 1, 1, &op, &p))
            __atomic_add_fetch(&r->wins, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void test_one_winner(void)
{
    race r = { marks_new(0), 0 };
    REQUIRE(r.m);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, racer, &r);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK(r.wins == 10);                /* one per item, whoever came first */
    marks_free(r.m);
}

static void test_base64(void)
{
    unsigned char out[64];
    char enc[64];
    CHECK(kura_base64_decode("YWJj", 4, out, sizeof(out)) == 3 && memcmp(out, "abc", 3) == 0);
    CHECK(kura_base64_decode("YQ==", 4, out, sizeof(out)) == 1 && out[0] == 'a');
    CHECK(kura_base64_decode("YWI=", 4, out, sizeof(out)) == 2);
    CHECK(kura_base64_decode("YWJ", 3, out, sizeof(out)) == 0);        /* not a multiple of 4 */
    CHECK(kura_base64_decode("!!!!", 4, out, sizeof(out)) == 0);       /* nothing valid */
    CHECK(kura_base64_decode("Y!WJj", 5, out, sizeof(out)) == 3);      /* skipped, as memcached */
    CHECK(kura_base64_decode("====", 4, out, sizeof(out)) == 0);       /* invalid padding */
    CHECK(kura_base64_decode("YWJjYWJj", 8, out, 5) == 0);             /* no room */
    for (size_t n = 0; n < 40; n++) {
        unsigned char in[40];
        for (size_t i = 0; i < n; i++)
            in[i] = (unsigned char)(i * 37 + n);
        size_t el = kura_base64_encode(in, n, enc);
        CHECK(el == 4 * ((n + 2) / 3));
        if (n > 0)
            CHECK(kura_base64_decode(enc, el, out, sizeof(out)) == n && memcmp(out, in, n) == 0);
    }
}

int main(void)
{
    RUN(test_bump_and_prev);
    RUN(test_tokens_and_stale);
    RUN(test_bounded_and_stale_kept);
    RUN(test_store_time);
    RUN(test_one_winner);
    RUN(test_base64);
    UNIT_DONE();
}

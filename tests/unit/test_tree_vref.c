/*
 * test_tree_vref.c - a large value held beyond its get (item.h's
 * kura_vref, src/store/tree/tree_vref.c): a get of a value in the cache
 * of large values offers a hold; a value held keeps its bytes through an
 * overwrite, a delete, eviction and the store's close, and the last
 * release frees the entry (and, after a close, the tree's remains: under
 * AddressSanitizer a hold never released is a leak, a free too early a
 * use-after-free).  Inline values and values not kept offer none.
 */
#include <string.h>

#include "unit.h"
#include "hashdb_testlib.h"
#include "tree_testlib.h"
#include "kura/testhooks.h"

#define VLEN 20000

static kura_clock CLK = { .now = 2000000 };

static const unsigned char *val(int v)
{
    static unsigned char buf[2][VLEN];
    unsigned char *b = buf[v & 1];
    for (size_t i = 0; i < VLEN; i++)
        b[i] = (unsigned char)(v * 31 + i * 7 + (i >> 8));
    return b;
}

static int put(kura_store *s, const char *key, const void *v, size_t n)
{
    kura_item it = { .key = key, .klen = strlen(key), .val = v, .vlen = n };
    return kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK);
}

/* what a get offers, held if there is a reference */
typedef struct held {
    const kura_vref_ops *ops;
    void *owner, *obj;
    const unsigned char *p;
    size_t n;
} held;

static int hold_cb(void *arg, const kura_item *it)
{
    held *h = arg;
    h->p = it->val;
    h->n = it->vlen;
    if (it->vref) {
        h->ops = it->vref->ops;
        h->owner = it->vref->owner;
        h->obj = it->vref->obj;
        h->ops->hold(h->owner, h->obj);
    }
    return 0;
}

static uint64_t held_bytes(kura_store *s)
{
    return t_stat(s, "tree_value_cache_held_bytes");
}

static void test_hold_through_changes(void)
{
    kura_store *s = t_open_tree(tpath("changes"), NULL);
    REQUIRE(s);
    REQUIRE(put(s, "k", val(1), VLEN) == KURA_OK);
    held h = { 0 };
    REQUIRE(s->ops->get(s, "k", 1, &CLK, hold_cb, &h) == KURA_OK);
    REQUIRE(h.ops != NULL);
    CHECK_EQ_INT(held_bytes(s), VLEN);
    REQUIRE(put(s, "k", val(2), VLEN) == KURA_OK);     /* its run freed, entry unlisted */
    CHECK(kura_store_del(s, "k", 1, 0, &CLK) == KURA_OK);
    for (int i = 0; i < 8; i++)     /* new entries, maybe where a freed one was */
        put(s, "other", val(2), VLEN);
    CHECK(h.n == VLEN && memcmp(h.p, val(1), VLEN) == 0);
    h.ops->release(h.owner, h.obj);
    CHECK_EQ_INT(held_bytes(s), 0);
    kura_store_close(s);
}

/* Held across the store's close (a replica's full copy swaps the store
 * under a slow client): the bytes stay, the last release frees the rest. */
static void test_hold_past_close(void)
{
    kura_store *s = t_open_tree(tpath("close"), NULL);
    REQUIRE(s);
    REQUIRE(put(s, "a", val(1), VLEN) == KURA_OK);
    REQUIRE(put(s, "b", val(2), VLEN) == KURA_OK);
    held a = { 0 }, b = { 0 };
    REQUIRE(s->ops->get(s, "a", 1, &CLK, hold_cb, &a) == KURA_OK);
    REQUIRE(s->ops->get(s, "b", 1, &CLK, hold_cb, &b) == KURA_OK);
    REQUIRE(a.ops && b.ops);
    kura_store_close(s);
    CHECK(memcmp(a.p, val(1), VLEN) == 0);
    a.ops->release(a.owner, a.obj);
    CHECK(memcmp(b.p, val(2), VLEN) == 0);
    b.ops->release(b.owner, b.obj);     /* the last: frees the tree's remains */
}

/* An inline value, and a value with the cache off: no reference. */
static void test_none_offered(void)
{
    kura_store *s = t_open_tree(tpath("none"), "#vcache=0");
    REQUIRE(s);
    REQUIRE(put(s, "big", val(1), VLEN) == KURA_OK);
    REQUIRE(put(s, "small", "abc", 3) == KURA_OK);
    held h = { 0 };
    REQUIRE(s->ops->get(s, "big", 3, &CLK, hold_cb, &h) == KURA_OK);
    CHECK(h.ops == NULL);
    REQUIRE(s->ops->get(s, "small", 5, &CLK, hold_cb, &h) == KURA_OK);
    CHECK(h.ops == NULL);
    kura_store_close(s);
}

int main(void)
{
    t_setup();
    kura_test.bg_hold = true;
    RUN(test_hold_through_changes);
    RUN(test_hold_past_close);
    RUN(test_none_offered);
    kura_test.bg_hold = false;
    t_teardown();
    UNIT_DONE();
}

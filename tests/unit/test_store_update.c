/*
 * test_store_update.c - the one interpreter of changes (src/store/update.c)
 * over a store that offers nothing but the read-modify-write primitive: a
 * fake of one key, which records what it was shown and asked, so the
 * interpreter's rules are seen apart from any backend's:
 *
 *  - a put's condition (set, add, replace, cas) judged on the item shown,
 *    its value written as given, the feed's cas kept, a feed error
 *    cancelling the write; the hint: the value offered, metadata only,
 *    blind for a set alone;
 *  - a delete's cas; a miss asks the store to drop a dead item it met;
 *  - the checks made before the store acts: a bad key (rmw never called),
 *    a value past -I and a read-only store (nothing written, even when an
 *    update callback asked), a TOUCH with nothing to touch, a REMOVE of a
 *    dead item in a read-only store.
 * Each check fails if the interpreter's rule goes (the fake writes what it
 * is asked).
 */
#include <string.h>

#include "kura/store.h"
#include "unit.h"

typedef struct fake {
    kura_store base;
    bool have;
    char key[KURA_KEY_MAX];
    size_t klen;
    unsigned char val[256];
    size_t vlen;
    uint32_t flags;
    int64_t exptime;
    uint64_t cas;
    int calls;                          /* rmw calls */
    kura_rmw_hint hint;                 /* the last call's */
    int action;                         /* what the last decision asked */
    bool shown;                         /* the last decision was shown an item */
} fake;

static int fake_rmw(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                    const kura_rmw_hint *hint, kura_update_fn fn, void *arg)
{
    fake *f = (fake *)s;
    (void)clk;
    f->calls++;
    f->hint = *hint;
    kura_item cur = { .key = f->key, .klen = f->klen, .val = f->val, .vlen = f->vlen,
                      .flags = f->flags, .exptime = f->exptime, .cas = f->cas };
    kura_update out;
    memset(&out, 0, sizeof(out));
    f->shown = f->have;
    int rc = fn(arg, f->have ? &cur : NULL, &out);
    f->action = out.action;
    switch (out.action) {
    case KURA_UPDATE_REPLACE: {
        unsigned char v[256];
        size_t l0 = out.part[0].len, l1 = out.part[1].len;
        if (l0 + l1 > sizeof(v))
            return KURA_ETOOBIG;
        if (l0)
            memcpy(v, out.part[0].base, l0);
        if (l1)
            memcpy(v + l0, out.part[1].base, l1);
        memcpy(f->val, v, l0 + l1);
        f->vlen = l0 + l1;
        memcpy(f->key, key, klen);
        f->klen = klen;
        f->flags = out.flags;
        f->exptime = out.exptime;
        f->cas = out.cas;
        f->have = true;
        break;
    }
    case KURA_UPDATE_TOUCH:
        f->exptime = out.exptime;
        break;
    case KURA_UPDATE_REMOVE:
        f->have = false;
        break;
    default:
        break;
    }
    return rc;
}

static const kura_store_ops fake_ops = { .name = "fake", .rmw = fake_rmw };

static void fake_init(fake *f, size_t item_max)
{
    memset(f, 0, sizeof(*f));
    f->base.ops = &fake_ops;
    f->base.item_max = item_max;
}

static const kura_clock clk = { .now = 1000 };

static kura_item item(const char *key, const char *val, uint64_t cas)
{
    return (kura_item){ .key = key, .klen = strlen(key), .val = val, .vlen = strlen(val),
                        .flags = 5, .exptime = 0, .cas = cas };
}

static bool holds(const fake *f, const char *val)
{
    return f->have && f->vlen == strlen(val) && memcmp(f->val, val, f->vlen) == 0;
}

/* A feed that stamps its own cas, or refuses, and keeps the change it was
 * handed (the store call's clock's feed_ctx). */
typedef struct feed_rec {
    int puts, dels, fail;
    void *change;
} feed_rec;

static int rec_put(void *arg, void *change, kura_item *it)
{
    feed_rec *r = arg;
    r->puts++;
    r->change = change;
    it->cas = 700 + (uint64_t)r->puts;
    return r->fail;
}

static int rec_del(void *arg, void *change, const char *key, size_t klen)
{
    feed_rec *r = arg;
    (void)key;
    (void)klen;
    r->dels++;
    r->change = change;
    return r->fail;
}

static void test_put_conditions(void)
{
    fake f;
    fake_init(&f, 1 << 20);
    kura_store *s = &f.base;
    kura_item a = item("k", "one", 11), b = item("k", "two", 12);

    CHECK_EQ_INT(kura_store_put(s, &a, KURA_PUT_PRESENT, 0, &clk), KURA_NOTFOUND);
    CHECK(!f.have);
    CHECK_EQ_INT(kura_store_put(s, &a, KURA_PUT_ABSENT, 0, &clk), KURA_OK);
    CHECK(holds(&f, "one") && f.cas == 11 && f.flags == 5);     /* no feed: the cas given */
    CHECK(f.hint.put == &a && f.hint.meta && !f.hint.blind);    /* add: not blind */
    CHECK_EQ_INT(kura_store_put(s, &b, KURA_PUT_ABSENT, 0, &clk), KURA_EXISTS);
    CHECK(holds(&f, "one"));
    CHECK_EQ_INT(kura_store_put(s, &b, KURA_PUT_CAS, 99, &clk), KURA_EXISTS);
    CHECK(holds(&f, "one"));
    CHECK_EQ_INT(kura_store_put(s, &b, KURA_PUT_CAS, 11, &clk), KURA_OK);
    CHECK(holds(&f, "two") && f.cas == 12);
    CHECK_EQ_INT(kura_store_put(s, &a, KURA_PUT_PRESENT, 0, &clk), KURA_OK);
    CHECK(holds(&f, "one"));
    CHECK_EQ_INT(kura_store_put(s, &b, KURA_PUT_ANY, 0, &clk), KURA_OK);
    CHECK(holds(&f, "two"));
    CHECK(f.hint.blind && f.hint.put == &b);                    /* set: blind */
    CHECK_EQ_INT(kura_store_put(s, &a, 42, 0, &clk), KURA_EINVAL);  /* no such condition */
    CHECK(holds(&f, "two"));
}

static void test_feed_calls(void)
{
    fake f;
    fake_init(&f, 1 << 20);
    kura_store *s = &f.base;
    feed_rec r = { 0 };
    kura_feed feed = { rec_put, rec_del, &r };
    s->feed = &feed;
    kura_item a = item("k", "one", 0);

    CHECK_EQ_INT(kura_store_put(s, &a, KURA_PUT_ANY, 0, &clk), KURA_OK);
    CHECK(f.cas == 701 && r.puts == 1);                         /* the feed's cas */
    CHECK_EQ_INT(kura_store_put(s, &a, KURA_PUT_ABSENT, 0, &clk), KURA_EXISTS);
    CHECK_EQ_INT(r.puts, 1);                                    /* a refused put: no row */
    r.fail = KURA_EIO;
    kura_item b = item("k", "two", 0);
    CHECK_EQ_INT(kura_store_put(s, &b, KURA_PUT_ANY, 0, &clk), KURA_EIO);
    CHECK(holds(&f, "one"));                                    /* cancelled */
    CHECK_EQ_INT(kura_store_del(s, "k", 1, 0, &clk), KURA_EIO);
    CHECK(holds(&f, "one"));
    r.fail = KURA_OK;
    CHECK_EQ_INT(kura_store_del(s, "k", 1, 0, &clk), KURA_OK);
    CHECK(!f.have && r.dels == 2);
    /* the change the caller put in the clock reaches the feed, put and
     * delete, and a refusal is the store call's result as the feed said it */
    int change;
    kura_clock cc = clk;
    cc.feed_ctx = &change;
    r.change = NULL;
    CHECK_EQ_INT(kura_store_put(s, &a, KURA_PUT_ANY, 0, &cc), KURA_OK);
    CHECK(r.change == &change);
    r.change = NULL;
    CHECK_EQ_INT(kura_store_del(s, "k", 1, 0, &cc), KURA_OK);
    CHECK(r.change == &change);
    r.fail = -1000;                                             /* any negative */
    CHECK_EQ_INT(kura_store_put(s, &a, KURA_PUT_ANY, 0, &cc), -1000);
    CHECK(!f.have && f.action == KURA_UPDATE_KEEP);
    r.fail = KURA_OK;
}

static void test_delete(void)
{
    fake f;
    fake_init(&f, 1 << 20);
    kura_store *s = &f.base;
    kura_item a = item("k", "one", 11);
    CHECK_EQ_INT(kura_store_del(s, "k", 1, 0, &clk), KURA_NOTFOUND);
    CHECK_EQ_INT(f.action, KURA_UPDATE_REMOVE);     /* a dead one met may go */
    CHECK(f.hint.meta && !f.hint.put);
    CHECK_EQ_INT(kura_store_put(s, &a, KURA_PUT_ANY, 0, &clk), KURA_OK);
    CHECK_EQ_INT(kura_store_del(s, "k", 1, 12, &clk), KURA_EXISTS);
    CHECK(holds(&f, "one") && f.action == KURA_UPDATE_KEEP);
    CHECK_EQ_INT(kura_store_del(s, "k", 1, 11, &clk), KURA_OK);
    CHECK(!f.have);
}

/* An update callback that asks for what it is told. */
typedef struct ask {
    int action;
    const char *val;
    size_t vlen;
    int rc;
} ask;

static int ask_cb(void *arg, const kura_item *cur, kura_update *out)
{
    ask *a = arg;
    (void)cur;
    out->action = a->action;
    out->exptime = 2000;
    out->part[0].base = a->val;
    out->part[0].len = a->vlen;
    return a->rc;
}

static void test_checks(void)
{
    fake f;
    fake_init(&f, 200);                     /* -I: values up to 140 bytes under key "k" */
    kura_store *s = &f.base;
    char big[160], key[KURA_KEY_MAX + 1];
    memset(big, 'v', sizeof(big));
    memset(key, 'k', sizeof(key));
    kura_item a = item("k", "one", 11);

    kura_item bad = a;
    bad.key = NULL;                     /* (the empty key is "", 0) */
    bad.klen = 0;
    CHECK_EQ_INT(kura_store_put(s, &bad, KURA_PUT_ANY, 0, &clk), KURA_EINVAL);
    bad.key = key;
    bad.klen = sizeof(key);
    CHECK_EQ_INT(kura_store_put(s, &bad, KURA_PUT_ANY, 0, &clk), KURA_EINVAL);
    CHECK_EQ_INT(kura_store_del(s, key, sizeof(key), 0, &clk), KURA_NOTFOUND);
    ask keep = { KURA_UPDATE_KEEP, NULL, 0, KURA_OK };
    CHECK_EQ_INT(kura_store_update(s, key, sizeof(key), &clk, ask_cb, &keep), KURA_EINVAL);
    CHECK_EQ_INT(f.calls, 0);                               /* the store never asked */

    kura_item large = a;
    large.val = big;
    large.vlen = sizeof(big);
    CHECK_EQ_INT(kura_store_put(s, &large, KURA_PUT_ANY, 0, &clk), KURA_ETOOBIG);
    CHECK_EQ_INT(f.calls, 0);

    CHECK_EQ_INT(kura_store_put(s, &a, KURA_PUT_ANY, 0, &clk), KURA_OK);
    ask grow = { KURA_UPDATE_REPLACE, big, sizeof(big), KURA_OK };
    CHECK_EQ_INT(kura_store_update(s, "k", 1, &clk, ask_cb, &grow), KURA_ETOOBIG);
    CHECK(holds(&f, "one") && f.action == KURA_UPDATE_KEEP);
    ask fine = { KURA_UPDATE_REPLACE, "two", 3, 7 };         /* the callback's status ... */
    CHECK_EQ_INT(kura_store_update(s, "k", 1, &clk, ask_cb, &fine), 7);   /* ... passed on */
    CHECK(holds(&f, "two") && !f.hint.put && !f.hint.meta && !f.hint.blind);

    ask rm = { KURA_UPDATE_REMOVE, NULL, 0, KURA_OK };
    CHECK_EQ_INT(kura_store_update(s, "k", 1, &clk, ask_cb, &rm), KURA_OK);
    CHECK(!f.have);
    ask touch = { KURA_UPDATE_TOUCH, NULL, 0, KURA_OK };
    CHECK_EQ_INT(kura_store_update(s, "k", 1, &clk, ask_cb, &touch), KURA_OK);
    CHECK(!f.shown && f.action == KURA_UPDATE_KEEP);        /* nothing to touch */
    CHECK_EQ_INT(kura_store_update(s, "k", 1, &clk, ask_cb, &rm), KURA_OK);
    CHECK_EQ_INT(f.action, KURA_UPDATE_REMOVE);             /* a dead one met may go */

    CHECK_EQ_INT(kura_store_put(s, &a, KURA_PUT_ANY, 0, &clk), KURA_OK);
    s->read_only = true;
    int calls = f.calls;
    CHECK_EQ_INT(kura_store_put(s, &a, KURA_PUT_ANY, 0, &clk), KURA_EREADONLY);
    CHECK_EQ_INT(kura_store_del(s, "k", 1, 0, &clk), KURA_EREADONLY);
    CHECK_EQ_INT(f.calls, calls);
    CHECK_EQ_INT(kura_store_update(s, "k", 1, &clk, ask_cb, &fine), KURA_EREADONLY);
    CHECK(holds(&f, "one") && f.action == KURA_UPDATE_KEEP);
    CHECK_EQ_INT(kura_store_update(s, "k", 1, &clk, ask_cb, &keep), KURA_OK);  /* reads go */
    f.have = false;
    CHECK_EQ_INT(kura_store_update(s, "k", 1, &clk, ask_cb, &rm), KURA_OK);
    CHECK_EQ_INT(f.action, KURA_UPDATE_KEEP);               /* a dead one stays */
}

int main(void)
{
    RUN(test_put_conditions);
    RUN(test_feed_calls);
    RUN(test_delete);
    RUN(test_checks);
    UNIT_DONE();
}

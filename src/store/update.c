/*
 * update.c - the one interpreter of changes over the stores' primitive.
 *
 * Every backend offers one read-modify-write primitive (ops->rmw,
 * store.h): under the key's lock it shows the live item, or none, to a
 * decision and then stores, touches, deletes or leaves it as told.  What a
 * put's condition (set, add, replace, cas), a delete's cas and an update
 * callback's action mean is decided here, once, so the cache, the hash
 * file and the B+ tree cannot differ on it; so are the checks made where
 * the store is entered (the key's length, the item size limit -I, a
 * read-only store) and the calls to the change feed, made under the
 * key's lock before the store writes.  A backend keeps its storage, its
 * locking and its reclaiming of dead items.
 */
#include <stdint.h>
#include <string.h>

#include "kura/store.h"

/* True when a value of vlen bytes for a key of klen is past the store's
 * limit (flags not counted, as memcached's -I check before it knows them
 * would; 32-bit lengths in every format leave a margin), or the key past
 * what the store holds (key_max). */
static bool too_big(const kura_store *s, size_t klen, size_t vlen)
{
    return vlen > UINT32_MAX - 1024 || (s->key_max && klen > s->key_max) ||
           (s->item_max && kura_item_wire_total(klen, vlen, 0) > s->item_max);
}

/* The change feed (store.h), given the feed_ctx of the store call's clock. */
static inline int feed_put(kura_store *s, const kura_clock *clk, kura_item *it)
{
    return s->feed ? s->feed->put(s->feed->arg, clk->feed_ctx, it) : KURA_OK;
}

static inline int feed_del(kura_store *s, const kura_clock *clk, const char *key, size_t klen)
{
    return s->feed ? s->feed->del(s->feed->arg, clk->feed_ctx, key, klen) : KURA_OK;
}

/* ---- put ------------------------------------------------------------------ */

typedef struct put_arg {
    kura_store *s;
    const kura_clock *clk;
    const kura_item *it;
    int cond;
    uint64_t cmp_cas;
} put_arg;

/* How cond judges the live item (or none). */
static int put_cond(int cond, const kura_item *cur, uint64_t cmp_cas)
{
    switch (cond) {
    case KURA_PUT_ANY:
        return KURA_OK;
    case KURA_PUT_ABSENT:
        return cur ? KURA_EXISTS : KURA_OK;
    case KURA_PUT_PRESENT:
        return cur ? KURA_OK : KURA_NOTFOUND;
    case KURA_PUT_CAS:
        return !cur ? KURA_NOTFOUND : cur->cas != cmp_cas ? KURA_EXISTS : KURA_OK;
    default:
        return KURA_EINVAL;
    }
}

static int put_decide(void *arg, const kura_item *cur, kura_update *out)
{
    put_arg *p = arg;
    int rc = put_cond(p->cond, cur, p->cmp_cas);
    if (rc != KURA_OK)
        return rc;
    /* the change feed (store.h) gives the cas and logs the change */
    kura_item stamped = *p->it;
    if ((rc = feed_put(p->s, p->clk, &stamped)) != KURA_OK)
        return rc;
    out->action = KURA_UPDATE_REPLACE;
    out->flags = p->it->flags;
    out->exptime = p->it->exptime;
    out->cas = stamped.cas;
    out->part[0].base = p->it->val;
    out->part[0].len = p->it->vlen;
    return KURA_OK;
}

int kura_store_put(kura_store *s, const kura_item *it, int cond, uint64_t cmp_cas,
                   const kura_clock *clk)
{
    if (!kura_key_ok(it->key, it->klen) || (it->vlen && !it->val))
        return KURA_EINVAL;
    if (too_big(s, it->klen, it->vlen))
        return KURA_ETOOBIG;
    if (s->read_only)
        return KURA_EREADONLY;
    put_arg p = { s, clk, it, cond, cmp_cas };
    kura_rmw_hint h = { .put = it, .meta = true, .blind = cond == KURA_PUT_ANY };
    return s->ops->rmw(s, it->key, it->klen, clk, &h, put_decide, &p);
}

/* ---- delete --------------------------------------------------------------- */

typedef struct del_arg {
    kura_store *s;
    const kura_clock *clk;
    uint64_t cmp_cas;
} del_arg;

static int del_decide(void *arg, const kura_item *cur, kura_update *out)
{
    del_arg *d = arg;
    if (!cur) {
        out->action = KURA_UPDATE_REMOVE;       /* a dead one met goes */
        return KURA_NOTFOUND;
    }
    if (d->cmp_cas && cur->cas != d->cmp_cas)
        return KURA_EXISTS;
    int rc = feed_del(d->s, d->clk, cur->key, cur->klen);
    if (rc == KURA_OK)
        out->action = KURA_UPDATE_REMOVE;
    return rc;
}

int kura_store_del(kura_store *s, const char *key, size_t klen, uint64_t cmp_cas,
                   const kura_clock *clk)
{
    if (!kura_key_ok(key, klen))
        return KURA_NOTFOUND;
    if (s->read_only)
        return KURA_EREADONLY;
    del_arg d = { s, clk, cmp_cas };
    static const kura_rmw_hint h = { .meta = true };
    return s->ops->rmw(s, key, klen, clk, &h, del_decide, &d);
}

/* ---- update --------------------------------------------------------------- */

typedef struct update_arg {
    kura_store *s;
    size_t klen;
    kura_update_fn fn;
    void *arg;
} update_arg;

/* The caller's decision, checked: what the store is then asked to do is
 * something it can do, or nothing and the reason returned. */
static int update_decide(void *arg, const kura_item *cur, kura_update *out)
{
    update_arg *u = arg;
    int rc = u->fn(u->arg, cur, out), err = KURA_OK;
    switch (out->action) {
    case KURA_UPDATE_KEEP:
        return rc;
    case KURA_UPDATE_REPLACE: {
        size_t l0 = out->part[0].base ? out->part[0].len : 0;
        size_t l1 = out->part[1].base ? out->part[1].len : 0;
        out->part[0].len = l0;
        out->part[1].len = l1;
        if (l1 > SIZE_MAX - l0 || too_big(u->s, u->klen, l0 + l1))
            err = KURA_ETOOBIG;
        break;
    }
    case KURA_UPDATE_TOUCH:
        if (!cur)
            out->action = KURA_UPDATE_KEEP;
        else if (too_big(u->s, u->klen, cur->vlen))
            err = KURA_ETOOBIG;
        break;
    case KURA_UPDATE_REMOVE:
        if (!cur && u->s->read_only)
            out->action = KURA_UPDATE_KEEP;     /* a dead one met stays */
        break;
    default:
        err = KURA_EINVAL;
    }
    if (err == KURA_OK && u->s->read_only && out->action != KURA_UPDATE_KEEP)
        err = KURA_EREADONLY;
    if (err != KURA_OK) {
        out->action = KURA_UPDATE_KEEP;
        return err;
    }
    return rc;
}

int kura_store_update(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                      kura_update_fn fn, void *arg)
{
    if (!kura_key_ok(key, klen))
        return KURA_EINVAL;
    update_arg u = { s, klen, fn, arg };
    static const kura_rmw_hint h = { 0 };
    return s->ops->rmw(s, key, klen, clk, &h, update_decide, &u);
}

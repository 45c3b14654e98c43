/*
 * list.c - the listing commands' walk over any store, in bounded batches
 * (include/kura/list.h says what it promises).
 *
 * Why batches copied out: a store calls back with its lock held (a stripe
 * of the cache or the hash file, the B+ tree's lock), and the connection
 * that lists may drain slowly.  Formatting a million keys under a lock, or
 * buffering them all, would stall writers or grow without bound.  So a
 * step copies at most one batch of keys and metadata (never values) into
 * memory of its own, lets go, and only then hands them out.  The cursor is
 * the last key handed out (and the part, on a store without order), so a
 * walk resumes exactly after it, whatever changed in between, and a
 * caller may stop after any key.
 *
 * On a store without order a part is collected with a bounded max-heap:
 * the LIST_SORTED_BATCH smallest keys above the cursor.  A part that holds
 * more is passed over again for the next batch; with the cache's 256 and
 * the hash file's 1024 stripes a part holds a few thousand keys at a
 * million items, so that is rare.  The same heap over every part gives key
 * order on such a store (spec.sorted), one full pass per batch; the pass
 * is split into steps of about LIST_STEP_VISITS items, the heap kept in
 * the cursor between them, so that no step costs the whole store.  A
 * batch is kept in the cursor until every key of it was handed out: a
 * caller that stops half way does not make the next step collect it
 * again.
 *
 * A walk backward (spec.back) is the same walk in the mirror: every
 * comparison of a key with the cursor, the range and the heap's top is
 * turned round (dircmp), so "after the cursor" is below it, start the
 * upper bound, and the heap keeps the largest keys below the cursor; an
 * ordered store walks down from a key (KURA_ITER_BACK).
 */
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "kura/list.h"
#include "marks.h"

/* A key up to memcached's 250 bytes is kept in the slot; a longer one
 * (Tokyo Tyrant's, up to -kmax) in big, which the slot keeps for reuse
 * until the cursor ends: a batch of thousands of slots stays small. */
typedef struct list_slot {
    kura_list_item it;                  /* it.key points at k or big */
    char *big;                          /* NULL, or bigcap bytes */
    size_t bigcap;
    char k[KURA_KEY_MC_MAX];
} list_slot;

/* The cursor's last key (have_last). */
static const char *cursor_last(const kura_list_cursor *c)
{
    return c->llen > sizeof(c->last) ? c->last_long : c->last;
}

static const char *slot_key(list_slot *s)
{
    return s->it.klen > sizeof(s->k) ? s->big : s->k;
}

/* One store walk's callback state.  The batch is the cursor's (c->v, c->n,
 * c->more), which a sorted pass fills over several walks. */
typedef struct collect {
    const kura_list_spec *spec;
    kura_list_cursor *c;
    size_t cap;
    bool nomem;                         /* the batch could not grow */
    bool ended;                         /* ordered walk: past the last key that can match */
} collect;

#define COLLECT_FULL 1                  /* the ordered walk's stops */
#define COLLECT_DONE 2

/* Keys in the tree's order: memcmp, a prefix before its extensions. */
static int keycmp(const char *a, size_t al, const char *b, size_t bl)
{
    int r = memcmp(a, b, al < bl ? al : bl);
    if (r)
        return r;
    return al < bl ? -1 : al > bl;
}

/* keycmp in the walk's direction: < 0 when a comes first. */
static int dircmp(const kura_list_spec *sp, const char *a, size_t al, const char *b, size_t bl)
{
    int r = keycmp(a, al, b, bl);
    return sp->back ? -r : r;
}

static bool after_cursor(const collect *col, const kura_item *it)
{
    return !col->c->have_last ||
           dircmp(col->spec, it->key, it->klen, cursor_last(col->c), col->c->llen) > 0;
}

static bool below_start(const kura_list_spec *sp, const char *k, size_t kl)
{
    if (!sp->start)
        return false;
    int r = dircmp(sp, k, kl, sp->start, sp->slen);
    return r < 0 || (r == 0 && sp->start_open);
}

static bool above_end(const kura_list_spec *sp, const char *k, size_t kl)
{
    if (!sp->end)
        return false;
    int r = dircmp(sp, k, kl, sp->end, sp->elen);
    return r > 0 || (r == 0 && sp->end_open);
}

static bool has_prefix(const kura_list_spec *sp, const char *k, size_t kl)
{
    return kl >= sp->plen && memcmp(k, sp->prefix, sp->plen) == 0;
}

/* False when a long key's room could not be had. */
static bool fill_slot(list_slot *s, const kura_item *it)
{
    char *k = s->k;
    if (it->klen > sizeof(s->k)) {
        if (s->bigcap < it->klen) {
            char *b = realloc(s->big, it->klen);
            if (!b)
                return false;
            s->big = b;
            s->bigcap = it->klen;
        }
        k = s->big;
    }
    memcpy(k, it->key, it->klen);
    s->it = (kura_list_item){
        .key = k, .klen = it->klen, .vlen = it->vlen, .flags = it->flags,
        .flags_exact = it->val != NULL, .exptime = it->exptime, .cas = it->cas,
    };
    return true;
}

/* Room for one more slot in the batch (it grows as it fills: a short
 * listing holds little). */
static bool grow(collect *col)
{
    kura_list_cursor *c = col->c;
    if (c->n < c->alloc)
        return true;
    size_t a = c->alloc ? c->alloc * 2 : 64;
    if (a > col->cap)
        a = col->cap;
    list_slot *v = realloc(c->v, a * sizeof(*v));
    if (v) {
        for (size_t i = 0; i < c->n; i++)
            v[i].it.key = slot_key(&v[i]);      /* the slots moved */
        for (size_t i = c->alloc; i < a; i++) {
            v[i].big = NULL;
            v[i].bigcap = 0;
        }
        c->v = v;
    }
    uint32_t *ix = v ? realloc(c->ix, a * sizeof(*ix)) : NULL;
    if (!ix) {
        col->nomem = true;
        return false;
    }
    c->ix = ix;
    c->alloc = a;
    return true;
}

/* The ordered walk's callback (store lock held): keys come in order, so the
 * walk ends at the first key past the range or the prefix. */
static int ordered_cb(void *arg, const kura_item *it)
{
    collect *col = arg;
    const kura_list_spec *sp = col->spec;
    col->c->visits++;
    if (!after_cursor(col, it) || below_start(sp, it->key, it->klen))
        return 0;
    if (above_end(sp, it->key, it->klen)) {
        col->ended = true;
        return COLLECT_DONE;
    }
    if (sp->plen && !has_prefix(sp, it->key, it->klen)) {
        if (dircmp(sp, it->key, it->klen, sp->prefix, sp->plen) < 0)
            return 0;
        col->ended = true;              /* the keys with the prefix are behind us */
        return COLLECT_DONE;
    }
    if (!grow(col))
        return KURA_ENOMEM;
    kura_list_cursor *c = col->c;
    c->ix[c->n] = (uint32_t)c->n;
    if (!fill_slot(&c->v[c->n], it))
        return KURA_ENOMEM;
    c->n++;
    return c->n == col->cap ? COLLECT_FULL : 0;
}

/* The heap orders slot numbers, not slots: a swap moves 4 bytes, not a
 * slot.  "Less": first in the walk's direction. */
static bool slot_less(const kura_list_spec *sp, const list_slot *v, uint32_t a, uint32_t b)
{
    return dircmp(sp, v[a].it.key, v[a].it.klen, v[b].it.key, v[b].it.klen) < 0;
}

static void swap_ix(uint32_t *ix, size_t a, size_t b)
{
    uint32_t t = ix[a];
    ix[a] = ix[b];
    ix[b] = t;
}

/* A part's callback (part lock held): keeps the cap smallest
 * matching keys above the cursor in a max-heap. */
static int heap_cb(void *arg, const kura_item *it)
{
    collect *col = arg;
    const kura_list_spec *sp = col->spec;
    kura_list_cursor *c = col->c;
    c->visits++;
    if (!after_cursor(col, it) || below_start(sp, it->key, it->klen) ||
        above_end(sp, it->key, it->klen) || (sp->plen && !has_prefix(sp, it->key, it->klen)))
        return 0;
    size_t i;
    if (c->n < col->cap) {
        if (!grow(col))
            return KURA_ENOMEM;
        list_slot *v = c->v;
        uint32_t *ix = c->ix;
        if (!fill_slot(&v[c->n], it))
            return KURA_ENOMEM;
        i = c->n++;
        ix[i] = (uint32_t)i;
        while (i > 0 && slot_less(sp, v, ix[(i - 1) / 2], ix[i])) {
            swap_ix(ix, (i - 1) / 2, i);
            i = (i - 1) / 2;
        }
        return 0;
    }
    c->more = true;
    list_slot *v = c->v;
    uint32_t *ix = c->ix;
    list_slot *top = &v[ix[0]];
    if (dircmp(sp, it->key, it->klen, top->it.key, top->it.klen) >= 0)
        return 0;
    if (!fill_slot(top, it))            /* the largest kept makes room */
        return KURA_ENOMEM;
    for (i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < c->n && slot_less(sp, v, ix[m], ix[l]))
            m = l;
        if (r < c->n && slot_less(sp, v, ix[m], ix[r]))
            m = r;
        if (m == i)
            break;
        swap_ix(ix, i, m);
        i = m;
    }
    return 0;
}

typedef struct sort_arg {
    const kura_list_spec *sp;
    const list_slot *v;
} sort_arg;

static int ix_cmp(const void *a, const void *b, void *arg)
{
    const sort_arg *sa = arg;
    const list_slot *x = &sa->v[*(const uint32_t *)a], *y = &sa->v[*(const uint32_t *)b];
    return dircmp(sa->sp, x->it.key, x->it.klen, y->it.key, y->it.klen);
}

/* One part of a store without order, keys and metadata only (the hash
 * file then reads no record). */
static int walk_part(kura_store *st, uint32_t p, const kura_clock *clk, collect *col)
{
    kura_iter_spec part = { .scope = KURA_ITER_PART, .part = p, .keys_only = true };
    return st->ops->iterate(st, &part, clk, heap_cb, col);
}

bool engine_list_ordered(kura_engine *e)
{
    return e->store->ops->ordered;
}

/* Where an ordered walk starts: after the cursor, else at the later (in
 * the walk's direction) of start and the prefix's first key (NULL: the
 * first key; backward, the prefix's last possible key, the prefix padded
 * with 0xff to KURA_KEY_MAX, is built in pad). */
static const char *ordered_from(const kura_list_spec *sp, const kura_list_cursor *c,
                                char pad[KURA_KEY_MAX], size_t *len)
{
    if (c->have_last) {
        *len = c->llen;
        return cursor_last(c);
    }
    const char *f = sp->start;
    *len = sp->slen;
    const char *p = sp->prefix;
    size_t pl = sp->plen;
    if (pl && sp->back) {
        memcpy(pad, sp->prefix, pl);
        memset(pad + pl, 0xff, KURA_KEY_MAX - pl);
        p = pad;
        pl = KURA_KEY_MAX;
    }
    if (sp->plen && (!f || dircmp(sp, p, pl, f, *len) > 0)) {
        f = p;
        *len = pl;
    }
    return f;
}

void engine_list_begin(kura_list_cursor *c)
{
    engine_list_end(c);
}

void engine_list_end(kura_list_cursor *c)
{
    for (size_t i = 0; c->v && i < c->alloc; i++)
        free(c->v[i].big);
    free(c->last_long);
    free(c->v);
    free(c->ix);
    *c = (kura_list_cursor){ 0 };
}

/* Collects the next batch: one ordered walk, one part, or (sorted) the
 * next parts of the pass, until LIST_STEP_VISITS items were seen.  Sets
 * c->held once the batch is complete, in key order. */
static int collect_step(kura_engine *e, const kura_list_spec *spec, kura_list_cursor *c)
{
    bool ordered = engine_list_ordered(e);
    bool sorted = !ordered && spec->sorted;
    collect col = { .spec = spec, .c = c, .cap = ordered ? LIST_BATCH : LIST_SORTED_BATCH };
    kura_clock clk = engine_clock(e);
    int rc = KURA_OK;
    engine_gate_in(e);
    kura_store *st = e->store;
    uint32_t np = st->ops->parts;
    uint64_t seen = c->visits;
    if (ordered) {
        kura_iter_spec from = { .scope = spec->back ? KURA_ITER_BACK : KURA_ITER_FROM,
                                .keys_only = true };
        char pad[KURA_KEY_MAX];
        from.from = ordered_from(spec, c, pad, &from.flen);
        rc = st->ops->iterate(st, &from, &clk, ordered_cb, &col);
        c->more = rc == COLLECT_FULL;
        if (rc > 0)
            rc = KURA_OK;
        c->held = true;
    } else if (sorted) {
        while (c->part < np && c->visits - seen < LIST_STEP_VISITS && rc == KURA_OK)
            rc = walk_part(st, c->part++, &clk, &col);
        c->held = c->part >= np;
    } else if (c->part < np) {
        rc = walk_part(st, c->part, &clk, &col);
        c->held = true;
    } else {
        c->held = true;                 /* an empty batch, and no more */
    }
    engine_gate_out(e);
    if (col.nomem)
        rc = KURA_ENOMEM;
    if (rc < 0)
        return rc;
    if (c->held && !ordered && c->n)
        qsort_r(c->ix, c->n, sizeof(*c->ix), ix_cmp, &(sort_arg){ spec, c->v });
    c->next = 0;
    return KURA_OK;
}

/* The batch was handed out: what comes after it. */
static void batch_done(kura_engine *e, const kura_list_spec *spec, kura_list_cursor *c)
{
    bool ordered = engine_list_ordered(e);
    uint32_t np = e->store->ops->parts;
    bool more = c->more;
    c->held = false;
    c->n = c->next = 0;
    c->more = false;
    if (ordered || spec->sorted) {
        c->part = 0;                    /* a sorted walk's next pass starts over */
        c->done = !more;
    } else if (!more) {
        c->part++;
        c->have_last = false;
        c->done = c->part >= np;
    }
}

int engine_list_step(kura_engine *e, const kura_list_spec *spec, kura_list_cursor *c,
                     kura_list_fn emit, void *arg)
{
    if (c->done)
        return LIST_END;
    if (!c->held)
        return collect_step(e, spec, c);
    while (c->next < c->n) {
        list_slot *s = &c->v[c->ix[c->next]];
        int r = emit(arg, &s->it);
        if (r)
            return r;
        char *last = c->last;
        if (s->it.klen > sizeof(c->last)) {
            if (!c->last_long && !(c->last_long = malloc(KURA_KEY_MAX)))
                return KURA_ENOMEM;
            last = c->last_long;
        }
        memcpy(last, s->it.key, s->it.klen);
        c->llen = (uint16_t)s->it.klen;
        c->have_last = true;
        c->next++;
    }
    batch_done(e, spec, c);
    return c->done ? LIST_END : KURA_OK;
}

void engine_list_marks(kura_engine *e, const char *key, size_t klen, uint64_t cas,
                       bool *fetched, int64_t *last_access)
{
    marks_op op = { 0 };                /* sets nothing: records nothing */
    marks_prev prev;
    marks_access(e->marks, key, klen, cas, engine_now(e), &op, &prev);
    *fetched = prev.bits & MARK_FETCHED;
    *last_access = prev.atime;
}

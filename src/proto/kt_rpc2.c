/*
 * kt_rpc2.c - Kyoto Tycoon's RPC procedures on several records: set_bulk,
 * remove_bulk and get_bulk (records named "_KEY"), and match_prefix /
 * match_regex, which list keys.
 *
 * The bulk procedures apply each record on its own: "atomic" (ktserver:
 * all under one lock) is accepted, and each record is atomic, not the
 * set of them (docs/migration.md).  get_bulk's output stops at
 * KT_OUT_MAX bytes.
 *
 * A match walks the store with the engine's listing steps (list.h), as
 * Tokyo Tyrant's fwmkeys and misc regex do (tt_walk.c): KT_WALK_SLICE
 * keys, or KT_WALK_STEPS of the matcher's steps (regex) or of the edit
 * distance's cells (similar), a call; the request then
 * stays unconsumed and runs again on the connection's next turn, where
 * the walk goes on.  The regular expression is kura's bounded matcher
 * (ere.h), a key that would take past KT_REGEX_KEY_STEPS failing the
 * request.  The keys come in the listing's order (key order on the B+
 * tree, the store's elsewhere), each "_KEY" with its index in that
 * order, at most max (negative: all, up to KT_LIST_MAX).  match_similar
 * lists the keys within range edits (insertions, deletions, changes of a
 * byte, or with utf of a UTF-8 character) of origin, the closest first
 * (ties in key order), at most max, as Kyoto Cabinet orders them.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kura/testhooks.h"
#include "kt_int.h"

/* ---- bulk ----------------------------------------------------------------------------------- */

static int set_bulk(kt_req *r)
{
    kura_session *s = r->s;
    int64_t exptime = kt_exptime(s->engine, kt_param_xt(r));
    uint64_t num = 0;
    for (size_t i = 0; i < r->st->in.n; i++) {
        const kt_pair *p = &r->st->in.v[i];
        if (p->k.n < 1 || p->k.p[0] != '_')
            continue;
        kura_item it = { .key = p->k.p + 1, .klen = p->k.n - 1, .val = p->v.p, .vlen = p->v.n,
                         .exptime = exptime };
        if (!proto_key_ok(it.klen, KT_KEY_MAX(r->s)))
            return kt_db_fail(r, KURA_EINVAL, false);
        if (!engine_item_fits(s->engine, it.klen, it.vlen, 0))
            return kt_db_fail(r, KURA_ETOOBIG, false);
        s->dirty = true;
        KURA_STAT_INC(s->stats, cmd_set);
        int rc = engine_store(s->engine, s->stats, KURA_CMD_SET, &it, NULL, NULL);
        if (rc != KURA_STORED)
            return kt_db_fail(r, rc, false);
        num++;
    }
    kt_out_setf(&r->st->out, "num", "%llu", (unsigned long long)num);
    return 200;
}

static int remove_bulk(kt_req *r)
{
    kura_session *s = r->s;
    uint64_t num = 0;
    for (size_t i = 0; i < r->st->in.n; i++) {
        const kt_pair *p = &r->st->in.v[i];
        if (p->k.n < 1 || p->k.p[0] != '_' ||
            !proto_key_ok(p->k.n - 1, KT_KEY_MAX(r->s)))
            continue;
        s->dirty = true;
        int rc = engine_delete(s->engine, s->stats, p->k.p + 1, p->k.n - 1, NULL);
        if (rc == KURA_OK)
            num++;
        else if (rc < 0)
            return kt_db_fail(r, rc, false);
    }
    kt_out_setf(&r->st->out, "num", "%llu", (unsigned long long)num);
    return 200;
}

static int get_bulk(kt_req *r)
{
    uint64_t num = 0;
    char key[KURA_KEY_MAX + 1];
    for (size_t i = 0; i < r->st->in.n && !r->st->out.full; i++) {
        const kt_pair *p = &r->st->in.v[i];
        if (p->k.n < 1 || p->k.p[0] != '_')
            continue;
        rec g = { &r->st->reply, true, 0, 0, 0 };
        int rc = kt_read(r, p->k.p + 1, p->k.n - 1, &g);
        if (rc == KURA_NOTFOUND)
            continue;
        if (rc != KURA_OK)
            return kt_db_fail(r, rc, false);
        memcpy(key, p->k.p, p->k.n);    /* "_KEY": at most -kmax + 1 bytes */
        if (kt_out_set(&r->st->out, key, p->k.n, r->st->reply.data, r->st->reply.len))
            num++;
    }
    kt_out_setf(&r->st->out, "num", "%llu", (unsigned long long)num);
    return 200;
}

int kt_rpc_bulk(kt_req *r, const char *name)
{
    if (!strcmp(name, "set_bulk"))
        return set_bulk(r);
    if (!strcmp(name, "remove_bulk"))
        return remove_bulk(r);
    if (!strcmp(name, "get_bulk"))
        return get_bulk(r);
    return 0;
}

/* ---- match_prefix, match_regex, match_similar ------------------------------------------------ */

void kt_walk_release(kura_session *s, kt_walk *w)
{
    if (w->re)
        ere_free(w->re);
    w->re = NULL;
    w->kind = 0;
    kura_buf_free(&w->keys);
    engine_list_end(&w->cur);
    walk_release(s);
}

#define MATCH_FULL 3                    /* emit's stop: the walk is over (LIST_END is 2) */
#define SIMILAR_MAX 1024                /* an origin's characters */

typedef struct match_run {
    kt_walk *w;
    uint64_t steps;
    bool sliced;
    bool failed;                        /* a key past the matcher's budget */
    uint32_t origin[SIMILAR_MAX];       /* match_similar's, as characters */
    size_t olen;
    size_t range;
    bool utf;
} match_run;

/* Bytes, or UTF-8 characters (a bad byte counts as one), into out. */
static size_t chars(const char *p, size_t n, bool utf, uint32_t *out, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k < max; k++) {
        unsigned char c = (unsigned char)p[i];
        size_t len = !utf || c < 0xc0 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        if (i + len > n)
            len = 1;
        uint32_t v = len == 1 ? c : c & (0x7f >> len);
        for (size_t j = 1; j < len; j++)
            v = v << 6 | ((unsigned char)p[i + j] & 0x3f);
        out[k] = v;
        i += len;
    }
    return k;
}

/* The edit distance of a and b, or bound + 1 when it is past bound;
 * O(an * bn) steps, counted. */
static size_t distance(const uint32_t *a, size_t an, const uint32_t *b, size_t bn, size_t bound,
                       uint64_t *steps)
{
    if ((an > bn ? an - bn : bn - an) > bound)
        return bound + 1;
    size_t row[KURA_KEY_MAX + 2];
    for (size_t j = 0; j <= bn; j++)
        row[j] = j;
    for (size_t i = 1; i <= an; i++) {
        size_t diag = row[0], best = row[0] = i;
        for (size_t j = 1; j <= bn; j++) {
            size_t up = row[j];
            size_t v = diag + (a[i - 1] != b[j - 1]);
            v = up + 1 < v ? up + 1 : v;
            v = row[j - 1] + 1 < v ? row[j - 1] + 1 : v;
            row[j] = v;
            diag = up;
            best = v < best ? v : best;
        }
        *steps += bn;
        if (best > bound)
            return bound + 1;
    }
    return row[bn];
}

/* Whether li matches the walk (the distance into *dist); MATCH_FULL when
 * a key takes the regex past its budget. */
static int matches(match_run *run, const kura_list_item *li, uint32_t *dist)
{
    kt_walk *w = run->w;
    *dist = 0;
    if (w->kind == 2) {
        int m = ere_match(w->re, li->key, li->klen, KT_REGEX_KEY_STEPS, &run->steps);
        if (m == ERE_EBUDGET) {
            run->failed = true;
            return MATCH_FULL;
        }
        return m == ERE_OK;
    }
    if (w->kind == 3) {
        uint32_t k[KURA_KEY_MAX];
        size_t kn = chars(li->key, li->klen, run->utf, k, KURA_KEY_MAX);
        size_t d = distance(run->origin, run->olen, k, kn, run->range, &run->steps);
        *dist = (uint32_t)d;
        return d <= run->range;
    }
    return 1;
}

static int match_emit(void *arg, const kura_list_item *li)
{
    match_run *run = arg;
    kt_walk *w = run->w;
    if (w->max == 0 || w->count >= KT_LIST_MAX || w->keys.len >= KT_OUT_MAX)
        return MATCH_FULL;              /* as many as may be listed */
    if (w->kind != 1 && run->sliced && run->steps >= KT_WALK_STEPS)
        return LIST_STOP;
    w->cur.count++;
    uint32_t dist;
    int m = matches(run, li, &dist);
    if (m != 1)
        return m == MATCH_FULL ? MATCH_FULL : 0;
    unsigned char h[8];
    put_be32(h, (uint32_t)li->klen);
    put_be32(h + 4, dist);
    if (!kura_buf_append(&w->keys, h, 8) || !kura_buf_append(&w->keys, li->key, li->klen))
        return KURA_ENOMEM;
    w->count++;
    if (w->kind != 3)
        w->max--;                       /* similar: the closest max, once all are seen */
    return 0;
}

/* Starts a walk; 0, or the status it was answered with. */
static int match_begin(kt_req *r, int kind, kt_span pat)
{
    kt_walk *w = &r->st->walk;
    if (!walk_admit(r->s))
        return kt_error(r, 500, "too many listings under way: try again later");
    if (kind == 2 && ere_compile(&w->re, pat.p, pat.n, 0, NULL) != ERE_OK) {
        walk_release(r->s);
        kt_error(r, 0, "DB: 8: logical inconsistency: compilation failed");
        return 450;
    }
    kt_span m = kt_param(&r->st->in, "max");
    int64_t max = m.p ? kt_atoi(m) : -1;
    w->kind = kind;
    w->max = max < 0 ? UINT64_MAX : (uint64_t)max;
    w->count = 0;
    w->keys.len = 0;
    engine_list_begin(&w->cur);
    return 0;
}

typedef struct found {
    const char *key;
    uint32_t klen, dist;
} found;

static int found_cmp(const void *x, const void *y)
{
    const found *a = x, *b = y;
    if (a->dist != b->dist)
        return a->dist < b->dist ? -1 : 1;
    size_t n = a->klen < b->klen ? a->klen : b->klen;
    int c = memcmp(a->key, b->key, n);
    return c ? c : (a->klen > b->klen) - (a->klen < b->klen);
}

/* The reply: "_KEY" with its index (similar: closest first, at most
 * max), then num. */
static int match_reply(kt_req *r)
{
    kt_walk *w = &r->st->walk;
    found *f = malloc((w->count ? w->count : 1) * sizeof(*f));
    if (!f)
        return kt_error(r, 500, "out of memory");
    size_t n = 0;
    for (size_t off = 0; off + 8 <= w->keys.len && n < w->count; n++) {
        f[n] = (found){ w->keys.data + off + 8, get_be32(w->keys.data + off),
                        get_be32(w->keys.data + off + 4) };
        off += 8 + f[n].klen;
    }
    if (w->kind == 3) {
        qsort(f, n, sizeof(*f), found_cmp);
        if (n > w->max)
            n = (size_t)w->max;
    }
    char key[KURA_KEY_MAX + 1];
    for (size_t i = 0; i < n; i++) {
        key[0] = '_';
        memcpy(key + 1, f[i].key, f[i].klen);
        char v[24];
        int vn = snprintf(v, sizeof(v), "%zu", i);
        kt_out_set(&r->st->out, key, f[i].klen + 1, v, (size_t)vn);
    }
    free(f);
    kt_out_setf(&r->st->out, "num", "%zu", n);
    return 200;
}

/* Runs the walk a slice; 0 when it paused, else its status. */
static int match_walk(kt_req *r, match_run *run, kt_span pat, bool *paused)
{
    kura_session *s = r->s;
    kt_walk *w = run->w;
    kura_list_spec spec = { .prefix = w->kind == 1 ? pat.p : NULL,
                            .plen = w->kind == 1 ? pat.n : 0 };
    uint64_t start = w->cur.count;
    int rc = KURA_OK;
    while (rc == KURA_OK && !w->cur.done) {
        if (run->sliced && w->cur.count - start >= KT_WALK_SLICE)
            rc = LIST_STOP;
        else
            rc = engine_list_step(s->engine, &spec, &w->cur, match_emit, run);
        if (rc == LIST_END || rc == MATCH_FULL)
            rc = rc == MATCH_FULL ? MATCH_FULL : KURA_OK;
        if (rc == LIST_STOP) {
            s->out_full = true;         /* the rest on the connection's next turn */
            *paused = true;
            return 0;
        }
    }
    if (run->failed)
        return kt_error(r, 500, "the regular expression takes too long on a key");
    return rc < 0 ? kt_db_fail(r, rc, false) : match_reply(r);
}

int kt_rpc_match(kt_req *r, int kind, bool *paused)
{
    kt_walk *w = &r->st->walk;
    static const char *const names[] = { "", "prefix", "regex", "origin" };
    kt_span pat = kt_param(&r->st->in, names[kind]);
    if (!pat.p)
        return kt_error(r, 400, "invalid parameters");
    if (!w->kind) {
        int code = match_begin(r, kind, pat);
        if (code)
            return code;
    }
    match_run *run = malloc(sizeof(*run));
    if (!run) {
        kt_walk_release(r->s, w);
        return kt_error(r, 500, "out of memory");
    }
    *run = (match_run){ .w = w, .sliced = !KURA_TEST_SWITCH(list_inline) };
    if (kind == 3) {
        kt_span rg = kt_param(&r->st->in, "range");
        int64_t range = rg.p ? kt_atoi(rg) : 1;
        run->range = range < 0 ? 1 : range > SIMILAR_MAX ? SIMILAR_MAX : (size_t)range;
        run->utf = kt_param(&r->st->in, "utf").p != NULL;
        run->olen = chars(pat.p, pat.n, run->utf, run->origin, SIMILAR_MAX);
    }
    int code = match_walk(r, run, pat, paused);
    free(run);
    if (!*paused)
        kt_walk_release(r->s, w);
    return code;
}

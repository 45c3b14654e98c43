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
 * keys, or KT_WALK_STEPS of the matcher's steps, a call; the request then
 * stays unconsumed and runs again on the connection's next turn, where
 * the walk goes on.  The regular expression is kura's bounded matcher
 * (ere.h), a key that would take past KT_REGEX_KEY_STEPS failing the
 * request.  The keys come in the listing's order (key order on the B+
 * tree, the store's elsewhere), each "_KEY" with its index in that
 * order, at most max (negative: all, up to KT_LIST_MAX).
 */
#include <stdio.h>

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
        if (!proto_key_ok(it.klen, KURA_KEY_MAX))
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
        if (p->k.n < 1 || p->k.p[0] != '_' || !proto_key_ok(p->k.n - 1, KURA_KEY_MAX))
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
        memcpy(key, p->k.p, p->k.n);    /* "_KEY": at most 251 bytes */
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

/* ---- match_prefix, match_regex ------------------------------------------------------------------ */

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

typedef struct match_run {
    kt_walk *w;
    uint64_t steps;
    bool sliced;
    bool failed;                        /* a key past the matcher's budget */
} match_run;

static int match_emit(void *arg, const kura_list_item *li)
{
    match_run *run = arg;
    kt_walk *w = run->w;
    if (w->max == 0 || w->count >= KT_LIST_MAX || w->keys.len >= KT_OUT_MAX)
        return MATCH_FULL;              /* as many as may be listed */
    if (w->kind == 2 && run->sliced && run->steps >= KT_WALK_STEPS)
        return LIST_STOP;
    w->cur.count++;
    if (w->kind == 2) {
        int m = ere_match(w->re, li->key, li->klen, KT_REGEX_KEY_STEPS, &run->steps);
        if (m == ERE_EBUDGET) {
            run->failed = true;
            return MATCH_FULL;
        }
        if (m != ERE_OK)
            return 0;
    }
    unsigned char l[4];
    put_be32(l, (uint32_t)li->klen);
    if (!kura_buf_append(&w->keys, l, 4) || !kura_buf_append(&w->keys, li->key, li->klen))
        return KURA_ENOMEM;
    w->count++;
    w->max--;
    return 0;
}

/* Starts a walk; 0, or the status it was answered with. */
static int match_begin(kt_req *r, bool regex, kt_span pat)
{
    kt_walk *w = &r->st->walk;
    if (!walk_admit(r->s))
        return kt_error(r, 500, "too many listings under way: try again later");
    if (regex && ere_compile(&w->re, pat.p, pat.n, 0, NULL) != ERE_OK) {
        walk_release(r->s);
        kt_error(r, 0, "DB: 8: logical inconsistency: compilation failed");
        return 450;
    }
    kt_span m = kt_param(&r->st->in, "max");
    int64_t max = m.p ? kt_atoi(m) : -1;
    w->kind = regex ? 2 : 1;
    w->max = max < 0 ? UINT64_MAX : (uint64_t)max;
    w->count = 0;
    w->keys.len = 0;
    engine_list_begin(&w->cur);
    return 0;
}

/* The reply: "_KEY" with its index, then num. */
static int match_reply(kt_req *r)
{
    kt_walk *w = &r->st->walk;
    char key[KURA_KEY_MAX + 1];
    uint64_t i = 0;
    for (size_t off = 0; off + 4 <= w->keys.len; i++) {
        uint32_t n = get_be32(w->keys.data + off);
        key[0] = '_';
        memcpy(key + 1, w->keys.data + off + 4, n);
        char v[24];
        int vn = snprintf(v, sizeof(v), "%llu", (unsigned long long)i);
        kt_out_set(&r->st->out, key, n + 1, v, (size_t)vn);
        off += 4 + n;
    }
    kt_out_setf(&r->st->out, "num", "%llu", (unsigned long long)i);
    return 200;
}

int kt_rpc_match(kt_req *r, bool regex, bool *paused)
{
    kura_session *s = r->s;
    kt_walk *w = &r->st->walk;
    kt_span pat = kt_param(&r->st->in, regex ? "regex" : "prefix");
    if (!pat.p)
        return kt_error(r, 400, "invalid parameters");
    if (!w->kind) {
        int code = match_begin(r, regex, pat);
        if (code)
            return code;
    }
    kura_list_spec spec = { .prefix = regex ? NULL : pat.p, .plen = regex ? 0 : pat.n };
    bool sliced = !KURA_TEST_SWITCH(list_inline);
    match_run run = { w, 0, sliced, false };
    uint64_t start = w->cur.count;
    int rc = KURA_OK;
    while (rc == KURA_OK && !w->cur.done) {
        if (sliced && w->cur.count - start >= KT_WALK_SLICE) {
            s->out_full = true;
            *paused = true;
            return 0;
        }
        rc = engine_list_step(s->engine, &spec, &w->cur, match_emit, &run);
        if (rc == LIST_END)
            rc = KURA_OK;
        if (rc == MATCH_FULL)
            break;
        if (rc == LIST_STOP) {
            s->out_full = true;
            *paused = true;
            return 0;
        }
    }
    if (rc == MATCH_FULL)
        rc = KURA_OK;
    int code;
    if (run.failed)
        code = kt_error(r, 500, "the regular expression takes too long on a key");
    else if (rc < 0)
        code = kt_db_fail(r, rc, false);
    else
        code = match_reply(r);
    kt_walk_release(s, w);
    return code;
}

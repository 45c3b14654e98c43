/*
 * tt_walk.c - what walks the store in Tokyo Tyrant's protocol: the
 * iterator of iterinit / iternext (and misc's), and the replies that list
 * records (fwmkeys, misc regex and range), on the engine's listing steps
 * (list.h), so no request holds a lock or walks more than a bounded share
 * of the store at a time.
 *
 * The iterator is the connection's own (ttserver has one per database,
 * shared by every client, so two clients iterating disturb each other;
 * here they do not).  It copies one listing batch of keys at a time and
 * hands them out one per iternext; it is fuzzy as every listing is: a key
 * live for the whole iteration is given once, one stored or removed
 * meanwhile may or may not be.  Order: key order on the B+ tree, none
 * useful on the hash file and the cache (as on Tokyo Cabinet's hash).
 *
 * A listing reply begins with its count, so it is built whole in the
 * session's state before it is appended; the walk goes TT_WALK_SLICE keys
 * a call, leaving the request unconsumed in between (the connection calls
 * again on its next turn), and stops at TT_LIST_MAX records or
 * TT_LIST_BYTES bytes.  misc regex matches with kura's own matcher
 * (ere.h: linear time, no back-references) and measures its slice in the
 * matcher's steps as well (TT_WALK_STEPS), so that a costly pattern over
 * many keys costs the worker's other connections a few milliseconds a
 * turn, never the seconds libc's backtracking regexec took on one key.
 */
#include <string.h>

#include "kura/testhooks.h"
#include "tt_int.h"

/* ---- the iterator ------------------------------------------------------------------ */

void tt_iterinit(tt_req *r, const char *start, size_t slen)
{
    tt_iter *it = &r->st->iter;
    engine_list_begin(&it->cur);
    it->keys.len = it->pos = 0;
    it->have_start = start != NULL && slen <= sizeof(it->start);   /* a key the store can hold */
    it->slen = it->have_start ? slen : 0;
    if (it->have_start)
        memcpy(it->start, start, slen);
}

static int take_key(void *arg, const kura_list_item *li)
{
    kura_buf *b = arg;
    unsigned char l[2] = { (unsigned char)(li->klen >> 8), (unsigned char)li->klen };
    return kura_buf_append(b, l, 2) && kura_buf_append(b, li->key, li->klen) ? 0 : KURA_ENOMEM;
}

int tt_iternext(tt_req *r, const char **key, size_t *klen)
{
    tt_iter *it = &r->st->iter;
    if (it->pos >= it->keys.len) {
        it->keys.len = it->pos = 0;
        kura_list_spec spec = { .start = it->have_start ? it->start : NULL, .slen = it->slen };
        /* a step over an empty part of the store gives nothing: go on to
         * the next (a walk has a bounded number of parts) */
        while (it->keys.len == 0 && !it->cur.done) {
            int rc = engine_list_step(r->s->engine, &spec, &it->cur, take_key, &it->keys);
            if (rc < 0)
                return rc;
        }
        if (it->keys.len == 0)
            return KURA_NOTFOUND;
    }
    const char *p = it->keys.data + it->pos;
    *klen = (size_t)(unsigned char)p[0] << 8 | (unsigned char)p[1];
    *key = p + 2;
    it->pos += 2 + *klen;
    return KURA_OK;
}

/* ---- listing replies ---------------------------------------------------------------- */

void tt_walk_release(tt_walk *w)
{
    if (w->kind == TT_WALK_REGEX)
        ere_free(w->re);
    w->re = NULL;
    w->kind = 0;
    kura_buf_free(&w->res);
    engine_list_end(&w->cur);          /* a cursor keeps its batch between steps */
}

typedef struct walk_run {
    tt_req *r;
    tt_walk *w;
    uint64_t steps;                     /* the matcher's, in this call */
    bool sliced;                        /* this call stops at TT_WALK_STEPS */
} walk_run;

#define WALK_FULL 3                     /* emit's stop: the reply is as long as it may be */
#define WALK_BUDGET 4                   /* emit's failure: a key past TT_REGEX_KEY_STEPS */

static int emit_value(void *arg, const kura_item *it)
{
    tt_walk *w = arg;
    return tt_elem(&w->res, it->key, it->klen) && tt_elem(&w->res, it->val, it->vlen)
               ? 0 : KURA_ENOMEM;
}

static int walk_emit(void *arg, const kura_list_item *li)
{
    walk_run *run = arg;
    tt_walk *w = run->w;
    if (w->max == 0 || w->count >= TT_LIST_MAX || w->res.len >= TT_LIST_BYTES)
        return WALK_FULL;
    if (w->kind == TT_WALK_REGEX && run->sliced && run->steps >= TT_WALK_STEPS)
        return LIST_STOP;               /* this key first on the next turn */
    w->cur.count++;                     /* keys seen: the slice's measure */
    if (w->kind == TT_WALK_FWM) {
        if (!tt_elem(&w->res, li->key, li->klen))
            return KURA_ENOMEM;
        w->count++;
        w->max--;
        return 0;
    }
    if (w->kind == TT_WALK_REGEX) {
        /* up to a NUL, as ttserver's regexec reads the key */
        size_t kl = strnlen(li->key, li->klen);
        int m = ere_match(w->re, li->key, kl, TT_REGEX_KEY_STEPS, &run->steps);
        if (m == ERE_EBUDGET)
            return WALK_BUDGET;
        if (m != ERE_OK)
            return 0;
    }
    /* the value as it is now; a key removed since the step saw it is
     * left out; the read is not an access */
    int rc = engine_get(run->r->s->engine, run->r->s->stats, li->key, li->klen,
                        &(engine_get_opts){ .no_bump = true }, emit_value, w, NULL);
    if (rc < 0)
        return rc;
    if (rc == KURA_OK) {
        w->count += 2;                  /* a key and its value */
        w->max--;
    }
    return 0;
}

bool tt_walk_run(tt_req *r, int kind, const kura_list_spec *spec, uint64_t max,
                 const char *regex, size_t rlen)
{
    tt_walk *w = &r->st->walk;
    kura_session *s = r->s;
    if (!w->kind) {
        /* a walk holds its reply (up to TT_LIST_BYTES) between turns:
         * counted with the text protocol's listings (WALKS_MAX), so their
         * number is bounded; one more fails as ttserver's walks fail */
        if (!walk_admit(s)) {
            tt_code_u32(r, 1, 0);
            return true;
        }
        if (kind == TT_WALK_REGEX) {
            /* Tokyo's rule: a leading '*' makes it case-insensitive; the
             * pattern ends at a NUL, as ttserver's C string does */
            unsigned flags = 0;
            if (rlen > 0 && regex[0] == '*') {
                flags |= ERE_ICASE;
                regex++;
                rlen--;
            }
            rlen = strnlen(regex, rlen);
            /* refused (a back-reference, a syntax error, too large):
             * failure, as ttserver answers a pattern regcomp refuses */
            if (rlen > TT_NAME_MAX || ere_compile(&w->re, regex, rlen, flags, NULL) != ERE_OK) {
                walk_release(s);
                tt_code_u32(r, 1, 0);
                return true;
            }
        }
        w->kind = kind;
        w->count = 0;
        w->max = max;
        w->res.len = 0;
        engine_list_begin(&w->cur);
    }
    /* the test switch list_inline: the whole walk in this call, as before
     * the slices (the negative check of test_tt_regex.py) */
    bool sliced = !KURA_TEST_SWITCH(list_inline);
    walk_run run = { r, w, 0, sliced };
    uint64_t start = w->cur.count;
    int rc = KURA_OK;
    while (rc == KURA_OK && !w->cur.done) {
        if (sliced && w->cur.count - start >= TT_WALK_SLICE) {
            s->out_full = true;         /* the rest on the connection's next turn */
            return false;
        }
        rc = engine_list_step(s->engine, spec, &w->cur, walk_emit, &run);
        if (rc == LIST_END)
            rc = KURA_OK;
        if (rc == LIST_STOP) {
            s->out_full = true;         /* the matcher's budget for this turn is spent */
            return false;
        }
    }
    if (rc == WALK_FULL)
        rc = KURA_OK;
    bool failed = rc < 0 || rc == WALK_BUDGET;
    if (!failed) {
        unsigned char h[5] = { 0 };
        put_be32(h + 1, w->count);
        if (!kura_buf_reserve(r->out, 5 + w->res.len) || !kura_buf_append(r->out, h, 5) ||
            !kura_buf_append(r->out, w->res.data, w->res.len))
            s->close = true;
    } else if (rc == KURA_ENOMEM) {
        s->close = true;
    } else {
        tt_code_u32(r, 1, 0);
    }
    tt_walk_release(w);
    walk_release(s);
    return true;
}

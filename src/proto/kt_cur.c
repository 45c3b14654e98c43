/*
 * kt_cur.c - Kyoto Tycoon's cursor procedures (cur_jump, cur_step,
 * cur_get, cur_set_value, cur_remove, cur_seize, ..., cur_delete), each
 * naming its cursor with CUR=N; a connection's cursors are its own
 * (ktserver's too) and at most KT_CURSORS_MAX.
 *
 * A cursor is a listing walk (list.h) in key order: the B+ tree's own
 * order, and on the hash file and the cache the listing's sorted walk
 * (spec.sorted), which costs a pass over the store per LIST_SORTED_BATCH
 * keys.  It holds one batch of keys; its position is a key of that
 * batch, and a step moves to the next, collecting the next batch when
 * this one is spent.  A record removed after the batch was collected is
 * passed over.
 *
 * Backward (cur_jump_back, cur_step_back) the cursor is the same walk
 * going down (spec.back: the B+ tree descends from the key, the other
 * stores keep the largest keys below the cursor in their pass), so the
 * batch is in descending order and a step, a cur_get with step or a
 * cur_remove moves to the previous key, as Kyoto Cabinet's tree cursor
 * does after a backward move.  A move in the other direction than the
 * walk's starts a new walk from the current key, that key left out.
 * ktserver answers the backward moves 501 on a hash database; kura walks
 * every store in key order, so it serves them on each.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kt_int.h"

void kt_cursors_free(kt_state *st)
{
    for (int i = 0; i < KT_CURSORS_MAX; i++) {
        kt_cursor *c = st->curs[i];
        if (!c)
            continue;
        engine_list_end(&c->walk);
        kura_buf_free(&c->keys);
        free(c);
        st->curs[i] = NULL;
    }
}

/* The cursor CUR names, made on first use; NULL with the status in *code
 * (400: no CUR, or KT_CURSORS_MAX already). */
static kt_cursor *cursor_of(kt_req *r, bool make, int *code)
{
    kt_span v = kt_param(&r->st->in, "CUR");
    *code = 0;
    if (!v.p || v.n == 0 || v.p[0] < '0' || v.p[0] > '9') {
        *code = kt_error(r, 400, "no such cursor");
        return NULL;
    }
    int64_t id = kt_atoi(v);
    int free_slot = -1;
    for (int i = 0; i < KT_CURSORS_MAX; i++) {
        if (r->st->curs[i] && r->st->curs[i]->id == id)
            return r->st->curs[i];
        if (!r->st->curs[i] && free_slot < 0)
            free_slot = i;
    }
    if (!make)
        return NULL;
    if (free_slot < 0) {
        *code = kt_error(r, 400, "too many cursors on this connection");
        return NULL;
    }
    kt_cursor *c = calloc(1, sizeof(*c));
    if (!c) {
        *code = kt_error(r, 500, "out of memory");
        return NULL;
    }
    c->id = id;
    c->pos = SIZE_MAX;                  /* not positioned */
    r->st->curs[free_slot] = c;
    return c;
}

/* A batch holds each key after its length in 2 bytes (big-endian): keys
 * run to KURA_KEY_MAX (4096) bytes under -kmax, past what a byte holds. */
#define KEY_LEN_BYTES 2

static int take_key(void *arg, const kura_list_item *li)
{
    kura_buf *b = arg;
    unsigned char l[KEY_LEN_BYTES] = { (unsigned char)(li->klen >> 8), (unsigned char)li->klen };
    return kura_buf_append(b, l, sizeof(l)) && kura_buf_append(b, li->key, li->klen)
               ? 0 : KURA_ENOMEM;
}

/* The length of the batch's key at pos. */
static size_t key_len_at(const kt_cursor *c, size_t pos)
{
    const unsigned char *p = (const unsigned char *)c->keys.data + pos;
    return (size_t)p[0] << 8 | p[1];
}

/* Listing steps one request may take to find the cursor's next key (a
 * sorted step looks at LIST_STEP_VISITS items): past them the request
 * pauses and goes on at the connection's next turn, so a cursor on a
 * large hash file never holds the worker for a whole pass. */
#ifndef KT_CUR_STEPS
#define KT_CUR_STEPS 16
#endif
#define CUR_PAUSE 100                   /* fill's: run the request again later */

/* Makes pos a key of the batch, collecting the next batch when it is
 * spent: KURA_OK, KURA_NOTFOUND (past the last key), CUR_PAUSE or an
 * error. */
static int fill(kt_req *r, kt_cursor *c)
{
    if (c->pos == SIZE_MAX)
        return KURA_NOTFOUND;
    if (c->pos < c->keys.len)
        return KURA_OK;
    c->keys.len = c->pos = 0;           /* (a paused fill left both at 0: goes on) */
    kura_engine *e = r->s->engine;
    kura_list_spec spec = { .start = c->have_start ? c->start : NULL, .slen = c->slen,
                            .start_open = c->start_open, .sorted = !engine_list_ordered(e),
                            .back = c->back };
    for (int steps = 0; c->keys.len == 0 && !c->walk.done; steps++) {
        if (steps == KT_CUR_STEPS) {
            c->pos = c->keys.len;       /* the same fill next time */
            return CUR_PAUSE;
        }
        int rc = engine_list_step(e, &spec, &c->walk, take_key, &c->keys);
        if (rc < 0)
            return rc;
    }
    if (c->keys.len == 0) {
        c->pos = SIZE_MAX;
        return KURA_NOTFOUND;
    }
    return KURA_OK;
}

/* A new walk from key (NULL: the first key, or backward the last), key
 * itself left out if open.  A key longer than any stored one stands as its
 * first KURA_KEY_MAX bytes: forward then open (that prefix is below the
 * key), backward closed (it is below too, and every key up to it). */
static void jump(kt_cursor *c, const char *key, size_t klen, bool back, bool open)
{
    engine_list_begin(&c->walk);
    c->keys.len = 0;
    c->pos = 0;
    c->back = back;
    if (key && klen > sizeof(c->start)) {
        klen = sizeof(c->start);
        open = !back;
    }
    c->have_start = key && klen > 0;
    c->start_open = open;
    c->slen = c->have_start ? klen : 0;
    if (c->have_start)
        memcpy(c->start, key, klen);
    else if (key && back)
        c->pos = SIZE_MAX;              /* no key is at or below "" */
}

static void step(kt_cursor *c)
{
    if (c->pos < c->keys.len)
        c->pos += KEY_LEN_BYTES + key_len_at(c, c->pos);
}

/* The current record, copied into g (the key into *key, *klen), passing
 * over keys removed since their batch: KURA_OK, KURA_NOTFOUND or an
 * error. */
static int current(kt_req *r, kt_cursor *c, rec *g, const char **key, size_t *klen)
{
    for (;;) {
        int rc = fill(r, c);
        if (rc != KURA_OK)
            return rc;
        *klen = key_len_at(c, c->pos);
        *key = c->keys.data + c->pos + KEY_LEN_BYTES;
        rc = kt_read(r, *key, *klen, g);
        if (rc != KURA_NOTFOUND)
            return rc;
        step(c);
    }
}

/* The status of a cursor's failed move: -1 (paused: s->out_full set),
 * 450 past the last record, or the store's error. */
static int cur_fail(kt_req *r, int rc)
{
    if (rc == CUR_PAUSE) {
        r->s->out_full = true;
        return -1;
    }
    return kt_db_fail(r, rc, rc == KURA_NOTFOUND);
}

/* cur_get, cur_get_key, cur_get_value, cur_seize, cur_remove. */
static int cur_read(kt_req *r, kt_cursor *c, const char *name)
{
    bool seize = !strcmp(name, "seize"), remove = !strcmp(name, "remove");
    bool want_key = !strcmp(name, "get") || !strcmp(name, "get_key") || seize;
    bool want_val = !strcmp(name, "get") || !strcmp(name, "get_value") || seize;
    rec g = { &r->st->reply, want_val, 0, 0, 0 };
    const char *key;
    size_t klen;
    int rc = current(r, c, &g, &key, &klen);
    if (rc != KURA_OK)
        return cur_fail(r, rc);
    if (seize || remove) {
        r->s->dirty = true;
        rc = engine_delete(r->s->engine, r->s->stats, key, klen, NULL);
        if (rc < 0)
            return kt_db_fail(r, rc, false);
    }
    if (want_key)
        kt_out_set(&r->st->out, "key", 3, key, klen);
    if (want_val)
        kt_out_set(&r->st->out, "value", 5, r->st->reply.data, r->st->reply.len);
    if (want_val && want_key && g.exptime)
        kt_out_setf(&r->st->out, "xt", "%lld", (long long)g.exptime);
    if (seize || remove || kt_param(&r->st->in, "step").p)
        step(c);
    return 200;
}

static int cur_set_value(kt_req *r, kt_cursor *c)
{
    kt_span v = kt_param(&r->st->in, "value");
    if (!v.p)
        return kt_error(r, 400, "invalid parameters");
    rec g = { &r->st->reply, false, 0, 0, 0 };
    const char *key;
    size_t klen;
    int rc = current(r, c, &g, &key, &klen);
    if (rc != KURA_OK)
        return cur_fail(r, rc);
    kura_session *s = r->s;
    if (!engine_item_fits(s->engine, klen, v.n, 0))
        return kt_db_fail(r, KURA_ETOOBIG, false);
    kura_item it = { .key = key, .klen = klen, .val = v.p, .vlen = v.n,
                     .exptime = kt_exptime(s->engine, kt_param_xt(r)) };
    s->dirty = true;
    KURA_STAT_INC(s->stats, cmd_set);
    rc = engine_store(s->engine, s->stats, KURA_CMD_REPLACE, &it, NULL, NULL);
    if (rc == KURA_NOT_STORED)
        return kt_db_fail(r, KURA_NOTFOUND, true);
    if (rc != KURA_STORED)
        return kt_db_fail(r, rc, false);
    if (kt_param(&r->st->in, "step").p)
        step(c);
    return 200;
}

/* A step: the next key of the walk, or, against the walk's direction, a
 * new walk from the current key (Kyoto Cabinet's step after jump_back). */
static int turn_or_step(kt_req *r, kt_cursor *c, bool back)
{
    int rc = fill(r, c);
    if (rc != KURA_OK)
        return rc;
    if (c->back == back) {
        step(c);
        return KURA_OK;
    }
    char key[KURA_KEY_MAX];
    size_t klen = key_len_at(c, c->pos);
    memcpy(key, c->keys.data + c->pos + KEY_LEN_BYTES, klen);
    jump(c, key, klen, back, true);
    return KURA_OK;
}

/* cur_jump (to key, or the first), cur_jump_back (to the last key at or
 * before key, or the last), cur_step and cur_step_back; a move whose
 * next key takes more than a turn to find is made once: the request run
 * again goes on finding it (c->resuming). */
static int cur_move(kt_req *r, kt_cursor *c, bool to_jump, bool back)
{
    int rc;
    if (!c->resuming) {
        if (to_jump) {
            kt_span k = kt_param(&r->st->in, "key");
            jump(c, k.p, k.n, back, false);
        } else if ((rc = turn_or_step(r, c, back)) != KURA_OK) {
            return cur_fail(r, rc);
        }
    }
    rec g = { &r->st->reply, false, 0, 0, 0 };
    const char *key;
    size_t klen;
    rc = current(r, c, &g, &key, &klen);
    c->resuming = rc == CUR_PAUSE;
    return rc == KURA_OK ? 200 : cur_fail(r, rc);
}

int kt_rpc_cursor(kt_req *r, const char *name)
{
    int code;
    bool del = !strcmp(name, "delete");
    kt_cursor *c = cursor_of(r, !del, &code);
    if (del) {
        if (!c)
            return code ? code : kt_error(r, 501, "not implemented: cur_delete");
        for (int i = 0; i < KT_CURSORS_MAX; i++)
            if (r->st->curs[i] == c)
                r->st->curs[i] = NULL;
        engine_list_end(&c->walk);
        kura_buf_free(&c->keys);
        free(c);
        return 200;
    }
    if (!c)
        return code;
    if (!strcmp(name, "jump") || !strcmp(name, "step"))
        return cur_move(r, c, name[0] == 'j', false);
    if (!strcmp(name, "jump_back") || !strcmp(name, "step_back"))
        return cur_move(r, c, name[0] == 'j', true);
    if (!strcmp(name, "set_value"))
        return cur_set_value(r, c);
    if (!strcmp(name, "get") || !strcmp(name, "get_key") || !strcmp(name, "get_value") ||
        !strcmp(name, "seize") || !strcmp(name, "remove"))
        return cur_read(r, c, name);
    char msg[96];
    snprintf(msg, sizeof(msg), "not implemented: cur_%.64s", name);
    return kt_error(r, 501, msg);
}

/*
 * tt.c - Tokyo Tyrant's binary protocol, as ttserver 1.1.41 answers it on
 * a hash database: request framing, dispatch, and the record commands
 * (put putkeep putcat putshl putnr out get mget vsiz addint adddouble ext
 * sync optimize vanish copy restore setmst rnum size).  The changes that
 * read first (putcat putshl addint adddouble) are in tt_update.c, the
 * iterator and fwmkeys in tt_walk.c, misc and stat in tt_misc.c.
 *
 * A connection whose first byte is 0xC8 speaks it (proto.c).  A request
 * is 0xC8, a command byte, fixed big-endian 32-bit (and for restore and
 * setmst 64-bit) fields, then the keys, values and arguments those fields
 * announce; most replies are a status byte (0 success, 1 failure) and the
 * data.  What ttserver does with bad input, kura does: a length that is
 * negative or over 256 MiB, an unknown command, or a byte other than 0xC8
 * where a request starts closes the connection without a reply.  What kura
 * cannot keep (a key over 250 bytes, a value over -I) is not buffered: the
 * body is read past and the request answered as a failed one (status 1),
 * except where the lengths are absurd for kura (an mget or misc request
 * over TT_REQ_MAX, a name or path over TT_NAME_MAX), which closes.
 *
 * Values are stored as they are, with flags 0 and no expiry, so a record
 * put here is read back by memcached's get, and a memcached set is read
 * back by get here.
 *
 * Memory per connection is bounded as the memcached protocols' is: one
 * request (a key and a value within -I, or TT_REQ_MAX of mget keys or
 * misc arguments) and replies up to KURA_REPLY_HIGH_WATER between requests;
 * a reply counted before it is sent (mget, fwmkeys, misc) is built whole
 * and stops at TT_LIST_BYTES plus one value, leaving the rest out.
 */
#include <stdio.h>
#include <string.h>

#include "tt_int.h"

#define TT_MAGIC 0xC8

_Atomic uint64_t tt_counts[TTC_COUNT];

/* ---- replies -------------------------------------------------------------------- */

bool tt_code(tt_req *r, uint8_t code)
{
    if (kura_buf_append(r->out, &code, 1))
        return true;
    r->s->close = true;
    return false;
}

bool tt_code_u32(tt_req *r, uint8_t code, uint32_t n)
{
    unsigned char b[5] = { code };
    put_be32(b + 1, n);
    if (kura_buf_append(r->out, b, 5))
        return true;
    r->s->close = true;
    return false;
}

bool tt_elem(kura_buf *b, const void *p, size_t n)
{
    unsigned char l[4];
    put_be32(l, (uint32_t)n);
    return kura_buf_reserve(b, 4 + n) && kura_buf_append(b, l, 4) && kura_buf_append(b, p, n);
}

static bool tt_code_u64(tt_req *r, uint64_t n)
{
    unsigned char b[9] = { 0 };
    put_be32(b + 1, (uint32_t)(n >> 32));
    put_be32(b + 5, (uint32_t)n);
    if (kura_buf_append(r->out, b, 9))
        return true;
    r->s->close = true;
    return false;
}

/* ---- the commands ------------------------------------------------------------------ */

static void cmd_put(tt_req *r)
{
    size_t klen = r->f[0], vlen = r->f[1];
    const char *key = r->body, *val = r->body + klen;
    int rc;
    switch (r->cmd) {
    case TT_PUT: case TT_PUTNR:
        rc = tt_store(r, KURA_CMD_SET, key, klen, val, vlen);
        break;
    case TT_PUTKEEP:
        rc = tt_store(r, KURA_CMD_ADD, key, klen, val, vlen);
        break;
    case TT_PUTCAT:
        rc = tt_put_cat(r, key, klen, val, vlen);
        break;
    default:
        rc = tt_putshl(r, key, klen, val, vlen, r->f[2]);
        break;
    }
    if (rc != KURA_STORED)
        TT_COUNT(put_miss);
    if (r->cmd != TT_PUTNR)
        tt_code(r, rc == KURA_STORED ? 0 : 1);
}

static void cmd_out(tt_req *r)
{
    r->s->dirty = true;
    int rc = engine_delete(r->s->engine, r->s->stats, r->body, r->f[0], NULL);
    if (rc != KURA_OK)
        TT_COUNT(out_miss);
    tt_code(r, rc == KURA_OK ? 0 : 1);
}

/* get: [0][vsiz][value], straight from the store into the reply. */
typedef struct get_arg {
    tt_req *r;
    bool vsiz_only;
} get_arg;

static int emit_value(void *arg, const kura_item *it)
{
    get_arg *g = arg;
    kura_buf *out = g->r->out;
    size_t n = g->vsiz_only ? 0 : it->vlen;
    if (!kura_buf_reserve(out, 5 + n))
        return KURA_ENOMEM;
    unsigned char h[5] = { 0 };
    put_be32(h + 1, (uint32_t)it->vlen);
    kura_buf_append(out, h, 5);
    kura_buf_append(out, it->val, n);
    return 0;
}

static void cmd_get(tt_req *r)
{
    get_arg g = { r, r->cmd == TT_VSIZ };
    size_t mark = r->out->len;
    int rc = engine_get(r->s->engine, r->s->stats, r->body, r->f[0], NULL, emit_value, &g, NULL);
    if (rc == KURA_OK)
        return;
    r->out->len = mark;
    if (rc == KURA_ENOMEM) {
        r->s->close = true;
        return;
    }
    if (r->cmd == TT_GET)
        TT_COUNT(get_miss);
    tt_code(r, 1);
}

/* mget: [0][count] then [ksiz][vsiz][key][value] per record found. */
typedef struct mget_arg {
    kura_buf *out;
    const char *key;
    size_t klen;
} mget_arg;

static int emit_record(void *arg, const kura_item *it)
{
    mget_arg *m = arg;
    if (!kura_buf_reserve(m->out, 8 + m->klen + it->vlen))
        return KURA_ENOMEM;
    unsigned char h[8];
    put_be32(h, (uint32_t)m->klen);
    put_be32(h + 4, (uint32_t)it->vlen);
    kura_buf_append(m->out, h, 8);
    kura_buf_append(m->out, m->key, m->klen);
    kura_buf_append(m->out, it->val, it->vlen);
    return 0;
}

static void cmd_mget(tt_req *r)
{
    size_t head = r->out->len;
    if (!tt_code_u32(r, 0, 0))
        return;
    uint32_t found = 0;
    const char *p = r->body;
    for (uint32_t i = 0; i < r->f[0]; i++) {
        mget_arg m = { r->out, p + 4, get_be32(p) };
        p += 4 + m.klen;
        if (!proto_key_ok(m.klen, TT_KEY_MAX(r->s)))
            continue;                   /* no such key can be stored here */
        if (r->out->len - head >= TT_LIST_BYTES)
            break;                      /* the reply is as long as it may be */
        int rc = engine_get(r->s->engine, r->s->stats, m.key, m.klen, NULL, emit_record, &m,
                            NULL);
        if (rc == KURA_ENOMEM) {
            r->s->close = true;
            return;
        }
        if (rc == KURA_OK)
            found++;
    }
    put_be32((unsigned char *)r->out->data + head + 1, found);
}

static void cmd_addint(tt_req *r)
{
    int32_t sum;
    if (tt_addint(r, r->body, r->f[0], (int32_t)r->f[1], &sum) == KURA_STORED)
        tt_code_u32(r, 0, (uint32_t)sum);
    else
        tt_code(r, 1);
}

static void cmd_adddouble(tt_req *r)
{
    /* the 16 bytes of the number precede the key: tt_one points body at
     * them */
    unsigned char b[17] = { 0 };
    if (tt_adddouble(r, r->body + 16, r->f[0], (const unsigned char *)r->body, b + 1) !=
        KURA_STORED) {
        tt_code(r, 1);
        return;
    }
    if (!kura_buf_append(r->out, b, sizeof(b)))
        r->s->close = true;
}

static void cmd_setmst(tt_req *r)
{
    kura_server_info *si = r->s->server;
    char host[TT_NAME_MAX + 1];
    memcpy(host, r->body, r->blen);
    host[r->blen] = '\0';
    int rc = si && si->tt_setmst ? si->tt_setmst(si->tt_setmst_ctx, host, (int)r->f[1], r->ts,
                                                 (int)r->f[2])
                                 : KURA_EINVAL;
    tt_code(r, rc == KURA_OK ? 0 : 1);
}

/* copy and restore: run by the server's hook on another thread (kurad's
 * snapshot thread), the reply deferred: the first call starts the job and
 * pauses the request (the connection waits, its worker serves the
 * others); the call once woken answers with the job's outcome.  false
 * while it waits. */
static bool cmd_job(tt_req *r, int what)
{
    kura_session *s = r->s;
    kura_server_info *si = s->server;
    if (s->job) {
        if (!atomic_load(&s->job->kj_done))
            return false;
        int rc = s->job->kj_rc;
        kura_job_release(s->job);
        s->job = NULL;
        /* a restore changed the store for this request: its answer waits
         * for those changes to be durable (and -syncrepl's replicas), as
         * a put's does */
        if (what == KURA_JOB_TT_RESTORE)
            s->dirty = true;
        tt_code(r, rc == KURA_OK ? 0 : 1);
        return true;
    }
    kura_job *j = NULL;
    if (si && si->tt_job && s->wake && (j = calloc(1, sizeof(*j) + r->blen + 1))) {
        atomic_init(&j->kj_refs, 2);
        j->kj_wake = s->wake;
        j->kj_wake_arg = s->wake_arg;
        j->kj_what = what;
        j->kj_ts = r->ts;
        j->kj_opts = (int)(what == KURA_JOB_TT_RESTORE ? r->f[3] : 0);
        memcpy(j->kj_path, r->body, r->blen);
        if (si->tt_job(si->tt_job_ctx, j) == KURA_OK) {
            s->job = j;
            return cmd_job(r, what);    /* answered now if it is already done */
        }
        free(j);
    }
    tt_code(r, 1);
    return true;
}

static void cmd_simple(tt_req *r)
{
    kura_session *s = r->s;
    int rc = KURA_OK;
    switch (r->cmd) {
    case TT_ITERINIT:
        tt_iterinit(r, NULL, 0);
        break;
    case TT_SYNC:
        rc = engine_sync(s->engine);
        break;
    case TT_VANISH:
        s->dirty = true;
        rc = engine_flush_all(s->engine, s->stats, 0);
        break;
    case TT_OPTIMIZE:
        break;                          /* kura compacts its files itself */
    default:                            /* ext: not served */
        rc = KURA_EINVAL;
        break;
    }
    tt_code(r, rc < 0 ? 1 : 0);
}

static void cmd_count(tt_req *r)
{
    kura_store_usage u;
    engine_usage_exact(r->s->engine, &u);     /* exact at once after vanish, out, putkeep */
    tt_code_u64(r, r->cmd == TT_RNUM ? u.curr_items : u.bytes);
}

static void cmd_iternext(tt_req *r)
{
    const char *key;
    size_t klen;
    if (tt_iternext(r, &key, &klen) != KURA_OK) {
        tt_code(r, 1);
        return;
    }
    unsigned char h[5] = { 0 };
    put_be32(h + 1, (uint32_t)klen);
    if (!kura_buf_reserve(r->out, 5 + klen) || !kura_buf_append(r->out, h, 5) ||
        !kura_buf_append(r->out, key, klen))
        r->s->close = true;
}

/* fwmkeys: [0][count] then [ksiz][key] per key with the prefix; a
 * negative max is no limit. */
static bool cmd_fwmkeys(tt_req *r)
{
    int32_t max = (int32_t)r->f[1];
    kura_list_spec spec = { .prefix = r->body, .plen = r->blen };
    return tt_walk_run(r, TT_WALK_FWM, &spec, max < 0 ? UINT64_MAX : (uint64_t)max, NULL, 0);
}

/* ---- framing --------------------------------------------------------------------------- */

/* Each command kura reads: its fixed bytes after magic and command, and
 * the counter ttserver's stat counts it under.  A command not here (a
 * zero head: ttserver's repl stream, or unknown) closes the connection. */
static const struct {
    uint8_t fixed1;                     /* the fixed bytes + 1 (0: not a command kura reads) */
    uint8_t counter;
} tt_cmds[256] = {
    [TT_PUT] = { 8 + 1, TTC_put },              [TT_PUTKEEP] = { 8 + 1, TTC_putkeep },
    [TT_PUTCAT] = { 8 + 1, TTC_putcat },        [TT_PUTSHL] = { 12 + 1, TTC_putshl },
    [TT_PUTNR] = { 8 + 1, TTC_putnr },          [TT_OUT] = { 4 + 1, TTC_out },
    [TT_GET] = { 4 + 1, TTC_get },              [TT_MGET] = { 4 + 1, TTC_mget },
    [TT_VSIZ] = { 4 + 1, TTC_vsiz },            [TT_ITERINIT] = { 0 + 1, TTC_iterinit },
    [TT_ITERNEXT] = { 0 + 1, TTC_iternext },    [TT_FWMKEYS] = { 8 + 1, TTC_fwmkeys },
    [TT_ADDINT] = { 8 + 1, TTC_addint },        [TT_ADDDOUBLE] = { 20 + 1, TTC_adddouble },
    [TT_EXT] = { 16 + 1, TTC_ext },             [TT_SYNC] = { 0 + 1, TTC_sync },
    [TT_OPTIMIZE] = { 4 + 1, TTC_optimize },    [TT_VANISH] = { 0 + 1, TTC_vanish },
    [TT_COPY] = { 4 + 1, TTC_copy },            [TT_RESTORE] = { 16 + 1, TTC_restore },
    [TT_SETMST] = { 20 + 1, TTC_setmst },       [TT_RNUM] = { 0 + 1, TTC_rnum },
    [TT_SIZE] = { 0 + 1, TTC_size },            [TT_STAT] = { 0 + 1, TTC_stat },
    [TT_MISC] = { 12 + 1, TTC_misc },
};

/* Counts a command as ttserver's stat does. */
static void count_cmd(uint8_t cmd)
{
    atomic_fetch_add_explicit(&tt_counts[tt_cmds[cmd].counter], 1, memory_order_relaxed);
}

/* What follows a list of n elements ([be32 length][bytes] each) starting
 * at p: 0 with *end set; 1 more input is needed (*end: at least this
 * much); -1 a length is absurd or the list passes TT_REQ_MAX.  The scan
 * resumes where the previous call on the same request stopped (st->scan),
 * so a long list arriving in many reads is scanned once. */
static int list_end(tt_state *st, const char *p, size_t avail, uint32_t n, size_t *end)
{
    size_t off = st->scan_off;
    for (uint32_t i = st->scan_n; i < n; i++) {
        st->scan_off = off;
        st->scan_n = i;
        if (avail - off < 4) {
            *end = off + 4;
            return 1;
        }
        uint32_t l = get_be32(p + off);
        if (l > TT_MAX_ARG || off + 4 + l > TT_REQ_MAX)
            return -1;
        if (off + 4 + l > avail) {
            *end = off + 4 + l;
            return 1;
        }
        off += 4 + l;
    }
    *end = off;
    return 0;
}

/* The lengths ttserver refuses: negative (as int32) or over 256 MiB. */
static bool absurd(uint32_t n) { return n > TT_MAX_ARG; }

/* What frame_body found. */
enum { FRAME_READY, FRAME_NEED, FRAME_CLOSE };

/* The length of r's body (the bytes after its fixed fields, at h + *head)
 * into *body, from its fixed fields; *keep false when the request is to be
 * read past and answered with a failure.  FRAME_NEED sets s->need;
 * FRAME_CLOSE: absurd lengths, the connection closes. */
static int frame_body(tt_req *r, const char *h, size_t avail, size_t *head, uint64_t *body,
                      bool *keep)
{
    kura_session *s = r->s;
    const char *f = h + 2;
    switch (r->cmd) {
    case TT_PUT: case TT_PUTKEEP: case TT_PUTCAT: case TT_PUTNR:
    case TT_PUTSHL:
        if (absurd(r->f[0]) || absurd(r->f[1]) || (r->cmd == TT_PUTSHL && r->f[2] > INT32_MAX))
            return FRAME_CLOSE;
        *body = (uint64_t)r->f[0] + r->f[1];
        *keep = proto_key_ok(r->f[0], TT_KEY_MAX(s)) &&
                engine_item_fits(s->engine, r->f[0], r->f[1], 0);
        break;
    case TT_OUT: case TT_GET: case TT_VSIZ: case TT_ADDINT:
        if (absurd(r->f[0]))
            return FRAME_CLOSE;
        *body = r->f[0];
        *keep = proto_key_ok(r->f[0], TT_KEY_MAX(s));
        break;
    case TT_ADDDOUBLE:
        if (absurd(r->f[0]))
            return FRAME_CLOSE;
        *body = 16 + (uint64_t)r->f[0];
        *head -= 16;                    /* the number is read with the key */
        *keep = proto_key_ok(r->f[0], TT_KEY_MAX(s));
        break;
    case TT_FWMKEYS:
        if (absurd(r->f[0]))
            return FRAME_CLOSE;
        *body = r->f[0];
        *keep = proto_key_ok(r->f[0], TT_KEY_MAX(s));
        break;
    case TT_EXT:
        if (r->f[0] >= TT_NAME_MAX || absurd(r->f[2]) || absurd(r->f[3]))
            return FRAME_CLOSE;
        *body = (uint64_t)r->f[0] + r->f[2] + r->f[3];
        *keep = false;                  /* no script extension: a failure */
        break;
    case TT_OPTIMIZE: case TT_COPY: case TT_RESTORE:
        if (r->f[0] > TT_NAME_MAX)
            return FRAME_CLOSE;
        if (r->cmd == TT_RESTORE)       /* [path length][ts, 64 bits][opts] */
            r->ts = (uint64_t)r->f[1] << 32 | r->f[2];
        *body = r->f[0];
        break;
    case TT_SETMST:
        if (r->f[0] > TT_NAME_MAX || r->f[1] > INT32_MAX)
            return FRAME_CLOSE;
        r->ts = (uint64_t)get_be32(f + 8) << 32 | get_be32(f + 12);
        r->f[2] = get_be32(f + 16);
        *body = r->f[0];
        break;
    case TT_MGET: case TT_MISC: {
        uint32_t n = r->cmd == TT_MGET ? r->f[0] : r->f[2];
        size_t pre = r->cmd == TT_MISC ? r->f[0] : 0;   /* misc's name */
        if (n > TT_MAX_ARGS || pre >= TT_NAME_MAX)
            return FRAME_CLOSE;
        if (avail < *head + pre) {
            s->need = *head + pre;
            return FRAME_NEED;
        }
        size_t end;
        int rc = list_end(r->st, h + *head + pre, avail - *head - pre, n, &end);
        if (rc < 0)
            return FRAME_CLOSE;
        if (rc > 0) {
            s->need = *head + pre + end;
            return FRAME_NEED;
        }
        *body = pre + end;
        break;
    }
    default:
        *body = 0;
        break;
    }
    return FRAME_READY;
}

/* A request not buffered (its key too long, its item too big, a script
 * extension): answered with a failure now, its body read past (the reply
 * comes before anything the client sends after the body). */
static void refuse_unread(tt_req *r, uint64_t body)
{
    count_cmd(r->cmd);
    switch (r->cmd) {
    case TT_FWMKEYS:
        tt_code_u32(r, 0, 0);           /* no key is that long */
        break;
    case TT_PUTNR:
        TT_COUNT(put_miss);
        break;
    default:
        if (r->cmd <= TT_PUTNR)
            TT_COUNT(put_miss);
        tt_code(r, 1);
        break;
    }
    r->st->swallow = body;
}

/* Runs the whole request r; false when it paused (a walk's slice ran out,
 * or it must wait for its turn): the same request runs again later. */
static bool dispatch(tt_req *r)
{
    switch (r->cmd) {
    case TT_PUT: case TT_PUTKEEP: case TT_PUTCAT: case TT_PUTNR: case TT_PUTSHL:
        cmd_put(r);
        break;
    case TT_OUT:
        cmd_out(r);
        break;
    case TT_GET: case TT_VSIZ:
        cmd_get(r);
        break;
    case TT_MGET:
        cmd_mget(r);
        break;
    case TT_ADDINT:
        cmd_addint(r);
        break;
    case TT_ADDDOUBLE:
        cmd_adddouble(r);
        break;
    case TT_ITERNEXT:
        cmd_iternext(r);
        break;
    case TT_FWMKEYS:
        return cmd_fwmkeys(r);
    case TT_MISC:
        tt_misc(r);
        return !r->st->walk.kind;       /* a walk paused: this request again later */
    case TT_SETMST:
        cmd_setmst(r);
        break;
    case TT_COPY:
        return cmd_job(r, KURA_JOB_TT_COPY);
    case TT_RESTORE:
        return cmd_job(r, KURA_JOB_TT_RESTORE);
    case TT_RNUM: case TT_SIZE:
        cmd_count(r);
        break;
    case TT_STAT:
        tt_stat(r);
        break;
    default:
        cmd_simple(r);
        break;
    }
    return true;
}

/* Handles the request at h: the bytes it used, or 0 when it needs more
 * input (s->need set) or must wait for its turn (s->out_full set); a
 * request that closes the connection uses everything. */
static size_t tt_one(kura_session *s, tt_state *st, const char *h, size_t avail, kura_buf *out)
{
    if ((unsigned char)h[0] != TT_MAGIC)
        goto close;
    if (avail < 2) {
        s->need = 2;
        return 0;
    }
    tt_req r = { .s = s, .st = st, .out = out, .cmd = (uint8_t)h[1] };
    int fixed = tt_cmds[r.cmd].fixed1 - 1;
    if (fixed < 0)
        goto close;
    size_t head = 2 + (size_t)fixed;
    if (avail < head) {
        s->need = head;
        return 0;
    }
    const char *f = h + 2;
    for (int i = 0; i < fixed / 4 && i < 4; i++)
        r.f[i] = get_be32(f + 4 * i);
    uint64_t body;                      /* bytes after the fixed fields */
    bool keep = true;                   /* false: read past the body, answer a failure */
    switch (frame_body(&r, h, avail, &head, &body, &keep)) {
    case FRAME_NEED:
        return 0;
    case FRAME_CLOSE:
        goto close;
    }
    if (!keep) {
        refuse_unread(&r, body);
        return head;
    }
    if (avail - head < body) {
        s->need = head + (size_t)body;
        return 0;
    }
    r.body = h + head;
    r.blen = (size_t)body;
    if (!st->walk.kind && !s->job)
        count_cmd(r.cmd);               /* once, not per resumed slice or wait */
    if (!dispatch(&r))
        return 0;
    return head + (size_t)body;

close:
    /* ttserver drops the connection without a word */
    KURA_STAT_INC(s->stats, protocol_closes);
    s->close = true;
    return avail;
}

static size_t tt_process(kura_session *s, char *in, size_t len, kura_buf *out)
{
    tt_state *st = s->state;
    size_t pos = 0;
    unsigned turns = 0;
    s->need = 0;
    s->out_full = false;
    while (pos < len && !s->close) {
        if (session_turn_over(s, out, &turns))
            break;                      /* the rest on the connection's next turn */
        if (st->swallow) {
            session_swallow(&pos, len, &st->swallow);
            continue;
        }
        size_t used = tt_one(s, st, in + pos, len - pos, out);
        if (used == 0)
            break;
        st->scan_off = st->scan_n = 0;  /* the next request's list is scanned anew */
        pos += used;
    }
    return s->close ? len : pos;
}

static void tt_release(void *state)
{
    tt_state *st = state;
    tt_walk_release(&st->walk);
    engine_list_end(&st->iter.cur);
    kura_buf_free(&st->iter.keys);
    kura_buf_free(&st->scratch);
}

const kura_proto kura_proto_tt = { "tokyotyrant", tt_process, sizeof(tt_state), tt_release };

/*
 * meta.c - memcached's meta commands (mg ms md ma mn me), byte-compatible
 * with memcached 1.6.18, the version Debian 12 ships and our reference.
 *
 * The meta commands are part of the ASCII protocol: memcached parses them
 * on the same connection as get and set, so text.c's command table
 * dispatches "mg", "ms", ... here, with the line already split into tokens.
 * A request is a command, a key and flags, each flag one letter, some with
 * a value glued on ("T30", "Oabc").  Flags are first checked all at once
 * (meta_preparse: duplicates, unknown letters, bad numbers, base64 keys),
 * with memcached's error strings and its order of checks; then the reply
 * echoes the return flags in the order the request gave them, as memcached
 * does, followed by the recache state (Z, X, W).
 *
 * Several flags act "as met" in memcached's loop over the tokens (T and N
 * set the exptime where they stand, t reports it where it stands), so a
 * reply can depend on the order of the flags; the functions below walk the
 * tokens the same way rather than assume an order.
 *
 * What an item is beyond its value (fetched, last access, stale, token) is
 * the engine's (engine_get and friends, src/engine/marks.c).
 */
#include <stdio.h>
#include <string.h>

#include "kura/base64.h"
#include "proto_int.h"

#define META_MAX_TOKENS 20              /* memcached's MFLAG_MAX_OPT_LENGTH */
#define META_MAX_OPAQUE 32              /* MFLAG_MAX_OPAQUE_LENGTH */

typedef struct meta_flags {
    bool has_error;
    bool no_update, vivify, value, set_stale, no_reply, has_cas, new_ttl, key_binary;
    bool recache;
    char mode;
    int32_t exptime, vivify_exptime, recache_time;   /* client forms */
    uint32_t client_flags;
    uint64_t req_cas, delta, initial;
    const char *key;                    /* decoded if base64 */
    size_t klen;
    char keybuf[PROTO_MC_KEY_MAX];
} meta_flags;

/* A flag's value: the token without its letter. */
static text_token flag_value(const text_token *t)
{
    text_token v = { t->value + 1, t->length - 1 };
    return v;
}

/* memcached's _meta_flag_preparse: the flags from tok[start] on.  Returns 0,
 * or -1 with *errstr set (the last error met; an unknown or repeated flag
 * stops at once). */
static int meta_preparse(text_token *tok, int start, meta_flags *of, const char **errstr)
{
    bool seen[127] = { false };

    of->key = tok[1].value;
    of->klen = tok[1].length;
    for (int i = start; tok[i].length != 0; i++) {
        unsigned char o = (unsigned char)tok[i].value[0];
        text_token v = flag_value(&tok[i]);
        if (o >= 127 || seen[o]) {
            *errstr = "CLIENT_ERROR duplicate flag";
            return -1;
        }
        seen[o] = true;
        switch (o) {
        case 'b': {
            size_t n = kura_base64_decode(tok[1].value, tok[1].length,
                                          (unsigned char *)of->keybuf, sizeof(of->keybuf));
            if (n == 0) {
                *errstr = "CLIENT_ERROR error decoding key";
                of->has_error = true;
            }
            of->key = of->keybuf;
            of->klen = n;
            of->key_binary = true;
            break;
        }
        case 'N':
            of->vivify = true;
            if (!text_safe_i32(&v, &of->vivify_exptime)) {
                *errstr = "CLIENT_ERROR bad token in command line format";
                of->has_error = true;
            }
            break;
        case 'T':
            if (!text_safe_i32(&v, &of->exptime)) {
                *errstr = "CLIENT_ERROR bad token in command line format";
                of->has_error = true;
            } else {
                of->new_ttl = true;
            }
            break;
        case 'R':
            if (!text_safe_i32(&v, &of->recache_time)) {
                *errstr = "CLIENT_ERROR bad token in command line format";
                of->has_error = true;
            } else {
                of->recache = true;
            }
            break;
        case 'l': case 'h': case 'O': case 'P': case 'L':
        case 'k': case 's': case 't': case 'c': case 'f':
            break;
        case 'v':
            of->value = true;
            break;
        case 'u':
            of->no_update = true;
            break;
        case 'q':
            of->no_reply = true;
            break;
        case 'F':
            if (!text_safe_u32(&v, &of->client_flags))
                of->has_error = true;       /* memcached keeps the previous message */
            break;
        case 'C':
            if (!text_safe_u64(&v, &of->req_cas)) {
                *errstr = "CLIENT_ERROR bad token in command line format";
                of->has_error = true;
            } else {
                of->has_cas = true;
            }
            break;
        case 'M':
            if (tok[i].length != 2) {
                *errstr = "CLIENT_ERROR incorrect length for M token";
                of->has_error = true;
            } else {
                of->mode = tok[i].value[1];
            }
            break;
        case 'J':
            if (!text_safe_u64(&v, &of->initial)) {
                *errstr = "CLIENT_ERROR invalid numeric initial value";
                of->has_error = true;
            }
            break;
        case 'D':
            if (!text_safe_u64(&v, &of->delta)) {
                *errstr = "CLIENT_ERROR invalid numeric delta value";
                of->has_error = true;
            }
            break;
        case 'I':
            of->set_stale = true;
            break;
        default:
            *errstr = "CLIENT_ERROR invalid flag";
            return -1;
        }
    }
    return of->has_error ? -1 : 0;
}

/* An error reply: shown even in quiet mode (memcached's out_errstring). */
static void meta_error(text_session *s, kura_buf *out, const char *str)
{
    s->noreply = false;
    text_client_error(s, out, str);
}

static bool opaque_too_long(const text_token *tok)
{
    for (int i = 2; tok[i].length != 0; i++)
        if (tok[i].value[0] == 'O' && tok[i].length > META_MAX_OPAQUE)
            return true;
    return false;
}

/* Index of the first token starting with c (from tok[2]), or -1. */
static int flag_at(const text_token *tok, char c)
{
    for (int i = 2; tok[i].length != 0; i++)
        if (tok[i].value[0] == c)
            return i;
    return -1;
}

/* The checks every meta command starts with, in memcached's order: at
 * least a key (else ERROR), a key of at most 250 bytes, at most
 * META_MAX_TOKENS tokens (too_many is the message, which differs between
 * commands), then the flags.  flag_error: the message for bad flags, NULL
 * for the one preparse found.  False if the request was answered. */
static bool meta_start(text_session *s, text_token *tok, int ntok, kura_buf *out,
                       meta_flags *of, const char *too_many, const char *flag_error)
{
    const char *errstr = "CLIENT_ERROR bad command line format";
    if (ntok < 3) {
        KURA_STAT_INC(s->stats, unknown_commands);
        text_reply(s, out, "ERROR");
        return false;
    }
    if (!proto_key_ok(tok[1].length, PROTO_MC_KEY_MAX)) {
        meta_error(s, out, "CLIENT_ERROR bad command line format");
        return false;
    }
    if (ntok > META_MAX_TOKENS) {
        meta_error(s, out, too_many);
        return false;
    }
    if (meta_preparse(tok, 2, of, &errstr) != 0) {
        meta_error(s, out, flag_error ? flag_error : errstr);
        return false;
    }
    return true;
}

/* ---- reply building --------------------------------------------------------- */

/* A reply line under construction; its bytes go to `out` at meta_line_end. */
typedef struct meta_line {
    char buf[1024];
    size_t len;
} meta_line;

static void ml_put(meta_line *l, const void *p, size_t n)
{
    if (n > sizeof(l->buf) - l->len)
        n = sizeof(l->buf) - l->len;
    memcpy(l->buf + l->len, p, n);
    l->len += n;
}

static void ml_str(meta_line *l, const char *s) { ml_put(l, s, strlen(s)); }

static void ml_u64(meta_line *l, const char *flag, uint64_t v)
{
    char num[24];
    ml_str(l, flag);
    ml_put(l, num, kura_fmt_u64(num, v));
}

/* The key as a reply shows it: base64 for a binary key. */
static void ml_key_bytes(meta_line *l, const char *key, size_t klen, bool binary)
{
    if (binary) {
        char enc[4 * ((KURA_KEY_MAX + 2) / 3)];
        ml_put(l, enc, kura_base64_encode((const unsigned char *)key, klen, enc));
    } else {
        ml_put(l, key, klen);
    }
}

/* " k<key>", followed by " b" for a binary key. */
static void ml_key(meta_line *l, const char *key, size_t klen, bool binary)
{
    ml_str(l, " k");
    ml_key_bytes(l, key, klen, binary);
    if (binary)
        ml_str(l, " b");
}

/* " <opaque token>" and " k<key>": what every reply carries back. */
static void ml_opaque_key(meta_line *l, const text_token *tok, const char *key, size_t klen,
                          bool binary)
{
    for (int i = 2; tok[i].length != 0; i++) {
        if (tok[i].value[0] == 'O') {
            ml_str(l, " ");
            ml_put(l, tok[i].value, tok[i].length);
        } else if (tok[i].value[0] == 'k') {
            ml_key(l, key, klen, binary);
        }
    }
}

/* memcached's clock: seconds since its process_started, which it sets 62
 * seconds before its start (engine_started is 2 before ours). */
static int64_t mc_uptime(text_session *s, int64_t now)
{
    return now - (engine_started(s->engine) - 60);
}

/* True if a key cannot have come as text, so a reply shows it in base64
 * (memcached remembers per item that it was stored with "b"; kura's access
 * marks remember it for me, engine_item_info.key_binary, while they last). */
static bool key_is_binary(const char *key, size_t klen)
{
    for (size_t i = 0; i < klen; i++)
        if ((unsigned char)key[i] <= ' ' || (unsigned char)key[i] == 0x7f)
            return true;
    return false;
}

/* " t<remaining>": memcached prints -1 for never and the difference as an
 * unsigned 32-bit number (an exptime already past wraps); an exptime in
 * the past is its relative time 1. */
static void ml_ttl(meta_line *l, text_session *s, int64_t exptime, int64_t now)
{
    if (exptime == 0) {
        ml_str(l, " t-1");
        return;
    }
    ml_u64(l, " t", (uint32_t)(exptime == 1 ? 1 - mc_uptime(s, now) : exptime - now));
}

static bool ml_end(text_session *s, meta_line *l, kura_buf *out)
{
    ml_put(l, "\r\n", 2);
    if (!kura_buf_append(out, l->buf, l->len)) {
        s->close = true;
        return false;
    }
    return true;
}

/* ---- mg ------------------------------------------------------------------------ */

typedef struct mg_ctx {
    text_session *s;
    text_token *tok;
    meta_flags *of;
    engine_item_info info;
    kura_buf *out;
    int64_t now, t_abs, n_abs;
    bool answered;
} mg_ctx;

/* Under the key's lock: the reply line and the value. */
static int mg_emit(void *arg, const kura_item *it)
{
    mg_ctx *g = arg;
    const engine_item_info *in = &g->info;
    meta_line l = { .len = 0 };
    int64_t exp = in->created ? 0 : in->old_exptime;

    if (g->of->value) {
        ml_u64(&l, "VA ", it->vlen);
    } else {
        ml_str(&l, "HD");
    }
    for (int i = 2; g->tok[i].length != 0; i++) {
        const text_token *t = &g->tok[i];
        switch (t->value[0]) {
        case 'T': exp = g->t_abs; break;
        case 'N': if (in->created) exp = g->n_abs; break;
        case 's': ml_u64(&l, " s", it->vlen); break;
        case 't': ml_ttl(&l, g->s, exp, g->now); break;
        case 'c': ml_u64(&l, " c", it->cas); break;
        case 'f': ml_u64(&l, " f", it->flags); break;
        case 'l': ml_u64(&l, " l", (uint32_t)(g->now - in->last_access)); break;
        case 'h': ml_str(&l, in->fetched ? " h1" : " h0"); break;
        case 'O': ml_str(&l, " "); ml_put(&l, t->value, t->length); break;
        case 'k':                       /* as stored, as memcached shows it */
            ml_key(&l, it->key, it->klen, in->key_binary || key_is_binary(it->key, it->klen));
            break;
        }
    }
    if (in->token_sent)
        ml_str(&l, " Z");
    if (in->stale)
        ml_str(&l, " X");
    if (in->won)
        ml_str(&l, " W");
    ml_put(&l, "\r\n", 2);
    size_t need = l.len + (g->of->value ? (proto_value_by_ref(it) ? 0 : it->vlen) + 2 : 0);
    if (!kura_buf_reserve(g->out, need)) {
        g->s->close = true;
        return 0;
    }
    kura_buf_append(g->out, l.buf, l.len);
    if (g->of->value) {
        if (!proto_append_value(g->out, it) || !kura_buf_append(g->out, "\r\n", 2))
            g->s->close = true;         /* (a reference's room: as the reserve's) */
    }
    g->answered = true;
    return 0;
}

void meta_get(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    meta_flags of = { 0 };
    if (!meta_start(s, tok, ntok, out, &of, "CLIENT_ERROR options flags are too long", NULL))
        return;

    int ti = flag_at(tok, 'T'), ni = flag_at(tok, 'N'), ri = flag_at(tok, 'R');
    engine_get_opts o = {
        .touch = of.new_ttl, .exptime = of.exptime,
        .vivify = of.vivify,
        /* the later of T and N sets a created item's exptime */
        .vivify_exptime = (of.new_ttl && ti > ni) ? of.exptime : of.vivify_exptime,
        .recache = of.recache, .recache_exptime = of.recache_time,
        .recache_after_touch = of.new_ttl && ti < ri,
        .no_bump = of.no_update,
    };
    mg_ctx g = { s, tok, &of, { 0 }, out, engine_now(s->engine), 0, 0, false };
    if (of.new_ttl)
        g.t_abs = engine_abs_exptime(s->engine, of.exptime);
    if (of.vivify)
        g.n_abs = engine_abs_exptime(s->engine, of.vivify_exptime);
    if (of.new_ttl || of.vivify)
        s->dirty = true;
    size_t mark = out->len;
    int rc = engine_get(s->engine, s->stats, of.key, of.klen, &o, mg_emit, &g, &g.info);
    if (opaque_too_long(tok)) {
        kura_buf_rewind(out, mark);
        meta_error(s, out, "CLIENT_ERROR opaque token too long");
        return;
    }
    if (rc < 0) {
        kura_buf_rewind(out, mark);
        s->noreply = false;
        text_server_error(s, out, rc);
        return;
    }
    if (rc == KURA_OK)
        return;
    if (of.no_reply)
        return;                         /* quiet mode hides a miss */
    meta_line l = { .len = 0 };
    ml_str(&l, "EN");
    ml_opaque_key(&l, tok, of.key, of.klen, of.key_binary);
    ml_end(s, &l, out);
}

/* ---- ms ------------------------------------------------------------------------ */

int meta_set_parse(text_session *s, text_token *tok, int ntok, kura_buf *out, meta_set_req *req)
{
    meta_flags of = { 0 };
    const char *errstr = "CLIENT_ERROR bad command line format";
    int32_t vlen;

    if (ntok < 3) {
        KURA_STAT_INC(s->stats, unknown_commands);
        text_reply(s, out, "ERROR");
        return 0;
    }
    if (!proto_key_ok(tok[1].length, PROTO_MC_KEY_MAX) || ntok == 3) {
        meta_error(s, out, "CLIENT_ERROR bad command line format");
        return 0;
    }
    if (ntok > META_MAX_TOKENS) {
        meta_error(s, out, "CLIENT_ERROR options flags too long");
        return 0;
    }
    if (!text_safe_i32(&tok[2], &vlen) || vlen < 0 || vlen > INT32_MAX - 2) {
        meta_error(s, out, "CLIENT_ERROR bad command line format");
        return 0;
    }
    req->vlen = (uint64_t)vlen;
    if (meta_preparse(tok, 3, &of, &errstr) != 0)
        goto error;

    bool opaque_error = false;
    for (int i = 3; tok[i].length != 0; i++)
        if (tok[i].value[0] == 'O' && tok[i].length > META_MAX_OPAQUE) {
            errstr = "CLIENT_ERROR opaque token too long";
            opaque_error = true;
        }
    switch (of.mode) {
    case 0: case 'S': req->cmd = KURA_CMD_SET; break;
    case 'E': req->cmd = KURA_CMD_ADD; break;
    case 'A': req->cmd = KURA_CMD_APPEND; break;
    case 'P': req->cmd = KURA_CMD_PREPEND; break;
    case 'R': req->cmd = KURA_CMD_REPLACE; break;
    default:
        errstr = "CLIENT_ERROR invalid mode for ms M token";
        goto error;
    }
    if (of.has_cas && (req->cmd == KURA_CMD_SET || req->cmd == KURA_CMD_REPLACE))
        req->cmd = KURA_CMD_CAS;
    if (opaque_error)
        goto error;

    memcpy(req->key, of.key, of.klen);
    req->klen = of.klen;
    req->key_binary = of.key_binary;
    req->flags = of.client_flags;
    req->exptime = of.new_ttl ? of.exptime : 0;
    req->cas = of.has_cas ? of.req_cas : 0;
    req->invalidate = of.set_stale && req->cmd == KURA_CMD_CAS;
    req->tok = tok;
    req->ntok = ntok;
    s->noreply = of.no_reply;
    if (!engine_item_fits(s->engine, req->klen, req->vlen, req->flags)) {
        KURA_STAT_INC(s->stats, store_too_large);
        errstr = "SERVER_ERROR object too large for cache";
        /* A refused set must not leave the old value readable. */
        s->dirty = true;
        engine_delete(s->engine, s->stats, req->key, req->klen,
                      &(engine_delete_opts){ .unlink = true });
        s->noreply = false;
        text_reply(s, out, errstr);
        s->swallow = req->vlen + 2;
        return 0;
    }
    return 1;

error:
    meta_error(s, out, errstr);
    s->swallow = req->vlen + 2;
    return 0;
}

void meta_set_complete(text_session *s, meta_set_req *req, const char *data, kura_buf *out)
{
    KURA_STAT_INC(s->stats, cmd_set);
    if (data[req->vlen] != '\r' || data[req->vlen + 1] != '\n') {
        meta_error(s, out, "CLIENT_ERROR bad data chunk");
        return;
    }
    kura_item it = {
        .key = req->key, .klen = req->klen, .val = data, .vlen = req->vlen,
        .flags = req->flags, .exptime = req->exptime,
    };
    engine_store_opts o = { .cas_in = req->cas, .invalidate = req->invalidate,
                            .key_binary = req->key_binary };
    uint64_t cas = 0;
    s->dirty = true;
    int rc = engine_store(s->engine, s->stats, req->cmd, &it, &o, &cas);
    meta_line l = { .len = 0 };
    switch (rc) {
    case KURA_STORED:
        if (s->noreply) {
            s->noreply = false;
            return;
        }
        ml_str(&l, "HD");
        break;
    case KURA_STORE_EXISTS:    ml_str(&l, "EX"); break;
    case KURA_STORE_NOT_FOUND: ml_str(&l, "NF"); break;
    case KURA_NOT_STORED:      ml_str(&l, "NS"); break;
    default:
        s->noreply = false;
        text_server_error(s, out, rc);
        return;
    }
    s->noreply = false;
    const text_token *tok = req->tok;
    for (int i = 3; tok[i].length != 0; i++) {
        if (tok[i].value[0] == 'O') {
            ml_str(&l, " ");
            ml_put(&l, tok[i].value, tok[i].length);
        } else if (tok[i].value[0] == 'k') {
            ml_key(&l, req->key, req->klen, req->key_binary);
        } else if (tok[i].value[0] == 'c') {
            ml_u64(&l, " c", cas);
        }
    }
    ml_end(s, &l, out);
}

/* ---- md ------------------------------------------------------------------------ */

void meta_delete(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    meta_flags of = { 0 };
    if (!meta_start(s, tok, ntok, out, &of, "CLIENT_ERROR options flags too long",
                    "CLIENT_ERROR invalid or duplicate flag"))
        return;
    if (opaque_too_long(tok)) {
        meta_error(s, out, "CLIENT_ERROR opaque token too long");
        return;
    }
    s->dirty = true;
    engine_delete_opts o = { .cas_in = of.has_cas ? of.req_cas : 0, .invalidate = of.set_stale,
                             .touch = of.new_ttl, .exptime = of.exptime };
    int rc = engine_delete(s->engine, s->stats, of.key, of.klen, &o);
    meta_line l = { .len = 0 };
    switch (rc) {
    case KURA_OK:
        if (of.no_reply)
            return;
        ml_str(&l, "HD");
        break;
    case KURA_EXISTS:   ml_str(&l, "EX"); break;
    case KURA_NOTFOUND: ml_str(&l, "NF"); break;
    default:
        text_server_error(s, out, rc);
        return;
    }
    ml_opaque_key(&l, tok, of.key, of.klen, of.key_binary);
    ml_end(s, &l, out);
}

/* ---- ma ------------------------------------------------------------------------ */

void meta_arith(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    meta_flags of = { .delta = 1 };
    bool incr = true;
    char result[KURA_INCR_MAX_LEN];

    if (!meta_start(s, tok, ntok, out, &of, "CLIENT_ERROR options flags too long",
                    "CLIENT_ERROR invalid or duplicate flag"))
        return;
    switch (of.mode) {
    case 0: case 'I': case '+': incr = true; break;
    case 'D': case '-': incr = false; break;
    default:
        meta_error(s, out, "CLIENT_ERROR invalid mode for ma M token");
        return;
    }

    int ti = flag_at(tok, 'T'), ni = flag_at(tok, 'N');
    engine_arith_opts o = {
        .cas_in = of.has_cas ? of.req_cas : 0,
        .vivify = of.vivify, .initial = of.initial,
        /* a created item: N where it stands, T where it stands, the later wins */
        .vivify_exptime = (of.new_ttl && ti > ni) ? of.exptime : of.vivify_exptime,
        .touch = of.new_ttl, .exptime = of.exptime,
    };
    engine_item_info info = { 0 };
    int64_t now = engine_now(s->engine);
    int64_t t_abs = of.new_ttl ? engine_abs_exptime(s->engine, of.exptime) : 0;
    int64_t n_abs = of.vivify ? engine_abs_exptime(s->engine, of.vivify_exptime) : 0;
    s->dirty = true;
    int rc = engine_arith(s->engine, s->stats, of.key, of.klen, incr, of.delta, &o,
                          result, &info);
    meta_line l = { .len = 0 };
    if (opaque_too_long(tok) && (rc == KURA_OK || rc == KURA_NOTFOUND || rc == KURA_EXISTS)) {
        /* memcached finds it while writing the reply: the change is made */
        meta_error(s, out, "CLIENT_ERROR opaque token too long");
        return;
    }
    switch (rc) {
    case KURA_OK:
        if (of.no_reply && !info.created)
            return;
        break;
    case KURA_NON_NUMERIC:
        meta_error(s, out, "CLIENT_ERROR cannot increment or decrement non-numeric value");
        return;
    case KURA_ENOMEM:
        meta_error(s, out, "SERVER_ERROR out of memory");
        return;
    case KURA_NOTFOUND:
        ml_str(&l, "NF");
        ml_opaque_key(&l, tok, of.key, of.klen, of.key_binary);
        ml_end(s, &l, out);
        return;
    case KURA_EXISTS:
        ml_str(&l, "EX");
        ml_opaque_key(&l, tok, of.key, of.klen, of.key_binary);
        ml_end(s, &l, out);
        return;
    default:
        s->noreply = false;
        text_server_error(s, out, rc);
        return;
    }
    size_t vlen = strlen(result);
    if (of.value)
        ml_u64(&l, "VA ", vlen);
    else
        ml_str(&l, "HD");
    int64_t exp = info.created ? 0 : info.old_exptime;
    for (int i = 2; tok[i].length != 0; i++) {
        const text_token *t = &tok[i];
        switch (t->value[0]) {
        case 'c': ml_u64(&l, " c", info.cas); break;
        case 't': ml_ttl(&l, s, exp, now); break;
        case 'T': exp = t_abs; break;
        case 'N': if (info.created) exp = n_abs; break;
        case 'O': ml_str(&l, " "); ml_put(&l, t->value, t->length); break;
        case 'k': ml_key(&l, of.key, of.klen, of.key_binary); break;
        }
    }
    if (of.value) {
        ml_put(&l, "\r\n", 2);
        ml_put(&l, result, vlen);
    }
    ml_end(s, &l, out);
}

/* ---- mn, me ---------------------------------------------------------------------- */

void meta_noop(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    (void)tok; (void)ntok;
    s->noreply = false;
    text_reply(s, out, "MN");
}

/* memcached's slab class of an item of `total` bytes with its default
 * settings (-n 48, -f 1.25, 1 MiB pages; chunks above half a page go to the
 * largest class), so that "me" reports the class memcached would. */
static unsigned slab_class_of(uint64_t total)
{
    const uint64_t chunk_max = 512 * 1024;
    uint64_t size = 96;
    unsigned cls = 1;
    while (cls < 63 && size <= (uint64_t)(chunk_max / 1.25)) {
        if (total <= size)
            return cls;
        uint64_t next = (uint64_t)((double)size * 1.25);
        if (next % 8)
            next += 8 - next % 8;
        size = next;
        cls++;
    }
    return cls;
}

typedef struct me_ctx {
    text_session *s;
    meta_flags *of;
    engine_item_info info;
    kura_buf *out;
    int64_t now;
} me_ctx;

static int me_emit(void *arg, const kura_item *it)
{
    me_ctx *m = arg;
    meta_line l = { .len = 0 };
    char tail[200];
    ml_str(&l, "ME ");
    /* base64 as memcached shows it: for an item stored with a base64 key
     * (whatever form this request used), or one no text line could name */
    ml_key_bytes(&l, it->key, it->klen, m->info.key_binary || key_is_binary(it->key, it->klen));
    uint64_t total = kura_item_wire_total(it->klen, it->vlen, it->flags);
    int n = snprintf(tail, sizeof(tail), " exp=%d la=%llu cas=%llu fetch=%s cls=%u size=%llu",
                     it->exptime == 0 ? -1 : it->exptime == 1 ? (int)(mc_uptime(m->s, m->now) - 1)
                                                              : (int)(m->now - it->exptime),
                     (unsigned long long)(uint32_t)(m->now - m->info.last_access),
                     (unsigned long long)it->cas, m->info.fetched ? "yes" : "no",
                     slab_class_of(total), (unsigned long long)total);
    ml_put(&l, tail, (size_t)n);
    ml_end(m->s, &l, m->out);
    return 0;
}

void meta_debug(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    meta_flags of = { 0 };
    if (ntok < 3 || !proto_key_ok(tok[1].length, PROTO_MC_KEY_MAX)) {
        text_client_error(s, out, "CLIENT_ERROR bad command line format");
        return;
    }
    of.key = tok[1].value;
    of.klen = tok[1].length;
    if (ntok >= 4 && tok[2].length == 1 && tok[2].value[0] == 'b') {
        size_t n = kura_base64_decode(tok[1].value, tok[1].length,
                                      (unsigned char *)of.keybuf, sizeof(of.keybuf));
        if (n == 0) {
            text_client_error(s, out, "CLIENT_ERROR bad command line format");
            return;
        }
        of.key = of.keybuf;
        of.klen = n;
        of.key_binary = true;
    }
    engine_get_opts o = { .no_bump = true };
    me_ctx m = { s, &of, { 0 }, out, engine_now(s->engine) };
    int rc = engine_get(s->engine, s->stats, of.key, of.klen, &o, me_emit, &m, &m.info);
    if (rc == KURA_OK)
        return;
    if (rc < 0)
        text_server_error(s, out, rc);
    else
        text_reply(s, out, "EN");
}

/*
 * text.c - the memcached ASCII protocol, byte-compatible with memcached 1.6.
 *
 * A request line is split on single spaces into at most 23 tokens, exactly
 * as memcached's tokenizer does (only "get"-style commands read past that),
 * and dispatched through the command table (cmdtab.c: the built-ins below,
 * and the commands the server registers), which also checks the token
 * count.  Numbers are parsed with memcached's rules, quirks included (a
 * 32-bit field given a larger number keeps its low 32 bits, as memcached's
 * safe_strtol does), because clients and tests compare replies byte for
 * byte.  Errors use memcached's strings; "noreply" silences every reply of
 * its request, errors too, as in memcached.
 *
 * The line is never modified in place: a storage command whose value is
 * still arriving is re-parsed when the rest comes, and only then applied.
 *
 * Memory per connection is bounded whatever the client sends.  Replies are
 * copied into the connection's output (values are copied out under the
 * store's lock, design.md says why), so a multi-get is answered key by key:
 * once the output holds KURA_REPLY_HIGH_WATER bytes, the get stops before its
 * next key, leaves its line unconsumed and remembers the key's offset
 * (session->resume); the connection sends what is queued and, once the
 * socket has drained, calls again and the get carries on from that key.
 * So "get a a a ... a" against a 1 MB value holds at most the high-water
 * mark plus one value, not 400 MB, and a client that reads nothing stops
 * the request there.  memcached references items instead of copying them;
 * we keep copying (no reference counts on the request path, and the same
 * code for stores whose data is on disk) and bound the copies.
 *
 * The search for a line's newline resumes where the previous call stopped
 * (session->scan), so a long line trickled in small pieces is scanned once,
 * not once per read.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "proto_int.h"

#define MAX_TOKENS TEXT_MAX_TOKENS
#define TEXT_CMD_META_SET 100           /* update_cmd of "ms": its value is read as set's is */

/* ---- replies ------------------------------------------------------------- */

static void reply(text_session *s, kura_buf *out, const char *str)
{
    if (s->noreply) {
        s->noreply = false;
        return;
    }
    size_t n = strlen(str);
    if (!kura_buf_reserve(out, n + 2)) {
        s->close = true;
        return;
    }
    memcpy(out->data + out->len, str, n);
    memcpy(out->data + out->len + n, "\r\n", 2);
    out->len += n + 2;
}

static void client_error(text_session *s, kura_buf *out, const char *str)
{
    KURA_STAT_INC(s->stats, client_errors);
    reply(s, out, str);
}

/* A command's key, checked where the line is parsed: one longer than
 * memcached takes is answered as memcached answers it, and false
 * returned. */
static bool key_parsed(text_session *s, const text_token *key, kura_buf *out)
{
    if (proto_key_ok(key->length, PROTO_MC_KEY_MAX))
        return true;
    client_error(s, out, "CLIENT_ERROR bad command line format");
    return false;
}

static void server_error_for(text_session *s, kura_buf *out, int rc)
{
    char msg[96];
    if (rc == KURA_ENOMEM) {
        reply(s, out, "SERVER_ERROR out of memory storing object");
        return;
    }
    snprintf(msg, sizeof(msg), "SERVER_ERROR %s", kura_strerror(rc));
    reply(s, out, msg);
}

/* ---- numbers, with memcached's safe_strto* semantics ----------------------- */

static bool is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* strtoull/strtoll core on a token: optional white space and sign, digits,
 * then the token's end or white space.  *mag is the magnitude; false on no
 * digits, trailing garbage, or a magnitude past 2^64-1 (ERANGE). */
static bool parse_num(const text_token *t, bool *neg, uint64_t *mag)
{
    const char *p = t->value, *end = t->value + t->length;
    uint64_t v = 0;

    while (p < end && is_space(*p))
        p++;
    *neg = false;
    if (p < end && (*p == '+' || *p == '-'))
        *neg = *p++ == '-';
    const char *digits = p;
    while (p < end && *p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
        p++;
    }
    if (p == digits || (p < end && !is_space(*p)))
        return false;
    *mag = v;
    return true;
}

static bool has_minus(const text_token *t)
{
    return memchr(t->value, '-', t->length) != NULL;
}

/* safe_strtoull: unsigned 64-bit; a "negative" that wraps to a huge value fails. */
static bool safe_u64(const text_token *t, uint64_t *out)
{
    bool neg;
    uint64_t mag;
    if (!parse_num(t, &neg, &mag))
        return false;
    uint64_t v = neg ? (uint64_t)0 - mag : mag;
    if ((int64_t)v < 0 && has_minus(t))
        return false;
    *out = v;
    return true;
}

/* safe_strtoul: as safe_u64, then memcached keeps the low 32 bits. */
static bool safe_u32(const text_token *t, uint32_t *out)
{
    uint64_t v;
    if (!safe_u64(t, &v))
        return false;
    *out = (uint32_t)v;
    return true;
}

/* safe_strtol: signed 64-bit range (ERANGE outside), low 32 bits kept. */
static bool safe_i32(const text_token *t, int32_t *out)
{
    bool neg;
    uint64_t mag;
    if (!parse_num(t, &neg, &mag))
        return false;
    if ((!neg && mag > (uint64_t)INT64_MAX) || (neg && mag > (uint64_t)INT64_MAX + 1))
        return false;
    int64_t v = neg ? (int64_t)((uint64_t)0 - mag) : (int64_t)mag;
    *out = (int32_t)(uint32_t)(uint64_t)v;
    return true;
}

void text_reply(text_session *s, kura_buf *out, const char *str) { reply(s, out, str); }
void text_client_error(text_session *s, kura_buf *out, const char *str)
{
    client_error(s, out, str);
}
void text_server_error(text_session *s, kura_buf *out, int rc) { server_error_for(s, out, rc); }
bool text_safe_u64(const text_token *t, uint64_t *out) { return safe_u64(t, out); }
bool text_safe_u32(const text_token *t, uint32_t *out) { return safe_u32(t, out); }
bool text_safe_i32(const text_token *t, int32_t *out) { return safe_i32(t, out); }

/* cmdtab.h's helpers for registered commands: the same rules */
void kura_session_reply(kura_session *s, kura_buf *out, const char *str) { reply(s, out, str); }
void kura_session_client_error(kura_session *s, kura_buf *out, const char *str)
{
    client_error(s, out, str);
}
bool kura_token_u64(const text_token *t, uint64_t *out) { return safe_u64(t, out); }
bool kura_token_u32(const text_token *t, uint32_t *out) { return safe_u32(t, out); }

static bool tok_is(const text_token *t, const char *s)
{
    size_t n = strlen(s);
    return t->value && t->length == n && memcmp(t->value, s, n) == 0;
}

/* ---- tokenizer ------------------------------------------------------------ */

/* memcached's tokenize_command on [line, line+len): splits on ' ', at most
 * max-1 tokens; the terminal token (length 0) points at the unprocessed rest,
 * or is NULL when the whole line was used.  Returns the count, terminal
 * included. */
static int tokenize(const char *line, size_t len, text_token *tok, int max)
{
    int n = 0;
    const char *s = line, *e = line, *end = line + len;

    for (; e < end; e++) {
        if (*e == ' ') {
            if (s != e) {
                tok[n].value = s;
                tok[n].length = (size_t)(e - s);
                n++;
                if (n == max - 1) {
                    e++;
                    s = e;
                    break;
                }
            }
            s = e + 1;
        }
    }
    if (s != e) {
        tok[n].value = s;
        tok[n].length = (size_t)(e - s);
        n++;
    }
    tok[n].value = e < end ? e : NULL;
    tok[n].length = 0;
    return n + 1;
}

static void set_noreply_maybe(text_session *s, const text_token *tok, int ntok)
{
    if (tok_is(&tok[ntok - 2], "noreply"))
        s->noreply = true;
}

/* ---- retrieval ------------------------------------------------------------- */

typedef struct get_ctx {
    kura_buf *out;
    bool with_cas;
    bool oom;
    bool discard;                       /* the request will fail: look up, don't format */
} get_ctx;

/* Called under the store's key lock: formats "VALUE k f n [cas]\r\n<data>\r\n"
 * (a large value by reference: value.c). */
static int emit_value(void *arg, const kura_item *it)
{
    get_ctx *g = arg;
    kura_buf *out = g->out;
    if (g->discard)
        return 0;
    bool by_ref = proto_value_by_ref(it);
    size_t need = 6 + it->klen + 3 * 22 + 4 + (by_ref ? 0 : it->vlen) + 2;
    if (!kura_buf_reserve(out, need)) {
        g->oom = true;
        return 0;
    }
    char *p = out->data + out->len;
    memcpy(p, "VALUE ", 6);
    p += 6;
    memcpy(p, it->key, it->klen);
    p += it->klen;
    *p++ = ' ';
    p += kura_fmt_u64(p, it->flags);
    *p++ = ' ';
    p += kura_fmt_u64(p, it->vlen);
    if (g->with_cas) {
        *p++ = ' ';
        p += kura_fmt_u64(p, it->cas);
    }
    *p++ = '\r';
    *p++ = '\n';
    if (by_ref) {
        out->len = (size_t)(p - out->data);
        if (!proto_append_value(out, it) || !KURA_BUF_LIT(out, "\r\n"))
            g->oom = true;
        return 0;
    }
    memcpy(p, it->val, it->vlen);
    p += it->vlen;
    *p++ = '\r';
    *p++ = '\n';
    out->len = (size_t)(p - out->data);
    return 0;
}

/* True if a key in [p, end) (space-separated) is longer than a key may be. */
static bool has_long_key(const char *p, const char *end)
{
    size_t run = 0;
    for (; p < end; p++) {
        if (*p == ' ')
            run = 0;
        else if (!proto_key_ok(++run, PROTO_MC_KEY_MAX))
            return true;
    }
    return false;
}

/* get/gets/gat/gats.  Keys past the 23rd token are tokenized in further
 * rounds, as memcached does, so a multi-get has no key limit.
 *
 * Once out reaches KURA_REPLY_HIGH_WATER (and at least one key was answered in
 * this call, so every call makes progress), the get pauses before its next
 * key: s->resume records the key's offset in the line and no END is written;
 * text_process leaves the line unconsumed, and the next call, after the
 * output has been sent, starts from that key.  memcached answers a line with
 * a too-long key anywhere in it by dropping the values it had stacked and
 * replying only CLIENT_ERROR; before the first pause (after which values have
 * left), the rest of the line is checked for such a key, and if there is one
 * the remaining keys are still looked up (hits, touches and counters as in
 * memcached) but not formatted, so the reply is the same bytes.  An error
 * after a pause (out of memory, a store error) cannot take back what was
 * sent: the error is replied and the connection closed, so a client never
 * takes a truncated reply for a whole one. */
static void cmd_get_common(text_session *s, text_token *tok, kura_buf *out,
                           bool with_cas, bool touch)
{
    size_t mark = out->len;
    int32_t exptime = 0;
    text_token *kt = &tok[1];
    get_ctx g = { out, with_cas, false, false };
    bool resumed = s->resume != 0, answered = false;

    if (touch) {
        if (!safe_i32(&tok[1], &exptime)) {
            client_error(s, out, "CLIENT_ERROR invalid exptime argument");
            return;
        }
        kt++;
        s->dirty = true;                /* gat changes exptimes */
    }
    if (resumed) {
        const char *rest = s->line_start + s->resume;
        s->resume = 0;
        tokenize(rest, (size_t)(s->line_end - rest), tok, MAX_TOKENS);
        kt = &tok[0];
    }
    for (;;) {
        for (; kt->length != 0; kt++) {
            if (answered && kura_buf_size(out) >= KURA_REPLY_HIGH_WATER && !g.discard) {
                if (resumed || !has_long_key(kt->value, s->line_end)) {
                    s->resume = (size_t)(kt->value - s->line_start);
                    return;             /* the rest once the output has drained */
                }
                kura_buf_rewind(out, mark);     /* this request ends in CLIENT_ERROR */
                g.discard = true;
            }
            if (!proto_key_ok(kt->length, PROTO_MC_KEY_MAX)) {
                kura_buf_rewind(out, mark);     /* memcached drops what it had stacked */
                client_error(s, out, "CLIENT_ERROR bad command line format");
                return;
            }
            engine_get_opts go = { .touch = touch, .exptime = exptime };
            int rc = engine_get(s->engine, s->stats, kt->value, kt->length, &go,
                                emit_value, &g, NULL);
            answered = true;
            detail_note(kt->value, kt->length, DETAIL_GET, rc == KURA_OK);
            if (g.oom || rc < 0) {
                /* A store error (a record failing its checksum, an I/O
                 * error): answering a miss would hide the fault and let a
                 * client "repair" the key with stale data.  As for the
                 * response buffer, drop what was stacked and fail the
                 * request, as docs/operations.md promises for a damaged
                 * record ("the request fails with SERVER_ERROR"). */
                kura_buf_rewind(out, mark);
                if (g.oom || rc == KURA_ENOMEM)
                    reply(s, out, "SERVER_ERROR out of memory writing get response");
                else
                    server_error_for(s, out, rc);
                if (resumed)
                    s->close = true;    /* part of this reply has already left */
                return;
            }
        }
        if (kt->value == NULL)
            break;
        /* More keys than one tokenizer round holds: continue with the rest. */
        const char *rest = kt->value;
        tokenize(rest, (size_t)(s->line_end - rest), tok, MAX_TOKENS);
        kt = &tok[0];
    }
    if (!KURA_BUF_LIT(out, "END\r\n"))
        s->close = true;
}

static void cmd_get(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    (void)ntok;                         /* any number of keys */
    cmd_get_common(s, tok, out, false, false);
}
static void cmd_gets(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    (void)ntok;                         /* any number of keys */
    cmd_get_common(s, tok, out, true, false);
}
static void cmd_gat(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    (void)ntok;                         /* any number of keys */
    cmd_get_common(s, tok, out, false, true);
}
static void cmd_gats(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    (void)ntok;                         /* any number of keys */
    cmd_get_common(s, tok, out, true, true);
}

/* ---- storage ---------------------------------------------------------------- */

/* The parsed header of a storage command, between its line and its value. */
typedef struct update_req {
    int cmd;                            /* enum kura_store_cmd */
    const char *key;
    size_t klen;
    uint32_t flags;
    int32_t exptime;
    uint64_t cas;
    uint64_t vlen;                      /* value bytes, CRLF excluded */
} update_req;

/* Parses set/add/replace/append/prepend/cas.  Returns 1 if the value must
 * be read (req filled), 0 if the request was answered (error, or refused
 * and its value is being swallowed). */
static int parse_update(text_session *s, text_token *tok, int ntok, kura_buf *out,
                        int cmd, update_req *req)
{
    int32_t vlen;

    set_noreply_maybe(s, tok, ntok);
    if (!key_parsed(s, &tok[1], out))
        return 0;
    req->cmd = cmd;
    req->key = tok[1].value;
    req->klen = tok[1].length;
    req->cas = 0;
    if (!(safe_u32(&tok[2], &req->flags) && safe_i32(&tok[3], &req->exptime) &&
          safe_i32(&tok[4], &vlen))) {
        client_error(s, out, "CLIENT_ERROR bad command line format");
        return 0;
    }
    if (cmd == KURA_CMD_CAS && !safe_u64(&tok[5], &req->cas)) {
        client_error(s, out, "CLIENT_ERROR bad command line format");
        return 0;
    }
    if (vlen < 0 || vlen > INT32_MAX - 2) {
        client_error(s, out, "CLIENT_ERROR bad command line format");
        return 0;
    }
    req->vlen = (uint64_t)vlen;
    detail_note(req->key, req->klen, DETAIL_SET, false);   /* before the value, as memcached */
    if (!engine_item_fits(s->engine, req->klen, req->vlen, req->flags)) {
        KURA_STAT_INC(s->stats, store_too_large);
        reply(s, out, "SERVER_ERROR object too large for cache");
        s->swallow = req->vlen + 2;
        /* A refused set must not leave the old value readable. */
        if (cmd == KURA_CMD_SET) {
            s->dirty = true;
            engine_delete(s->engine, s->stats, req->key, req->klen,
                          &(engine_delete_opts){ .unlink = true });
        }
        return 0;
    }
    return 1;
}

/* Applies a storage command whose value (vlen bytes + CRLF) is at data. */
static void complete_update(text_session *s, const update_req *req, const char *data,
                            kura_buf *out)
{
    KURA_STAT_INC(s->stats, cmd_set);
    if (data[req->vlen] != '\r' || data[req->vlen + 1] != '\n') {
        client_error(s, out, "CLIENT_ERROR bad data chunk");
        return;
    }
    kura_item it = {
        .key = req->key, .klen = req->klen, .val = data, .vlen = req->vlen,
        .flags = req->flags, .exptime = req->exptime,
    };
    s->dirty = true;
    int rc = engine_store(s->engine, s->stats, req->cmd, &it,
                          &(engine_store_opts){ .cas_in = req->cas }, NULL);
    switch (rc) {
    case KURA_STORED:          reply(s, out, "STORED"); break;
    case KURA_NOT_STORED:      reply(s, out, "NOT_STORED"); break;
    case KURA_STORE_EXISTS:    reply(s, out, "EXISTS"); break;
    case KURA_STORE_NOT_FOUND: reply(s, out, "NOT_FOUND"); break;
    default:                   server_error_for(s, out, rc); break;
    }
}

/* ---- other commands ----------------------------------------------------------- */

static void cmd_delete(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    if (ntok > 3) {
        bool hold_is_zero = tok_is(&tok[2], "0");
        set_noreply_maybe(s, tok, ntok);
        bool valid = (ntok == 4 && (hold_is_zero || s->noreply)) ||
                     (ntok == 5 && hold_is_zero && s->noreply);
        if (!valid) {
            client_error(s, out, "CLIENT_ERROR bad command line format.  "
                                 "Usage: delete <key> [noreply]");
            return;
        }
    }
    if (!key_parsed(s, &tok[1], out))
        return;
    detail_note(tok[1].value, tok[1].length, DETAIL_DEL, false);
    s->dirty = true;
    int rc = engine_delete(s->engine, s->stats, tok[1].value, tok[1].length, NULL);
    if (rc == KURA_OK)
        reply(s, out, "DELETED");
    else if (rc == KURA_NOTFOUND)
        reply(s, out, "NOT_FOUND");
    else
        server_error_for(s, out, rc);
}

static void cmd_arith(text_session *s, text_token *tok, int ntok, kura_buf *out, bool incr)
{
    uint64_t delta;
    char result[KURA_INCR_MAX_LEN];

    set_noreply_maybe(s, tok, ntok);
    if (!key_parsed(s, &tok[1], out))
        return;
    if (!safe_u64(&tok[2], &delta)) {
        client_error(s, out, "CLIENT_ERROR invalid numeric delta argument");
        return;
    }
    s->dirty = true;
    int rc = engine_arith(s->engine, s->stats, tok[1].value, tok[1].length, incr, delta, NULL,
                          result, NULL);
    switch (rc) {
    case KURA_OK:          reply(s, out, result); break;
    case KURA_NOTFOUND:    reply(s, out, "NOT_FOUND"); break;
    case KURA_NON_NUMERIC:
        client_error(s, out, "CLIENT_ERROR cannot increment or decrement non-numeric value");
        break;
    case KURA_ENOMEM:      reply(s, out, "SERVER_ERROR out of memory"); break;
    default:               server_error_for(s, out, rc); break;
    }
}

static void cmd_incr(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    cmd_arith(s, tok, ntok, out, true);
}
static void cmd_decr(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    cmd_arith(s, tok, ntok, out, false);
}

static void cmd_touch(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    int32_t exptime;

    set_noreply_maybe(s, tok, ntok);
    if (!key_parsed(s, &tok[1], out))
        return;
    if (!safe_i32(&tok[2], &exptime)) {
        client_error(s, out, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    s->dirty = true;
    int rc = engine_touch(s->engine, s->stats, tok[1].value, tok[1].length, exptime);
    if (rc == KURA_OK)
        reply(s, out, "TOUCHED");
    else if (rc == KURA_NOTFOUND)
        reply(s, out, "NOT_FOUND");
    else
        server_error_for(s, out, rc);
}

static void cmd_flush_all(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    int32_t delay = 0;

    set_noreply_maybe(s, tok, ntok);
    if (ntok != (s->noreply ? 3 : 2) && !safe_i32(&tok[1], &delay)) {
        client_error(s, out, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    s->dirty = true;
    int rc = engine_flush_all(s->engine, s->stats, delay);
    if (rc < 0)
        server_error_for(s, out, rc);
    else
        reply(s, out, "OK");
}

static void cmd_version(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    (void)tok; (void)ntok;
    reply(s, out, "VERSION " KURA_MEMCACHED_VERSION);
}

static void cmd_verbosity(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    uint32_t level;

    set_noreply_maybe(s, tok, ntok);
    if (!safe_u32(&tok[1], &level)) {
        client_error(s, out, "CLIENT_ERROR bad command line format");
        return;
    }
    atomic_store(&s->server->verbosity, level > 2 ? 2 : (int)level);
    reply(s, out, "OK");
}

static void cmd_quit(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    (void)tok; (void)ntok; (void)out;
    s->close = true;
}

static void cmd_stats(text_session *s, text_token *tok, int ntok, kura_buf *out)
{
    text_stats(s, tok, ntok, out);
}

/* ---- dispatch ------------------------------------------------------------------- */

/* The built-in commands, entered in every command table (cmdtab.c).
 * min/max count the terminal token, as memcached's WANT_TOKENS does; -1 = any. */
static const text_builtin builtin[] = {
    { "get",       cmd_get,       0, 3, -1, false },
    { "gets",      cmd_gets,      0, 3, -1, false },
    { "gat",       cmd_gat,       0, 3, -1, false },
    { "gats",      cmd_gats,      0, 3, -1, false },
    { "bget",      cmd_get,       0, 3, -1, false },
    { "set",       NULL, KURA_CMD_SET,     6, 7, true },
    { "add",       NULL, KURA_CMD_ADD,     6, 7, true },
    { "replace",   NULL, KURA_CMD_REPLACE, 6, 7, true },
    { "append",    NULL, KURA_CMD_APPEND,  6, 7, true },
    { "prepend",   NULL, KURA_CMD_PREPEND, 6, 7, true },
    { "cas",       NULL, KURA_CMD_CAS,     7, 8, true },
    { "delete",    cmd_delete,    0, 3, 5, false },
    { "incr",      cmd_incr,      0, 4, 5, true },
    { "decr",      cmd_decr,      0, 4, 5, true },
    { "touch",     cmd_touch,     0, 4, 5, true },
    { "flush_all", cmd_flush_all, 0, 2, 4, false },
    { "stats",     cmd_stats,     0, 2, -1, false },
    { "version",   cmd_version,   0, -1, -1, false },
    { "verbosity", cmd_verbosity, 0, 3, 4, true },
    { "quit",      cmd_quit,      0, -1, -1, false },
    /* the meta commands (meta.c) check their own token counts */
    { "mg",        meta_get,      0, -1, -1, false },
    { "ms",        NULL, TEXT_CMD_META_SET, -1, -1, false },
    { "md",        meta_delete,   0, -1, -1, false },
    { "ma",        meta_arith,    0, -1, -1, false },
    { "mn",        meta_noop,     0, -1, -1, false },
    { "me",        meta_debug,    0, -1, -1, false },
};

const text_builtin *text_builtin_commands(size_t *n)
{
    *n = sizeof(builtin) / sizeof(builtin[0]);
    return builtin;
}

static bool tokens_ok(const text_command *c, int ntok)
{
    if (c->exact_pair)
        return ntok == c->min_tokens || ntok == c->max_tokens;
    return (c->min_tokens < 0 || ntok >= c->min_tokens) &&
           (c->max_tokens < 0 || ntok <= c->max_tokens);
}

/* memcached closes a connection that sends 2 KB without a newline unless
 * the line is a get/gets (an unbounded multi-get). */
static bool long_line_allowed(const char *p, size_t len)
{
    size_t i = 0;
    while (i < len && p[i] == ' ')
        i++;
    if (i > 100)
        return false;
    return (len - i >= 4 && memcmp(p + i, "get ", 4) == 0) ||
           (len - i >= 5 && memcmp(p + i, "gets ", 5) == 0);
}

const kura_proto kura_proto_text = { "text", text_process, 0, NULL };

size_t text_process(text_session *s, char *in, size_t len, kura_buf *out)
{
    size_t pos = 0;
    unsigned turns = 0;

    s->need = 0;
    s->out_full = false;
    while (pos < len && !s->close) {
        if (kura_buf_size(out) >= KURA_REPLY_HIGH_WATER || ++turns > KURA_REQUESTS_PER_CALL) {
            s->out_full = true;         /* the rest once the output has drained */
            break;
        }
        /* Where the newline search of the line at in[0] stopped last time:
         * only the first line can have been seen before. */
        size_t from = pos == 0 ? s->scan : 0;
        s->scan = 0;
        if (s->swallow) {
            size_t n = len - pos < s->swallow ? len - pos : (size_t)s->swallow;
            pos += n;
            s->swallow -= n;
            continue;
        }
        char *line = in + pos;
        size_t avail = len - pos;
        if (from > avail)
            from = 0;                   /* defensive: the caller moved the input */
        char *nl = memchr(line + from, '\n', avail - from);
        if (!nl) {
            if (avail > KURA_MAX_LINE_NO_NEWLINE &&
                (!long_line_allowed(line, avail) || avail > KURA_MAX_GET_LINE)) {
                KURA_STAT_INC(s->stats, protocol_closes);
                s->close = true;
                return len;
            }
            s->scan = avail;
            break;
        }
        size_t consumed = (size_t)(nl - line) + 1;
        size_t llen = (size_t)(nl - line);
        if (llen > 1 && line[llen - 1] == '\r')
            llen--;
        /* memcached reads the line as a C string: a NUL ends it. */
        char *nul = memchr(line, '\0', llen);
        if (nul)
            llen = (size_t)(nul - line);

        if (s->resume == 0 &&
            atomic_load_explicit(&s->server->verbosity, memory_order_relaxed) >= 2 &&
            s->server->trace)
            s->server->trace(s->conn_id, line, llen);

        text_token tok[MAX_TOKENS];
        int ntok = tokenize(line, llen, tok, MAX_TOKENS);
        s->noreply = false;
        if (ntok < 2 || tok[0].length < 2) {
            KURA_STAT_INC(s->stats, unknown_commands);
            reply(s, out, "ERROR");
            pos += consumed;
            continue;
        }
        const text_command *c = cmdtab_find(s->cmds, tok[0].value, tok[0].length);
        if (!c || !tokens_ok(c, ntok)) {
            KURA_STAT_INC(s->stats, unknown_commands);
            reply(s, out, "ERROR");
            pos += consumed;
            continue;
        }
        if (c->handler || c->fn) {
            s->line_start = line;
            s->line_end = line + llen;
            if (c->handler)
                c->handler(s, tok, ntok, out);
            else
                c->fn(c->ctx, s, tok, ntok, out);
            if (s->resume) {
                /* A get paused at the high-water mark: its line stays, and
                 * its newline need not be searched for again. */
                s->scan = consumed - 1;
                s->out_full = true;
                break;
            }
            pos += consumed;
            continue;
        }

        if (c->update_cmd == TEXT_CMD_META_SET) {
            meta_set_req mreq;
            if (!meta_set_parse(s, tok, ntok, out, &mreq)) {
                pos += consumed;
                continue;
            }
            if (avail - consumed < mreq.vlen + 2) {
                s->need = consumed + (size_t)mreq.vlen + 2;
                s->noreply = false;
                break;
            }
            meta_set_complete(s, &mreq, line + consumed, out);
            pos += consumed + (size_t)mreq.vlen + 2;
            continue;
        }
        update_req req;
        if (!parse_update(s, tok, ntok, out, c->update_cmd, &req)) {
            pos += consumed;
            continue;
        }
        if (avail - consumed < req.vlen + 2) {
            /* The value is still arriving: leave the request unconsumed. */
            s->need = consumed + (size_t)req.vlen + 2;
            s->noreply = false;
            break;
        }
        complete_update(s, &req, line + consumed, out);
        pos += consumed + (size_t)req.vlen + 2;
    }
    s->noreply = false;
    return pos;
}

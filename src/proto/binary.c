/*
 * binary.c - memcached's binary protocol, as memcached 1.6.18 answers it.
 *
 * A request is a 24-byte header (magic 0x80, opcode, key length, extras
 * length, body length, opaque, cas) and a body of extras, key and value.
 * Every opcode memcached 1.6 serves is served: get/getq/getk/getkq,
 * set/add/replace and their quiet forms, delete, increment/decrement with
 * initial value and expiration, append/prepend, quit, flush, noop, version,
 * stat (with and without a group), touch, gat/gatq/gatk/gatkq.  SASL
 * (list mechanisms, auth, step) is served with -S, as memcached -S serves
 * it (see "SASL" below); without -S it is answered as memcached without
 * SASL answers it (unknown command).
 *
 * memcached's checks and quirks are kept, since clients and memcapable
 * test them: a bad magic closes the connection without a word; a key and
 * extras longer than the body, a key over 250 bytes, or a request whose
 * lengths do not fit its opcode get an error and the connection closes; an
 * unknown opcode is answered and its body skipped; a value over the item
 * size limit is answered "Too large." and skipped, never buffered.  The
 * quiet forms answer only errors (and getq/getkq only hits); noop and any
 * non-quiet request act as the fence.
 *
 * Like the text protocol, this file works in place on the connection's
 * read buffer: a request is handled once its header, extras and key have
 * arrived, and a storage request once its value has too (session->need
 * says how much); values are copied into the output under the store's
 * lock.  Memory per connection is bounded by one request (-I plus 64 KiB
 * of key and extras) and KURA_REPLY_HIGH_WATER of replies.
 */
#include <stdlib.h>
#include <string.h>

#include "kura/bytes.h"
#include "proto_int.h"

#define BIN_REQ_MAGIC 0x80
#define BIN_RES_MAGIC 0x81
#define BIN_HDR 24

enum bin_opcode {
    OP_GET = 0x00, OP_SET = 0x01, OP_ADD = 0x02, OP_REPLACE = 0x03, OP_DELETE = 0x04,
    OP_INCREMENT = 0x05, OP_DECREMENT = 0x06, OP_QUIT = 0x07, OP_FLUSH = 0x08,
    OP_GETQ = 0x09, OP_NOOP = 0x0a, OP_VERSION = 0x0b, OP_GETK = 0x0c, OP_GETKQ = 0x0d,
    OP_APPEND = 0x0e, OP_PREPEND = 0x0f, OP_STAT = 0x10, OP_SETQ = 0x11, OP_ADDQ = 0x12,
    OP_REPLACEQ = 0x13, OP_DELETEQ = 0x14, OP_INCREMENTQ = 0x15, OP_DECREMENTQ = 0x16,
    OP_QUITQ = 0x17, OP_FLUSHQ = 0x18, OP_APPENDQ = 0x19, OP_PREPENDQ = 0x1a,
    OP_TOUCH = 0x1c, OP_GAT = 0x1d, OP_GATQ = 0x1e,
    OP_SASL_LIST_MECHS = 0x20, OP_SASL_AUTH = 0x21, OP_SASL_STEP = 0x22,
    OP_GATK = 0x23, OP_GATKQ = 0x24,
};

enum bin_status {
    ST_OK = 0x00, ST_KEY_ENOENT = 0x01, ST_KEY_EEXISTS = 0x02, ST_E2BIG = 0x03,
    ST_EINVAL = 0x04, ST_NOT_STORED = 0x05, ST_DELTA_BADVAL = 0x06,
    ST_AUTH_ERROR = 0x20, ST_AUTH_CONTINUE = 0x21,
    ST_UNKNOWN_COMMAND = 0x81, ST_ENOMEM = 0x82,
};

#define SASL_MECH_MAX 32                /* memcached's MAX_SASL_MECH_LEN */

/* One request's header, in host order, and where its parts are. */
typedef struct bin_req {
    uint8_t opcode;             /* as sent (quiet forms included) */
    uint8_t cmd;                /* the quiet form mapped to its loud one */
    bool quiet;
    uint16_t keylen;
    uint8_t extlen;
    uint32_t bodylen;
    uint32_t opaque;            /* echoed as sent (byte order untouched) */
    uint64_t cas;
    const unsigned char *ext;
    const char *key;
    const char *value;          /* storage commands: bodylen - extlen - keylen bytes */
    uint32_t vlen;
} bin_req;

/* The session's state between calls, private to this file (s->state). */
typedef struct binary_state {
    uint64_t swallow;                   /* body bytes of a refused request still to discard */
    bool wrote;                         /* the last request's reply makes memcached write */
    /* -S */
    void *sasl;                         /* the SASL exchange (sasl.c); NULL before */
    bool authenticated;
    bool sasl_started;                  /* an auth has started the exchange: step may follow */
} binary_state;

static void binary_release(void *state)
{
    session_sasl_free(&((binary_state *)state)->sasl);
}

/* ---- replies ----------------------------------------------------------------- */

/* Appends a response header, with room for `room` bytes of its body after
 * it (bin_header: all of it); the caller appends extlen + keylen + the
 * rest of bodylen bytes.  False (and the session closes) when memory runs
 * out. */
static bool bin_header_room(kura_session *s, kura_buf *out, const bin_req *r, uint16_t status,
                            uint8_t extlen, uint16_t keylen, uint32_t bodylen, uint64_t cas,
                            size_t room)
{
    if (!kura_buf_reserve(out, BIN_HDR + room)) {
        s->close = true;
        return false;
    }
    unsigned char *h = (unsigned char *)out->data + out->len;
    h[0] = BIN_RES_MAGIC;
    h[1] = r->opcode;
    put_be16(h + 2, keylen);
    h[4] = extlen;
    h[5] = 0;                           /* raw bytes */
    put_be16(h + 6, status);
    put_be32(h + 8, bodylen);
    memcpy(h + 12, &r->opaque, 4);
    put_be64(h + 16, cas);
    out->len += BIN_HDR;
    return true;
}

static bool bin_header(kura_session *s, kura_buf *out, const bin_req *r, uint16_t status,
                       uint8_t extlen, uint16_t keylen, uint32_t bodylen, uint64_t cas)
{
    return bin_header_room(s, out, r, status, extlen, keylen, bodylen, cas, bodylen);
}

/* A success reply with an optional body, unless the request was quiet. */
static void bin_ok(kura_session *s, kura_buf *out, const bin_req *r, uint64_t cas,
                   const void *body, uint32_t len)
{
    if (r->quiet)
        return;
    if (bin_header(s, out, r, ST_OK, 0, 0, len, cas))
        kura_buf_append(out, body, len);
}

/* An error reply with memcached's text for the status (quiet or not). */
static void bin_error(kura_session *s, kura_buf *out, const bin_req *r, uint16_t status)
{
    const char *msg;
    switch (status) {
    case ST_ENOMEM:           msg = "Out of memory"; break;
    case ST_UNKNOWN_COMMAND:  msg = "Unknown command"; break;
    case ST_KEY_ENOENT:       msg = "Not found"; break;
    case ST_EINVAL:           msg = "Invalid arguments"; break;
    case ST_KEY_EEXISTS:      msg = "Data exists for key."; break;
    case ST_E2BIG:            msg = "Too large."; break;
    case ST_DELTA_BADVAL:     msg = "Non-numeric server-side value for incr or decr"; break;
    case ST_NOT_STORED:       msg = "Not stored."; break;
    case ST_AUTH_ERROR:       msg = "Auth failure."; break;
    default:                  msg = "UNHANDLED ERROR"; break;
    }
    uint32_t n = (uint32_t)strlen(msg);
    ((binary_state *)s->state)->wrote = true;   /* memcached writes after an error (see below) */
    if (status == ST_EINVAL || status == ST_UNKNOWN_COMMAND)
        KURA_STAT_INC(s->stats, client_errors);
    if (bin_header(s, out, r, status, 0, 0, n, 0))
        kura_buf_append(out, msg, n);
}

/* A store error (I/O, a corrupt record, writes stopped): memcached has no
 * status for it; the closest is "Out of memory" for no room and a
 * temporary failure otherwise, with the reason as text. */
static void bin_store_error(kura_session *s, kura_buf *out, const bin_req *r, int rc)
{
    if (rc == KURA_ENOMEM) {
        bin_error(s, out, r, ST_ENOMEM);
        return;
    }
    const char *msg = kura_strerror(rc);
    uint32_t n = (uint32_t)strlen(msg);
    if (bin_header(s, out, r, ST_ENOMEM, 0, 0, n, 0))
        kura_buf_append(out, msg, n);
}

/* ---- commands ------------------------------------------------------------------ */

typedef struct bin_get_ctx {
    kura_session *s;
    kura_buf *out;
    const bin_req *r;
    bool with_key, with_value;
} bin_get_ctx;

/* Under the key's lock: flags, the key if asked, the value if asked. */
static int bin_emit(void *arg, const kura_item *it)
{
    bin_get_ctx *g = arg;
    uint16_t klen = g->with_key ? (uint16_t)it->klen : 0;
    uint32_t vlen = g->with_value ? (uint32_t)it->vlen : 0;
    size_t room = 4 + klen + (proto_value_by_ref(it) ? 0 : vlen);   /* (value.c) */
    if (!bin_header_room(g->s, g->out, g->r, ST_OK, 4, klen, 4 + klen + vlen, it->cas, room))
        return 0;
    unsigned char flags[4];
    put_be32(flags, it->flags);
    kura_buf_append(g->out, flags, 4);
    kura_buf_append(g->out, it->key, klen);
    if (g->with_value && !proto_append_value(g->out, it))
        g->s->close = true;             /* (no room for a copy: no half reply) */
    return 0;
}

static void bin_get(kura_session *s, const bin_req *r, kura_buf *out)
{
    bool touch = r->cmd == OP_TOUCH || r->cmd == OP_GAT || r->cmd == OP_GATK;
    bin_get_ctx g = { s, out, r, r->cmd == OP_GETK || r->cmd == OP_GATK, r->cmd != OP_TOUCH };
    engine_get_opts o = { .touch = touch };
    if (touch) {
        o.exptime = (int64_t)get_be32(r->ext);     /* memcached: unsigned, never "past" */
        s->dirty = true;
    }
    size_t mark = out->len;
    int rc = engine_get(s->engine, s->stats, r->key, r->keylen, &o, bin_emit, &g, NULL);
    detail_note(r->key, r->keylen, DETAIL_GET, rc == KURA_OK);
    if (rc == KURA_OK)
        return;
    kura_buf_rewind(out, mark);
    if (rc < 0) {
        bin_store_error(s, out, r, rc);
        return;
    }
    if (r->quiet)
        return;                         /* getq/getkq/gatq: a miss is silent */
    if (g.with_key) {
        if (bin_header(s, out, r, ST_KEY_ENOENT, 0, r->keylen, r->keylen, 0))
            kura_buf_append(out, r->key, r->keylen);
    } else {
        bin_error(s, out, r, ST_KEY_ENOENT);
    }
}

static void bin_store(kura_session *s, const bin_req *r, kura_buf *out)
{
    int cmd;
    switch (r->cmd) {
    case OP_SET:     cmd = KURA_CMD_SET; break;
    case OP_ADD:     cmd = KURA_CMD_ADD; break;
    case OP_REPLACE: cmd = KURA_CMD_REPLACE; break;
    case OP_APPEND:  cmd = KURA_CMD_APPEND; break;
    default:         cmd = KURA_CMD_PREPEND; break;
    }
    bool concat = cmd == KURA_CMD_APPEND || cmd == KURA_CMD_PREPEND;
    /* memcached: any cas turns set/add/replace into cas */
    if (r->cas && !concat)
        cmd = KURA_CMD_CAS;
    kura_item it = {
        .key = r->key, .klen = r->keylen, .val = r->value, .vlen = r->vlen,
        .flags = concat ? 0 : get_be32(r->ext),
        .exptime = concat ? 0 : (int64_t)get_be32(r->ext + 4),
    };
    engine_store_opts o = { .cas_in = r->cas };
    uint64_t cas = 0;
    KURA_STAT_INC(s->stats, cmd_set);
    if (!concat)
        detail_note(r->key, r->keylen, DETAIL_SET, false);   /* memcached: not append/prepend */
    s->dirty = true;
    int rc = engine_store(s->engine, s->stats, cmd, &it, &o, &cas);
    switch (rc) {
    case KURA_STORED:          bin_ok(s, out, r, cas, NULL, 0); break;
    case KURA_STORE_EXISTS:    bin_error(s, out, r, ST_KEY_EEXISTS); break;
    case KURA_STORE_NOT_FOUND: bin_error(s, out, r, ST_KEY_ENOENT); break;
    case KURA_NOT_STORED:
        bin_error(s, out, r, cmd == KURA_CMD_ADD ? ST_KEY_EEXISTS
                           : cmd == KURA_CMD_REPLACE ? ST_KEY_ENOENT : ST_NOT_STORED);
        break;
    default:                   bin_store_error(s, out, r, rc); break;
    }
}

static void bin_delete(kura_session *s, const bin_req *r, kura_buf *out)
{
    detail_note(r->key, r->keylen, DETAIL_DEL, false);
    s->dirty = true;
    int rc = engine_delete(s->engine, s->stats, r->key, r->keylen,
                           &(engine_delete_opts){ .cas_in = r->cas });
    switch (rc) {
    case KURA_OK:       bin_ok(s, out, r, 0, NULL, 0); break;
    case KURA_EXISTS:   bin_error(s, out, r, ST_KEY_EEXISTS); break;
    case KURA_NOTFOUND: bin_error(s, out, r, ST_KEY_ENOENT); break;
    default:            bin_store_error(s, out, r, rc); break;
    }
}

static void bin_arith(kura_session *s, const bin_req *r, kura_buf *out)
{
    char result[KURA_INCR_MAX_LEN];
    uint32_t expiration = get_be32(r->ext + 16);
    engine_arith_opts o = {
        .cas_in = r->cas,
        .vivify = expiration != 0xffffffffu,
        .initial = get_be64(r->ext + 8),
        .vivify_exptime = (int64_t)expiration,
    };
    engine_item_info info = { 0 };
    s->dirty = true;
    int rc = engine_arith(s->engine, s->stats, r->key, r->keylen, r->cmd == OP_INCREMENT,
                          get_be64(r->ext), &o, result, &info);
    switch (rc) {
    case KURA_OK: {
        unsigned char v[8];
        uint64_t n = 0;
        for (const char *p = result; *p >= '0' && *p <= '9'; p++)
            n = n * 10 + (uint64_t)(*p - '0');
        put_be64(v, n);
        bin_ok(s, out, r, info.cas, v, 8);
        break;
    }
    case KURA_NON_NUMERIC: bin_error(s, out, r, ST_DELTA_BADVAL); break;
    case KURA_NOTFOUND:    bin_error(s, out, r, ST_KEY_ENOENT); break;
    case KURA_EXISTS:      bin_error(s, out, r, ST_KEY_EEXISTS); break;
    default:               bin_store_error(s, out, r, rc); break;
    }
}

/* One stat as a packet: key = name, value = value. */
typedef struct bin_stat_ctx {
    kura_session *s;
    kura_buf *out;
    const bin_req *r;
} bin_stat_ctx;

static void bin_stat_packet(void *arg, const char *name, const char *value)
{
    bin_stat_ctx *c = arg;
    size_t nlen = strlen(name), vlen = strlen(value);
    if (bin_header(c->s, c->out, c->r, ST_OK, 0, (uint16_t)nlen, (uint32_t)(nlen + vlen), 0)) {
        kura_buf_append(c->out, name, nlen);
        kura_buf_append(c->out, value, vlen);
    }
}

static bool key_has(const bin_req *r, size_t at, const char *word)
{
    size_t n = strlen(word);
    return r->keylen >= at + n && memcmp(r->key + at, word, n) == 0;
}

/* stat [group]: the lines "stats [group]" answers, each a packet, then an
 * empty packet; an unknown group is "Not found".  Dispatched as memcached
 * dispatches it: a key that starts with "reset", "settings" or "detail"
 * is that group whatever follows ("settingsX" is settings; "detail dump"
 * answers one packet "detailed" holding the whole dump, "detail on" and
 * "detail off" switch), any other group by its exact name; "conns" is
 * not served over the binary protocol (memcached: Not found). */
static void bin_stat(kura_session *s, const bin_req *r, kura_buf *out)
{
    const kura_stats_source src = { s->engine, s->server, s->cmds };
    bin_stat_ctx c = { s, out, r };
    if (r->keylen == 0) {
        kura_stats_lines(&src, NULL, 0, bin_stat_packet, &c);
    } else if (key_has(r, 0, "reset")) {
        kura_buf ignored = { 0 };
        text_token tok[3] = { { "stats", 5 }, { "reset", 5 }, { NULL, 0 } };
        text_stats(s, tok, 3, &ignored);
        kura_buf_free(&ignored);
    } else if (key_has(r, 0, "settings")) {
        kura_stats_lines(&src, "settings", 8, bin_stat_packet, &c);
    } else if (key_has(r, 0, "detail")) {
        if (key_has(r, 6, " dump")) {
            kura_buf dump = { 0 };
            if (!detail_dump(&dump) || dump.len > UINT32_MAX - 8) {
                kura_buf_free(&dump);
                bin_error(s, out, r, ST_ENOMEM);
                return;
            }
            if (bin_header(s, out, r, ST_OK, 0, 8, (uint32_t)(8 + dump.len), 0)) {
                KURA_BUF_LIT(out, "detailed");
                kura_buf_append(out, dump.data, dump.len);
            }
            kura_buf_free(&dump);
        } else if (key_has(r, 6, " on") || key_has(r, 6, " off")) {
            detail_set(key_has(r, 6, " on"));
        } else {
            bin_error(s, out, r, ST_KEY_ENOENT);
            return;
        }
    } else if ((r->keylen == 5 && memcmp(r->key, "conns", 5) == 0) ||
               !kura_stats_lines(&src, r->key, r->keylen, bin_stat_packet, &c)) {
        bin_error(s, out, r, ST_KEY_ENOENT);
        return;
    }
    bin_header(s, out, r, ST_OK, 0, 0, 0, 0);
}

/* ---- SASL (-S) ---------------------------------------------------------------------
 *
 * As memcached 1.6.18 with -S: before a connection has authenticated, only
 * list mechanisms, auth, step and version are served; any other request
 * (noop, quit and an unknown opcode included) is answered "Auth failure."
 * and the connection closes.  Each of the three SASL requests starts the
 * exchange over (the connection is unauthenticated until it succeeds
 * again).  An auth or step answers "Authenticated" (counted in auth_cmds),
 * status 0x21 with libsasl2's challenge (continue), or "Auth failure."
 * (auth_cmds and auth_errors; the connection may try again).  A step
 * before any auth fails.  A mechanism name over 32 bytes is "Invalid
 * arguments" (its data skipped); data past the item size limit "Out of
 * memory" (skipped, never buffered). */

static bool sasl_allowed(const kura_session *s, const bin_req *r)
{
    const binary_state *b = s->state;
    return b->authenticated || r->opcode == OP_SASL_LIST_MECHS || r->opcode == OP_SASL_AUTH ||
           r->opcode == OP_SASL_STEP || r->opcode == OP_VERSION;
}

static void bin_sasl_mechs(kura_session *s, const bin_req *r, kura_buf *out)
{
    binary_state *b = s->state;
    const char *mechs;
    unsigned n;
    b->authenticated = false;
    if (session_sasl_mechs(&b->sasl, &mechs, &n) < 0) {
        bin_error(s, out, r, ST_AUTH_ERROR);
        return;
    }
    bin_ok(s, out, r, 0, mechs, n);
}

/* An auth or step whose data (vlen bytes) is at r->value. */
static void bin_sasl_auth(kura_session *s, const bin_req *r, kura_buf *out)
{
    binary_state *b = s->state;
    char mech[SASL_MECH_MAX + 1];
    const char *reply = NULL;
    unsigned n = 0;
    int rc = -1;
    b->authenticated = false;
    if (r->cmd == OP_SASL_AUTH) {
        memcpy(mech, r->key, r->keylen);
        mech[r->keylen] = '\0';
        rc = session_sasl_start(&b->sasl, mech, r->vlen ? r->value : NULL, r->vlen, &reply, &n);
        b->sasl_started = rc >= 0;
    } else if (b->sasl_started) {
        rc = session_sasl_step(&b->sasl, r->vlen ? r->value : NULL, r->vlen, &reply, &n);
    }
    if (rc == 0) {
        b->authenticated = true;
        KURA_STAT_INC(s->stats, auth_cmds);
        bin_ok(s, out, r, 0, "Authenticated", 13);
    } else if (rc == 1) {
        b->wrote = true;                /* memcached writes the challenge at once */
        if (bin_header(s, out, r, ST_AUTH_CONTINUE, 0, 0, n, 0))
            kura_buf_append(out, reply, n);
    } else {
        KURA_STAT_INC(s->stats, auth_cmds);
        KURA_STAT_INC(s->stats, auth_errors);
        bin_error(s, out, r, ST_AUTH_ERROR);
    }
}

/* kura's own commands (repl, digest, snapshot, stats groups, the
 * listings) are text commands: a connection authenticated by SASL whose
 * next request does not start with the binary magic speaks the text
 * protocol from then on (a replica's and kuractl's login, kura_login).
 * memcached -S closes such a connection; only an authenticated one is
 * answered differently, so what a client gets before authenticating is
 * memcached's. */
static size_t __attribute__((noinline, cold)) sasl_to_text(kura_session *s, char *in, size_t len,
                                                           kura_buf *out)
{
    binary_release(s->state);
    free(s->state);
    s->state = NULL;
    s->proto = &kura_proto_text;
    return kura_proto_text.process(s, in, len, out);
}

/* ---- the request loop -------------------------------------------------------------- */

/* Quiet opcodes and the loud ones they stand for, indexed by opcode: QUIET
 * with the loud one, 0 for an opcode that is not quiet (every opcode is
 * below QUIET). */
#define QUIET 0x80
static const uint8_t loud_ops[256] = {
    [OP_SETQ] = QUIET | OP_SET, [OP_ADDQ] = QUIET | OP_ADD,
    [OP_REPLACEQ] = QUIET | OP_REPLACE, [OP_DELETEQ] = QUIET | OP_DELETE,
    [OP_INCREMENTQ] = QUIET | OP_INCREMENT, [OP_DECREMENTQ] = QUIET | OP_DECREMENT,
    [OP_QUITQ] = QUIET | OP_QUIT, [OP_FLUSHQ] = QUIET | OP_FLUSH,
    [OP_APPENDQ] = QUIET | OP_APPEND, [OP_PREPENDQ] = QUIET | OP_PREPEND,
    [OP_GETQ] = QUIET | OP_GET, [OP_GETKQ] = QUIET | OP_GETK, [OP_GATQ] = QUIET | OP_GAT,
    [OP_GATKQ] = QUIET | OP_GATK,
};

static uint8_t loud_of(uint8_t op, bool *quiet)
{
    *quiet = loud_ops[op] & QUIET;
    return *quiet ? (uint8_t)(loud_ops[op] & ~QUIET) : op;
}

/* Checks a request's lengths against its opcode, as memcached's dispatch
 * does.  0: fine; 1: a protocol error (EINVAL, then close); 2: unknown. */
static int bin_check(const bin_req *r)
{
    uint16_t k = r->keylen;
    uint8_t e = r->extlen;
    uint32_t b = r->bodylen;
    switch (r->cmd) {
    case OP_VERSION: case OP_NOOP: case OP_QUIT: case OP_SASL_LIST_MECHS:
        return e == 0 && k == 0 && b == 0 ? 0 : 1;
    case OP_FLUSH:
        return k == 0 && b == e && (e == 0 || e == 4) ? 0 : 1;
    case OP_SET: case OP_ADD: case OP_REPLACE:
        return e == 8 && k != 0 && b >= (uint32_t)k + 8 ? 0 : 1;
    case OP_GET: case OP_GETK:
        return e == 0 && b == k && k > 0 ? 0 : 1;
    case OP_DELETE:
        return k > 0 && e == 0 && b == k ? 0 : 1;
    case OP_INCREMENT: case OP_DECREMENT:
        return k > 0 && e == 20 && b == (uint32_t)k + e ? 0 : 1;
    case OP_APPEND: case OP_PREPEND:
        return k > 0 && e == 0 ? 0 : 1;
    case OP_STAT:
        return e == 0 ? 0 : 1;
    case OP_SASL_AUTH: case OP_SASL_STEP:
        return e == 0 && k != 0 ? 0 : 1;
    case OP_TOUCH: case OP_GAT: case OP_GATK:
        return e == 4 && k != 0 ? 0 : 1;
    default:
        return 2;
    }
}

static bool has_value(uint8_t cmd)
{
    return cmd == OP_SET || cmd == OP_ADD || cmd == OP_REPLACE || cmd == OP_APPEND ||
           cmd == OP_PREPEND;
}

/* A storage request whose value (r->vlen) cannot be stored: E2BIG (and a
 * refused set removes the old value, as memcached); 0: it can. */
static uint16_t store_refusal(kura_session *s, bin_req *r)
{
    uint32_t flags = r->cmd == OP_APPEND || r->cmd == OP_PREPEND ? 0 : get_be32(r->ext);
    if (engine_item_fits(s->engine, r->keylen, r->vlen, flags))
        return 0;
    KURA_STAT_INC(s->stats, store_too_large);
    r->quiet = false;
    if (r->cmd == OP_SET) {
        s->dirty = true;                /* a refused set must not leave the old value */
        engine_delete(s->engine, s->stats, r->key, r->keylen,
                      &(engine_delete_opts){ .unlink = true });
    }
    return ST_E2BIG;
}

/* A SASL auth or step refused before its data is read (see "SASL"). */
static uint16_t sasl_refusal(kura_session *s, const bin_req *r)
{
    return r->keylen > SASL_MECH_MAX ? ST_EINVAL
           : !engine_item_fits(s->engine, r->keylen, r->vlen, 0) ? ST_ENOMEM
                                                                 : 0;
}

/* An error reply after which memcached writes out what it has queued
 * (those it sends before skipping a body do not).  *flushed: the output
 * memcached would have sent by now; a bad magic drops the rest, since
 * memcached closes without sending what it had not yet written. */
static void bin_error_flush(kura_session *s, kura_buf *out, const bin_req *r, uint16_t status,
                            size_t *flushed)
{
    bin_error(s, out, r, status);
    *flushed = out->len;
}

/* Reads the 24-byte header at h into r (key and extras point after it):
 * the bytes up to the key's end, which must be there before r is used. */
static size_t read_header(bin_req *r, const unsigned char *h)
{
    *r = (bin_req){
        .opcode = h[1], .keylen = get_be16(h + 2), .extlen = h[4], .bodylen = get_be32(h + 8),
        .cas = get_be64(h + 16),
    };
    memcpy(&r->opaque, h + 12, 4);
    r->ext = h + BIN_HDR;
    r->key = (const char *)h + BIN_HDR + r->extlen;
    r->cmd = loud_of(r->opcode, &r->quiet);
    return BIN_HDR + (size_t)r->extlen + r->keylen;
}

/* The checks that close the connection after one error reply (lengths
 * that disagree, SASL not done, a key too long, lengths wrong for the
 * opcode): -1 when it closes, else bin_check's 0 (fine) or 2 (unknown). */
static int admit(kura_session *s, const bin_req *r, kura_buf *out)
{
    if ((uint32_t)r->keylen + r->extlen > r->bodylen) {
        bin_error(s, out, r, ST_UNKNOWN_COMMAND);
        s->close = true;
        return -1;
    }
    if (s->server->sasl && !sasl_allowed(s, r)) {
        bin_error(s, out, r, ST_AUTH_ERROR);
        s->close = true;
        return -1;
    }
    if (!proto_key_ok(r->keylen, PROTO_MC_KEY_MAX)) {
        bin_error(s, out, r, ST_EINVAL);
        s->close = true;
        return -1;
    }
    int check = bin_check(r);
    if (check == 1) {
        bin_error(s, out, r, ST_EINVAL);
        s->close = true;
        return -1;
    }
    return check;
}

/* An unknown opcode (SASL's without -S): its error, and the `skip` bytes
 * after the key left to swallow (the whole body for an unknown opcode,
 * the value for SASL), as memcached skips them.  With nothing to skip,
 * memcached writes out what it has queued. */
static void unknown_command(kura_session *s, binary_state *b, const bin_req *r, uint32_t skip,
                            kura_buf *out, size_t *flushed)
{
    if (skip == 0) {
        bin_error_flush(s, out, r, ST_UNKNOWN_COMMAND, flushed);
        KURA_STAT_INC(s->stats, unknown_commands);
        return;
    }
    bin_error(s, out, r, ST_UNKNOWN_COMMAND);
    KURA_STAT_INC(s->stats, unknown_commands);
    b->swallow = skip;
}

/* A request with a value (a store, SASL's data) whose head (its first
 * `head` bytes) is at h: refused before its value is read (which is then
 * swallowed), or run once the whole value is there.  False when the value
 * is still arriving (s->need set); else *pos moved past what it used. */
static bool with_value(kura_session *s, binary_state *b, bin_req *r, const unsigned char *h,
                       size_t avail, size_t head, bool sasl_data, size_t *pos, kura_buf *out,
                       size_t *flushed)
{
    r->vlen = r->bodylen - r->extlen - r->keylen;
    uint16_t refused = sasl_data ? sasl_refusal(s, r) : store_refusal(s, r);
    if (refused) {
        bin_error(s, out, r, refused);
        *pos += head;
        b->swallow = r->vlen;
        return true;
    }
    if (avail < head + r->vlen) {
        s->need = head + r->vlen;       /* the value is still arriving */
        return false;
    }
    r->value = (const char *)h + head;
    *pos += head + r->vlen;
    b->wrote = false;
    if (sasl_data)
        bin_sasl_auth(s, r, out);
    else
        bin_store(s, r, out);
    if (b->wrote)
        *flushed = out->len;
    return true;
}

/* Runs a request without a value. */
static void dispatch(kura_session *s, bin_req *r, kura_buf *out, size_t *flushed)
{
    switch (r->cmd) {
    case OP_GET: case OP_GETK: case OP_TOUCH: case OP_GAT: case OP_GATK:
        bin_get(s, r, out);
        break;
    case OP_DELETE:
        bin_delete(s, r, out);
        break;
    case OP_INCREMENT: case OP_DECREMENT:
        bin_arith(s, r, out);
        break;
    case OP_FLUSH: {
        int64_t delay = r->extlen == 4 ? (int64_t)get_be32(r->ext) : 0;
        s->dirty = true;
        int rc = engine_flush_all(s->engine, s->stats, delay);
        if (rc < 0)
            bin_store_error(s, out, r, rc);
        else
            bin_ok(s, out, r, 0, NULL, 0);
        break;
    }
    case OP_NOOP:
        bin_ok(s, out, r, 0, NULL, 0);
        *flushed = out->len;            /* noop makes memcached write */
        break;
    case OP_VERSION:
        bin_ok(s, out, r, 0, KURA_MEMCACHED_VERSION, sizeof(KURA_MEMCACHED_VERSION) - 1);
        break;
    case OP_QUIT:
        bin_ok(s, out, r, 0, NULL, 0);
        s->close = true;
        break;
    case OP_STAT:
        bin_stat(s, r, out);
        break;
    }
}

const kura_proto kura_proto_binary = { "binary", binary_process, sizeof(binary_state),
                                        binary_release };

size_t binary_process(kura_session *s, char *in, size_t len, kura_buf *out)
{
    size_t pos = 0;
    size_t flushed = out->len;          /* what memcached would have written already */
    binary_state *b = s->state;

    unsigned turns = 0;

    s->need = 0;
    s->out_full = false;
    while (pos < len && !s->close) {
        if (session_turn_over(s, out, &turns))
            break;                      /* the rest on the connection's next turn */
        if (b->swallow) {
            session_swallow(&pos, len, &b->swallow);
            continue;
        }
        const unsigned char *h = (const unsigned char *)in + pos;
        size_t avail = len - pos;
        if (h[0] != BIN_REQ_MAGIC && s->server->sasl && b->authenticated)
            return pos + sasl_to_text(s, in + pos, len - pos, out);
        if (avail < BIN_HDR) {
            s->need = BIN_HDR;
            break;
        }
        if (h[0] != BIN_REQ_MAGIC) {
            /* memcached closes at once, without a reply, dropping the
             * replies it had not written yet */
            KURA_STAT_INC(s->stats, protocol_closes);
            kura_buf_rewind(out, flushed);
            s->close = true;
            return len;
        }
        bin_req r;
        size_t head = read_header(&r, h);
        if (avail < head) {
            s->need = head;
            break;
        }
        int check = admit(s, &r, out);
        if (check < 0)
            return len;
        uint32_t skip = check == 2 ? r.bodylen : r.bodylen - r.keylen;
        if (s->server->sasl && r.cmd == OP_SASL_LIST_MECHS) {
            pos += head;
            bin_sasl_mechs(s, &r, out);
            continue;
        }
        bool sasl_data = s->server->sasl && (r.cmd == OP_SASL_AUTH || r.cmd == OP_SASL_STEP);
        /* without -S, SASL is answered as an unknown opcode */
        bool unknown = check == 2 || (!s->server->sasl && (r.cmd == OP_SASL_LIST_MECHS ||
                                                           r.cmd == OP_SASL_AUTH ||
                                                           r.cmd == OP_SASL_STEP));
        if (unknown) {
            unknown_command(s, b, &r, skip, out, &flushed);
            pos += head;
            continue;
        }
        if (has_value(r.cmd) || sasl_data) {
            if (!with_value(s, b, &r, h, avail, head, sasl_data, &pos, out, &flushed))
                break;                  /* the value is still arriving */
            continue;
        }
        pos += head;
        b->wrote = false;
        dispatch(s, &r, out, &flushed);
        if (b->wrote)
            flushed = out->len;
    }
    return pos;
}

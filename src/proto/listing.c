/*
 * listing.c - the commands that list keys (docs/protocol.md, "Listing
 * keys"):
 *
 *   lru_crawler metadump <all|hash|<class>[,<class>...]>
 *       memcached's own dump, line for line as memcached 1.6 writes it
 *       ("key=<urlencoded> exp=<-1|abs> la=<abs> cas=<n> fetch=<yes|no>
 *       cls=<n> size=<n>\n" ..., "END\r\n"), so that memcached-tool's dump
 *       and other tools that read it work unchanged.  kura has no slabs:
 *       cls is the class memcached's default slab sizes (-n 48, -f 1.25,
 *       512 KiB chunks) would put the item in, size memcached's count.
 *   keys [prefix=P] [from=K|after=K] [to=K|before=K] [limit=N]
 *       kura's: "KEY <key>\r\n" per key, then "END\r\n".
 *   rget <start> <end> <left open 0|1> <right open 0|1> <max>
 *       MemcacheDB's range get: "VALUE <key> <flags> <bytes>\r\n<data>\r\n"
 *       per key, then "END\r\n", as a get answers.
 *
 * All three stream: they walk the store in bounded steps (engine_list_step,
 * list.h) and stop once the output holds KURA_OUT_HIGH_WATER bytes, or
 * LIST_SLICE_KEYS keys were answered in this call, or the walk looked at
 * LIST_TURN_VISITS items of the store in this call, leaving their line
 * unconsumed with session->resume set, exactly as a multi-get pauses; the
 * connection sends what is queued and, on its next turn of the event loop
 * (after the worker's other connections had theirs), calls again, and the
 * walk resumes from the cursor kept in the session (the last key shown,
 * and the batch being collected or handed out).  So a listing of any size
 * costs the connection at most the high-water mark plus one value and
 * one batch (list.h), a turn of it costs the worker about a millisecond,
 * and a client that stops reading stops the walk; one that goes away
 * frees it with its session.  A resumed listing that fails cannot take
 * back what was sent: it replies the error and closes.
 *
 * Order: key order on the B+ tree; on the cache and the hash file a
 * listing with a limit (keys limit=, rget) is in key order too (a pass
 * over the store per 4096 keys, taken over as many turns as it needs),
 * one without (metadump, keys with no limit) in no order.
 *
 * They need the engine and the text session's pause alone, so they live
 * beside the protocol; they are kura's (and memcached's admin) commands,
 * which the server registers (listing_register, proto.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/testhooks.h"
#include "kura/uriencode.h"
#include "proto_int.h"

#define LIST_SORTED_MAX 100000          /* the largest limit answered in key order
                                           on a store without order */

typedef struct list_run {
    text_session *s;
    kura_buf *out;
    int kind;
    uint64_t classes;                   /* metadump: bit c for slab class c */
    uint64_t limit;                     /* 0: none */
    bool answered;                      /* something was formatted in this call */
    uint64_t slice_end;                 /* the count at which this call's slice ends */
    int err;                            /* a get's error (rget) */
} list_run;

enum { LIST_METADUMP, LIST_KEYS, LIST_RGET };

#define LIST_LIMIT 3                    /* emit's stop: the limit was reached */
/* Keys a call lists before it lets the worker's other connections have a
 * turn: a slice of a listing costs them about what a multi-get of this
 * many keys would.  The keys the store was walked for (LIST_TURN_VISITS,
 * proto_int.h) are bounded apart: a call that walks and finds little
 * pauses as soon as one that answers much. */
#define LIST_SLICE_KEYS 512

/* ---- memcached's slab classes, for metadump's cls ------------------------ */

#define SLAB_CLASSES 64                 /* MAX_NUMBER_OF_SLAB_CLASSES */

static unsigned slab_size[SLAB_CLASSES];
static int slab_largest;
static pthread_once_t slab_once = PTHREAD_ONCE_INIT;

/* memcached's slabs_init with its defaults: 48-byte header + 48 (-n),
 * factor 1.25 (-f), 8-byte alignment, up to 512 KiB (half a slab page);
 * the last class holds the rest (chunked items). */
static void slab_init(void)
{
    const double factor = 1.25;
    const unsigned chunk_max = 512 * 1024;
    unsigned size = 48 + 48;
    int i = 0;
    while (++i < SLAB_CLASSES - 1) {
        if (size >= chunk_max / factor)
            break;
        if (size % 8)
            size += 8 - size % 8;
        slab_size[i] = size;
        size = (unsigned)(size * factor);
    }
    slab_largest = i;
    slab_size[i] = chunk_max;
}

/* slabs_clsid: the smallest class that holds size, or the largest. */
static int slab_class(uint64_t size)
{
    pthread_once(&slab_once, slab_init);
    for (int c = 1; c < slab_largest; c++)
        if (size <= slab_size[c])
            return c;
    return slab_largest;
}

/* ---- output ----------------------------------------------------------- */

static int emit_metadump(list_run *r, const kura_list_item *it)
{
    uint64_t size = kura_item_wire_total(it->klen, it->vlen, it->flags);
    int cls = slab_class(size);
    if (!(r->classes & ((uint64_t)1 << cls)))
        return 0;
    bool fetched;
    int64_t la;
    engine_list_marks(r->s->engine, it->key, it->klen, it->cas, &fetched, &la);
    char line[3 * KURA_KEY_MAX + 160];
    size_t n = 4;
    memcpy(line, "key=", 4);
    n += kura_uriencode(it->key, it->klen, line + n, sizeof(line) - n);
    n += (size_t)snprintf(line + n, sizeof(line) - n,
                          " exp=%lld la=%lld cas=%llu fetch=%s cls=%d size=%llu\n",
                          it->exptime ? (long long)it->exptime : -1LL, (long long)la,
                          (unsigned long long)it->cas, fetched ? "yes" : "no", cls,
                          (unsigned long long)size);
    return kura_buf_append(r->out, line, n) ? 0 : KURA_ENOMEM;
}

static int emit_key(list_run *r, const kura_list_item *it)
{
    return KURA_BUF_LIT(r->out, "KEY ") && kura_buf_append(r->out, it->key, it->klen) &&
                   KURA_BUF_LIT(r->out, "\r\n")
               ? 0
               : KURA_ENOMEM;
}

/* A get's callback (key lock held): "VALUE k f n\r\n<data>\r\n". */
static int format_value(void *arg, const kura_item *it)
{
    list_run *r = arg;
    char head[64];
    int h = snprintf(head, sizeof(head), " %u %zu\r\n", it->flags, it->vlen);
    if (!kura_buf_reserve(r->out, 6 + it->klen + (size_t)h + it->vlen + 2))
        return KURA_ENOMEM;
    kura_buf_append(r->out, "VALUE ", 6);
    kura_buf_append(r->out, it->key, it->klen);
    kura_buf_append(r->out, head, (size_t)h);
    kura_buf_append(r->out, it->val, it->vlen);
    kura_buf_append(r->out, "\r\n", 2);
    return 0;
}

/* rget: the value as it is now (a key removed since the walk saw it is
 * left out and not counted).  The read is not an access (as mg u). */
static int emit_value(list_run *r, const kura_list_item *it)
{
    engine_get_opts go = { .no_bump = true };
    int rc = engine_get(r->s->engine, r->s->stats, it->key, it->klen, &go, format_value, r,
                        NULL);
    if (rc == KURA_OK)
        return 0;
    if (rc > 0)
        return 1;                       /* gone: taken, not shown */
    return rc;
}

static int list_emit(void *arg, const kura_list_item *it)
{
    list_run *r = arg;
    kura_list_cursor *c = &r->s->list;
    if (r->limit && c->count >= r->limit)
        return LIST_LIMIT;
    if (!KURA_TEST_SWITCH(list_inline) &&
        (c->count >= r->slice_end || (r->answered && kura_buf_size(r->out) >= KURA_OUT_HIGH_WATER)))
        return LIST_STOP;               /* the rest on the next turn, once the output
                                           has drained */
    int rc;
    switch (r->kind) {
    case LIST_METADUMP: rc = emit_metadump(r, it); break;
    case LIST_KEYS:     rc = emit_key(r, it); break;
    default:            rc = emit_value(r, it); break;
    }
    if (rc < 0)
        return rc;
    if (rc == 0) {
        c->count++;
        r->answered = true;
    }
    return 0;
}

/* Runs (or resumes) the listing the line asks for, until it ends, the
 * output is full (paused: s->resume set) or it fails. */
static void list_run_walk(text_session *s, kura_buf *out, list_run *r,
                          const kura_list_spec *spec)
{
    bool resumed = s->resume != 0;
    size_t mark = out->len;
    s->resume = 0;
    if (!resumed) {
        session_pause_end(s);
        engine_list_begin(&s->list);
        if (!walk_admit(s)) {
            text_reply(s, out, WALKS_BUSY_REPLY);
            return;
        }
        KURA_STAT_INC(s->stats, listing_runs);
    }
    int rc;
    uint64_t visits = s->list.visits;
    r->slice_end = s->list.count + LIST_SLICE_KEYS;
    do {
        rc = engine_list_step(s->engine, spec, &s->list, list_emit, r);
    } while (rc == KURA_OK &&
             (KURA_TEST_SWITCH(list_inline) || s->list.visits - visits < LIST_TURN_VISITS));
    if (rc == KURA_OK)
        rc = LIST_STOP;                 /* this call's share is done: the rest later */
    if (rc == LIST_STOP) {
        s->resume = 1;                  /* the same line again, later */
        return;
    }
    engine_list_end(&s->list);
    walk_release(s);
    if (rc < 0) {
        if (!resumed)
            kura_buf_rewind(out, mark); /* nothing of it has left: no half answer */
        text_server_error(s, out, rc);
        if (resumed)
            s->close = true;            /* part of the reply has left */
        return;
    }
    if (!KURA_BUF_LIT(out, "END\r\n"))
        s->close = true;
}

/* ---- lru_crawler metadump --------------------------------------------- */

static bool tok_eq(const text_token *t, const char *s)
{
    size_t n = strlen(s);
    return t->length == n && memcmp(t->value, s, n) == 0;
}

/* "all", "hash", or class ids separated by commas (empty pieces skipped,
 * as memcached's strtok does).  0: parsed; 1: BADCLASS; 2: no class. */
static int parse_classes(const text_token *t, uint64_t *classes)
{
    if (tok_eq(t, "all") || tok_eq(t, "hash")) {
        *classes = ~(uint64_t)0;
        return 0;
    }
    *classes = 0;
    const char *p = t->value, *end = t->value + t->length;
    while (p < end) {
        const char *q = memchr(p, ',', (size_t)(end - p));
        if (!q)
            q = end;
        if (q > p) {
            text_token piece = { p, (size_t)(q - p) };
            uint32_t id;
            if (!text_safe_u32(&piece, &id) || id < 1 || id >= SLAB_CLASSES)
                return 1;
            *classes |= (uint64_t)1 << id;
        }
        p = q + 1;
    }
    return *classes ? 0 : 2;
}

static void cmd_lru_crawler(void *ctx, kura_session *s, text_token *tok, int ntok,
                            kura_buf *out)
{
    (void)ctx;
    if (ntok != 4 || !tok_eq(&tok[1], "metadump")) {
        KURA_STAT_INC(s->stats, unknown_commands);
        text_reply(s, out, "ERROR");
        return;
    }
    list_run r = { .s = s, .out = out, .kind = LIST_METADUMP };
    switch (parse_classes(&tok[2], &r.classes)) {
    case 1:
        text_reply(s, out, "BADCLASS invalid class id");
        return;
    case 2:
        text_reply(s, out, "NOTSTARTED no items to crawl");
        return;
    }
    kura_list_spec spec = { 0 };
    list_run_walk(s, out, &r, &spec);
}

/* ---- keys --------------------------------------------------------------- */

static bool key_ok(const text_token *t)
{
    return t->length >= 1 && proto_key_ok(t->length, PROTO_MC_KEY_MAX);
}

/* "name=value": the value's token, if the token is that option. */
static bool option(const text_token *t, const char *name, text_token *val)
{
    size_t n = strlen(name);
    if (t->length <= n || memcmp(t->value, name, n) != 0 || t->value[n] != '=')
        return false;
    val->value = t->value + n + 1;
    val->length = t->length - n - 1;
    return true;
}

static void cmd_keys(void *ctx, kura_session *s, text_token *tok, int ntok,
                     kura_buf *out)
{
    (void)ctx;
    kura_list_spec spec = { 0 };
    list_run r = { .s = s, .out = out, .kind = LIST_KEYS };
    bool seen_prefix = false, seen_limit = false;
    for (int i = 1; i < ntok - 1; i++) {
        text_token v;
        bool ok = false;
        if (option(&tok[i], "prefix", &v)) {
            ok = !seen_prefix && key_ok(&v);
            seen_prefix = true;
            spec.prefix = v.value;
            spec.plen = v.length;
        } else if (option(&tok[i], "from", &v) || option(&tok[i], "after", &v)) {
            ok = !spec.start && key_ok(&v);
            spec.start = v.value;
            spec.slen = v.length;
            spec.start_open = tok[i].value[0] == 'a';
        } else if (option(&tok[i], "to", &v) || option(&tok[i], "before", &v)) {
            ok = !spec.end && key_ok(&v);
            spec.end = v.value;
            spec.elen = v.length;
            spec.end_open = tok[i].value[0] == 'b';
        } else if (option(&tok[i], "limit", &v)) {
            uint64_t n = 0;
            ok = !seen_limit && v.value[0] >= '0' && v.value[0] <= '9' &&
                 text_safe_u64(&v, &n) && n >= 1;
            seen_limit = true;
            r.limit = n;
        }
        if (!ok) {
            text_client_error(s, out, "CLIENT_ERROR bad command line format");
            return;
        }
    }
    if (tok[ntok - 1].value) {          /* options past the tokenizer's last */
        text_client_error(s, out, "CLIENT_ERROR bad command line format");
        return;
    }
    spec.sorted = r.limit && r.limit <= LIST_SORTED_MAX;
    list_run_walk(s, out, &r, &spec);
}

/* ---- rget ---------------------------------------------------------------- */

static void cmd_rget(void *ctx, kura_session *s, text_token *tok, int ntok,
                     kura_buf *out)
{
    (void)ctx;
    (void)ntok;                         /* the table asks for exactly 7 */
    uint64_t max;
    bool lo = tok_eq(&tok[3], "1"), ro = tok_eq(&tok[4], "1");
    if (!key_ok(&tok[1]) || !key_ok(&tok[2]) || (!lo && !tok_eq(&tok[3], "0")) ||
        (!ro && !tok_eq(&tok[4], "0")) || !text_safe_u64(&tok[5], &max) || max < 1 ||
        max > LIST_SORTED_MAX || tok[5].value[0] < '0' || tok[5].value[0] > '9') {
        text_client_error(s, out, "CLIENT_ERROR bad command line format");
        return;
    }
    kura_list_spec spec = {
        .start = tok[1].value, .slen = tok[1].length, .start_open = lo,
        .end = tok[2].value, .elen = tok[2].length, .end_open = ro,
        .sorted = true,
    };
    list_run r = { .s = s, .out = out, .kind = LIST_RGET, .limit = max };
    list_run_walk(s, out, &r, &spec);
}

int listing_register(kura_cmdtab *t)
{
#ifdef KURA_TEST_HOOKS
    /* The integration tests' negative check (testhooks.h; test builds
     * only): listings and digest run whole in one call, as they did
     * before they were sliced. */
    if (getenv("KURA_TEST_LIST_INLINE"))
        kura_test.list_inline = true;
#endif
    static const kura_command cmds[] = {
        { "lru_crawler", cmd_lru_crawler, NULL, -1, -1 },
        { "keys", cmd_keys, NULL, 2, -1 },
        { "rget", cmd_rget, NULL, 7, 7 },
    };
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        int rc = kura_cmdtab_add(t, &cmds[i]);
        if (rc != KURA_OK)
            return rc;
    }
    return KURA_OK;
}

/*
 * digest.c - "digest": what a master and its replica hold, compared
 * without moving the data (kura's own command; docs/replication.md).
 *
 *   digest [N]        N buckets (default 256, at most 65536) by the hash
 *                     of the key; a line per bucket:
 *                         DIGEST <bucket> <items> <hash>
 *                     then END.  <hash> (16 hex digits) sums, over the
 *                     bucket's live items, a hash of the key, value, flags,
 *                     exptime and cas: equal on two servers when they hold
 *                     the same items (a replica keeps its master's cas).
 *   digest N B        the keys of bucket B, one line each:
 *                         KEY <key> <hash>
 *                     then END: the differing keys are named by comparing
 *                     these lines for the buckets whose DIGEST differed.
 *
 * The sum makes the digest independent of the order in which the store
 * walks its items.  It walks every live item once, on the connection's
 * worker thread, in bounded steps (engine_walk_step: a part of the cache
 * or the hash file, or a run of the tree's keys) of about LIST_TURN_VISITS
 * items per call: the line stays unconsumed with s->resume set, the sums
 * (or the bucket's keys) wait in the session, and the connection's next
 * turn of the event loop, after the worker's other connections had
 * theirs, carries on.  Nothing is sent before the walk is complete, so
 * a failure is a plain SERVER_ERROR.  The walk is fuzzy as a listing is:
 * a change made while it runs may or may not be counted.  Pick N so that a bucket's keys are few enough to list (N = items / 1000):
 * a list past 1 MiB is answered "SERVER_ERROR bucket too large: ask for
 * more buckets" instead, so the reply stays bounded.
 *
 * It needs the engine alone, so it lives beside the protocol, but it is
 * not memcached's: the server registers it (digest_register, proto.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/testhooks.h"
#include "proto_int.h"

#define DIGEST_DEFAULT 256
#define DIGEST_MAX 65536

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static uint32_t bucket_of(const char *key, size_t klen, uint32_t n)
{
    return (uint32_t)(mix(fnv(1469598103934665603ull, key, klen)) % n);
}

static uint64_t item_hash(const kura_item *it)
{
    uint64_t h = fnv(1469598103934665603ull, it->key, it->klen);
    h = fnv(h ^ 0x1, it->val, it->vlen);
    unsigned char f[20];
    memcpy(f, &it->flags, 4);
    memcpy(f + 4, &it->exptime, 8);
    memcpy(f + 12, &it->cas, 8);
    return mix(fnv(h, f, sizeof(f)));
}

/* A bucket's key list stops here: the answer is then an error asking for
 * more buckets, so no request makes the reply grow without bound. */
#define DIGEST_LIST_MAX KURA_OUT_HIGH_WATER
#define DIGEST_TOO_BIG 1                /* digest_item's stop: the list passed it */

/* A digest under way, kept in the session between calls. */
typedef struct digest_walk {
    uint32_t n;
    int64_t only;                       /* a bucket whose keys to list, or -1 */
    uint64_t *sum, *count;
    kura_buf *out;                      /* the bucket's key lines: &list */
    size_t mark;                        /* out's length before the reply */
    uint64_t seen;                      /* items walked */
    kura_walk_cursor cur;
    kura_buf list;
} digest_walk;

static void digest_free(void *arg)
{
    digest_walk *w = arg;
    free(w->sum);
    free(w->count);
    kura_buf_free(&w->list);
    free(w);
}

static int digest_item(void *arg, const kura_item *it)
{
    digest_walk *w = arg;
    w->seen++;
    uint32_t b = bucket_of(it->key, it->klen, w->n);
    uint64_t h = item_hash(it);
    if (w->only >= 0) {
        if (b == (uint64_t)w->only) {
            char tail[24];
            int t = snprintf(tail, sizeof(tail), " %016" PRIx64 "\r\n", h);
            if (!KURA_BUF_LIT(w->out, "KEY ") || !kura_buf_append(w->out, it->key, it->klen) ||
                !kura_buf_append(w->out, tail, (size_t)t))
                return KURA_ENOMEM;
            if (w->out->len - w->mark > DIGEST_LIST_MAX)
                return DIGEST_TOO_BIG;
        }
        return 0;
    }
    w->sum[b] += h;
    w->count[b]++;
    return 0;
}

/* The digest the line asks for, ready to walk: NULL after a reply (bad
 * arguments, no memory). */
static digest_walk *digest_start(text_token *tok, int ntok, kura_buf *out)
{
    uint32_t n = DIGEST_DEFAULT;
    int64_t only = -1;
    char *end;
    if (ntok > 2) {
        unsigned long v = strtoul(tok[1].value, &end, 10);
        if (end != tok[1].value + tok[1].length || v < 1 || v > DIGEST_MAX) {
            KURA_BUF_LIT(out, "CLIENT_ERROR bad command line format\r\n");
            return NULL;
        }
        n = (uint32_t)v;
    }
    if (ntok > 3) {
        unsigned long b = strtoul(tok[2].value, &end, 10);
        if (end != tok[2].value + tok[2].length || b >= n) {
            KURA_BUF_LIT(out, "CLIENT_ERROR bad command line format\r\n");
            return NULL;
        }
        only = (int64_t)b;
    }
    digest_walk *w = calloc(1, sizeof(*w));
    if (w) {
        w->n = n;
        w->only = only;
        w->out = &w->list;
        if (only < 0 && (!(w->sum = calloc(n, sizeof(uint64_t))) ||
                         !(w->count = calloc(n, sizeof(uint64_t))))) {
            digest_free(w);
            w = NULL;
        }
    }
    if (!w) {
        char line[96];
        int l = snprintf(line, sizeof(line), "SERVER_ERROR %s\r\n", kura_strerror(KURA_ENOMEM));
        kura_buf_append(out, line, (size_t)l);
    }
    return w;
}

/* tok[1], tok[2]: optional N and B; ntok counts the terminal token.  A
 * call walks about LIST_TURN_VISITS items, then pauses (s->resume) until
 * the walk is complete; the reply is written at the end. */
static void cmd_digest(void *ctx, kura_session *s, text_token *tok, int ntok,
                       kura_buf *out)
{
    (void)ctx;
    digest_walk *w = s->resume ? s->paused : NULL;
    s->resume = 0;
    if (!w) {
        session_pause_end(s);
        if (!(w = digest_start(tok, ntok, out)))
            return;
        if (!walk_admit(s)) {
            digest_free(w);
            KURA_BUF_LIT(out, WALKS_BUSY_REPLY "\r\n");
            return;
        }
        KURA_STAT_INC(s->stats, digest_runs);
        s->paused = w;
        s->paused_free = digest_free;
    }
    uint64_t start = w->seen;
    int rc = KURA_OK;
    while (rc == KURA_OK && !w->cur.done) {
        uint64_t used = w->seen - start;
        if (used >= LIST_TURN_VISITS && !KURA_TEST_SWITCH(list_inline)) {
            s->resume = 1;              /* the same line again, next turn */
            return;
        }
        rc = engine_walk_step(s->engine, &w->cur, LIST_TURN_VISITS - used, digest_item, w);
    }
    if (rc == KURA_OK && w->only < 0) {
        for (uint32_t b = 0; b < w->n; b++) {
            char line[80];
            int l = snprintf(line, sizeof(line), "DIGEST %u %" PRIu64 " %016" PRIx64 "\r\n", b,
                             w->count[b], w->sum[b]);
            kura_buf_append(out, line, (size_t)l);
        }
    } else if (rc == KURA_OK && w->list.len) {
        kura_buf_append(out, w->list.data, w->list.len);
    }
    session_pause_end(s);
    walk_release(s);
    if (rc == DIGEST_TOO_BIG) {
        KURA_BUF_LIT(out, "SERVER_ERROR bucket too large: ask for more buckets\r\n");
        return;
    }
    if (rc != KURA_OK) {
        char line[96];
        int l = snprintf(line, sizeof(line), "SERVER_ERROR %s\r\n", kura_strerror(rc));
        kura_buf_append(out, line, (size_t)l);
        return;
    }
    KURA_BUF_LIT(out, "END\r\n");
}

int digest_register(kura_cmdtab *t)
{
    const kura_command c = { "digest", cmd_digest, NULL, 2, 4 };
    return kura_cmdtab_add(t, &c);
}

/*
 * kt_bin.c - Kyoto Tycoon's binary protocol, on the -kt listener beside
 * HTTP: a request whose first byte is 0 or 0x80 and above.
 *
 *   0xB8 set_bulk     [flags:4][rnum:4] then rnum x [db:2][ksiz:4][vsiz:4][xt:8][key][value]
 *                     reply [0xB8][stored:4]
 *   0xB9 remove_bulk  [flags:4][rnum:4] then rnum x [db:2][ksiz:4][key]
 *                     reply [0xB9][removed:4]
 *   0xBA get_bulk     as remove_bulk; reply [0xBA][hits:4] then per hit
 *                     [db:2][ksiz:4][vsiz:4][xt:8][key][value]
 *   0xB1 replication  [flags:4][ts:8][sid:2]: [0xBF], closed
 *   0xB4 play_script  [flags:4][nsiz:4][rnum:4][name] then rnum x [ksiz:4][vsiz:4][key][value]
 *                     read whole and answered [0xBF], as ktserver without scripting
 * Numbers are big-endian; flags bit 0 (no reply) silences set_bulk,
 * remove_bulk and play_script, as ktserver; an error is [0xBF].  A record
 * for a database other than 0 is passed over (kura serves one).  xt is a
 * KT xt (seconds from now, or absolute when negative); get_bulk's is the
 * absolute expiry, 2^40 - 1 for none (Kyoto Tycoon's XTMAX).
 * Replication (0xB1) is kura's own (-mhost): its header (flags:4 ts:8
 * sid:2) is read and answered [0xBF], and the connection closed, as
 * ktserver answers without an update log.  Another first byte closes the
 * connection without a reply, as ktserver on an unknown one.
 * A key or value past KT_DATA_MAX is answered [0xBF] and closes, as
 * ktserver; a request past KT_BIN_MAX closes (kura buffers a request
 * whole before it runs it).
 */
#include "kura/thread.h"
#include "kt_int.h"

#define KT_XTMAX ((((int64_t)1) << 40) - 1)

/* Bytes of a record's fixed part, and how many lengths follow (1 or 2). */
static void record_shape(uint8_t magic, size_t *fixed, int *lens)
{
    switch (magic) {
    case KT_BIN_SET_BULK: *fixed = 18; *lens = 2; break;
    case KT_BIN_SCRIPT: *fixed = 8; *lens = 2; break;
    default: *fixed = 6; *lens = 1; break;
    }
}

int kt_bin_parse(const char *buf, size_t len, kt_bin_req *req, size_t *need, size_t scan[2])
{
    memset(req, 0, sizeof(*req));
    req->magic = (uint8_t)buf[0];
    if (req->magic == KT_BIN_REPL) {     /* flags:4 ts:8 sid:2, answered as ktserver without
                                            an update log */
        if (len < 15) {
            *need = 15;
            return KT_HTTP_NEED;
        }
        req->len = 15;
        return KT_BIN_DONE;
    }
    size_t head = req->magic == KT_BIN_SCRIPT ? 13 : 9;
    if (req->magic != KT_BIN_SET_BULK && req->magic != KT_BIN_REMOVE_BULK &&
        req->magic != KT_BIN_GET_BULK && req->magic != KT_BIN_SCRIPT)
        return KT_BIN_CLOSE;
    if (len < head) {
        *need = head;
        return KT_HTTP_NEED;
    }
    req->flags = get_be32(buf + 1);
    size_t nsiz = 0;
    if (req->magic == KT_BIN_SCRIPT) {
        nsiz = get_be32(buf + 5);
        req->rnum = get_be32(buf + 9);
        if (nsiz > KT_DATA_MAX) {
            req->bad = true;
            req->len = len;
            return KT_BIN_DONE;
        }
        req->name = (kt_span){ buf + head, nsiz };
    } else {
        req->rnum = get_be32(buf + 5);
    }
    req->recs = head + nsiz;
    size_t fixed;
    int lens;
    record_shape(req->magic, &fixed, &lens);
    size_t off = scan[0] ? scan[0] : req->recs;
    for (uint32_t i = (uint32_t)scan[1]; i < req->rnum; i++) {
        scan[0] = off;
        scan[1] = i;
        if (off + fixed > KT_BIN_MAX)
            return KT_BIN_CLOSE;
        if (len < off + fixed) {
            *need = off + fixed;
            return KT_HTTP_NEED;
        }
        const char *p = buf + off + (req->magic == KT_BIN_SCRIPT ? 0 : 2);
        uint64_t k = get_be32(p), v = lens == 2 ? get_be32(p + 4) : 0;
        if (k > KT_DATA_MAX || v > KT_DATA_MAX) {
            req->bad = true;
            req->len = len;
            return KT_BIN_DONE;
        }
        if (off + fixed + k + v > KT_BIN_MAX)
            return KT_BIN_CLOSE;
        if (len < off + fixed + k + v) {
            *need = off + fixed + (size_t)(k + v);
            return KT_HTTP_NEED;
        }
        off += fixed + (size_t)(k + v);
    }
    if (len < off) {
        *need = off;
        return KT_HTTP_NEED;
    }
    req->len = off;
    return KT_BIN_DONE;
}

void kt_bin_record(const char *buf, const kt_bin_req *req, size_t *off, uint16_t *db,
                   kt_span *key, kt_span *val, int64_t *xt)
{
    const char *p = buf + *off;
    *db = get_be16(p);
    uint32_t k = get_be32(p + 2);
    if (req->magic == KT_BIN_SET_BULK) {
        uint32_t v = get_be32(p + 6);
        *xt = (int64_t)get_be64(p + 10);
        *key = (kt_span){ p + 18, k };
        *val = (kt_span){ p + 18 + k, v };
        *off += 18 + (size_t)k + v;
    } else {
        *key = (kt_span){ p + 6, k };
        *val = (kt_span){ NULL, 0 };
        *off += 6 + (size_t)k;
    }
}

/* ---- running them ------------------------------------------------------------------------- */

static bool put_head(kura_buf *out, uint8_t magic, uint32_t n)
{
    unsigned char h[5] = { magic };
    put_be32(h + 1, n);
    return kura_buf_append(out, h, 5);
}

typedef struct bin_get {
    kura_buf *out;
    kt_span key;
} bin_get;

static int emit_rec(void *arg, const kura_item *it)
{
    bin_get *g = arg;
    if (!kura_buf_reserve(g->out, 18 + g->key.n + it->vlen))
        return KURA_ENOMEM;
    unsigned char h[18];
    put_be16(h, 0);
    put_be32(h + 2, (uint32_t)g->key.n);
    put_be32(h + 6, (uint32_t)it->vlen);
    put_be64(h + 10, (uint64_t)(it->exptime ? it->exptime : KT_XTMAX));
    kura_buf_append(g->out, h, 18);
    kura_buf_append(g->out, g->key.p, g->key.n);
    kura_buf_append(g->out, it->val, it->vlen);
    return 0;
}

/* One record of set_bulk or remove_bulk: 1 done, 0 not (a remove's
 * miss), -1 an error. */
static int change_one(kura_session *s, uint8_t magic, kt_span k, kt_span v, int64_t xt)
{
    if (!proto_key_ok(k.n, KT_KEY_MAX(s)))
        return magic == KT_BIN_REMOVE_BULK ? 0 : -1;
    s->dirty = true;
    if (magic == KT_BIN_REMOVE_BULK) {
        int rc = engine_delete(s->engine, s->stats, k.p, k.n, NULL);
        return rc == KURA_OK ? 1 : rc == KURA_NOTFOUND ? 0 : -1;
    }
    if (!engine_item_fits(s->engine, k.n, v.n, 0))
        return -1;
    kura_item it = { .key = k.p, .klen = k.n, .val = v.p, .vlen = v.n,
                     .exptime = kt_exptime(s->engine, xt) };
    KURA_STAT_INC(s->stats, cmd_set);
    return engine_store(s->engine, s->stats, KURA_CMD_SET, &it, NULL, NULL) == KURA_STORED ? 1
                                                                                         : -1;
}

/* Runs a parsed request; false on an error (answered [0xBF]). */
static bool run(kura_session *s, const char *in, const kt_bin_req *req, kura_buf *out)
{
    size_t off = req->recs, head = out->len;
    uint32_t hits = 0;
    if (req->magic == KT_BIN_GET_BULK && !put_head(out, KT_BIN_GET_BULK, 0))
        return false;
    for (uint32_t i = 0; i < req->rnum; i++) {
        uint16_t db;
        kt_span k, v;
        int64_t xt = INT64_MAX;
        kt_bin_record(in, req, &off, &db, &k, &v, &xt);
        if (db != 0)
            continue;
        if (req->magic != KT_BIN_GET_BULK) {
            int rc = change_one(s, req->magic, k, v, xt);
            if (rc < 0)
                return false;
            hits += (uint32_t)rc;
            continue;
        }
        if (!proto_key_ok(k.n, KT_KEY_MAX(s)) || out->len - head >= KT_OUT_MAX)
            continue;
        bin_get g = { out, k };
        int rc = engine_get(s->engine, s->stats, k.p, k.n, NULL, emit_rec, &g, NULL);
        if (rc < 0)
            return false;
        hits += rc == KURA_OK;
    }
    if (req->magic == KT_BIN_GET_BULK)
        put_be32((unsigned char *)out->data + head + 1, hits);
    else if (!(req->flags & KT_BIN_NOREPLY) && !put_head(out, req->magic, hits))
        s->close = true;
    return true;
}

size_t kt_bin(kura_session *s, kt_state *st, const char *in, size_t avail, kura_buf *out)
{
    kt_bin_req req;
    size_t need = 0;
    int rc = kt_bin_parse(in, avail, &req, &need, st->bin_scan);
    if (rc == KT_HTTP_NEED) {
        (void)need;                     /* s->need stays 0: called at every read, so the
                                           deadline is checked (kt.c) */
        if (kt_late(s, st)) {
            s->close = true;
            return avail;
        }
        return 0;
    }
    static const unsigned char err = KT_BIN_ERROR;
    bool noreply = (req.flags & KT_BIN_NOREPLY) && req.magic != KT_BIN_GET_BULK;
    if (rc == KT_BIN_CLOSE || req.bad) {
        if (req.bad && !noreply)
            kura_buf_append(out, &err, 1);
        KURA_STAT_INC(s->stats, protocol_closes);
        s->close = true;
        return avail;
    }
    size_t mark = out->len;
    if (req.magic == KT_BIN_REPL) {
        kura_buf_append(out, &err, 1);  /* no replication here: kura's replicas use -mhost */
        s->close = true;
    } else if (req.magic == KT_BIN_SCRIPT) {
        if (!noreply)
            kura_buf_append(out, &err, 1);
    } else if (!run(s, in, &req, out)) {
        out->len = mark;                /* ktserver answers an error and ends the session */
        if (!noreply)
            kura_buf_append(out, &err, 1);
        s->close = true;
    }
    return req.len;
}

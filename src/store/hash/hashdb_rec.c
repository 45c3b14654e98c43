/*
 * hashdb_rec.c - the hash file's records: their codec, and the framing the
 * log (src/log/, include/kura/seglog.h) calls back for.
 *
 * The log appends opaque records and knows nothing of this format; the
 * format (docs/formats.md: versions 1 to 4 read, version 5 written) stays
 * byte-identical to what it was when the log lived inside the hash file,
 * which is why the framing is a callback and not the log's own:
 *   - hd_append builds the record's body (key, value) as an iovec and lets
 *     the log call frame_head under its append lock with the next record
 *     number, which becomes the record's sequence number (so sequence
 *     numbers increase in log order, as before); the header and its CRC
 *     are encoded there, and max_cas_seen follows under the same lock;
 *   - hd_rec_check tells the log's scanner whether bytes at an offset are
 *     a valid record (header sane, CRC right) and how long it is.
 */
#include <string.h>
#include <sys/uio.h>

#include "kura/codec.h"
#include "kura/crc32c.h"
#include "hashdb_int.h"

/* Version 4 (docs/formats.md has it byte by byte): crc, a descriptor
 * byte, klen (version 5: 0 and a varint of it for a key of 0 or more than
 * 255 bytes), then varints vlen, [flags], [exptime (zigzag)], seq, [cas -
 * seq (zigzag)], and for a compressed PUT the codec and the raw length.
 * The descriptor says which of the optional fields are there: flags and
 * exptime are 0 in most items and then cost nothing, and the cas, handed
 * out by a counter that runs beside the sequence numbers, costs a byte as
 * its distance from the record's own sequence number (none when it is 0
 * or equal to it).  Under a 10M-item load of 150-byte values, 13 bytes
 * with flags 0 (versions 2 and 3: 20), 18 with kura-bench's random 32-bit
 * flags (24). */
size_t hd_rec_encode(unsigned char *h, const hd_rec *r)
{
    unsigned d = HD_V4_MARK | (unsigned)(r->type - 1);
    int64_t dcas = (int64_t)(r->cas - r->seq);     /* modulo 2^64: any cas */
    if (r->flags)
        d |= HD_V4_FLAGS;
    if (r->exptime)
        d |= HD_V4_EXPTIME;
    if (r->cas)
        d |= dcas ? HD_V4_CAS_DELTA : HD_V4_CAS_SEQ;
    put32(h, 0);
    h[4] = (unsigned char)d;
    unsigned char *p = h + 6;
    if (r->type != HD_REC_STATE && (r->klen == 0 || r->klen > 255)) {
        h[5] = HD_V5_KLONG;
        p = put_varint(p, r->klen);
    } else {
        h[5] = (unsigned char)r->klen;
    }
    p = put_varint(p, r->vlen);
    if (r->flags)
        p = put_varint(p, r->flags);
    if (r->exptime)
        p = put_varint(p, zigzag(r->exptime));
    p = put_varint(p, r->seq);
    if ((d & HD_V4_CAS) == HD_V4_CAS_DELTA)
        p = put_varint(p, zigzag(dcas));
    if (r->type == HD_REC_ZPUT) {
        *p++ = r->codec;
        p = put_varint(p, r->rawlen);
    }
    return (size_t)(p - h);
}

/* crc32c over key ++ value, continued over the header after the crc field
 * (so the body's part can be computed before the locks). */
uint32_t hd_rec_crc(const unsigned char *h, size_t hlen, uint32_t body_crc)
{
    return crc32c_update(body_crc, h + 4, hlen - 4);
}

static int decode_v1(const unsigned char *h, size_t avail, hd_rec *r)
{
    if (avail < HD_REC_HDR_V1 || h[4] != (HD_REC_MAGIC_V1 & 0xff) ||
        h[5] != (HD_REC_MAGIC_V1 >> 8))
        return -1;
    r->type = h[6];
    r->klen = h[7];
    r->hlen = HD_REC_HDR_V1;
    r->codec = 0;
    r->vlen = r->rawlen = get32(h + 8);
    r->flags = get32(h + 12);
    r->exptime = (int64_t)get64(h + 16);
    r->cas = get64(h + 24);
    r->seq = get64(h + 32);
    return 0;
}

/* The end of a version 2 to 4 header, once its varints are read: for a
 * compressed PUT (from version 3 on) the codec and the raw length, which
 * must be a known codec and a length the stored bytes could come from,
 * else it is no record; then the fields into r.  0, or -1. */
static int decode_finish(const unsigned char *h, const unsigned char *p,
                         const unsigned char *end, uint32_t version, uint64_t vlen,
                         uint64_t flags, uint64_t exp, hd_rec *r)
{
    uint64_t raw = vlen;
    r->codec = 0;
    if (r->type == HD_REC_ZPUT) {
        if (version < 3 || p >= end || *p == KURA_CODEC_NONE || *p >= KURA_CODEC_COUNT)
            return -1;
        r->codec = *p++;
        if (!(p = get_varint(p, end, &raw)) || raw > UINT32_MAX || raw <= vlen)
            return -1;
    }
    r->rawlen = (uint32_t)raw;
    r->hlen = (uint8_t)(p - h);
    r->vlen = (uint32_t)vlen;
    r->flags = (uint32_t)flags;
    r->exptime = unzigzag(exp);
    return 0;
}

/* Versions 2 and 3 (3 adds HD_REC_ZPUT). */
static int decode_v2(const unsigned char *h, size_t avail, uint32_t version, hd_rec *r)
{
    const unsigned char *end = h + (avail < HD_REC_HDR_MAX ? avail : HD_REC_HDR_MAX), *p;
    uint64_t vlen, flags, exp;
    if (avail < 13 || h[4] != (HD_REC_MAGIC & 0xff) || h[5] != (HD_REC_MAGIC >> 8) ||
        !(p = get_varint(h + 8, end, &vlen)) || !(p = get_varint(p, end, &flags)) ||
        !(p = get_varint(p, end, &exp)) || !(p = get_varint(p, end, &r->cas)) ||
        !(p = get_varint(p, end, &r->seq)) || vlen > UINT32_MAX || flags > UINT32_MAX)
        return -1;
    r->type = h[6];
    r->klen = h[7];
    return decode_finish(h, p, end, version, vlen, flags, exp, r);
}

/* Version 4.  Only what hd_rec_encode writes is a record: an optional
 * field present holds no 0, a cas delta is not 0, a cas of 0 has its own
 * mode; so that fewer stray bytes pass for a header. */
static int decode_v4(const unsigned char *h, size_t avail, uint32_t version, hd_rec *r)
{
    const unsigned char *end = h + (avail < HD_REC_HDR_MAX ? avail : HD_REC_HDR_MAX), *p;
    uint64_t vlen, flags = 0, exp = 0, dcas = 0;
    unsigned d = h[4];
    if ((d & HD_V4_MARK_MASK) != HD_V4_MARK || (d & HD_V4_CAS) == HD_V4_CAS_BAD)
        return -1;
    r->type = (uint8_t)((d & HD_V4_TYPE) + 1);
    r->klen = h[5];
    p = h + 6;
    if (version >= 5 && r->type != HD_REC_STATE && h[5] == HD_V5_KLONG) {
        uint64_t kl;
        if (!(p = get_varint(p, end, &kl)) || kl > KURA_KEY_MAX || (kl && kl < 256))
            return -1;                  /* only what hd_rec_encode writes */
        r->klen = (uint16_t)kl;
    }
    if (!(p = get_varint(p, end, &vlen)) || vlen > UINT32_MAX)
        return -1;
    if ((d & HD_V4_FLAGS) && (!(p = get_varint(p, end, &flags)) || !flags || flags > UINT32_MAX))
        return -1;
    if ((d & HD_V4_EXPTIME) && (!(p = get_varint(p, end, &exp)) || !exp))
        return -1;
    if (!(p = get_varint(p, end, &r->seq)))
        return -1;
    switch (d & HD_V4_CAS) {
    case HD_V4_CAS_ZERO: r->cas = 0; break;
    case HD_V4_CAS_SEQ: r->cas = r->seq; break;
    default:
        if (!(p = get_varint(p, end, &dcas)) || !dcas)
            return -1;
        r->cas = r->seq + (uint64_t)unzigzag(dcas);
    }
    if (r->cas == 0 && (d & HD_V4_CAS) != HD_V4_CAS_ZERO)
        return -1;
    return decode_finish(h, p, end, version, vlen, flags, exp, r);
}

int hd_rec_decode(const unsigned char *h, size_t avail, uint32_t version, hd_rec *r)
{
    if (avail < 8)
        return -1;
    r->crc = get32(h);
    int bad;
    if (version == 1)
        bad = decode_v1(h, avail, r);
    else if (version < 4)
        bad = decode_v2(h, avail, version, r);
    else
        bad = decode_v4(h, avail, version, r);
    if (bad)
        return -1;
    switch (r->type) {
    case HD_REC_PUT:
    case HD_REC_ZPUT: return r->klen || version >= 5 ? 0 : -1;   /* 5: the empty key */
    case HD_REC_DEL: return (r->klen || version >= 5) && r->vlen == 0 ? 0 : -1;
    case HD_REC_STATE: return r->klen == 0 && (r->vlen == 24 || r->vlen == 32) ? 0 : -1;
    }
    return -1;
}

/* What frame_head needs to encode one record's header. */
typedef struct hd_frame {
    hashdb *db;
    hd_rec r;
    uint32_t body_crc;
    uint64_t seq;               /* 0: take the log's record number */
} hd_frame;

/* The append callback (sl_frame_fn), run under the log's append lock: the
 * sequence number is taken there, so it follows the log's order.
 * max_cas_seen moves here too, under the lock a checkpoint reads it with;
 * unlike before the split it moves even if the write then fails, which
 * only makes it more conservative (the cas was handed out either way). */
static size_t frame_head(void *arg, unsigned char *h, uint64_t recno)
{
    hd_frame *f = arg;
    f->r.seq = f->seq ? f->seq : recno;
    size_t hlen = hd_rec_encode(h, &f->r);
    put32(h, hd_rec_crc(h, hlen, f->body_crc));
    if (hd_rec_is_put(f->r.type) && f->r.cas > f->db->max_cas_seen)
        f->db->max_cas_seen = f->r.cas;
    return hlen;
}

int hd_append(hashdb *db, int type, const char *key, size_t klen,
              const void *v0, size_t l0, const void *v1, size_t l1,
              uint32_t body_crc, uint32_t flags, int64_t exptime, uint64_t cas,
              uint64_t seq, const hd_zval *z, hd_loc *out)
{
    unsigned char h[HD_REC_HDR_MAX];
    struct iovec iov[4];
    int n = 0;
    hd_frame f = { .db = db, .body_crc = body_crc, .seq = seq,
                   .r = { .type = (uint8_t)type, .klen = (uint16_t)klen,
                          .vlen = (uint32_t)(l0 + l1), .rawlen = (uint32_t)(l0 + l1),
                          .flags = flags, .exptime = exptime, .cas = cas } };
    if (z && z->codec) {
        f.r.type = HD_REC_ZPUT;
        f.r.codec = z->codec;
        f.r.rawlen = z->rawlen;
    }
    sl_loc loc;

    iov[n++] = (struct iovec){ h, 0 };      /* its length once encoded */
    n = sl_iov_kv(iov, n, key, klen, v0, l0, v1, l1);
    int rc = sl_append(&db->log, iov, n, HD_REC_HDR_MAX, klen + l0 + l1, seq == 0, frame_head,
                       &f, &loc);
    if (rc)
        return rc;
    /* a flag, set once, rather than a count: every writer thread adding
     * to one shared word would bounce its cache line per write */
    if (exptime != 0 && !atomic_load_explicit(&db->expiry_written, memory_order_relaxed))
        atomic_store_explicit(&db->expiry_written, true, memory_order_relaxed);
    out->seg = loc.seg;
    out->hlen = loc.hlen;
    out->off = loc.off;
    out->lsn = loc.lsn;
    out->seq = f.r.seq;
    hd_thread_db = db;
    hd_thread_lsn = loc.lsn;
    return KURA_OK;
}

long long hd_rec_check(void *arg, const unsigned char *p, size_t avail, uint32_t version,
                       size_t *need)
{
    hd_rec *r = arg;
    if (hd_rec_decode(p, avail, version, r) != 0)
        return SL_NOT_REC;
    uint64_t rlen = hd_rec_size(r->hlen, r->klen, r->vlen);
    if (rlen > avail) {
        *need = (size_t)rlen;
        return SL_NEED_MORE;
    }
    /* the body through sl_scan_crc: a resync over garbage claiming long
     * records at every offset stays linear */
    if (hd_rec_crc(p, r->hlen, sl_scan_crc(p + r->hlen, rlen - r->hlen)) != r->crc)
        return SL_NOT_REC;
    return (long long)rlen;
}

void hd_scan_init(hashdb *db, hd_scan *sc, const hd_seg *sg)
{
    /* the longest header first: a version 2 header is no longer */
    sl_scan_init(sc, &db->log, sg, HD_REC_HDR_MAX);
}

int hd_scan_rec(hd_scan *sc, uint64_t off, hd_rec *r, const unsigned char **p)
{
    size_t len;
    return sl_scan_rec(sc, off, r, p, &len);
}

uint64_t hd_scan_resync(hd_scan *sc, uint64_t off)
{
    hd_rec r;
    return sl_scan_resync(sc, off, &r);
}

int hd_read_record(hashdb *db, const hd_ent *e, const unsigned char **recp, hd_rec *r)
{
    uint32_t segid = e->seg;
    uint64_t off = e->off;
    uint64_t rlen = hd_rec_size(e->hlen, e->klen, e->vlen);
    const unsigned char *p;
    uint32_t version;
    int rc = sl_read(&db->log, segid, off, rlen, &p, &version);
    if (rc == KURA_NOTFOUND) {
        hd_log(db, KURA_LOG_ERROR, "segment %08x is missing (record at offset %llu)", segid,
               (unsigned long long)off);
        atomic_fetch_add(&db->corrupt_reads, 1);
        return KURA_ECORRUPT;
    }
    if (rc == KURA_ECORRUPT)
        goto corrupt;
    if (rc)
        return rc;
    if (hd_rec_decode(p, e->hlen, version, r) != 0 || r->hlen != e->hlen ||
        r->type != (hd_ent_zcomp(e) ? HD_REC_ZPUT : HD_REC_PUT) || r->klen != e->klen ||
        r->vlen != e->vlen || r->rawlen != hd_ent_rawlen(e))
        goto corrupt;
    if (hd_rec_crc(p, r->hlen, crc32c_update(0, p + r->hlen, rlen - r->hlen)) != r->crc)
        goto corrupt;
    *recp = p;
    return KURA_OK;
corrupt:
    atomic_fetch_add(&db->corrupt_reads, 1);
    hd_log(db, KURA_LOG_ERROR, "corrupt record in %s/%08x.seg at offset %llu", db->dir, segid,
           (unsigned long long)off);
    return KURA_ECORRUPT;
}

/*
 * hashdb_zcomp.c - compressed records: the hash file's #zcomp=lzo|zlib|bz2
 * and #zmin=SIZE (docs/formats.md, "Record" and "Compression").
 *
 * A PUT whose value is at least zmin bytes is stored compressed, through
 * the project's one codec interface (include/kura/codec.h, block form, as
 * the B+ tree's overflow runs), when that saves at least 1/8 of it; else,
 * and for values that do not compress, as it is.  Such a record is an
 * HD_REC_ZPUT: its header names the codec and the value's raw length, and
 * its CRC covers the bytes as stored (an lzo block has no checksum of its
 * own).  Reading needs no parameter: a file holds plain and compressed
 * records of any codec side by side, so zcomp may change between opens.
 *
 * Compression runs before the stripe lock is taken (as the body's CRC
 * does), into a buffer of the calling thread's; decompression into
 * another, so a read hands out a pointer that stays valid until the
 * thread's next read, as the log's pread buffer does.
 */
#include <stdlib.h>
#include <string.h>

#include "kura/codec.h"
#include "kura/tlbuf.h"
#include "hashdb_int.h"

bool hd_zcomp_pack(hashdb *db, const void *v0, size_t l0, const void *v1, size_t l1,
                   const unsigned char **out, size_t *outlen, hd_zval *z)
{
    size_t raw = l0 + l1;
    z->codec = 0;
    z->rawlen = 0;
    if (!db->zcomp || raw < db->zmin || raw == 0)
        return false;
    const void *in = v0;
    if (l1) {                           /* append/prepend: the value in two parts */
        unsigned char *joined = tlbuf(TLB_ZCOMP_JOIN, raw);
        if (!joined)
            return false;
        memcpy(joined, v0, l0);
        memcpy(joined + l0, v1, l1);
        in = joined;
    }
    size_t cap = codec_bound((kura_codec)db->zcomp, raw), n = 0;
    unsigned char *packed = tlbuf(TLB_ZCOMP_OUT, cap);
    if (!packed ||
        codec_compress((kura_codec)db->zcomp, in, raw, packed, cap, &n) != KURA_OK ||
        n > raw - raw / 8)
        return false;                   /* saves less than 1/8: as it is */
    *out = packed;
    *outlen = n;
    z->codec = (uint8_t)db->zcomp;
    z->rawlen = (uint32_t)raw;
    return true;
}

int hd_zcomp_unpack(const hd_rec *r, const unsigned char *rec, const unsigned char **val)
{
    unsigned char *raw = tlbuf(TLB_ZCOMP_RAW, r->rawlen);
    if (!raw)
        return KURA_ENOMEM;
    int rc = codec_decompress((kura_codec)r->codec, rec + r->hlen + r->klen, r->vlen, raw,
                              r->rawlen);
    if (rc == KURA_ENOMEM)
        return rc;
    if (rc)
        return KURA_ECORRUPT;
    *val = raw;
    return KURA_OK;
}

int hd_read_item(hashdb *db, const hd_ent *e, kura_item *it, const unsigned char **rec,
                 hd_rec *r)
{
    int rc = hd_read_record(db, e, rec, r);
    if (rc)
        return rc;
    const unsigned char *val = *rec + r->hlen + e->klen;
    if (r->type == HD_REC_ZPUT && (rc = hd_zcomp_unpack(r, *rec, &val)) != KURA_OK) {
        if (rc == KURA_ECORRUPT) {
            atomic_fetch_add(&db->corrupt_reads, 1);
            hd_log(db, KURA_LOG_ERROR, "corrupt record in %s/%08x.seg at offset %llu: its "
                   "value does not decompress (%s) to its %u bytes", db->dir, e->seg,
                   (unsigned long long)e->off, codec_name((kura_codec)r->codec), r->rawlen);
        }
        return rc;
    }
    it->key = (const char *)*rec + r->hlen;
    it->klen = e->klen;
    it->val = val;
    it->vlen = r->rawlen;
    it->flags = r->flags;
    it->exptime = e->exptime;
    it->cas = e->cas;
    it->vref = NULL;
    return KURA_OK;
}

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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kura/codec.h"
#include "hashdb_int.h"

/* This thread's buffers: one for a value being written (compressed, or
 * joined from two parts before it), one for a value read (decompressed). */
typedef struct zbufs {
    unsigned char *out, *in, *raw;
    size_t outcap, incap, rawcap;
} zbufs;

static pthread_key_t zb_key;
static pthread_once_t zb_once = PTHREAD_ONCE_INIT;

static void zb_free(void *p)
{
    zbufs *b = p;
    free(b->out);
    free(b->in);
    free(b->raw);
    free(b);
}

static void zb_init(void)
{
    pthread_key_create(&zb_key, zb_free);
}

static zbufs *zb_get(void)
{
    pthread_once(&zb_once, zb_init);
    zbufs *b = pthread_getspecific(zb_key);
    if (!b && (b = calloc(1, sizeof(*b))) && pthread_setspecific(zb_key, b) != 0) {
        free(b);
        b = NULL;
    }
    return b;
}

/* *buf with room for n bytes (a buffer grown past 4 MiB for one large
 * value is given back when a small one comes, as the log's is). */
static unsigned char *zb_room(unsigned char **buf, size_t *cap, size_t n)
{
    if (*cap < n || (*cap > (4u << 20) && n < (64u << 10))) {
        size_t c = n < 4096 ? 4096 : n;
        unsigned char *p = malloc(c);
        if (!p)
            return NULL;
        free(*buf);
        *buf = p;
        *cap = c;
    }
    return *buf;
}

bool hd_zcomp_pack(hashdb *db, const void *v0, size_t l0, const void *v1, size_t l1,
                   const unsigned char **out, size_t *outlen, hd_zval *z)
{
    size_t raw = l0 + l1;
    z->codec = 0;
    z->rawlen = 0;
    if (!db->zcomp || raw < db->zmin || raw == 0)
        return false;
    zbufs *b = zb_get();
    if (!b)
        return false;
    const void *in = v0;
    if (l1) {                           /* append/prepend: the value in two parts */
        if (!zb_room(&b->in, &b->incap, raw))
            return false;
        memcpy(b->in, v0, l0);
        memcpy(b->in + l0, v1, l1);
        in = b->in;
    }
    size_t cap = codec_bound((kura_codec)db->zcomp, raw), n = 0;
    if (!zb_room(&b->out, &b->outcap, cap) ||
        codec_compress((kura_codec)db->zcomp, in, raw, b->out, cap, &n) != KURA_OK ||
        n > raw - raw / 8)
        return false;                   /* saves less than 1/8: as it is */
    *out = b->out;
    *outlen = n;
    z->codec = (uint8_t)db->zcomp;
    z->rawlen = (uint32_t)raw;
    return true;
}

int hd_zcomp_unpack(const hd_rec *r, const unsigned char *rec, const unsigned char **val)
{
    zbufs *b = zb_get();
    if (!b || !zb_room(&b->raw, &b->rawcap, r->rawlen))
        return KURA_ENOMEM;
    int rc = codec_decompress((kura_codec)r->codec, rec + r->hlen + r->klen, r->vlen, b->raw,
                              r->rawlen);
    if (rc == KURA_ENOMEM)
        return rc;
    if (rc)
        return KURA_ECORRUPT;
    *val = b->raw;
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
    return KURA_OK;
}

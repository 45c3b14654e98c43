/*
 * codec_lzo.c - LZO1X-1 through liblzo2.  LZO compresses blocks and has no
 * stream format, so a stream is kura's framing (codec.h): blocks of at
 * most LZO_BLOCK raw bytes, each with its raw and compressed lengths and a
 * CRC-32C of the raw bytes, and an empty block at the end.  Decoding uses
 * lzo1x_decompress_safe(), which never writes past its output buffer
 * whatever the input; the lengths are checked against their bounds before
 * any buffer is filled, so a damaged header cannot make it allocate or
 * wait for more than one block.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <lzo/lzo1x.h>

#include "codec_int.h"
#include "kura/bytes.h"
#include "kura/crc32c.h"
#include "kura/tlbuf.h"

#define LZO_BLOCK (256 * 1024)
#define LZO_HDR 12
#define LZO_WORST(n) ((n) + (n) / 16 + 64 + 3)      /* liblzo's documented bound */

struct lzo_state {
    unsigned char *raw;                 /* LZO_BLOCK: raw bytes being gathered or given */
    size_t rawlen, rawpos;
    unsigned char *blk;                 /* a framed block being built or read */
    size_t blklen, blkpos;
    size_t need;                        /* decoder: the block's framed size, 0 = header next */
    bool last;                          /* the end block was staged (enc) or read (dec) */
    unsigned char *wrk;                 /* LZO1X_1_MEM_COMPRESS */
};

static pthread_once_t lzo_once = PTHREAD_ONCE_INIT;
static int lzo_ready;

static void lzo_setup(void)
{
    lzo_ready = lzo_init() == LZO_E_OK;
}

static int l_init(codec_stream *s, int level)
{
    (void)level;
    pthread_once(&lzo_once, lzo_setup);
    if (!lzo_ready)
        return codec_fail(s, KURA_EINVAL, "liblzo2 failed to initialise");
    struct lzo_state *l = calloc(1, sizeof(*l));
    if (!l)
        return KURA_ENOMEM;
    l->raw = malloc(LZO_BLOCK);
    l->blk = malloc(LZO_HDR + LZO_WORST(LZO_BLOCK));
    l->wrk = s->enc ? malloc(LZO1X_1_MEM_COMPRESS) : NULL;
    if (!l->raw || !l->blk || (s->enc && !l->wrk)) {
        free(l->raw);
        free(l->blk);
        free(l->wrk);
        free(l);
        return KURA_ENOMEM;
    }
    s->u.lzo = l;
    return KURA_OK;
}

static void l_end(codec_stream *s)
{
    struct lzo_state *l = s->u.lzo;
    if (!l)
        return;
    free(l->raw);
    free(l->blk);
    free(l->wrk);
    free(l);
}

/* Frames raw[0..n) (n may be 0: the end block) into blk. */
static int stage(codec_stream *s, struct lzo_state *l, size_t n)
{
    lzo_uint clen = 0;
    if (n && lzo1x_1_compress(l->raw, n, l->blk + LZO_HDR, &clen, l->wrk) != LZO_E_OK)
        return codec_fail(s, KURA_EINVAL, "lzo1x_1_compress failed");
    put32(l->blk, (uint32_t)n);
    put32(l->blk + 4, (uint32_t)clen);
    put32(l->blk + 8, n ? crc32c_update(0, l->raw, n) : 0);
    l->blklen = LZO_HDR + clen;
    l->blkpos = 0;
    l->rawlen = 0;
    return KURA_OK;
}

static size_t give(unsigned char *out, size_t outcap, size_t *made, const unsigned char *from,
                   size_t *pos, size_t len)
{
    size_t n = len - *pos;
    if (n > outcap - *made)
        n = outcap - *made;
    if (n)
        memcpy(out + *made, from + *pos, n);
    *pos += n;
    *made += n;
    return n;
}

static int enc_run(codec_stream *s, struct lzo_state *l, const unsigned char *in, size_t inlen,
                   size_t *used, unsigned char *out, size_t outcap, size_t *made, bool finish)
{
    for (;;) {
        if (l->blkpos < l->blklen) {
            give(out, outcap, made, l->blk, &l->blkpos, l->blklen);
            if (l->blkpos < l->blklen)
                return CODEC_OK;            /* the output is full */
        }
        if (l->last)
            return CODEC_END;
        size_t take = inlen - *used;
        if (take > LZO_BLOCK - l->rawlen)
            take = LZO_BLOCK - l->rawlen;
        if (take)
            memcpy(l->raw + l->rawlen, in + *used, take);
        l->rawlen += take;
        *used += take;
        bool all_in = finish && *used == inlen;
        if (l->rawlen == LZO_BLOCK || (all_in && l->rawlen)) {
            int rc = stage(s, l, l->rawlen);
            if (rc)
                return rc;
        } else if (all_in) {
            int rc = stage(s, l, 0);
            if (rc)
                return rc;
            l->last = true;
        } else {
            return CODEC_OK;                /* all input taken, more to come */
        }
    }
}

static int dec_run(codec_stream *s, struct lzo_state *l, const unsigned char *in, size_t inlen,
                   size_t *used, unsigned char *out, size_t outcap, size_t *made)
{
    for (;;) {
        if (l->rawpos < l->rawlen) {
            give(out, outcap, made, l->raw, &l->rawpos, l->rawlen);
            if (l->rawpos < l->rawlen)
                return CODEC_OK;
        }
        if (l->last)
            return CODEC_END;
        size_t want = l->need ? l->need : LZO_HDR;
        size_t take = inlen - *used;
        if (take > want - l->blklen)
            take = want - l->blklen;
        if (take)
            memcpy(l->blk + l->blklen, in + *used, take);
        l->blklen += take;
        *used += take;
        if (l->blklen < want)
            return CODEC_OK;                /* more input needed */
        uint32_t raw = get32(l->blk), clen = get32(l->blk + 4), crc = get32(l->blk + 8);
        if (!l->need) {
            if (raw == 0 && clen == 0 && crc == 0) {
                l->last = true;
                continue;
            }
            if (raw == 0 || raw > LZO_BLOCK || clen == 0 || clen > LZO_WORST(LZO_BLOCK))
                return codec_fail(s, KURA_ECORRUPT, "a block header out of bounds");
            l->need = LZO_HDR + clen;
            continue;
        }
        lzo_uint n = raw;
        if (lzo1x_decompress_safe(l->blk + LZO_HDR, clen, l->raw, &n, NULL) != LZO_E_OK ||
            n != raw)
            return codec_fail(s, KURA_ECORRUPT, "a block does not decompress");
        if (crc32c_update(0, l->raw, raw) != crc)
            return codec_fail(s, KURA_ECORRUPT, "a block fails its checksum");
        l->rawlen = raw;
        l->rawpos = 0;
        l->need = 0;
        l->blklen = 0;
    }
}

static int l_run(codec_stream *s, const unsigned char *in, size_t inlen, size_t *used,
                 unsigned char *out, size_t outcap, size_t *made, bool finish)
{
    return s->enc ? enc_run(s, s->u.lzo, in, inlen, used, out, outcap, made, finish)
                  : dec_run(s, s->u.lzo, in, inlen, used, out, outcap, made);
}

static size_t l_bound(size_t n)
{
    return LZO_WORST(n);
}

static int l_compress(const void *in, size_t inlen, void *out, size_t outcap, size_t *outlen)
{
    pthread_once(&lzo_once, lzo_setup);
    if (!lzo_ready)
        return KURA_EINVAL;
    if (outcap < LZO_WORST(inlen))
        return KURA_ENOMEM;
    unsigned char *wrk = tlbuf(TLB_LZO_WORK, LZO1X_1_MEM_COMPRESS);
    if (!wrk)
        return KURA_ENOMEM;
    lzo_uint ol = 0;
    int rc = lzo1x_1_compress(in, inlen, out, &ol, wrk);
    if (rc != LZO_E_OK)
        return KURA_EINVAL;
    *outlen = ol;
    return KURA_OK;
}

static int l_decompress(const void *in, size_t inlen, void *out, size_t rawlen)
{
    pthread_once(&lzo_once, lzo_setup);
    lzo_uint n = rawlen;
    if (!lzo_ready)
        return KURA_EINVAL;
    int rc = lzo1x_decompress_safe(in, inlen, out, &n, NULL);
    return rc == LZO_E_OK && n == rawlen ? KURA_OK : KURA_ECORRUPT;
}

const codec_impl codec_lzo = {
    .init = l_init, .run = l_run, .end = l_end, .bound = l_bound,
    .compress = l_compress, .decompress = l_decompress,
};

/*
 * codec_bz2.c - bzip2 through libbz2: BZ2_bzCompress()/BZ2_bzDecompress()
 * for streams, the BuffToBuff calls for blocks.
 */
#include <limits.h>
#include <string.h>

#include "codec_int.h"

static int b_init(codec_stream *s, int level)
{
    bz_stream *b = &s->u.bz;
    memset(b, 0, sizeof(*b));
    int rc = s->enc ? BZ2_bzCompressInit(b, level > 0 && level <= 9 ? level : 9, 0, 0)
                    : BZ2_bzDecompressInit(b, 0, 0);
    return rc == BZ_OK ? KURA_OK : rc == BZ_MEM_ERROR ? KURA_ENOMEM : KURA_EINVAL;
}

static int b_run(codec_stream *s, const unsigned char *in, size_t inlen, size_t *used,
                 unsigned char *out, size_t outcap, size_t *made, bool finish)
{
    bz_stream *b = &s->u.bz;
    unsigned ilen = inlen > UINT_MAX ? UINT_MAX : (unsigned)inlen;
    unsigned olen = outcap > UINT_MAX ? UINT_MAX : (unsigned)outcap;
    b->next_in = (char *)in;
    b->avail_in = ilen;
    b->next_out = (char *)out;
    b->avail_out = olen;
    int rc = s->enc ? BZ2_bzCompress(b, finish && ilen == inlen ? BZ_FINISH : BZ_RUN)
                    : BZ2_bzDecompress(b);
    *used = ilen - b->avail_in;
    *made = olen - b->avail_out;
    switch (rc) {
    case BZ_STREAM_END:
        return CODEC_END;
    case BZ_OK:
    case BZ_RUN_OK:
    case BZ_FLUSH_OK:
    case BZ_FINISH_OK:
        return CODEC_OK;
    case BZ_MEM_ERROR:
        return codec_fail(s, KURA_ENOMEM, "out of memory");
    case BZ_DATA_ERROR_MAGIC:
        return codec_fail(s, KURA_ECORRUPT, "not bzip2 data");
    default:                            /* BZ_DATA_ERROR, BZ_PARAM_ERROR, BZ_SEQUENCE_ERROR */
        return codec_fail(s, KURA_ECORRUPT, "damaged bzip2 data");
    }
}

static void b_end(codec_stream *s)
{
    if (s->enc)
        BZ2_bzCompressEnd(&s->u.bz);
    else
        BZ2_bzDecompressEnd(&s->u.bz);
}

/* bzip2's documented worst case: 1% larger plus 600 bytes */
static size_t b_bound(size_t n)
{
    return n + n / 100 + 601;
}

static int b_compress(const void *in, size_t inlen, void *out, size_t outcap, size_t *outlen)
{
    if (inlen > UINT_MAX || outcap > UINT_MAX)
        return KURA_EINVAL;
    unsigned ol = (unsigned)outcap;
    int rc = BZ2_bzBuffToBuffCompress(out, &ol, (char *)in, (unsigned)inlen, 9, 0, 0);
    if (rc != BZ_OK)
        return rc == BZ_OUTBUFF_FULL || rc == BZ_MEM_ERROR ? KURA_ENOMEM : KURA_EINVAL;
    *outlen = ol;
    return KURA_OK;
}

static int b_decompress(const void *in, size_t inlen, void *out, size_t rawlen)
{
    if (inlen > UINT_MAX || rawlen > UINT_MAX)
        return KURA_EINVAL;
    unsigned ol = (unsigned)rawlen;
    int rc = BZ2_bzBuffToBuffDecompress(out, &ol, (char *)in, (unsigned)inlen, 0, 0);
    return rc == BZ_OK && ol == rawlen ? KURA_OK : rc == BZ_MEM_ERROR ? KURA_ENOMEM
                                                                      : KURA_ECORRUPT;
}

const codec_impl codec_bz2 = {
    .init = b_init, .run = b_run, .end = b_end, .bound = b_bound,
    .compress = b_compress, .decompress = b_decompress,
};

/*
 * codec_zlib.c - zlib: the zlib format (deflate, Adler-32), streaming with
 * deflate()/inflate(), blocks with compress2()/uncompress().
 */
#include <limits.h>
#include <string.h>

#include "codec_int.h"

static int z_init(codec_stream *s, int level)
{
    z_stream *z = &s->u.z;
    memset(z, 0, sizeof(*z));
    int rc = s->enc ? deflateInit(z, level > 0 && level <= 9 ? level : 6) : inflateInit(z);
    return rc == Z_OK ? KURA_OK : rc == Z_MEM_ERROR ? KURA_ENOMEM : KURA_EINVAL;
}

static int z_run(codec_stream *s, const unsigned char *in, size_t inlen, size_t *used,
                 unsigned char *out, size_t outcap, size_t *made, bool finish)
{
    z_stream *z = &s->u.z;
    uInt ilen = inlen > UINT_MAX ? UINT_MAX : (uInt)inlen;
    uInt olen = outcap > UINT_MAX ? UINT_MAX : (uInt)outcap;
    z->next_in = (Bytef *)in;
    z->avail_in = ilen;
    z->next_out = out;
    z->avail_out = olen;
    int rc = s->enc ? deflate(z, finish && ilen == inlen ? Z_FINISH : Z_NO_FLUSH)
                    : inflate(z, Z_NO_FLUSH);
    *used = ilen - z->avail_in;
    *made = olen - z->avail_out;
    switch (rc) {
    case Z_STREAM_END:
        return CODEC_END;
    case Z_OK:
    case Z_BUF_ERROR:                   /* no progress possible now: more input or room */
        return CODEC_OK;
    case Z_MEM_ERROR:
        return codec_fail(s, KURA_ENOMEM, "out of memory");
    default:                            /* Z_DATA_ERROR, Z_NEED_DICT, Z_STREAM_ERROR */
        return codec_fail(s, KURA_ECORRUPT, z->msg ? z->msg : "not zlib data");
    }
}

static void z_end(codec_stream *s)
{
    if (s->enc)
        deflateEnd(&s->u.z);
    else
        inflateEnd(&s->u.z);
}

static size_t z_bound(size_t n)
{
    return compressBound((uLong)n);
}

static int z_compress(const void *in, size_t inlen, void *out, size_t outcap, size_t *outlen)
{
    uLongf ol = outcap;
    int rc = compress2(out, &ol, in, inlen, 6);
    if (rc != Z_OK)
        return rc == Z_BUF_ERROR || rc == Z_MEM_ERROR ? KURA_ENOMEM : KURA_EINVAL;
    *outlen = ol;
    return KURA_OK;
}

static int z_decompress(const void *in, size_t inlen, void *out, size_t rawlen)
{
    uLongf ol = rawlen;
    int rc = uncompress(out, &ol, in, inlen);
    return rc == Z_OK && ol == rawlen ? KURA_OK : rc == Z_MEM_ERROR ? KURA_ENOMEM : KURA_ECORRUPT;
}

const codec_impl codec_zlib = {
    .init = z_init, .run = z_run, .end = z_end, .bound = z_bound,
    .compress = z_compress, .decompress = z_decompress,
};

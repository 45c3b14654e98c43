/*
 * codec.c - the codec interface (include/kura/codec.h): names, the
 * dispatch to each codec's file, and "none".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_int.h"

static const char *const names[KURA_CODEC_COUNT] = { "none", "zlib", "bz2", "lzo" };

const char *codec_name(kura_codec c)
{
    return (unsigned)c < KURA_CODEC_COUNT ? names[c] : NULL;
}

int codec_by_name(const char *name, kura_codec *out)
{
    for (int i = 0; i < KURA_CODEC_COUNT; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (kura_codec)i;
            return KURA_OK;
        }
    if (strcmp(name, "bzip2") == 0) {
        *out = KURA_CODEC_BZ2;
        return KURA_OK;
    }
    return KURA_EINVAL;
}

int codec_fail(codec_stream *s, int rc, const char *what)
{
    snprintf(s->err, sizeof(s->err), "%s: %s", codec_name(s->codec), what);
    return rc;
}

/* ---- none: a copy ---------------------------------------------------------- */

static int none_run(codec_stream *s, const unsigned char *in, size_t inlen, size_t *used,
                    unsigned char *out, size_t outcap, size_t *made, bool finish)
{
    size_t n = inlen < outcap ? inlen : outcap;
    if (n)
        memcpy(out, in, n);
    *used = *made = n;
    (void)s;
    return finish && n == inlen ? CODEC_END : CODEC_OK;
}

static size_t none_bound(size_t n) { return n; }

static int none_compress(const void *in, size_t inlen, void *out, size_t outcap, size_t *outlen)
{
    if (inlen > outcap)
        return KURA_ENOMEM;
    if (inlen)
        memcpy(out, in, inlen);
    *outlen = inlen;
    return KURA_OK;
}

static int none_decompress(const void *in, size_t inlen, void *out, size_t rawlen)
{
    if (inlen != rawlen)
        return KURA_ECORRUPT;
    if (inlen)
        memcpy(out, in, inlen);
    return KURA_OK;
}

static const codec_impl codec_none = {
    .run = none_run, .bound = none_bound, .compress = none_compress,
    .decompress = none_decompress,
};

static const codec_impl *impl_of(kura_codec c)
{
    switch (c) {
    case KURA_CODEC_NONE: return &codec_none;
    case KURA_CODEC_ZLIB: return &codec_zlib;
    case KURA_CODEC_BZ2:  return &codec_bz2;
    case KURA_CODEC_LZO:  return &codec_lzo;
    }
    return NULL;
}

static int stream_new(kura_codec c, bool enc, int level, codec_stream **out)
{
    const codec_impl *impl = impl_of(c);
    if (!impl)
        return KURA_EINVAL;
    codec_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return KURA_ENOMEM;
    s->codec = c;
    s->enc = enc;
    s->impl = impl;
    int rc = impl->init ? impl->init(s, level) : KURA_OK;
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return KURA_OK;
}

int codec_encoder(kura_codec c, int level, codec_stream **out)
{
    return stream_new(c, true, level, out);
}

int codec_decoder(kura_codec c, codec_stream **out)
{
    return stream_new(c, false, 0, out);
}

int codec_run(codec_stream *s, const void *in, size_t inlen, size_t *used, void *out,
              size_t outcap, size_t *made, bool finish)
{
    *used = *made = 0;
    if (s->ended)
        return CODEC_END;
    if (outcap == 0)
        return codec_fail(s, KURA_EINVAL, "no room for output");
    int rc = s->impl->run(s, in, inlen, used, out, outcap, made, finish);
    if (rc == CODEC_END)
        s->ended = true;
    /* a decoder told that the input is complete, which neither took any
     * nor gave any: its data stops in the middle */
    if (rc == CODEC_OK && !s->enc && finish && *used == inlen && *made == 0)
        return codec_fail(s, KURA_ECORRUPT, "the data is cut short");
    return rc;
}

void codec_free(codec_stream *s)
{
    if (!s)
        return;
    if (s->impl->end)
        s->impl->end(s);
    free(s);
}

const char *codec_error(const codec_stream *s)
{
    return s->err;
}

size_t codec_bound(kura_codec c, size_t n)
{
    const codec_impl *impl = impl_of(c);
    return impl ? impl->bound(n) : 0;
}

int codec_compress(kura_codec c, const void *in, size_t inlen, void *out, size_t outcap,
                   size_t *outlen)
{
    const codec_impl *impl = impl_of(c);
    return impl ? impl->compress(in, inlen, out, outcap, outlen) : KURA_EINVAL;
}

int codec_decompress(kura_codec c, const void *in, size_t inlen, void *out, size_t rawlen)
{
    const codec_impl *impl = impl_of(c);
    return impl ? impl->decompress(in, inlen, out, rawlen) : KURA_EINVAL;
}

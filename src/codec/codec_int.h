/*
 * codec_int.h - what the codec files share: a stream's state, and each
 * codec's table (codec.c dispatches; codec_zlib.c, codec_bz2.c,
 * codec_lzo.c each implement one codec over its library).
 */
#ifndef KURA_CODEC_INT_H
#define KURA_CODEC_INT_H

#include <bzlib.h>
#include <zlib.h>

#include "kura/codec.h"
#include "kura/status.h"

struct lzo_state;

struct codec_stream {
    kura_codec codec;
    bool enc;
    bool ended;                         /* CODEC_END returned */
    char err[128];
    const struct codec_impl *impl;
    union {
        z_stream z;
        bz_stream bz;
        struct lzo_state *lzo;
    } u;
};

typedef struct codec_impl {
    int (*init)(codec_stream *s, int level);
    int (*run)(codec_stream *s, const unsigned char *in, size_t inlen, size_t *used,
               unsigned char *out, size_t outcap, size_t *made, bool finish);
    void (*end)(codec_stream *s);
    size_t (*bound)(size_t n);
    int (*compress)(const void *in, size_t inlen, void *out, size_t outcap, size_t *outlen);
    int (*decompress)(const void *in, size_t inlen, void *out, size_t rawlen);
} codec_impl;

extern const codec_impl codec_zlib, codec_bz2, codec_lzo;

/* a message for codec_error(), and the status to return */
int codec_fail(codec_stream *s, int rc, const char *what);

#endif

/*
 * codec.h - compression through the real libraries (zlib, libbz2,
 * liblzo2) behind one small interface, streaming: neither side ever holds
 * a whole file (src/codec/).  Snapshots write through it; compressed pages
 * and records use the block form.
 *
 * A stream is driven by codec_run(): give it input, take output, as often
 * as needed; finish tells an encoder that the input is complete.  A
 * decoder reports the end of its compressed data with CODEC_END and
 * refuses what is not its format, damaged or cut short with KURA_ECORRUPT
 * (never a crash, never a loop that makes no progress: a call that can
 * neither take input nor give output fails).
 *
 * Formats: zlib is the zlib format (deflate with an Adler-32); bz2 is the
 * bzip2 format (CRC-32 per block and for the stream); lzo has no stream
 * format of its own, so kura frames it: blocks of at most 256 KiB, each
 * "raw length (u32 LE), compressed length (u32 LE), CRC-32C of the raw
 * bytes (u32 LE), the LZO1X-1 bytes", ended by a block whose raw length
 * is 0.  none copies the bytes (a stream without an end of its own: the
 * caller's framing says where it stops).
 */
#ifndef KURA_CODEC_H
#define KURA_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kura_codec {
    KURA_CODEC_NONE = 0,
    KURA_CODEC_ZLIB = 1,
    KURA_CODEC_BZ2 = 2,
    KURA_CODEC_LZO = 3,
} kura_codec;

#define KURA_CODEC_COUNT 4

/* "none", "zlib", "bz2", "lzo"; NULL for an unknown id */
const char *codec_name(kura_codec c);
/* The id of a name (ktserver's "zlib", "bz2"/"bzip2", "lzo", "none"):
 * 0, or KURA_EINVAL */
int codec_by_name(const char *name, kura_codec *out);

/* codec_run's outcomes besides errors (KURA_ECORRUPT, KURA_ENOMEM,
 * KURA_EINVAL) */
#define CODEC_OK 0          /* progress; call again */
#define CODEC_END 1         /* decoder: the end of the data; encoder: all flushed */

typedef struct codec_stream codec_stream;

/* level: 0 = the codec's default (zlib 6, bz2 9, lzo: one level) */
int codec_encoder(kura_codec c, int level, codec_stream **out);
int codec_decoder(kura_codec c, codec_stream **out);
/* Takes up to inlen bytes (*used says how many), writes up to outcap
 * (*made says how many).  finish (encoder): no input after this one;
 * call until CODEC_END.  A decoder given finish with its data incomplete
 * fails with KURA_ECORRUPT ("cut short"). */
int codec_run(codec_stream *s, const void *in, size_t inlen, size_t *used, void *out,
              size_t outcap, size_t *made, bool finish);
void codec_free(codec_stream *s);
/* What went wrong, for a log line ("" if nothing). */
const char *codec_error(const codec_stream *s);

/* ---- blocks: one buffer in, one out ------------------------------------- */

/* The most a block of n bytes can grow to. */
size_t codec_bound(kura_codec c, size_t n);
/* 0 and *outlen, KURA_ENOMEM (out too small), KURA_EINVAL */
int codec_compress(kura_codec c, const void *in, size_t inlen, void *out, size_t outcap,
                   size_t *outlen);
/* The block must decompress to exactly rawlen bytes: else KURA_ECORRUPT.
 * zlib and bz2 blocks check themselves; an lzo block has no checksum of
 * its own (the caller's, a page's, must cover it): damage may go unseen
 * here, but never writes past rawlen. */
int codec_decompress(kura_codec c, const void *in, size_t inlen, void *out, size_t rawlen);

#endif

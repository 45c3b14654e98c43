/*
 * test_codec.c - the codecs (src/codec/) through their one interface: for
 * none, zlib, bz2 and lzo, streams round-trip empty, tiny, incompressible
 * and compressible data fed and drained in pieces of awkward sizes; blocks
 * round-trip within codec_bound() (a damaged zlib or bz2 block refused, an
 * LZO block, which has no checksum, never overrun); and the stream
 * decoders of zlib, bz2 and lzo
 * refuse what is damaged (bytes flipped across the data), cut short (every
 * tenth length) or not theirs (random bytes) with KURA_ECORRUPT, without a
 * crash and within a bounded number of calls.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kura/codec.h"
#include "kura/store.h"
#include "unit.h"

static const kura_codec all[] = { KURA_CODEC_NONE, KURA_CODEC_ZLIB, KURA_CODEC_BZ2,
                                  KURA_CODEC_LZO };

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* Runs a whole buffer through a stream in pieces of `chunk` bytes in and
 * `ochunk` out; the result in *out (malloc'd).  Returns the last status,
 * or -100 if a call made no progress where it should have. */
static int pump(codec_stream *s, const unsigned char *in, size_t len, size_t chunk,
                size_t ochunk, unsigned char **out, size_t *outlen)
{
    size_t cap = len * 2 + 1024, olen = 0, pos = 0;
    unsigned char *o = malloc(cap);
    int rc = CODEC_OK;
    for (long calls = 0; calls < 10000000; calls++) {
        size_t n = len - pos < chunk ? len - pos : chunk;
        bool finish = pos + n == len;
        if (cap - olen < ochunk) {
            cap = cap * 2 + ochunk;
            o = realloc(o, cap);
        }
        size_t used, made;
        rc = codec_run(s, in + pos, n, &used, o + olen, ochunk, &made, finish);
        pos += used;
        olen += made;
        if (rc != CODEC_OK)
            break;
        if (used == 0 && made == 0 && !finish) {
            rc = -100;
            break;
        }
    }
    *out = o;
    *outlen = olen;
    return rc;
}

static int roundtrip(kura_codec c, const unsigned char *data, size_t len, size_t chunk,
                     size_t ochunk)
{
    codec_stream *e, *d;
    unsigned char *z, *back;
    size_t zlen, blen;
    if (codec_encoder(c, 0, &e) || codec_decoder(c, &d))
        return -1;
    int rc = pump(e, data, len, chunk, ochunk, &z, &zlen);
    int ok = rc == CODEC_END;
    rc = pump(d, z, zlen, ochunk, chunk, &back, &blen);
    ok = ok && (rc == CODEC_END || (c == KURA_CODEC_NONE && rc == CODEC_END)) && blen == len &&
         (len == 0 || memcmp(back, data, len) == 0);
    if (!ok)
        printf("# %s: len %zu chunk %zu/%zu: rc %d, %zu bytes back, %s\n", codec_name(c), len,
               chunk, ochunk, rc, blen, codec_error(d));
    codec_free(e);
    codec_free(d);
    free(z);
    free(back);
    return ok ? 0 : -1;
}

static void test_names(void)
{
    kura_codec c;
    CHECK_EQ_STR(codec_name(KURA_CODEC_LZO), "lzo");
    CHECK(codec_name((kura_codec)9) == NULL);
    CHECK(codec_by_name("bz2", &c) == KURA_OK && c == KURA_CODEC_BZ2);
    CHECK(codec_by_name("bzip2", &c) == KURA_OK && c == KURA_CODEC_BZ2);
    CHECK(codec_by_name("zlib", &c) == KURA_OK && c == KURA_CODEC_ZLIB);
    CHECK(codec_by_name("gzip", &c) == KURA_EINVAL);
}

static void test_roundtrips(void)
{
    size_t big = 3 << 20;
    unsigned char *noise = malloc(big), *text = malloc(big);
    for (size_t i = 0; i < big; i++)
        noise[i] = (unsigned char)rnd();
    for (size_t i = 0; i < big; i++)
        text[i] = "the quick brown fox jumps over the lazy dog, again and again\n"[i % 61];
    static const size_t chunks[][2] = { { 1, 7 }, { 7, 1 }, { 4096, 333 }, { 1 << 20, 1 << 16 } };
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
        kura_codec c = all[k];
        CHECK_EQ_INT(roundtrip(c, text, 0, 4096, 4096), 0);
        CHECK_EQ_INT(roundtrip(c, text, 1, 1, 1), 0);
        for (size_t j = 0; j < 4; j++) {
            size_t len = chunks[j][0] == 1 || chunks[j][1] == 1 ? 100000 : big;
            CHECK_EQ_INT(roundtrip(c, text, len, chunks[j][0], chunks[j][1]), 0);
            CHECK_EQ_INT(roundtrip(c, noise, len, chunks[j][0], chunks[j][1]), 0);
        }
    }
    free(noise);
    free(text);
}

static void test_blocks(void)
{
    size_t n = 200000;
    unsigned char *in = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        in[i] = i < n / 2 ? (unsigned char)(i % 7) : (unsigned char)rnd();
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
        kura_codec c = all[k];
        size_t cap = codec_bound(c, n), zlen = 0;
        unsigned char *z = malloc(cap);
        CHECK(cap >= n);
        CHECK_EQ_INT(codec_compress(c, in, n, z, cap, &zlen), KURA_OK);
        CHECK(zlen <= cap);
        if (c != KURA_CODEC_NONE)
            CHECK(zlen < n);
        CHECK_EQ_INT(codec_decompress(c, z, zlen, back, n), KURA_OK);
        CHECK(memcmp(in, back, n) == 0);
        CHECK_EQ_INT(codec_compress(c, in, n, z, 10, &zlen), KURA_ENOMEM);
        if (c != KURA_CODEC_NONE) {
            size_t zl2;
            codec_compress(c, in, n, z, cap, &zl2);
            z[zl2 / 2] ^= 0x55;
            /* zlib and bzip2 check their own data; an LZO block has no
             * checksum (its user's, a page's, covers it): it must only
             * not crash, and not return more than asked */
            int rc = codec_decompress(c, z, zl2, back, n);
            if (c != KURA_CODEC_LZO)
                CHECK(rc != KURA_OK);
            CHECK(codec_decompress(c, z, zl2 / 2, back, n) != KURA_OK);
        }
        free(z);
    }
    free(in);
    free(back);
}

/* The decoders of the codecs with checksums refuse damage. */
static void test_damage(void)
{
    size_t n = 600000;
    unsigned char *in = malloc(n);
    for (size_t i = 0; i < n; i++)
        in[i] = (unsigned char)((i * 31) % 251 ^ (i % 1000 == 0 ? rnd() : 0));
    for (size_t k = 1; k < sizeof(all) / sizeof(all[0]); k++) {
        kura_codec c = all[k];
        codec_stream *e;
        unsigned char *z, *back;
        size_t zlen, blen;
        REQUIRE(codec_encoder(c, 0, &e) == KURA_OK);
        CHECK_EQ_INT(pump(e, in, n, 65536, 65536, &z, &zlen), CODEC_END);
        codec_free(e);
        int undetected = 0, cut_ok = 0, hung = 0;
        for (int t = 0; t < 40; t++) {
            size_t at = (size_t)(rnd() % zlen);
            unsigned char save = z[at];
            z[at] ^= (unsigned char)(1u << (rnd() % 8));
            codec_stream *d;
            codec_decoder(c, &d);
            int rc = pump(d, z, zlen, 4096, 8192, &back, &blen);
            if (rc == -100)
                hung++;
            else if (rc >= 0 && (blen != n || memcmp(back, in, n) != 0))
                undetected++;       /* decoded to something else and said nothing */
            free(back);
            codec_free(d);
            z[at] = save;
        }
        for (size_t cut = 0; cut < zlen; cut += zlen / 10 + 1) {
            codec_stream *d;
            codec_decoder(c, &d);
            int rc = pump(d, z, cut, 4096, 8192, &back, &blen);
            if (rc == KURA_ECORRUPT)
                cut_ok++;
            free(back);
            codec_free(d);
        }
        unsigned char garbage[5000];
        for (size_t i = 0; i < sizeof(garbage); i++)
            garbage[i] = (unsigned char)rnd();
        codec_stream *d;
        codec_decoder(c, &d);
        int grc = pump(d, garbage, sizeof(garbage), 512, 4096, &back, &blen);
        free(back);
        codec_free(d);
        printf("# %s: %d undetected flips, %d hangs, %d of 10 cuts refused, garbage %d\n",
               codec_name(c), undetected, hung, cut_ok, grc);
        CHECK_EQ_INT(undetected, 0);
        CHECK_EQ_INT(hung, 0);
        CHECK_EQ_INT(cut_ok, 10);
        CHECK_EQ_INT(grc, KURA_ECORRUPT);
        free(z);
    }
    free(in);
}

int main(void)
{
    RUN(test_names);
    RUN(test_roundtrips);
    RUN(test_blocks);
    RUN(test_damage);
    UNIT_DONE();
}

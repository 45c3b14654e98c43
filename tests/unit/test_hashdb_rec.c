/*
 * test_hashdb_rec.c - the hash file's record headers (src/store/hash/
 * hashdb_rec.c, docs/formats.md): version 4's encoding and decoding for
 * every combination of its presence bits and cas modes and at the fields'
 * limits (cas 0 and 2^64 - 1, exptime negative and large, the largest
 * lengths and sequence numbers), the canonical form alone accepted, a
 * truncated or damaged header refused and every byte of a record under
 * its checksum; versions 1 to 3 still decoded, and a database whose
 * segment is version 3 opened, read, written (into a new version 4
 * segment) and opened again.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kura/bytes.h"
#include "kura/codec.h"
#include "kura/crc32c.h"
#include "../../src/store/hash/hashdb_int.h"
#include "hashdb_testlib.h"
#include "unit.h"

static const kura_clock CLK = { .now = 1000000, .oldest_cas = 0 };

static bool same_rec(const hd_rec *a, const hd_rec *b)
{
    return a->type == b->type && a->klen == b->klen && a->vlen == b->vlen &&
           a->rawlen == b->rawlen && a->codec == b->codec && a->flags == b->flags &&
           a->exptime == b->exptime && a->cas == b->cas && a->seq == b->seq;
}

/* r encoded, decoded as version 4 at every length from the header's own
 * (a header cut short is no header) and compared; returns the length. */
static size_t round_trip(const hd_rec *r)
{
    unsigned char h[HD_REC_HDR_MAX + 8];
    hd_rec d;
    memset(h, 0xee, sizeof(h));
    size_t n = hd_rec_encode(h, r);
    if (n < 8 || n > 53) {
        printf("# header of %zu bytes\n", n);
        return 0;
    }
    for (size_t avail = 0; avail < n; avail++)
        if (hd_rec_decode(h, avail, 4, &d) == 0) {
            printf("# a header cut to %zu of %zu bytes decoded\n", avail, n);
            return 0;
        }
    memset(&d, 0x5a, sizeof(d));
    if (hd_rec_decode(h, sizeof(h), 4, &d) != 0 || d.hlen != n || !same_rec(r, &d)) {
        printf("# type %u flags %u exptime %lld cas %llu seq %llu: not read back\n", r->type,
               r->flags, (long long)r->exptime, (unsigned long long)r->cas,
               (unsigned long long)r->seq);
        return 0;
    }
    /* the descriptor says what is there */
    unsigned want = HD_V4_MARK | (unsigned)(r->type - 1) | (r->flags ? HD_V4_FLAGS : 0) |
                    (r->exptime ? HD_V4_EXPTIME : 0) |
                    (!r->cas ? HD_V4_CAS_ZERO : r->cas == r->seq ? HD_V4_CAS_SEQ
                                                                 : HD_V4_CAS_DELTA);
    if (h[4] != want) {
        printf("# descriptor %02x, expected %02x\n", h[4], want);
        return 0;
    }
    return n;
}

/* Every presence-bit combination and cas mode, with each field at its
 * limits, for each type of record. */
static void test_v4_every_combination(void)
{
    static const uint32_t flags[] = { 0, 1, 127, 128, UINT32_MAX };
    static const int64_t exps[] = { 0, 1, -1, 1700000000, -1700000000, INT64_MAX, INT64_MIN };
    static const uint64_t seqs[] = { 0, 1, 127, 128, 10000000, UINT64_MAX - 1, UINT64_MAX };
    int tried = 0, ok = 0;
    for (int type = HD_REC_PUT; type <= HD_REC_ZPUT; type++)
        for (size_t f = 0; f < sizeof(flags) / sizeof(flags[0]); f++)
            for (size_t x = 0; x < sizeof(exps) / sizeof(exps[0]); x++)
                for (size_t q = 0; q < sizeof(seqs) / sizeof(seqs[0]); q++) {
                    uint64_t seq = seqs[q];
                    /* cas: 0, the sequence number, next to it on either
                     * side, far from it, and the extremes */
                    uint64_t cass[] = { 0, seq, seq + 1, seq - 1, 1, UINT64_MAX,
                                        (uint64_t)1 << 63, seq ^ 0x5555555555555555ull };
                    for (size_t c = 0; c < sizeof(cass) / sizeof(cass[0]); c++) {
                        hd_rec r = { .type = (uint8_t)type, .flags = flags[f],
                                     .exptime = exps[x], .cas = cass[c], .seq = seq };
                        switch (type) {
                        case HD_REC_PUT: r.klen = 250; r.vlen = r.rawlen = UINT32_MAX; break;
                        case HD_REC_DEL: r.klen = 1; break;
                        case HD_REC_STATE: r.vlen = r.rawlen = 32; break;
                        case HD_REC_ZPUT:
                            r.klen = 21;
                            r.vlen = 100;
                            r.rawlen = UINT32_MAX;
                            r.codec = KURA_CODEC_COUNT - 1;
                            break;
                        }
                        tried++;
                        ok += round_trip(&r) != 0;
                    }
                }
    CHECK_EQ_INT(ok, tried);
    CHECK(tried == 4 * 5 * 7 * 7 * 8);
}

/* What a header costs: the smallest, a kura-bench item in a 10M-item load
 * (docs/benchmarks.md), and the largest, which fits HD_REC_HDR_MAX. */
static void test_v4_sizes(void)
{
    hd_rec r = { .type = HD_REC_PUT, .klen = 1, .vlen = 1, .rawlen = 1, .seq = 1 };
    CHECK_EQ_INT(round_trip(&r), 8);
    r.cas = 1;                                  /* = seq: no byte */
    CHECK_EQ_INT(round_trip(&r), 8);
    r = (hd_rec){ .type = HD_REC_PUT, .klen = 21, .vlen = 150, .rawlen = 150,
                  .seq = 9999999, .cas = 9999990 };
    CHECK_EQ_INT(round_trip(&r), 13);           /* crc 4, 1, 1, vlen 2, seq 4, cas 1 */
    r = (hd_rec){ .type = HD_REC_ZPUT, .klen = 250, .vlen = UINT32_MAX - 1,
                  .rawlen = UINT32_MAX, .codec = 1, .flags = UINT32_MAX,
                  .exptime = INT64_MIN, .seq = UINT64_MAX, .cas = (uint64_t)1 << 63 };
    CHECK_EQ_INT(round_trip(&r), 6 + 5 + 5 + 10 + 10 + 10 + 1 + 5);
}

/* Bytes that are no version 4 header: a wrong mark, the reserved cas
 * mode, a type's impossible lengths, and each non-canonical form (an
 * optional field present holding 0, a delta of 0, a cas of 0 by any other
 * mode than "zero"): one header per record, no other. */
static void test_v4_rejects(void)
{
    unsigned char h[HD_REC_HDR_MAX];
    hd_rec r = { .type = HD_REC_PUT, .klen = 3, .vlen = 5, .rawlen = 5, .flags = 7,
                 .exptime = 9, .cas = 12, .seq = 10 }, d;
    size_t n = hd_rec_encode(h, &r);
    REQUIRE(hd_rec_decode(h, n, 4, &d) == 0);
    unsigned char b[HD_REC_HDR_MAX];
#define MUTATED(expr) (memcpy(b, h, n), (expr), hd_rec_decode(b, n, 4, &d))
    CHECK(MUTATED(b[4] &= 0x3f) == -1);                 /* mark 00 */
    CHECK(MUTATED(b[4] |= 0x40) == -1);                 /* mark 11 */
    CHECK(MUTATED(b[4] |= HD_V4_CAS) == -1);            /* cas mode 3 */
    CHECK(MUTATED(b[5] = 0) == -1);                     /* a PUT without a key */
    CHECK(MUTATED(b[6] |= 0x80) == -1);                 /* a varint running past the end */
    CHECK(MUTATED(memset(b, 0, n)) == -1);              /* a zeroed tail */

    static const unsigned char bad[][8] = {
        /* crc, descriptor, klen, vlen, then the fields its bits ask for */
        { 0, 0, 0, 0, HD_V4_MARK | HD_V4_FLAGS, 1, 1, 0 },     /* flags 0 present */
        { 0, 0, 0, 0, HD_V4_MARK | HD_V4_EXPTIME, 1, 1, 0 },   /* exptime 0 present */
        { 0, 0, 0, 0, HD_V4_MARK | HD_V4_CAS_DELTA, 1, 1, 5 },  /* seq 5, delta 0: */
        { 0, 0, 0, 0, HD_V4_MARK | HD_V4_CAS_SEQ, 1, 1, 0 },   /* cas = seq = 0 */
        { 0, 0, 0, 0, HD_V4_MARK | 1, 1, 1, 1 },               /* a DEL with a value */
        { 0, 0, 0, 0, HD_V4_MARK | 2, 1, 24, 1 },              /* a STATE with a key */
        { 0, 0, 0, 0, HD_V4_MARK | 2, 0, 25, 1 },              /* a STATE of 25 bytes */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        unsigned char t[16] = { 0 };
        memcpy(t, bad[i], 8);
        if (i == 2)
            t[8] = 0;                                   /* the delta: 0 */
        CHECK(hd_rec_decode(t, i == 2 ? 9 : 8, 4, &d) == -1);
    }
    /* the forms they would be: accepted */
    unsigned char g[9] = { 0, 0, 0, 0, HD_V4_MARK | HD_V4_CAS_DELTA, 1, 1, 5, 2 };
    CHECK(hd_rec_decode(g, 9, 4, &d) == 0 && d.cas == 6 && d.seq == 5 && d.hlen == 9);
    unsigned char z[8] = { 0, 0, 0, 0, HD_V4_MARK | 2, 0, 24, 1 };
    CHECK(hd_rec_decode(z, 8, 4, &d) == 0 && d.type == HD_REC_STATE && d.cas == 0);
    /* a compressed PUT: a known codec, a raw length above the stored one */
    hd_rec zr = { .type = HD_REC_ZPUT, .klen = 2, .vlen = 10, .rawlen = 11, .codec = 1,
                  .seq = 3 };
    n = hd_rec_encode(h, &zr);
    CHECK(hd_rec_decode(h, n, 4, &d) == 0 && d.rawlen == 11);
    CHECK(MUTATED(b[n - 2] = KURA_CODEC_NONE) == -1);
    CHECK(MUTATED(b[n - 2] = KURA_CODEC_COUNT) == -1);
    CHECK(MUTATED(b[n - 1] = 10) == -1);
#undef MUTATED
}

/* A whole record (header, key, value) accepted by the scanner's check with
 * its length; any one bit flipped anywhere in it, and it is not. */
static void test_v4_checksum_covers_every_byte(void)
{
    unsigned char rec[HD_REC_HDR_MAX + 64];
    hd_rec r = { .type = HD_REC_PUT, .klen = 5, .vlen = 20, .rawlen = 20, .flags = 300,
                 .exptime = -5, .cas = 77, .seq = 70 };
    size_t n = hd_rec_encode(rec, &r);
    memcpy(rec + n, "hello", 5);
    memcpy(rec + n + 5, "01234567890123456789", 20);
    size_t len = n + 25;
    put32(rec, hd_rec_crc(rec, n, crc32c_update(0, rec + n, 25)));
    hd_rec d;
    size_t need = 0;
    REQUIRE(hd_rec_check(&d, rec, len, 4, &need) == (long long)len);
    int accepted = 0;
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit++) {
            rec[i] ^= (unsigned char)(1u << bit);
            /* more bytes after it: a length grown by the flip still fits */
            unsigned char big[sizeof(rec) + 256];
            memset(big, 0, sizeof(big));
            memcpy(big, rec, len);
            accepted += hd_rec_check(&d, big, sizeof(big), 4, &need) > 0;
            rec[i] ^= (unsigned char)(1u << bit);
        }
    CHECK_EQ_INT(accepted, 0);
}

/* Versions 1 to 3, as earlier kurads wrote them, still decode. */
static void test_old_versions_decode(void)
{
    hd_rec d;
    unsigned char v1[40] = { 0 };
    v1[4] = 'K';
    v1[5] = 'h';
    v1[6] = HD_REC_PUT;
    v1[7] = 3;
    put32(v1 + 8, 150);
    put32(v1 + 12, 9);
    put64(v1 + 16, (uint64_t)-7);
    put64(v1 + 24, 1234);
    put64(v1 + 32, 99);
    CHECK(hd_rec_decode(v1, 40, 1, &d) == 0 && d.hlen == 40 && d.vlen == 150 && d.flags == 9 &&
          d.exptime == -7 && d.cas == 1234 && d.seq == 99 && d.klen == 3);
    CHECK(hd_rec_decode(v1, 39, 1, &d) == -1);

    /* version 2: crc, "Kr", type, klen, vlen, flags, exptime, cas, seq */
    unsigned char v2[] = { 0, 0, 0, 0, 'K', 'r', HD_REC_PUT, 3, 0x96, 0x01, 9, 13, 0xd2,
                           0x09, 99 };
    for (uint32_t ver = 2; ver <= 3; ver++)
        CHECK(hd_rec_decode(v2, sizeof(v2), ver, &d) == 0 && d.hlen == sizeof(v2) &&
              d.vlen == 150 && d.flags == 9 && d.exptime == -7 && d.cas == 1234 &&
              d.seq == 99);
    /* read as version 4 it is no header: the mark differs */
    CHECK(hd_rec_decode(v2, sizeof(v2), 4, &d) == -1);
}

/* A compressed record in a version 2 segment is no record: version 3 and
 * later alone may hold them (an older kurad refuses those files whole). */
static void test_zput_versions(void)
{
    hd_rec d;
    unsigned char v3[] = { 0, 0, 0, 0, 'K', 'r', HD_REC_ZPUT, 1, 10, 0, 0, 0, 5, 1, 40 };
    CHECK(hd_rec_decode(v3, sizeof(v3), 2, &d) == -1);
    CHECK(hd_rec_decode(v3, sizeof(v3), 3, &d) == 0 && d.codec == 1 && d.rawlen == 40 &&
          d.vlen == 10);
}

/* A version 3 record, as an earlier kurad wrote it (the test's own
 * encoder: docs/formats.md). */
static size_t v3_record(unsigned char *p, const char *key, const char *val, uint64_t cas,
                        uint64_t seq)
{
    size_t klen = strlen(key), vlen = strlen(val);
    unsigned char *q = p + 8;
    p[4] = 'K';
    p[5] = 'r';
    p[6] = HD_REC_PUT;
    p[7] = (unsigned char)klen;
    q = put_varint(q, vlen);
    q = put_varint(q, 0);
    q = put_varint(q, 0);
    q = put_varint(q, cas);
    q = put_varint(q, seq);
    size_t hlen = (size_t)(q - p);
    memcpy(q, key, klen);
    memcpy(q + klen, val, vlen);
    put32(p, crc32c_update(crc32c_update(crc32c_update(0, key, klen), val, vlen), p + 4,
                           hlen - 4));
    return hlen + klen + vlen;
}

/* A database of one version 3 segment (no checkpoint): opened, its items
 * read; a write goes to a new segment of version 4 (a segment takes records
 * of its own version only); both read again after a reopen. */
static void test_v3_database_opens(void)
{
    const char *p = t_path("v3");
    char path[1024];
    REQUIRE(mkdir(p, 0755) == 0);
    static unsigned char seg[4096];
    memcpy(seg, HD_SEG_MAGIC, 8);
    put32(seg + 8, 3);
    put32(seg + 12, 1);
    put32(seg + 28, crc32c_update(0, seg, 28));
    size_t off = HD_SEG_HDR;
    off += v3_record(seg + off, "old1", "first value", 5, 1);
    off += v3_record(seg + off, "old2", "second value", 6, 2);
    snprintf(path, sizeof(path), "%s/00000001.seg", p);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(seg, 1, off, f) == off);
    fclose(f);

    kura_store_config cfg = t_cfg(KURA_SYNC_NONE);
    kura_store *s;
    char err[512];
    t_val v;
    for (int round = 0; round < 2; round++) {
        REQUIRE(t_open(p, "", &cfg, &s, err, sizeof(err)) == KURA_OK);
        CHECK(t_get(s, "old1", &CLK, &v) == KURA_OK && v.len == 11 &&
              memcmp(v.buf, "first value", 11) == 0 && v.cas == 5);
        CHECK(t_get(s, "old2", &CLK, &v) == KURA_OK && v.cas == 6);
        if (round == 0)
            CHECK(t_put(s, "new", "a v4 value", 3, 5000000, 700, KURA_PUT_ANY, 0, &CLK) == KURA_OK);
        else
            CHECK(t_get(s, "new", &CLK, &v) == KURA_OK && v.cas == 700 && v.flags == 3 &&
                  v.exptime == 5000000 && v.len == 10);
        kura_store_close(s);
    }
    snprintf(path, sizeof(path), "%s/00000002.seg", p);
    f = fopen(path, "rb");
    REQUIRE(f);
    unsigned char h[16];
    CHECK(fread(h, 1, 16, f) == 16 && get32(h + 8) == HD_VERSION && get32(h + 12) == 2);
    fclose(f);
}

/* Version 5: a key of 256 to KURA_KEY_MAX bytes has its length as a
 * varint after a klen byte of 0; a version 4 reader refuses such a header,
 * and only what the encoder writes decodes (no escape for a short key, no
 * key past KURA_KEY_MAX). */
static void test_v5_long_keys(void)
{
    static const size_t lens[] = { 255, 256, 300, 1000, 4095, KURA_KEY_MAX };
    for (int type = HD_REC_PUT; type <= HD_REC_ZPUT; type++) {
        if (type == HD_REC_STATE)
            continue;
        for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
            hd_rec r = { .type = (uint8_t)type, .klen = (uint16_t)lens[i],
                         .vlen = type == HD_REC_DEL ? 0 : 77, .seq = 9, .cas = 9, .flags = 3 };
            if (type == HD_REC_ZPUT) {
                r.codec = 1;
                r.rawlen = 100;
            } else {
                r.rawlen = r.vlen;
            }
            unsigned char h[HD_REC_HDR_MAX + 8];
            memset(h, 0xee, sizeof(h));
            size_t n = hd_rec_encode(h, &r);
            hd_rec d;
            memset(&d, 0x5a, sizeof(d));
            CHECK(n <= HD_REC_HDR_MAX);
            CHECK(hd_rec_decode(h, sizeof(h), 5, &d) == 0 && d.hlen == n && same_rec(&r, &d));
            if (lens[i] > 255) {
                CHECK_EQ_INT(h[5], HD_V5_KLONG);
                CHECK(hd_rec_decode(h, sizeof(h), 4, &d) != 0);  /* version 4: no such record */
            } else {
                CHECK_EQ_INT(h[5], 255);
            }
        }
    }
    /* an escape naming a short key, or one past KURA_KEY_MAX: no record */
    hd_rec r = { .type = HD_REC_PUT, .klen = 300, .vlen = 1, .rawlen = 1, .seq = 1 };
    unsigned char h[HD_REC_HDR_MAX + 8];
    hd_rec d;
    memset(h, 0, sizeof(h));
    hd_rec_encode(h, &r);
    CHECK(h[5] == HD_V5_KLONG && h[6] == ((300 & 0x7f) | 0x80) && h[7] == 300 >> 7);
    h[6] = (200 & 0x7f) | 0x80;
    h[7] = 200 >> 7;            /* 200: written in the byte, never escaped */
    CHECK(hd_rec_decode(h, sizeof(h), 5, &d) != 0);
    h[6] = ((KURA_KEY_MAX + 1) & 0x7f) | 0x80;
    h[7] = (KURA_KEY_MAX + 1) >> 7;
    CHECK(hd_rec_decode(h, sizeof(h), 5, &d) != 0);
}

int main(void)
{
    t_setup();
    RUN(test_v4_every_combination);
    RUN(test_v4_sizes);
    RUN(test_v4_rejects);
    RUN(test_v4_checksum_covers_every_byte);
    RUN(test_old_versions_decode);
    RUN(test_zput_versions);
    RUN(test_v5_long_keys);
    RUN(test_v3_database_opens);
    t_teardown();
    UNIT_DONE();
}

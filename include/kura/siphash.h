/*
 * siphash.h - SipHash (Aumasson and Bernstein, 2012), the keyed hash of the
 * stores' hash tables.
 *
 * Why keyed.  The stores' tables (the hash file's open-addressed index, the
 * cache's chained buckets) are indexed by the hash of a key the client
 * chose.  With an unkeyed hash, anyone can compute offline many keys whose
 * hashes share the stripe and home bits and send them: every one lands in
 * the same probe sequence or chain, and each operation on them costs O(n).
 * SipHash is a pseudorandom function of its 128-bit key: without the key,
 * an attacker cannot tell which keys collide, so collisions stay at the
 * rate of chance.  The key is random per process (siphash_process_key), so
 * nothing that outlives the process (files, checkpoints) may depend on a
 * hash value.
 *
 * Rounds.  SipHash-c-d runs c rounds per 8-byte block and d at the end.
 * The tables use SipHash-1-3, the variant made for hash tables (Python,
 * Rust's HashMap and Linux's hsiphash use it); 2-4 is the variant of the
 * paper, kept by the generic siphash_cd() so the implementation is checked
 * against the paper's published vectors as well (tests/unit/test_siphash.c).
 *
 * The 1-3 function is inline, its rounds unrolled: it is on every lookup,
 * where a few nanoseconds show (the generic siphash_cd loops over c and d).
 */
#ifndef KURA_SIPHASH_H
#define KURA_SIPHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct siphash_key {
    uint64_t k0, k1;            /* the key's bytes 0-7 and 8-15, little-endian */
} siphash_key;

/* SipHash-c-d of len bytes at in, 64-bit output.  For tests and for
 * checking the rounds; O(len). */
uint64_t siphash_cd(const siphash_key *key, const void *in, size_t len, int c, int d);

/* Fills *key with 16 random bytes: getrandom(2), else /dev/urandom.
 * KURA_OK, or KURA_EIO when neither gives them (never a fixed key). */
int siphash_random_key(siphash_key *key);

/* The process's key, made on the first call (thread-safe) by
 * siphash_random_key; KURA_EIO, and *key untouched, when no randomness is
 * to be had (every later call then fails too).  The stores call it when
 * they open and keep a copy. */
int siphash_process_key(siphash_key *key);

/* ---- SipHash-1-3, inline ---------------------------------------------- */

static inline uint64_t siphash_rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

#define SIPHASH_ROUND(v0, v1, v2, v3) do {                                  \
        v0 += v1; v1 = siphash_rotl(v1, 13); v1 ^= v0; v0 = siphash_rotl(v0, 32); \
        v2 += v3; v3 = siphash_rotl(v3, 16); v3 ^= v2;                      \
        v0 += v3; v3 = siphash_rotl(v3, 21); v3 ^= v0;                      \
        v2 += v1; v1 = siphash_rotl(v1, 17); v1 ^= v2; v2 = siphash_rotl(v2, 32); \
    } while (0)

/* Eight bytes as SipHash reads them: little-endian, whatever the host. */
static inline uint64_t siphash_le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* The last n < 8 bytes, little-endian in the low bytes.  Without a loop or
 * a variable-length memcpy (a call): when the whole input is at least 8
 * bytes long, one load of its last 8 bytes, shifted; otherwise at most
 * three loads of 4, 2 and 1 bytes. */
static inline uint64_t siphash_tail(const unsigned char *p, size_t n, size_t len)
{
    if (n == 0)
        return 0;
    if (len >= 8)
        return siphash_le64(p + n - 8) >> (64 - 8 * n);
    uint64_t t = 0;
    size_t at = 0;
    if (n & 4) {
        t = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
        at = 4;
    }
    if (n & 2) {
        t |= ((uint64_t)p[at] | (uint64_t)p[at + 1] << 8) << (8 * at);
        at += 2;
    }
    if (n & 1)
        t |= (uint64_t)p[at] << (8 * at);
    return t;
}

/* SipHash-1-3 of len bytes at in; the same value as siphash_cd(key, in,
 * len, 1, 3).  O(len): on this machine about 8 ns for 8 bytes and 2 ns for
 * each 8 more (the unkeyed hash it replaced: 3.5 ns for 8 bytes). */
static inline uint64_t siphash13(const siphash_key *key, const void *in, size_t len)
{
    const unsigned char *p = in;
    uint64_t v0 = key->k0 ^ 0x736f6d6570736575ULL;
    uint64_t v1 = key->k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = key->k0 ^ 0x6c7967656e657261ULL;
    uint64_t v3 = key->k1 ^ 0x7465646279746573ULL;
    size_t n = len;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t m = siphash_le64(p);
        v3 ^= m;
        SIPHASH_ROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56 | siphash_tail(p, n, len);
    v3 ^= b;
    SIPHASH_ROUND(v0, v1, v2, v3);
    v0 ^= b;
    v2 ^= 0xff;
    SIPHASH_ROUND(v0, v1, v2, v3);
    SIPHASH_ROUND(v0, v1, v2, v3);
    SIPHASH_ROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

#endif

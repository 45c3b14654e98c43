/*
 * bytes.h - the little-endian fields and varints of kura's on-disk formats
 * (docs/formats.md): written and read byte by byte, so that the files are
 * the same on any host.  Shared by the hash file, the segment log and the
 * update log.  And the big-endian fields of the wire protocols that have
 * them (memcached's binary protocol, Tokyo Tyrant's, the login's frames).
 */
#ifndef KURA_BYTES_H
#define KURA_BYTES_H

#include <stdint.h>

static inline void put32(unsigned char *p, uint32_t v)
{
    /* unrolled: the compiler merges these into one store (a loop it
     * does not) */
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}
static inline void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}
static inline uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}
static inline uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* LEB128: 7 bits a byte, low first; a set top bit means more follow. */
static inline unsigned char *put_varint(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

/* NULL when the varint runs past end or past 10 bytes. */
static inline const unsigned char *get_varint(const unsigned char *p, const unsigned char *end,
                                              uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; p < end && shift < 70; shift += 7) {
        unsigned char b = *p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return p;
        }
    }
    return NULL;
}

/* a signed value (exptime may be negative: already expired), zigzag-coded
 * so that small magnitudes stay short */
static inline uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t unzigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/* Big-endian (network order) fields. */
static inline uint16_t get_be16(const void *p)
{
    const unsigned char *b = p;
    return (uint16_t)(b[0] << 8 | b[1]);
}
static inline uint32_t get_be32(const void *p)
{
    const unsigned char *b = p;
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}
static inline uint64_t get_be64(const void *p)
{
    const unsigned char *b = p;
    return (uint64_t)get_be32(b) << 32 | get_be32(b + 4);
}
static inline void put_be16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}
static inline void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}
static inline void put_be64(unsigned char *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

#endif

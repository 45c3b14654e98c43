/*
 * seg_item.c - an item's bytes in a segment: the format, and nothing else.
 *
 * Why this shape.  memcached spends 48 to 56 bytes of header on an item
 * (links, refcount, times, cas, flags, lengths) and rounds it up to its
 * slab class; most of that is pointers and fields a cache of small values
 * rarely uses.  Here an item is
 *
 *   kb(1) bits(1) [klen(2)] vlen(1-5, LEB128) [flags(4)] [exptime(4)] cas(4|8) key value
 *
 * packed back to back with no alignment: kb is the key's length plus one
 * for keys of 0..SEG_KLEN_SHORT bytes (a zero kb is where a segment's items
 * end), else SEG_KB_LONG and the length in 2 little-endian bytes after the
 * bits (Tokyo Tyrant's keys, up to KURA_KEY_MAX), so memcached's keys keep
 * a 1-byte length; flags and exptime only where they
 * are set (SI_FLAGS, SI_EXP), the cas as a signed 32-bit delta from the
 * segment's first cas (a segment fills in far fewer than 2^31 of the
 * engine's cas numbers; where it does not, SI_CAS64 keeps all 64 bits).
 * A 12-byte key with a 100-byte value and neither flags nor exptime takes
 * 119 bytes.  The bits byte also carries what the index needs no room for:
 * SI_DELETED (a scan - eviction, warm restart - skips the item), whether
 * it was read, and a 2-bit read frequency for the merge eviction.  Those
 * bits change under the stripe lock of the item's key while the evictor may
 * read them without it, so they are read and written with atomics.
 */
#include <string.h>

#include "seg_int.h"

static inline size_t varint_len(uint32_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

_Static_assert(KURA_KEY_MAX <= UINT16_MAX, "a long key's length fits its 2 bytes");

/* The item's size in its segment.  klen is at most KURA_KEY_MAX.  O(1). */
uint32_t seg_item_size(size_t klen, size_t vlen, uint32_t flags, uint32_t exptime, bool cas64)
{
    return (uint32_t)(2 + (klen > SEG_KLEN_SHORT ? 2 : 0) + varint_len((uint32_t)vlen) + (flags ? 4 : 0) + (exptime ? 4 : 0) +
                      (cas64 ? 8 : 4) + klen + vlen);
}

/* True if cas is kept in 4 bytes as a delta from base. */
bool seg_cas_fits(uint64_t cas, uint64_t base)
{
    int64_t d = (int64_t)(cas - base);
    return d >= INT32_MIN && d <= INT32_MAX;
}

/* Writes the item at p (seg_item_size bytes; the caller reserved them).
 * The value is v0 then v1, either of which may be empty. */
void seg_item_write(uint8_t *p, const char *key, size_t klen, const void *v0, size_t l0,
                    const void *v1, size_t l1, uint32_t flags, uint32_t exptime,
                    uint64_t cas, uint64_t base)
{
    uint32_t vlen = (uint32_t)(l0 + l1);
    uint8_t bits = (flags ? SI_FLAGS : 0) | (exptime ? SI_EXP : 0) |
                   (seg_cas_fits(cas, base) ? 0 : SI_CAS64);
    uint8_t *q = p + 2;
    p[0] = seg_item_kb(klen);
    if (klen > SEG_KLEN_SHORT) {
        *q++ = (uint8_t)(klen & 0xff);
        *q++ = (uint8_t)(klen >> 8);
    }
    for (uint32_t v = vlen; ; v >>= 7) {
        *q++ = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        if (v < 0x80)
            break;
    }
    if (flags) {
        memcpy(q, &flags, 4);
        q += 4;
    }
    if (exptime) {
        memcpy(q, &exptime, 4);
        q += 4;
    }
    if (bits & SI_CAS64) {
        memcpy(q, &cas, 8);
        q += 8;
    } else {
        int32_t d = (int32_t)(int64_t)(cas - base);
        memcpy(q, &d, 4);
        q += 4;
    }
    memcpy(q, key, klen);
    q += klen;
    if (l0)
        memcpy(q, v0, l0);
    if (l1)
        memcpy(q + l0, v1, l1);
    /* the bits last: a scan reads a whole item or sees bits 0 and kb */
    __atomic_store_n(&p[1], bits, __ATOMIC_RELEASE);
}

/* Parses the item at p, of at most room bytes; false if its bytes do not
 * make an item (a scan's end, or damage in a mapped file).  O(1). */
bool seg_item_parse(uint8_t *p, size_t room, uint64_t base, seg_view *v)
{
    if (room < 7 || p[0] == 0)
        return false;
    v->hdr = p;
    v->bits = seg_item_bits(p);
    size_t i = 2;
    if (p[0] == SEG_KB_LONG) {
        v->klen = (uint16_t)(p[2] | p[3] << 8);
        if (v->klen <= SEG_KLEN_SHORT || v->klen > KURA_KEY_MAX)
            return false;
        i = 4;
    } else {
        v->klen = (uint16_t)(p[0] - 1);
    }
    uint32_t vlen = 0;
    for (int shift = 0; ; shift += 7) {
        if (i >= room || shift > 28)
            return false;
        uint8_t b = p[i++];
        vlen |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
    }
    v->vlen = vlen;
    v->flags = 0;
    v->exptime = 0;
    size_t need = i + (v->bits & SI_FLAGS ? 4 : 0) + (v->bits & SI_EXP ? 4 : 0) +
                  (v->bits & SI_CAS64 ? 8 : 4) + v->klen;
    if (need > room || vlen > room - need)
        return false;
    if (v->bits & SI_FLAGS) {
        memcpy(&v->flags, p + i, 4);
        i += 4;
    }
    if (v->bits & SI_EXP) {
        memcpy(&v->exptime, p + i, 4);
        i += 4;
    }
    if (v->bits & SI_CAS64) {
        memcpy(&v->cas, p + i, 8);
        i += 8;
    } else {
        int32_t d;
        memcpy(&d, p + i, 4);
        v->cas = base + (uint64_t)(int64_t)d;
        i += 4;
    }
    v->key = (const char *)p + i;
    v->val = v->key + v->klen;
    v->size = (uint32_t)(need + vlen);
    return true;
}

uint8_t seg_item_bits(const uint8_t *hdr)
{
    return __atomic_load_n(&hdr[1], __ATOMIC_ACQUIRE);
}

/* The bits change only under the stripe lock of the item's key, so a load
 * and a store do not lose a change; atomics for the readers without it. */
void seg_item_set_bits(uint8_t *hdr, uint8_t set)
{
    __atomic_store_n(&hdr[1], (uint8_t)(seg_item_bits(hdr) | set), __ATOMIC_RELEASE);
}

/* A read: fetched, and one more on the frequency (saturating at 3).  Under
 * the key's stripe lock; no store once both are set. */
void seg_item_touch(uint8_t *hdr)
{
    uint8_t b = seg_item_bits(hdr);
    uint8_t f = (uint8_t)((b & SI_FREQ_MASK) >> 5);
    uint8_t nb = (uint8_t)((b & ~SI_FREQ_MASK) | SI_FETCHED | ((f < 3 ? f + 1 : 3) << 5));
    if (nb != b)
        __atomic_store_n(&hdr[1], nb, __ATOMIC_RELAXED);
}

/* The merge's second chance, under the key's stripe lock: true if the item
 * was read since the last merge that met it, and then one less on its
 * frequency. */
bool seg_item_decay(uint8_t *hdr)
{
    uint8_t b = seg_item_bits(hdr);
    uint8_t f = (uint8_t)((b & SI_FREQ_MASK) >> 5);
    if (f == 0)
        return false;
    __atomic_store_n(&hdr[1], (uint8_t)((b & ~SI_FREQ_MASK) | ((f - 1) << 5)), __ATOMIC_RELAXED);
    return true;
}

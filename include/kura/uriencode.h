/*
 * uriencode.h - memcached's uriencode of keys in its text lines (the
 * metadump listing's key=, the watch stream's key=): RFC 3986's
 * unreserved bytes stay, every other byte is %XX (upper-case hex).
 */
#ifndef KURA_URIENCODE_H
#define KURA_URIENCODE_H

#include <stddef.h>

/* Encodes klen bytes of key into out (room for cap bytes, cap > 0) and
 * NUL-terminates it; returns the encoded length.  3 * klen + 1 bytes of
 * room always suffice; with less, the encoding stops before the first
 * byte whose form does not fit.  O(klen). */
size_t kura_uriencode(const char *key, size_t klen, char *out, size_t cap);

#endif

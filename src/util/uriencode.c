/*
 * uriencode.c - memcached's uriencode (include/kura/uriencode.h), once for
 * the listing and the watch stream, which print keys the same way.
 */
#include <stdbool.h>

#include "kura/uriencode.h"

size_t kura_uriencode(const char *key, size_t klen, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (size_t i = 0; i < klen; i++) {
        unsigned char c = (unsigned char)key[i];
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                     (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
        if (n + (plain ? 1 : 3) >= cap)
            break;
        if (plain) {
            out[n++] = (char)c;
        } else {
            out[n++] = '%';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    out[n] = '\0';
    return n;
}

/*
 * escape.c - peer-supplied strings escaped for the log (escape.h).
 *
 * Into the caller's buffer: nothing is allocated, so a log call can escape
 * on its stack whatever thread it runs on.
 */
#include <string.h>

#include "kura/escape.h"

/* c as it is written: into e, returning its length (1, 2 or 4). */
static size_t escape_byte(unsigned char c, char e[4])
{
    static const char hex[] = "0123456789abcdef";
    if (c == '\\') {
        e[0] = e[1] = '\\';
        return 2;
    }
    if (c >= 0x20 && c < 0x7f) {
        e[0] = (char)c;
        return 1;
    }
    e[0] = '\\';
    e[1] = 'x';
    e[2] = hex[c >> 4];
    e[3] = hex[c & 15];
    return 4;
}

const char *kura_escape(char *dst, size_t cap, const char *src, size_t n)
{
    char e[4];
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += escape_byte((unsigned char)src[i], e);
    /* all of it, or what fits before "..." and the NUL */
    size_t room = total < cap ? cap - 1 : cap - 4, o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = escape_byte((unsigned char)src[i], e);
        if (o + len > room)
            break;
        memcpy(dst + o, e, len);
        o += len;
    }
    if (total >= cap) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
    return dst;
}

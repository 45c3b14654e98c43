/*
 * base64.c - base64 with memcached's decoding rules (see base64.h).
 */
#include <stdint.h>
#include <string.h>

#include "kura/base64.h"

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    if (c == '=') return 0;
    return -1;
}

size_t kura_base64_decode(const char *src, size_t len, unsigned char *out, size_t out_len)
{
    size_t count = 0;
    for (size_t i = 0; i < len; i++)
        if (b64_value((unsigned char)src[i]) >= 0)
            count++;
    if (count == 0 || count % 4 || count / 4 * 3 > out_len)
        return 0;

    unsigned char block[4];
    unsigned char *pos = out;
    int pad = 0;
    count = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value((unsigned char)src[i]);
        if (v < 0)
            continue;
        if (src[i] == '=')
            pad++;
        block[count++] = (unsigned char)v;
        if (count == 4) {
            *pos++ = (unsigned char)((block[0] << 2) | (block[1] >> 4));
            *pos++ = (unsigned char)((block[1] << 4) | (block[2] >> 2));
            *pos++ = (unsigned char)((block[2] << 6) | block[3]);
            count = 0;
            if (pad) {
                if (pad > 2)
                    return 0;           /* invalid padding */
                pos -= pad;
                break;
            }
        }
    }
    return (size_t)(pos - out);
}

size_t kura_base64_encode(const unsigned char *src, size_t len, char *out)
{
    char *p = out;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
        *p++ = b64_alphabet[v >> 18];
        *p++ = b64_alphabet[(v >> 12) & 63];
        *p++ = b64_alphabet[(v >> 6) & 63];
        *p++ = b64_alphabet[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)src[i] << 16 | (i + 1 < len ? (uint32_t)src[i + 1] << 8 : 0);
        *p++ = b64_alphabet[v >> 18];
        *p++ = b64_alphabet[(v >> 12) & 63];
        *p++ = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
        *p++ = '=';
    }
    return (size_t)(p - out);
}

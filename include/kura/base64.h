/*
 * base64.h - base64 as memcached's meta protocol uses it for binary keys
 * (the "b" flag): the standard alphabet with '=' padding.
 *
 * The decoder follows memcached's (from Jouni Malinen's public domain
 * code) so that the same inputs are refused: characters outside the
 * alphabet are skipped, the remaining count must be a multiple of 4, and
 * padding ends the input.
 */
#ifndef KURA_BASE64_H
#define KURA_BASE64_H

#include <stddef.h>

/* Decodes len bytes at src into out (room for out_len); returns the decoded
 * length, or 0 if the input does not decode or does not fit. */
size_t kura_base64_decode(const char *src, size_t len, unsigned char *out, size_t out_len);

/* Encodes len bytes into out, which has room for 4 * ((len + 2) / 3) bytes;
 * returns the encoded length. */
size_t kura_base64_encode(const unsigned char *src, size_t len, char *out);

#endif

/*
 * escape.h - a string that came from a peer, made safe to log (escape.c).
 *
 * A log line is one line: a host name, key or message a client or another
 * server sent may hold a newline (a forged line after it), a terminal
 * escape, or bytes that are not text.  kura_escape() writes such a string
 * with every byte outside printable ASCII as \xNN and a backslash as \\,
 * so that the line shows exactly what was sent and nothing more.
 */
#ifndef KURA_ESCAPE_H
#define KURA_ESCAPE_H

#include <stddef.h>

/* At most this many bytes (the NUL included) for n bytes escaped: 4 each. */
#define KURA_ESCAPED_MAX(n) ((n) * 4 + 1)

/* Writes src[0..n) escaped into dst (cap bytes, cap >= 4), NUL-terminated:
 * bytes 0x20-0x7e but the backslash as they are, a backslash as "\\",
 * every other byte as "\xNN" (lower-case hex).  When the result does not
 * fit, as much as fits is written (never half an escape) and "..."
 * ends it.  Returns dst, for use as a printf argument.  O(n). */
const char *kura_escape(char *dst, size_t cap, const char *src, size_t n);

#endif

/*
 * test_escape.c - kura_escape (src/util/escape.c), the log's escaping of
 * peer-supplied strings: printable ASCII kept, a backslash doubled, every
 * other byte (newline, NUL, escape, DEL, 0x80 up) as \xNN; a result that
 * does not fit cut at a whole escape and ended with "...", never past cap.
 */
#include <string.h>

#include "kura/escape.h"
#include "unit.h"

#define ESC(buf, s) kura_escape(buf, sizeof(buf), s, sizeof(s) - 1)

static void test_bytes(void)
{
    char b[200];
    CHECK_EQ_STR(ESC(b, "127.0.0.1"), "127.0.0.1");
    CHECK_EQ_STR(ESC(b, ""), "");
    CHECK_EQ_STR(ESC(b, "evil\n2026 ERROR forged"), "evil\\x0a2026 ERROR forged");
    CHECK_EQ_STR(ESC(b, "a\r\nb"), "a\\x0d\\x0ab");
    CHECK_EQ_STR(ESC(b, "x\x1b[2J\x7f\x9b\xff"), "x\\x1b[2J\\x7f\\x9b\\xff");
    CHECK_EQ_STR(ESC(b, "a\0b"), "a\\x00b");
    CHECK_EQ_STR(ESC(b, "back\\slash"), "back\\\\slash");   /* "\x0a" sent as text stays apart */
    CHECK(strchr(ESC(b, "\n\r\t\v\f"), '\n') == NULL);
}

static void test_cut(void)
{
    char b[8];
    CHECK_EQ_STR(ESC(b, "abcdefg"), "abcdefg");             /* exactly fits */
    CHECK_EQ_STR(ESC(b, "abcdefgh"), "abcd...");
    CHECK_EQ_STR(ESC(b, "ab\ncdefgh"), "ab...");            /* never half an escape */
    char small[4];
    CHECK_EQ_STR(ESC(small, "abc"), "abc");
    CHECK_EQ_STR(ESC(small, "abcd"), "...");
    char big[KURA_ESCAPED_MAX(3)];
    CHECK_EQ_STR(ESC(big, "\n\n\n"), "\\x0a\\x0a\\x0a");      /* the bound is enough */
}

int main(void)
{
    RUN(test_bytes);
    RUN(test_cut);
    UNIT_DONE();
}

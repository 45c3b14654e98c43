/*
 * fuzz_tt.c - Tokyo Tyrant's binary protocol (src/proto/tt.c, tt_walk.c,
 * tt_misc.c): its fixed fields, announced lengths, mget's and misc's lists,
 * the bodies read past when too long, walks paused and resumed, through
 * session.c.
 *
 * Input: the bytes a client sends after the first: the first byte is
 * always the magic 0xC8, which is what makes a session Tokyo Tyrant's, so
 * the fuzzer spends no inputs on the memcached protocols.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *p = malloc(size + 1);
    if (!p)
        abort();
    p[0] = 0xC8;
    if (size)
        memcpy(p + 1, data, size);
    fuzz_session(p, size + 1);
    free(p);
    return 0;
}

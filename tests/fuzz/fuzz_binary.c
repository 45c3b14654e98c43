/*
 * fuzz_binary.c - the memcached binary protocol (src/proto/binary.c): the
 * 24-byte request header, extras, keys and bodies, quiet commands and the
 * swallowing of refused bodies, through session.c.
 *
 * Input: the bytes a client sends after the first: the first byte is
 * always the request magic 0x80, which is what makes a session binary,
 * so the fuzzer spends no inputs on the text protocol.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *p = malloc(size + 1);
    if (!p)
        abort();
    p[0] = 0x80;
    if (size)
        memcpy(p + 1, data, size);
    fuzz_session(p, size + 1);
    free(p);
    return 0;
}

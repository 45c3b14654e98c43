/*
 * fuzz_text.c - the memcached text protocol's parser and its commands
 * (src/proto/text.c, stats.c, listing.c, digest.c), as a client's bytes
 * reach them: session.c feeds the input to a session in chunks.
 *
 * Input: the bytes a client sends.  A first byte of 0x80 would choose the
 * binary protocol (fuzz_binary.c covers it), so it is replaced by a space.
 * tests/fuzz/text.dict names the commands and their options.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] != 0x80) {
        fuzz_session(data, size);
        return 0;
    }
    unsigned char *p = fuzz_dup(data, size);
    p[0] = ' ';
    fuzz_session(p, size);
    free(p);
    return 0;
}

/*
 * fuzz_meta.c - the meta commands (mg, ms, md, ma, mn, me; src/proto/meta.c)
 * and their flags, base64 keys, opaque tokens and the engine's access
 * marks behind them, through the text session they share (session.c).
 *
 * Input: the bytes a client sends, as fuzz_text.c's; what makes this the
 * meta target is its corpus (meta requests only) and tests/fuzz/meta.dict
 * (the meta commands and every flag), which keep the fuzzer in meta.c.
 */
#include <stdlib.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || data[0] == 0x80)
        return 0;                       /* the binary protocol: fuzz_binary.c */
    fuzz_session(data, size);
    return 0;
}

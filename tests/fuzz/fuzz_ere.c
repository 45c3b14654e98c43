/*
 * fuzz_ere.c - kura's regular-expression compiler and matcher
 * (src/util/ere.c): the pattern of Tokyo Tyrant's misc regex is a
 * client's bytes, compiled by ere_compile and run over every key.
 *
 * Input: a flags byte (bit 0: ERE_ICASE; bits 1-7: how many bytes of the
 * rest are the subject, times 4), then the pattern, then the subject (the
 * last bytes).  A pattern either compiles or is refused with a reason; a
 * compiled one matches the subject within its bound ((n + 1) * 2 *
 * program size steps, no more than ERE_PROG_MAX instructions), gives the
 * same answer with a budget it does not reach, and stops on one it does.
 */
#include <stdlib.h>

#include "kura/ere.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned flags = data[0] & 1 ? ERE_ICASE : 0;
    size_t slen = (size_t)(data[0] >> 1) * 4;
    data++;
    size--;
    if (slen > size)
        slen = size;
    const char *pat = (const char *)data, *subj = (const char *)data + size - slen;
    size_t plen = size - slen;
    ere *re;
    const char *why = NULL;
    int rc = ere_compile(&re, pat, plen, flags, &why);
    if (rc != ERE_OK) {
        if (re != NULL || why == NULL || rc >= 0)
            abort();
        return 0;
    }
    size_t n = ere_size(re);
    if (n == 0 || n > ERE_PROG_MAX)
        abort();
    uint64_t steps = 0, bound = (uint64_t)(slen + 1) * 2 * n;
    int m = ere_match(re, subj, slen, 0, &steps);
    if ((m != ERE_OK && m != ERE_NOMATCH) || steps > bound)
        abort();
    uint64_t again = 0;
    if (ere_match(re, subj, slen, bound + 1, &again) != m || again != steps)
        abort();
    if (steps > 10) {
        again = 0;
        int b = ere_match(re, subj, slen, steps / 2, &again);
        if (b != ERE_EBUDGET && b != m)
            abort();
    }
    ere_free(re);
    return 0;
}

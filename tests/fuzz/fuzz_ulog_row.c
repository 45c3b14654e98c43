/*
 * fuzz_ulog_row.c - the update log's row decoder, ul_decode() (src/log/ulog.c),
 * which reads rows from segment files and, on a replica, straight off the
 * master's socket.
 *
 * Input: a flags byte (fuzz.h: FUZZ_FIX_CRC repairs each row's CRC-32C so
 * that mutations reach the field decoding behind it), then rows back to
 * back, decoded in turn until one is not a row or is cut short.  Every
 * row decoded is encoded again with ul_encode() and decoded once more: the
 * two decodings must agree (a row the reader accepts is one the writer
 * can write), which catches a decoder that takes fields it cannot mean.
 */
#include <stdlib.h>
#include <string.h>

#include "kura/ulog.h"
#include "fuzz.h"

static void same(const ul_row *a, const ul_row *b)
{
    if (a->type != b->type || a->ts != b->ts || a->sid != b->sid || a->flags != b->flags ||
        a->exptime != b->exptime || a->cas != b->cas || a->prev_ts != b->prev_ts ||
        a->klen != b->klen || a->vlen != b->vlen ||
        (a->klen && memcmp(a->key, b->key, a->klen) != 0) ||
        (a->vlen && memcmp(a->val, b->val, a->vlen) != 0) ||
        (a->origin_ts && a->origin_ts != b->origin_ts))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned char *buf = fuzz_dup(data + 1, size - 1);
    size_t len = size - 1, off = 0, need;
    if (data[0] & FUZZ_FIX_CRC)
        fuzz_fix_ul_rows(buf, len);
    for (;;) {
        ul_row row;
        long long r = ul_decode(buf + off, len - off, &row, &need);
        if (r == SL_NEED_MORE && need <= len - off)
            abort();                    /* asked for bytes it had */
        if (r <= 0)
            break;
        if ((size_t)r > len - off)
            abort();
        unsigned char *enc = malloc(UL_ROW_HEAD_MAX + row.vlen);
        if (!enc)
            abort();
        size_t h = ul_encode(enc, &row);
        if (row.vlen)
            memcpy(enc + h, row.val, row.vlen);
        ul_row again;
        if (ul_decode(enc, h + row.vlen, &again, &need) != (long long)(h + row.vlen))
            abort();
        same(&row, &again);
        free(enc);
        off += (size_t)r;
    }
    free(buf);
    return 0;
}

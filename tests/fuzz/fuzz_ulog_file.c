/*
 * fuzz_ulog_file.c - the update log's file decoding (src/log/ulog.c over
 * src/log/seglog.c): a segment file's header, the scan that finds where
 * its rows end, the header row and every row a reader hands out, as
 * kuractl ulog list/show and a master's stream read a log they are given.
 *
 * Input: a flags byte, then the segment file 00000001.seg, opened read
 * only (nothing in the directory changes) in a temp directory.  With
 * FUZZ_FIX_CRC the segment header's id and CRC and every row's CRC are
 * repaired, so that mutations reach the row decoding and the reader.
 */
#include <stdlib.h>
#include <string.h>

#include "kura/bytes.h"
#include "kura/crc32c.h"
#include "kura/ulog.h"
#include "fuzz.h"

static void quiet(void *arg, int level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned char *seg = fuzz_dup(data + 1, size - 1);
    size_t len = size - 1;
    if ((data[0] & FUZZ_FIX_CRC) && len >= SL_SEG_HDR) {
        put32(seg + 12, 1);
        put32(seg + 28, crc32c_update(0, seg, 28));
        fuzz_fix_ul_rows(seg + SL_SEG_HDR, len - SL_SEG_HDR);
    }
    fuzz_clear();
    fuzz_write("ulog/00000001.seg", seg, len);
    free(seg);

    ul_config cfg = { .dir = fuzz_path("ulog"), .sid = 1, .read_only = true, .log = quiet };
    ul_log *log;
    char err[256];
    if (ul_open(&cfg, &log, NULL, err, sizeof(err)) != 0)
        return 0;
    ul_seg_info *segs;
    size_t n;
    if (ul_segments(log, &segs, &n) == 0)
        free(segs);
    ul_extent ex;
    ul_get_extent(log, &ex);
    ul_reader *rd;
    if (ul_reader_open(log, 0, &rd) == 0) {
        ul_row row;
        while (ul_reader_next(rd, &row) == 0)
            if (row.klen > UL_KEY_MAX || (row.type != UL_PUT && row.vlen))
                abort();
        ul_reader_close(rd);
    }
    ul_close(log);
    return 0;
}

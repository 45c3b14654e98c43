/*
 * fuzz_snapshot.c - the snapshot reader (src/snap/snapshot.c): snap_peek's
 * look at the two ends, snap_open's header, trailer and whole-file checks,
 * then snap_next's decompression and item records, as kurad reads a
 * snapshot at start and kuractl snapshot verify/restore and load read one.
 *
 * Input: a flags byte, then the file.  With FUZZ_FIX_CRC the header's CRC
 * (bytes 60..63), each version 2 block's CRCs and the trailer's CRC of the
 * whole file (its last 4 bytes) are repaired, so that mutations reach the
 * stream and its records (version 1) or the blocks' columns (version 2);
 * the seeds use codec "none", whose bytes are the records or columns
 * themselves.  The corpus holds both versions (v1-*: written before
 * version 2, kept as they were).
 */
#include <stdlib.h>

#include "kura/snapshot.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned char *f = fuzz_dup(data + 1, size - 1);
    size_t len = size - 1;
    if (data[0] & FUZZ_FIX_CRC)
        fuzz_fix_snapshot(f, len);
    fuzz_write("s.ksnap", f, len);
    free(f);

    const char *path = fuzz_path("s.ksnap");
    char err[512];
    snap_info info;
    snap_peek(path, &info, err, sizeof(err));
    snap_reader *r;
    if (snap_open(path, &r, &info, err, sizeof(err)) != 0)
        return 0;
    kura_item it;
    uint64_t n = 0;
    int rc;
    while ((rc = snap_next(r, &it, err, sizeof(err))) == 0) {
        if (it.klen == 0 || it.klen > 250)
            abort();
        n++;
    }
    if (rc == SNAP_DONE && n != info.items)
        abort();                        /* "the item count checked" */
    snap_close(r);
    return 0;
}

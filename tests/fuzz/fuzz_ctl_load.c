/*
 * fuzz_ctl_load.c - kuractl load's two dump formats (src/ctl/ctl_dump.c,
 * ctl_load_file): the memcached format's "set KEY FLAGS EXPTIME BYTES"
 * lines and values, and the kura format (a snapshot file, read through
 * ctl_snap.c and src/snap/), told apart by the first bytes as load does.
 *
 * Input: a flags byte, then the dump file, loaded into an in-memory cache
 * opened for each input (the store load writes to is not what is under
 * test).  With FUZZ_FIX_CRC a kura-format file's checksums are repaired
 * (fuzz.h), so that mutations reach its items.  kuractl.c's main() is
 * renamed away (Makefile) so that its globals and helpers link here.
 */
#include <stdlib.h>
#include <string.h>

#include "kura/snapshot.h"
#include "kura/store.h"
#include "../../src/ctl/ctl.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned char *f = fuzz_dup(data + 1, size - 1);
    size_t len = size - 1;
    if ((data[0] & FUZZ_FIX_CRC) && len >= 8 && memcmp(f, SNAP_MAGIC, 8) == 0)
        fuzz_fix_snapshot(f, len);
    fuzz_write("dump", f, len);
    free(f);

    g_ctl.quiet = true;
    kura_store_config cfg = { .mem_limit = 8 << 20, .item_size_max = 1 << 20 };
    kura_store *s;
    char err[256];
    if (kura_store_open("*", &cfg, &s, err, sizeof(err)) != KURA_OK)
        abort();
    uint64_t items = 0;
    ctl_load_file(s, fuzz_path("dump"), &items);
    kura_store_close(s);
    return 0;
}

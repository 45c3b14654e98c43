/*
 * test_tree_wbehind.c - the B+ tree's write-behind of large values
 * (src/store/tree/tree.c bg_writebehind; docs/options.md, `wbehind`).
 *
 * A value too large for a leaf is written into its own run of pages; the
 * background thread starts the writeback of those pages once `wbehind`
 * bytes of runs have been written since it last did, so that the disk
 * works while the sets go on instead of at the next sync.  With
 * #wbehind=64k, twenty values of 20 KB (400 KB of runs) get their
 * writeback started: `tree_writebehind_bytes` passes 64 KB.  With
 * #wbehind=0 (the negative check) the same sets are left to the kernel:
 * once a checkpoint shows the background thread has run after every set
 * (the small sets that follow the large ones fill the log past #ckpt),
 * the count is still 0.  Whether the disk is kept busy is a matter for
 * the benchmark (bench/footprint.py --parts disk --disk-limit 50).  Waits
 * are polls with deadlines scaled by KURA_TEST_DEADLINE_SCALE (unit.h):
 * nothing here depends on how fast the machine is.
 */
#include <string.h>
#include <time.h>

#include "unit.h"
#include "hashdb_testlib.h"
#include "tree_testlib.h"

static kura_clock CLK = { .now = 2000000 };

static int put(kura_store *s, const char *key, size_t n)
{
    static unsigned char v[20000];
    memset(v, key[0], sizeof(v));
    kura_item it = { .key = key, .klen = strlen(key), .val = v, .vlen = n };
    return kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK);
}

/* Twenty 20 KB sets, then small ones past #ckpt=64k; returns the store
 * after its background thread has written a checkpoint since (polled until
 * unit_deadline(20): 20 s times KURA_TEST_DEADLINE_SCALE), or NULL. */
static kura_store *load(const char *name, const char *params)
{
    kura_store *s = t_open_tree(tpath(name), params);
    CHECK(s != NULL);
    if (!s)
        return NULL;
    char k[32];
    for (int i = 0; i < 20; i++) {
        snprintf(k, sizeof(k), "big%d", i);
        CHECK_EQ_INT(put(s, k, 20000), KURA_OK);
    }
    uint64_t ck0 = t_stat(s, "tree_checkpoints");
    for (int i = 0; i < 3000; i++) {
        snprintf(k, sizeof(k), "small-key-%06d", i);
        CHECK_EQ_INT(put(s, k, 40), KURA_OK);
    }
    double end = unit_deadline(20);
    while (t_stat(s, "tree_checkpoints") <= ck0 && unit_now() < end) {
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    CHECK(t_stat(s, "tree_checkpoints") > ck0);
    return s;
}

static void test_writeback_started(void)
{
    kura_store *s = load("wb", "#psiz=4096#ckpt=64k#wbehind=64k");
    if (!s)
        return;
    /* (the round that saw the last runs may come after the checkpoint) */
    double end = unit_deadline(20);
    uint64_t b;
    while ((b = t_stat(s, "tree_writebehind_bytes")) < 65536 && unit_now() < end) {
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    printf("# write-behind of 20 x 20 KB runs, #wbehind=64k: %llu bytes\n", (unsigned long long)b);
    CHECK(b >= 65536);
    CHECK(b <= 20 * 24576);
    kura_store_close(s);
}

static void test_off_negative(void)
{
    kura_store *s = load("wb0", "#psiz=4096#ckpt=64k#wbehind=0");
    if (!s)
        return;
    CHECK_EQ_INT((int)t_stat(s, "tree_writebehind_bytes"), 0);
    kura_store_close(s);
}

int main(void)
{
    t_setup();
    RUN(test_writeback_started);
    RUN(test_off_negative);
    t_teardown();
    UNIT_DONE();
}

/*
 * testhooks.h - the switches a test sets to make the library behave in a
 * way it can check (most bring back an old, knowingly unsafe behaviour:
 * the negative checks that show a test fails without what it guards).
 *
 * They exist only in test builds: compiled with -DKURA_TEST_HOOKS (the
 * Makefile's TEST_HOOKS=1: `make test`'s build-test/, build-asan/,
 * build-tsan/), the switches are fields of one global, kura_test
 * (src/util/testhooks.c), and production code reads one as
 * KURA_TEST_SWITCH(name), calls a hook as KURA_TEST_CALL(name, args...)
 * (name##_arg first) and clears one as KURA_TEST_SET(name, v).  Without
 * the define (plain `make`, `make deb`, `make install`) there is no
 * kura_test: a switch is the constant 0, a call and a set are nothing, so
 * the compiler drops every test-only branch and a release kurad or kuractl
 * holds none of them, reads no test environment variable and no test
 * option.  A reader of production code sees at a glance which branches
 * only a test takes, and a test has one header to include.
 *
 * Every switch is off (zero) unless a test sets it: a unit test directly;
 * kurad of a test build sets list_inline, vref_early_release,
 * conn_sndbuf and job_inline from KURA_TEST_LIST_INLINE,
 * KURA_TEST_VREF_EARLY, KURA_TEST_SNDBUF and KURA_TEST_JOB_INLINE in its
 * environment (ha_no_fence from KURA_TEST_HA_NO_FENCE) (and kuractl of a test build reads
 * KURACTL_TEST_IMPORT_DROP_FIRST), so that an integration test can show
 * its check fails without the bound or the hold it guards, or meet partial
 * sends.  A switch is process-wide: it applies to every store the test has
 * open.  The header belongs to util/, the lowest layer (tools/layers.txt),
 * so that any layer may read a switch; the stores' test-only entry points
 * are the store's (storedebug.h).
 */
#ifndef KURA_TESTHOOKS_H
#define KURA_TESTHOOKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef KURA_TEST_HOOKS

typedef struct kura_testhooks {
    /* While true, no backend's background work runs (dbfile.c: the
     * interval syncer still does), so that a test's crash image holds no
     * checkpoint but the ones it asked for, however slowly it runs.
     * Writers never wait for the background work, so holding it changes
     * only when checkpoints are written. */
    _Atomic bool bg_hold;
    /* The stores write no log line of their own: the hash file none at
     * all, the B+ tree none to stderr (a cfg->log still gets its lines).
     * For test programs whose expected damage would flood their output. */
    _Atomic bool quiet_stores;
    /* The hash file's next open keeps the hash key it draws instead of
     * the checkpoint's, as an open of an older checkpoint or a rebuild
     * does; the open clears it. */
    bool hashdb_fresh_key;
    /* Hash file compaction removes a compacted segment's file at once, as
     * before checkpoint version 7, instead of after two checkpoints: the
     * negative check of test_hashdb's test_retired_segments. */
    bool hashdb_drop_compacted;
    /* A hash file checkpoint keeps checkpoint.prev beside it, as before
     * the previous one was removed once the new one read back: the
     * negative check of test_hashdb_crash's test_ckpt_retention. */
    bool hashdb_keep_ckpt_prev;
    /* Hash file checkpoints are written in version 7 (16-byte slots, as
     * before version 8), for the tests that open one. */
    bool hashdb_ckpt_v7;
    /* A hash file open's replay leaves its stripes' checkpoint sums
     * unmarked, so that the end of the open takes a changed stripe's live
     * bytes from the checkpoint: the negative check of test_hashdb's
     * test_live_bytes_reopen. */
    bool hashdb_cksum_unmarked;
    /* A new hash file opened without #segsiz starts its segments at this
     * many bytes instead of 1 MiB (0: 1 MiB), so that a test's few
     * records pass through the sizes they grow by. */
    uint64_t hashdb_seg_first;
    /* Called by a hash file writer copying a large value while the
     * readers of its stripe are let in (hd_append_put), so that a test
     * can hold the copy there and read meanwhile.  Set before the writer
     * starts, cleared after it is joined. */
    void (*hashdb_copy)(void *arg);
    void *hashdb_copy_arg;
    /* Listings and digest (src/proto/listing.c, digest.c) and Tokyo
     * Tyrant's listings (tt_walk.c: fwmkeys, misc regex and range) run
     * whole in the call that starts them, without the per-call bounds
     * that let the worker's other connections have a turn (and without
     * the output's high-water pause): the walk inline on the worker, as
     * before the bounds.  Read from KURA_TEST_LIST_INLINE by
     * listing_register. */
    bool list_inline;
    /* A segment scan reads each window afresh from the offset asked for,
     * as it did before it kept what it had read: the negative check of
     * test_seglog's linear resync (quadratic with this set). */
    bool sl_scan_reread;
    /* A sealed segment's pages stay mapped in the process, as before they
     * were released at the seal: test_seglog's negative check. */
    bool sl_keep_sealed_resident;
    /* sl_append stores every record that fits into the write mapping, large
     * ones too, as before records of a page or more went in with pwritev:
     * test_seglog's negative check (the large records' pages then fault
     * into the process through the mapping). */
    bool sl_large_via_map;
    /* sl_scan_crc checksums every range afresh, as checks did before the
     * prefix checksums: test_seglog's negative check (quadratic). */
    bool sl_scan_crc_direct;
    /* The hash file's sweep is never quiet: it reads every entry's record
     * pass after pass, as it did before (test_hashdb's negative check). */
    bool hd_sweep_never_quiet;
    /* The B+ tree's negative checks (test_tree_pack.c, test_powerloss.c):
     * its checkpoints leave the log's active segment as it is, as before
     * they sealed it (the log then grows with segsiz, not checkpoints);
     * a page freed since the last checkpoint is reusable at once, before
     * the meta page that stops reaching it is durable (unsafe: the
     * power-loss images must catch it); inserts split a full leaf without
     * first sharing its cells with a sibling; the free pages that end the
     * file stay in it; a freed page is never reused (it is lost); every
     * split is even (none of the right-most split's full pages). */
    bool tree_keep_wal;
    bool tree_keep_tail;
    bool tree_no_reuse;
    bool tree_even_split;
    bool tree_reuse_pending;
    bool tree_no_share;
    /* The B+ tree's reads take the tree lock exclusive, as before they
     * shared it (test_tree_readers' negative check: two gets are never
     * inside the store at once). */
    bool tree_read_exclusive;
    /* A B+ tree get looks in the thread's last leaf without checking
     * that it holds the key's range (test_tree's negative check). */
    bool tree_last_leaf_unchecked;
    /* A B+ tree change starts from the last put's kept path without
     * checking that its leaf's range holds the key (test_tree's negative
     * check of the kept path, tree_search.c). */
    bool tree_wpath_unchecked;
    /* Called by a B+ tree get between letting the lock go and reading its
     * overflow run (tree.c, get_ovf), so that a test can change the key
     * and reuse the run's pages meanwhile; and the negative check: the
     * get answers with what it read, without looking the key up again. */
    void (*tree_ovf_unlocked)(void *arg);
    void *tree_ovf_unlocked_arg;
    bool tree_ovf_no_recheck;
    /* Called by a B+ tree get once it found its leaf, unpinned
     * (tree_search.c; leaf: the page's bytes), so that a test can evict
     * and reload pages while the get reads it; and the negative check: an
     * evicted page object is reusable at once, not once every get that
     * may read it is out (tree_cache.c's limbo). */
    void (*tree_get_parked)(void *arg, const unsigned char *leaf);
    void *tree_get_parked_arg;
    bool tree_limbo_off;
    /* ... and every reader of the tree enters its lock with the epoch, as
     * a get does, walks too: a walk then holds every page object evicted
     * while it is inside (test_tree_unpinned's negative check of the
     * limbo's bound). */
    bool tree_walk_epoch;
    /* The B+ tree's gets neither use nor fill its cache of large values
     * (tree_vcache.c): every get reads and checks its run, as before. */
    bool tree_vcache_off;
    /* The negative check of its bound: an entry is not dropped when its
     * run is freed (it stays until evicted; the cas check still keeps it
     * from answering for another value). */
    bool tree_vcache_no_drop;
    /* Called by a B+ tree checkpoint once it let the lock go and before it
     * writes its pages (tree_commit.c), so that a test can change the
     * pages it is about to write; and the negative check: a change to a
     * page being written renames the page object in place (as before
     * checkpoints wrote outside the lock), not a copy of it. */
    void (*tree_ckpt_writing)(void *arg);
    void *tree_ckpt_writing_arg;
    bool tree_ckpt_no_copy;
    /* The B+ tree's large values written once (tree_wal.c, RUN records;
     * test_tree_runs.c, test_powerloss.c): the put logs the value as it
     * did before (the bytes are written twice: the measurement's negative
     * check); the log is synced without syncing the tree file first (a
     * durable record may name a run that is not: a power-loss image loses
     * an acknowledged value); a freed run is reusable at once, before the
     * checkpoint that no longer needs the RUN record naming it (replay
     * meets a run overwritten). */
    bool tree_log_values;
    /* ... and a run that extends the file writes its last page's padding
     * too (not only up to the file-system block past its stored bytes),
     * as before: test_tree_runs' negative check of the bytes written. */
    bool tree_run_pad_written;
    bool tree_run_no_presync;
    bool tree_run_reuse_now;
    /* A value sent by reference (src/proto/value.c) has its hold released
     * as soon as it is queued, its bytes still to be sent: the negative
     * check of test_value_refs (a slow reader meets the freed entry).  Read
     * from KURA_TEST_VREF_EARLY by the first such value. */
    bool vref_early_release;
    /* kurad sets SO_SNDBUF to this on every client socket (0: the
     * kernel's own, which grows to MiBs): test_value_refs' slow client
     * then meets partial sends of every large reply, whatever the
     * kernel's tuning.  Read from KURA_TEST_SNDBUF by conn_new. */
    int conn_sndbuf;
    /* Called each time engine_usage_exact walks the keys to count them
     * (src/engine/count.c), so that test_count can show a count after a
     * flush does not walk, and one on a store opened under a watermark
     * does, once. */
    void (*count_walked)(void *arg);
    void *count_walked_arg;
    /* Tokyo Tyrant's copy and restore run on the worker that received
     * them (snapd_tt_job), as before they moved to the snapshot thread:
     * the negative check of test_tt_copy (another client's get waits for
     * the whole copy).  Read from KURA_TEST_JOB_INLINE by snapd_start. */
    bool job_inline;
    /* Failover's leader keeps its write fence open for good while it
     * leads (no deadline from its lease): a leader paused past its lease
     * takes writes when it wakes, until its thread learns it leads no
     * more, as before the fence.  The negative check of test_ha's Fence.
     * Read from KURA_TEST_HA_NO_FENCE by ha_start. */
    bool ha_no_fence;
} kura_testhooks;

extern kura_testhooks kura_test;

#define KURA_TEST_SWITCH(name) (kura_test.name)
#define KURA_TEST_SET(name, v) ((void)(kura_test.name = (v)))
#define KURA_TEST_CALL(name, ...) \
    (kura_test.name ? kura_test.name(kura_test.name##_arg, ##__VA_ARGS__) : (void)0)

#else   /* a release build: no switch, no hook */

/* takes a call's arguments so that they count as used; inlined to nothing */
static inline void kura_nohook(int none, ...)
{
    (void)none;
}

#define KURA_TEST_SWITCH(name) 0
#define KURA_TEST_SET(name, v) ((void)0)
#define KURA_TEST_CALL(name, ...) kura_nohook(0, ##__VA_ARGS__)

#endif

#endif

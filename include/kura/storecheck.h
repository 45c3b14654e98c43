/*
 * storecheck.h - full checks of a file backend's database, for an operator
 * (kuractl check) and for tests: every record read and checked, and the
 * backend's structures checked against the records.
 *
 * A check runs on a store opened read-only (nothing else using it) and
 * never changes it.  Damage is reported line by line through a callback
 * (a record's place, and its key when the bytes still say it), and
 * counted; the return value is KURA_OK when the check could run to its
 * end, whatever it found, or an error that stopped it (KURA_ENOMEM,
 * KURA_EIO on an unreadable file).
 */
#ifndef KURA_STORECHECK_H
#define KURA_STORECHECK_H

#include <stdint.h>

#include "kura/store.h"

typedef struct kura_check_report {
    uint64_t segments;          /* hash file: segment files read */
    uint64_t records;           /* records read whole and checked (every kind) */
    uint64_t puts, dels;        /* of them: item versions, deletions */
    uint64_t bytes;             /* bytes read */
    uint64_t damaged;           /* damaged records or regions */
    uint64_t damaged_bytes;
    uint64_t entries;           /* index entries checked */
    uint64_t index_bad;         /* entries that disagree with the records */
} kura_check_report;

typedef struct kura_check_cb {
    void (*damage)(void *arg, const char *line);            /* one line per problem */
    void (*progress)(void *arg, uint64_t done, uint64_t total);     /* bytes */
    void *arg;
} kura_check_cb;

/* The hash file (src/store/hash/hashdb_check.c): every segment read
 * record by record, each record's checksum and header checked (a run of
 * zeros to a segment's end is a preallocated tail, not damage); every
 * index entry's record read back and compared (type, key, lengths, cas);
 * and no record of an indexed key newer than the one the index names.
 * Cost: one read of every segment, and of every live record again. */
int hashdb_check(kura_store *s, kura_check_report *rep, const kura_check_cb *cb);

/* The B+ tree's structure check (src/store/tree/tree_check.c): pages,
 * order, depth, counts, free space accounting.  It stops at the first
 * problem, described in err; *leaked gets pages neither reachable nor
 * free (not damage). */
int btree_debug_check(kura_store *s, uint64_t *leaked, char *err, size_t errlen);

#endif

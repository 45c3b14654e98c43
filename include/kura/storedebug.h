/*
 * storedebug.h - the backends' test-only entry points: what a unit test
 * calls to make a store do now what its background work would do later,
 * or to look inside it.  Defined only in test builds (-DKURA_TEST_HOOKS,
 * testhooks.h), like the test switches.
 */
#ifndef KURA_STOREDEBUG_H
#define KURA_STOREDEBUG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/store.h"

/* The hash file: one synchronous round of checkpoint and compaction
 * (hashdb.c), as the background work would do it. */
int hashdb_debug_maintain(kura_store *s, bool checkpoint, bool compact);
/* The hash of a key under the store's hash key (its low bits pick the
 * stripe). */
uint64_t hashdb_debug_hash(kura_store *store, const char *key, size_t klen);
/* The longest probe in the index: how many slots past its home line's
 * first slot the farthest entry sits.  O(slots), under each stripe's read
 * lock in turn. */
size_t hashdb_debug_probe_max(kura_store *store);

/* The B+ tree: a checkpoint now, as the background work would write one. */
int btree_debug_checkpoint(kura_store *s);

#endif

/*
 * seg.h - the segment-structured cache's constructor, for cache.c's
 * cache_open, which picks the cache's layout (#layout=seg, the default,
 * or heap).  Everything else about it is reached through its
 * kura_store_ops table; seg_int.h describes its structures.
 */
#ifndef KURA_SEG_H
#define KURA_SEG_H

#include <stddef.h>
#include <stdint.h>

#include "kura/store.h"

/* A segment cache of limit bytes, capped at about cap items (0: none;
 * each stripe its share), its index starting with `buckets` slots in all,
 * its segments holding an item of cfg->item_size_max bytes; empty, or with
 * what cfg->memory_file kept at a graceful stop (seg_warm.c).
 * KURA_ENOMEM. */
int segcache_make(kura_store **out, uint64_t limit, uint64_t cap, uint64_t buckets,
                  const kura_store_config *cfg);

/* exptime in 32 bits, as both layouts keep it: 0 stays 0 (never), a time
 * already past is 1, a time past 2106 is UINT32_MAX (and reads back so). */
static inline uint32_t cache_exptime32(int64_t e)
{
    if (e == 0)
        return 0;
    if (e < 1)
        return 1;
    if (e > (int64_t)UINT32_MAX)
        return UINT32_MAX;
    return (uint32_t)e;
}

#endif

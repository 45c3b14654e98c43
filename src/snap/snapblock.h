/*
 * snapblock.h - the blocks of a version 2 snapshot (src/snap/snapblock.c;
 * docs/formats.md, "Snapshots", has the layout).  Internal to src/snap/.
 *
 * A block holds up to SB_TARGET bytes of items (or one larger item),
 * sorted by key, as columns: the keys with the prefix they share with the
 * key before them left out, the fixed fields (lengths, flags, exptime,
 * cas) each apart and delta- or varint-coded, and the values apart.  The
 * columns are one compressed section, the values another, each through
 * the snapshot's codec; a CRC of the block's head and compressed bytes is
 * checked before anything is decompressed, and a CRC of the raw bytes
 * after.  Like with like is what makes a general-purpose compressor find
 * the repeats: a key next to a key, a value next to a value.
 */
#ifndef KURA_SNAPBLOCK_H
#define KURA_SNAPBLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/codec.h"
#include "kura/item.h"
#include "kura/snapshot.h"

#define SB_HEAD         32
#define SB_MAGIC        "KSBK"
#define SB_MAGIC_WIDE   "KSBL"          /* version 3: a block whose key columns
                                           (shared prefix, suffix length) are 2
                                           bytes each, for keys over 255 bytes */
#define SB_TARGET       SNAP_BLOCK_MAX  /* a block of several items stays under this raw */
#define SB_ITEM_FIXED   38              /* the most an item's fields take, its key aside */
#define SB_VAL_MAX      (1u << 30)

/* ---- writing ------------------------------------------------------------ */

typedef struct sb_builder sb_builder;

sb_builder *sb_builder_new(kura_codec codec, int level);
void sb_builder_free(sb_builder *b);
/* True when it can take the item without passing SB_TARGET (an empty
 * block takes any item). */
bool sb_fits(const sb_builder *b, const kura_item *it);
/* Copies the item in: 0 or KURA_ENOMEM. */
int sb_add(sb_builder *b, const kura_item *it);
uint32_t sb_count(const sb_builder *b);
/* Sorts, lays out and compresses the block gathered so far, then empties
 * the builder: *out (valid until the next call) gets the block's bytes,
 * head included, *raw its uncompressed size.  0, KURA_ENOMEM or the
 * codec's error (msg says which). */
int sb_seal(sb_builder *b, const unsigned char **out, size_t *len, uint64_t *raw, char *msg,
            size_t msglen);

/* ---- reading ------------------------------------------------------------ */

typedef struct sb_reader sb_reader;

sb_reader *sb_reader_new(kura_codec codec);
void sb_reader_free(sb_reader *r);
/* Reads the block at file offset off (which must end by end), checks its
 * CRCs, decompresses it and checks every item's fields against the
 * columns' extents, before the first item is handed out.  *next gets the
 * offset after it, *raw its uncompressed size.  0, KURA_ECORRUPT,
 * KURA_ESYS or KURA_ENOMEM; err says which, naming the offset. */
int sb_load(sb_reader *r, int fd, uint64_t off, uint64_t end, uint64_t *next, uint64_t *raw,
            char *err, size_t errlen);
/* The block's next item (valid until the next call): 0, or 1 when the
 * block has no more. */
int sb_next(sb_reader *r, kura_item *it);
/* Items in the loaded block. */
uint32_t sb_items(const sb_reader *r);
/* Bytes of the buffers it holds. */
size_t sb_footprint(const sb_reader *r);

#endif

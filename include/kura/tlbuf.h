/*
 * tlbuf.h - scratch buffers owned by the calling thread.
 *
 * Reads that must copy (a record read with pread, a value decompressed)
 * and codecs that need a work area use one buffer per thread and purpose,
 * kept between calls, so that the steady state allocates nothing and no
 * lock is taken.  Each purpose has its own slot, because one call may hold
 * two at once (a record read into TLB_LOG_READ, its value decompressed
 * into TLB_ZCOMP_RAW).  A buffer grown past 4 MiB for one large value is
 * given back when a small request comes; all are freed at thread exit.
 */
#ifndef KURA_TLBUF_H
#define KURA_TLBUF_H

#include <stddef.h>

typedef enum tlbuf_slot {
    TLB_LOG_READ,           /* seglog: a record read with pread */
    TLB_ZCOMP_JOIN,         /* hash file: a value's two parts joined to compress */
    TLB_ZCOMP_OUT,          /* hash file: a value compressed */
    TLB_ZCOMP_RAW,          /* hash file: a value decompressed */
    TLB_LZO_WORK,           /* LZO1X-1's dictionary */
    TLB_TREE_OVF,           /* B+ tree: an overflow run read */
    TLB_TREE_ZRAW,          /* B+ tree: a value decompressed */
    TLB_TREE_PAGE,          /* B+ tree: a compressed page read */
    TLB_NSLOTS
} tlbuf_slot;

/* This thread's buffer for slot with room for n bytes (its contents are not
 * kept when it grows), or NULL when memory runs out.  Valid until the next
 * call for the same slot on this thread. */
unsigned char *tlbuf(tlbuf_slot slot, size_t n);

/* Frees this thread's buffer for slot if it holds more than keep bytes
 * (a caller that knows a large value is done with). */
void tlbuf_trim(tlbuf_slot slot, size_t keep);

#endif

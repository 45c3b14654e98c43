/*
 * grow.h - arrays that grow by doubling: one rule for every growable
 * array and buffer that keeps its capacity beside it (kura_buf's bytes,
 * the batches of walks and listings, the streams' buffers, the stores'
 * page vectors).
 */
#ifndef KURA_GROW_H
#define KURA_GROW_H

#include <stddef.h>

/* Makes the array at *pv (pv: the address of the array's pointer), of
 * *cap elements of `size` bytes, hold at least `need` elements: its
 * capacity doubles, from `first` when it has none, until it does, and the
 * array is reallocated (it may move; the elements stay).  0, or -1 when
 * memory runs out or the size would overflow (then nothing changed).
 * Nothing is done when need <= *cap.  Amortized O(1) an element. */
int kura_grow(void *pv, size_t *cap, size_t need, size_t size, size_t first);

#endif

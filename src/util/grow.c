/*
 * grow.c - arrays that grow by doubling (include/kura/grow.h).  The
 * array's pointer is read and written through memcpy, so that any pointer
 * type can be passed without a cast of the pointer's own address.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kura/grow.h"

int kura_grow(void *pv, size_t *cap, size_t need, size_t size, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : first ? first : 1;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2)
            return -1;
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / size)
        return -1;
    void *old, *p;
    memcpy(&old, pv, sizeof(old));
    if (!(p = realloc(old, ncap * size)))
        return -1;
    memcpy(pv, &p, sizeof(p));
    *cap = ncap;
    return 0;
}

/*
 * tree_zcomp.c - compressed overflow runs: the B+ tree's #zcomp=lzo|zlib|bz2
 * (docs/formats.md, "Compression").
 *
 * What is compressed: a value too large to sit in its leaf (an overflow
 * run), through the project's one codec interface (include/kura/codec.h,
 * block form).  Leaf and branch pages are compressed too, in their own
 * slots with the rest punched out (tree_pzcomp.c).  A run is
 * stored compressed only when that saves at least one page; otherwise, and
 * for data that does not compress, as it is, so zcomp never costs space.
 * The leaf cell records the codec and the stored length, so a run is freed
 * and checked without being read; a compressed run's checksum is the run's
 * own (lzo blocks carry none), and its header repeats the codec and the
 * value's length, so a run that does not match its cell is refused.
 */
#include <stdlib.h>
#include <string.h>

#include "kura/codec.h"
#include "kura/tlbuf.h"
#include "tree_int.h"

int bt_zcomp_pack(btree *bt, const void *v0, size_t l0, const void *v1, size_t l1, void **out,
                  size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (!bt->zcomp)
        return 0;
    size_t raw = l0 + l1;
    const void *in = v0;
    unsigned char *joined = NULL;
    if (l1) {                           /* append/prepend: the value in two parts */
        if (!(joined = malloc(raw)))
            return 0;
        memcpy(joined, v0, l0);
        memcpy(joined + l0, v1, l1);
        in = joined;
    }
    size_t cap = codec_bound((kura_codec)bt->zcomp, raw), z = 0;
    unsigned char *buf = malloc(cap);
    int rc = buf ? codec_compress((kura_codec)bt->zcomp, in, raw, buf, cap, &z) : KURA_ENOMEM;
    free(joined);
    if (rc != KURA_OK || bt_ovf_pages(bt, z) >= bt_ovf_pages(bt, raw)) {
        free(buf);                      /* no page saved: store it as it is */
        return 0;
    }
    *out = buf;
    *outlen = z;
    return bt->zcomp;
}

int bt_zcomp_unpack(btree *bt, int codec, const unsigned char *in, size_t inlen, size_t rawlen,
                    const unsigned char **val)
{
    (void)bt;
    unsigned char *zb = tlbuf(TLB_TREE_ZRAW, rawlen ? rawlen : 1);  /* the thread's own */
    if (!zb)
        return KURA_ENOMEM;
    int rc = codec_decompress((kura_codec)codec, in, inlen, zb, rawlen);
    if (rc == KURA_ENOMEM)
        return rc;
    if (rc)
        return KURA_ECORRUPT;
    *val = zb;
    return KURA_OK;
}

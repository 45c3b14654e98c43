/*
 * tree_page.c - the B+ tree's page format: a slotted page of cells.
 *
 * Every page is psiz bytes with a 40-byte header (docs/formats.md):
 *   0 crc32c of bytes 4..psiz | 4 type | 6 n | 8 pgno | 16 txn | 24 link |
 *   32 upper (where the cell area starts) | 36 used (bytes of live cells)
 * then n 2-byte slots, in key order, each the offset of its cell; cells are
 * packed from the page's end downwards.  A removed cell leaves a hole that
 * the next insert that needs it compacts away.  The in-memory page is the
 * on-disk page: nothing is decoded or encoded on the way in or out, only
 * the checksum is computed when a page is written (pg_seal).  With #zcomp a
 * page may be stored compressed (tree_pzcomp.c): it is decompressed on
 * its way into the cache, so everything here sees the plain page.
 *
 * A leaf cell is klen(1) hlen(1) kind(1: bits 0..1 0 inline, 1 overflow, 2
 * compressed overflow; bits 2..7 the key length's bits 8..13), then four unsigned LEB128 varints: vlen, flags, exptime
 * (zigzag), cas; then the key (at hlen) and the value, or the first page of
 * its overflow run (8), or (kind 2) that page, the run's stored bytes (4)
 * and its codec (1): the cell says how long the run is, so freeing or
 * checking it needs no read.  An
 * item of an 8-byte key and value takes 24 bytes instead of the 42 of fixed
 * fields: 70% more cells to a page, a smaller tree, more of it cached.  A
 * branch cell is klen(1) child(8) key: the child holds keys >= key (its
 * top byte, unused by page numbers, holds the key length's bits 8..15);
 * the header's link is the child left of the first key.  A key over 255
 * bytes (version 4) uses those spare bits; a shorter one leaves them 0, so
 * such cells are as older versions wrote them.
 *
 * Bytes read from the file are hostile: pg_verify checks the checksum, the
 * type, the page's own number and that every slot and cell lies inside the
 * page before anything else looks at it.
 */
#include <string.h>

#include "kura/bytes.h"
#include "kura/codec.h"
#include "kura/crc32c.h"
#include "tree_int.h"

void pg_init(unsigned char *d, size_t psiz, int type, uint64_t pgno, uint64_t txn)
{
    memset(d, 0, BT_HDR);
    d[4] = (unsigned char)type;
    bt_put64(d + 8, pgno);
    bt_put64(d + 16, txn);
    bt_put32(d + 32, (uint32_t)psiz);
}

static size_t put_var(unsigned char *p, uint64_t v)
{
    return (size_t)(put_varint(p, v) - p);
}

/* Decodes a varint of at most max bytes; the bytes used, or 0 if bad. */
static size_t get_var(const unsigned char *p, size_t max, uint64_t *v)
{
    const unsigned char *q = get_varint(p, p + max, v);
    return q ? (size_t)(q - p) : 0;
}

/* a leaf cell's value length: the first varint (checked by pg_verify) */
static uint64_t leaf_vlen(const unsigned char *c)
{
    uint64_t v = 0;
    (void)get_var(c + 3, 5, &v);
    return v;
}

/* A cell's key length, and a leaf cell's kind (0 inline, 1 or 2 a run). */
static size_t cell_klen(int type, const unsigned char *c)
{
    if (type == BT_BRANCH)
        return (size_t)c[0] | (size_t)c[8] << 8;
    return (size_t)c[0] | (size_t)(c[2] >> 2) << 8;
}

static unsigned leaf_kind(const unsigned char *c) { return c[2] & 3u; }

size_t pg_cell_len(int type, const unsigned char *c)
{
    size_t kl = cell_klen(type, c);
    if (type == BT_BRANCH)
        return BT_BRANCH_FIXED + kl;
    unsigned k = leaf_kind(c);
    return (size_t)c[1] + kl + (k == 2 ? 13 : k ? 8 : leaf_vlen(c));
}

size_t pg_used(const unsigned char *d, size_t psiz)
{
    (void)psiz;
    return BT_HDR + 2 * (size_t)pg_n(d) + bt_get32(d + 36);
}

size_t pg_free(const unsigned char *d, size_t psiz)
{
    return psiz - pg_used(d, psiz);
}

void pg_cell_key(const unsigned char *c, int type, const char **key, size_t *klen)
{
    *klen = cell_klen(type, c);
    *key = (const char *)c + (type == BT_BRANCH ? BT_BRANCH_FIXED : c[1]);
}

unsigned pg_search(const unsigned char *d, const char *key, size_t klen, bool *found)
{
    int type = pg_type(d);
    unsigned n = pg_n(d), lo = 0, hi = n;
    *found = false;
    if (n == 0)
        return 0;
    /* keys that come in order (a load, an import) land past the last
     * key, at every level: one comparison instead of a search */
    const char *lk;
    size_t lkl;
    pg_cell_key(pg_ccell(d, n - 1), type, &lk, &lkl);
    int lc = bt_keycmp(lk, lkl, key, klen);
    if (lc < 0)
        return n;
    if (lc == 0) {
        *found = true;
        return n - 1;
    }
    hi = n - 1;
    /* A page the CPU's caches do not hold (a search in random order)
     * costs a memory latency per load that waits for the one before: a
     * probe's slot, then its cell, then the next probe's.  The slots'
     * lines are asked for at once, and each probe asks for the cells of
     * both probes that may follow it, so that the next one is on its way
     * meanwhile (hints only: nothing is read through them). */
    for (unsigned o = 0; o < 2 * n; o += 64)
        __builtin_prefetch(d + BT_HDR + o);
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        __builtin_prefetch(pg_ccell(d, (lo + mid) / 2));
        __builtin_prefetch(pg_ccell(d, (mid + 1 + hi) / 2));
        const char *k;
        size_t kl;
        pg_cell_key(pg_ccell(d, mid), type, &k, &kl);
        int c = bt_keycmp(k, kl, key, klen);
        if (c < 0) {
            lo = mid + 1;
        } else {
            if (c == 0)
                *found = true;
            hi = mid;
        }
    }
    if (*found && lo < pg_n(d)) {
        const char *k;
        size_t kl;
        pg_cell_key(pg_ccell(d, lo), type, &k, &kl);
        *found = bt_keycmp(k, kl, key, klen) == 0;
    }
    return lo;
}

uint64_t pg_child(const unsigned char *d, unsigned i)
{
    return i == 0 ? pg_link(d) : pg_cell_child(pg_ccell(d, i - 1));
}

void pg_set_child(unsigned char *d, unsigned i, uint64_t pgno)
{
    if (i == 0)
        pg_set_link(d, pgno);
    else {
        unsigned char *c = pg_cell(d, i - 1);
        bt_put64(c + 1, pgno | (uint64_t)c[8] << 56);  /* the key length's high byte stays */
    }
}

void pg_build(unsigned char *d, size_t psiz, uint64_t link, const unsigned char *const *cells,
              const uint16_t *lens, unsigned n)
{
    size_t off = psiz, used = 0;
    for (unsigned i = 0; i < n; i++) {
        off -= lens[i];
        memcpy(d + off, cells[i], lens[i]);
        bt_put16(d + BT_HDR + 2 * i, (uint16_t)off);
        used += lens[i];
    }
    bt_put16(d + 6, (uint16_t)n);
    pg_set_link(d, link);
    bt_put32(d + 32, (uint32_t)off);
    bt_put32(d + 36, (uint32_t)used);
}

/* Rewrites the page without holes (scratch: psiz bytes). */
static void pg_compact(unsigned char *d, size_t psiz, unsigned char *scratch)
{
    const unsigned char *cells[psiz / 8];   /* a cell takes at least 10 bytes + its slot */
    uint16_t lens[psiz / 8];
    unsigned n = pg_n(d);
    int type = pg_type(d);
    memcpy(scratch, d, psiz);
    for (unsigned i = 0; i < n; i++) {
        cells[i] = pg_ccell(scratch, i);
        lens[i] = (uint16_t)pg_cell_len(type, cells[i]);
    }
    pg_build(d, psiz, pg_link(d), cells, lens, n);
}

bool pg_insert(unsigned char *d, size_t psiz, unsigned i, const void *cell, size_t len,
               unsigned char *scratch)
{
    unsigned n = pg_n(d);
    if (pg_free(d, psiz) < len + 2)
        return false;
    size_t upper = bt_get32(d + 32);
    if (upper < BT_HDR + 2 * (size_t)(n + 1) + len) {
        pg_compact(d, psiz, scratch);
        upper = bt_get32(d + 32);
    }
    upper -= len;
    memcpy(d + upper, cell, len);
    memmove(d + BT_HDR + 2 * (i + 1), d + BT_HDR + 2 * i, 2 * (size_t)(n - i));
    bt_put16(d + BT_HDR + 2 * i, (uint16_t)upper);
    bt_put16(d + 6, (uint16_t)(n + 1));
    bt_put32(d + 32, (uint32_t)upper);
    bt_put32(d + 36, bt_get32(d + 36) + (uint32_t)len);
    return true;
}

void pg_remove(unsigned char *d, size_t psiz, unsigned i)
{
    unsigned n = pg_n(d);
    unsigned char *c = pg_cell(d, i);
    size_t len = pg_cell_len(pg_type(d), c);
    if (c - d == (long)bt_get32(d + 32))
        bt_put32(d + 32, bt_get32(d + 32) + (uint32_t)len);    /* the lowest cell */
    memmove(d + BT_HDR + 2 * i, d + BT_HDR + 2 * (i + 1), 2 * (size_t)(n - i - 1));
    bt_put16(d + 6, (uint16_t)(n - 1));
    bt_put32(d + 36, bt_get32(d + 36) - (uint32_t)len);
    if (n == 1)
        bt_put32(d + 32, (uint32_t)psiz);
}

/* The four varints of a leaf cell's head (hlen bytes): the bytes they
 * take, or 0 if they do not fit it. */
static size_t leaf_fields(const unsigned char *c, size_t hlen, uint64_t f[4])
{
    /* get_varint's rules (at most 10 bytes, none past hlen), written out:
     * every get and every page read decodes a head */
    size_t at = 3;
    for (int i = 0; i < 4; i++) {
        uint64_t x = 0;
        for (unsigned sh = 0;; sh += 7) {
            if (at >= hlen || sh >= 70)
                return 0;
            unsigned b = c[at++];
            x |= (uint64_t)(b & 0x7f) << sh;
            if (b < 0x80)
                break;
        }
        f[i] = x;
    }
    return at;
}

void pg_leaf_decode(const unsigned char *c, bt_cell *out)
{
    uint64_t f[4] = { 0, 0, 0, 0 };
    (void)leaf_fields(c, c[1], f);      /* pg_verify checked them */
    unsigned kind = leaf_kind(c);
    out->klen = cell_klen(BT_LEAF, c);
    out->ovf = kind != 0;
    out->vlen = (uint32_t)f[0];
    out->flags = (uint32_t)f[1];
    out->exptime = unzigzag(f[2]);
    out->cas = f[3];
    out->key = (const char *)c + c[1];
    out->val = c + c[1] + out->klen;
    out->ovf_pgno = out->ovf ? bt_get64(out->val) : 0;
    out->ovf_bytes = kind == 2 ? bt_get32(out->val + 8) : out->vlen;
    out->ovf_codec = kind == 2 ? out->val[12] : 0;
}

size_t pg_leaf_encode(unsigned char *c, const char *key, size_t klen, uint32_t flags,
                      int64_t exptime, uint64_t cas, uint32_t vlen, const void *v0, size_t l0,
                      const void *v1, size_t l1, const bt_ovf *ovf)
{
    size_t h = 3;
    c[0] = (unsigned char)klen;
    c[2] = (unsigned char)((!ovf ? 0 : ovf->codec ? 2 : 1) | (klen >> 8) << 2);
    h += put_var(c + h, vlen);
    h += put_var(c + h, flags);
    h += put_var(c + h, zigzag(exptime));
    h += put_var(c + h, cas);
    c[1] = (unsigned char)h;
    memcpy(c + h, key, klen);
    unsigned char *v = c + h + klen;
    if (ovf) {
        bt_put64(v, ovf->pgno);
        if (!ovf->codec)
            return h + klen + 8;
        bt_put32(v + 8, ovf->bytes);
        v[12] = ovf->codec;
        return h + klen + 13;
    }
    if (l0)
        memcpy(v, v0, l0);
    if (l1)
        memcpy(v + l0, v1, l1);
    return h + klen + l0 + l1;
}

size_t pg_branch_encode(unsigned char *c, const char *key, size_t klen, uint64_t child)
{
    c[0] = (unsigned char)klen;
    bt_put64(c + 1, (child & BT_CHILD_MASK) | (uint64_t)(klen >> 8) << 56);
    memcpy(c + BT_BRANCH_FIXED, key, klen);
    return BT_BRANCH_FIXED + klen;
}

void pg_seal(unsigned char *d, size_t psiz)
{
    bt_put32(d, crc32c_update(0, d + 4, psiz - 4));
}

int pg_verify(const unsigned char *d, size_t psiz, uint64_t pgno, int type)
{
    if (bt_get32(d) != crc32c_update(0, d + 4, psiz - 4))
        return KURA_ECORRUPT;
    return pg_verify_shape(d, psiz, pgno, type);
}

int pg_verify_shape(const unsigned char *d, size_t psiz, uint64_t pgno, int type)
{
    if ((type && pg_type(d) != type) || bt_get64(d + 8) != pgno)
        return KURA_ECORRUPT;
    int t = pg_type(d);
    if (t != BT_BRANCH && t != BT_LEAF)
        return KURA_OK;
    size_t n = pg_n(d), upper = bt_get32(d + 32), used = 0;
    if (BT_HDR + 2 * n > upper || upper > psiz)
        return KURA_ECORRUPT;
    for (size_t i = 0; i < n; i++) {
        size_t off = bt_get16(d + BT_HDR + 2 * i);
        size_t fixed = t == BT_BRANCH ? BT_BRANCH_FIXED : BT_LEAF_MIN;
        if (off < upper || off + fixed > psiz)
            return KURA_ECORRUPT;
        const unsigned char *c = d + off;
        size_t kl = cell_klen(t, c);
        if (kl > KURA_KEY_MAX)          /* 0: the empty key (version 4) */
            return KURA_ECORRUPT;
        if (t == BT_LEAF) {
            uint64_t f[4];
            if (leaf_kind(c) > 2 || c[1] < BT_LEAF_MIN || c[1] > BT_LEAF_HDR_MAX ||
                off + c[1] > psiz || leaf_fields(c, c[1], f) != c[1] ||
                f[0] > UINT32_MAX || f[1] > UINT32_MAX)
                return KURA_ECORRUPT;
        }
        size_t len = pg_cell_len(t, c);
        if (off + len > psiz)
            return KURA_ECORRUPT;
        if (t == BT_LEAF && leaf_kind(c) == 2) {
            const unsigned char *v = c + c[1] + kl;
            if (v[12] < 1 || v[12] >= KURA_CODEC_COUNT || bt_get32(v + 8) == 0)
                return KURA_ECORRUPT;   /* an unknown codec or an empty run */
        }
        used += len;
    }
    return used == bt_get32(d + 36) ? KURA_OK : KURA_ECORRUPT;
}

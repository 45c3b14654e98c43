/*
 * snapblock.c - a version 2 snapshot's blocks (src/snap/snapblock.h;
 * docs/formats.md, "Snapshots").
 *
 * The writer gathers items (their fields and keys in one arena, their
 * values in another), sorts them by key when the block is sealed, and
 * lays the columns out one after another; the reader checks a whole
 * block's columns against their extents before it hands out an item, so
 * snap_next never meets a bad length half-way through a block.
 *
 * Memory: a block of several items is at most SB_TARGET raw; a single
 * larger item (values up to 1 GiB) makes a block of its own, and both
 * sides then hold it about three times (its copy, the column, the
 * compressed bytes), as the v1 reader held a record whole.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kura/bytes.h"
#include "kura/crc32c.h"
#include "kura/grow.h"
#include "kura/status.h"
#include "snapblock.h"

/* an item in the builder's arena: klen u16, flags u32, exptime i64,
 * cas u64, vlen u32, the key */
#define M_FLAGS 2
#define M_EXP 6
#define M_CAS 14
#define M_VLEN 22
#define ENT_HEAD 26

static size_t ent_klen(const unsigned char *m) { return (size_t)m[0] | (size_t)m[1] << 8; }

typedef struct sb_ent {
    uint32_t moff;              /* into meta */
    uint32_t voff;              /* into vals */
} sb_ent;

struct sb_builder {
    kura_codec codec;
    int level;
    unsigned char *meta;
    size_t mlen, mcap;
    unsigned char *vals;
    size_t vlen, vcap;
    sb_ent *ents;
    uint32_t n, ecap;
    size_t est;                 /* the most the block's raw bytes can be */
    bool wide;                  /* a key of more than 255 bytes: SB_MAGIC_WIDE */
    unsigned char *fields;      /* the sealed block's columns */
    size_t fcap;
    unsigned char *sorted;      /* its values in key order, less shared prefixes */
    size_t scap;
    uint32_t *vpl;              /* what each value shares with the one before */
    size_t vplcap;
    unsigned char *out;         /* the sealed block */
    size_t ocap;
};

/* Makes *p hold at least need bytes (and be a buffer even for 0: the
 * codec is never given a null pointer). */
static int grow(unsigned char **p, size_t *cap, size_t need)
{
    if (*p && need <= *cap)
        return KURA_OK;
    return kura_grow(p, cap, need ? need : 1, 1, 64 * 1024) ? KURA_ENOMEM : KURA_OK;
}

sb_builder *sb_builder_new(kura_codec codec, int level)
{
    sb_builder *b = calloc(1, sizeof(*b));
    if (b) {
        b->codec = codec;
        b->level = level;
    }
    return b;
}

void sb_builder_free(sb_builder *b)
{
    if (!b)
        return;
    free(b->meta);
    free(b->vals);
    free(b->ents);
    free(b->fields);
    free(b->sorted);
    free(b->vpl);
    free(b->out);
    free(b);
}

static size_t item_est(const kura_item *it) { return SB_ITEM_FIXED + it->klen + it->vlen; }

bool sb_fits(const sb_builder *b, const kura_item *it)
{
    return b->n == 0 || b->est + item_est(it) <= SB_TARGET;
}

uint32_t sb_count(const sb_builder *b) { return b->n; }

int sb_add(sb_builder *b, const kura_item *it)
{
    if (b->n == b->ecap) {
        uint32_t c = b->ecap ? b->ecap * 2 : 4096;
        sb_ent *e = realloc(b->ents, c * sizeof(*e));
        if (!e)
            return KURA_ENOMEM;
        b->ents = e;
        b->ecap = c;
    }
    if (grow(&b->meta, &b->mcap, b->mlen + ENT_HEAD + it->klen) ||
        grow(&b->vals, &b->vcap, b->vlen + it->vlen))
        return KURA_ENOMEM;
    unsigned char *m = b->meta + b->mlen;
    m[0] = (unsigned char)it->klen;
    m[1] = (unsigned char)(it->klen >> 8);
    put32(m + M_FLAGS, it->flags);
    put64(m + M_EXP, (uint64_t)it->exptime);
    put64(m + M_CAS, it->cas);
    put32(m + M_VLEN, (uint32_t)it->vlen);
    if (it->klen > 255)
        b->wide = true;
    memcpy(m + ENT_HEAD, it->key, it->klen);
    if (it->vlen)
        memcpy(b->vals + b->vlen, it->val, it->vlen);
    b->ents[b->n++] = (sb_ent){ .moff = (uint32_t)b->mlen, .voff = (uint32_t)b->vlen };
    b->mlen += ENT_HEAD + it->klen;
    b->vlen += it->vlen;
    b->est += item_est(it);
    return KURA_OK;
}

static int ent_cmp(const void *a, const void *b, void *arg)
{
    const unsigned char *meta = arg;
    const unsigned char *x = meta + ((const sb_ent *)a)->moff;
    const unsigned char *y = meta + ((const sb_ent *)b)->moff;
    size_t xl = ent_klen(x), yl = ent_klen(y);
    int c = memcmp(x + ENT_HEAD, y + ENT_HEAD, xl < yl ? xl : yl);
    return c ? c : (xl > yl) - (xl < yl);
}

/* A key column's entry: 1 byte, or 2 (little-endian) in a wide block. */
static void put_width(unsigned char *p, size_t w, size_t v)
{
    p[0] = (unsigned char)v;
    if (w == 2)
        p[1] = (unsigned char)(v >> 8);
}

static size_t get_width(const unsigned char *p, size_t w)
{
    return w == 2 ? (size_t)p[0] | (size_t)p[1] << 8 : p[0];
}

/* sb_seal's key and value columns, in key order: each key's prefix shared
 * with the one before and its suffix (into the fields at b->fields), and,
 * with sorted (n > 1), each value less what it shares with the one before
 * (into sorted, the shares into vpl).  Returns where the suffixes end;
 * *vpos: the value column's length. */
static unsigned char *seal_keys(sb_builder *b, unsigned char *sorted, uint32_t *vpl,
                                size_t *vposp)
{
    uint32_t n = b->n;
    unsigned char *f = b->fields;
    size_t w = b->wide ? 2 : 1, pmax = b->wide ? 65535 : 255;
    unsigned char *pfx = f, *sfl = f + w * n, *sfx = f + 2 * w * n;
    const unsigned char *prev = NULL, *pv = NULL;
    size_t plen = 0, vpos = 0, pvl = 0;
    for (uint32_t i = 0; i < n; i++) {      /* keys: shared prefix, suffix */
        if (i + 8 < n) {    /* in key order they are scattered: fetched ahead */
            __builtin_prefetch(b->meta + b->ents[i + 8].moff);
            __builtin_prefetch(b->vals + b->ents[i + 8].voff);
        }
        const unsigned char *m = b->meta + b->ents[i].moff;
        size_t kl = ent_klen(m), p = 0, lim = kl < plen ? kl : plen;
        while (p < lim && p < pmax && prev[p] == m[ENT_HEAD + p])
            p++;
        put_width(pfx + w * i, w, p);
        put_width(sfl + w * i, w, kl - p);
        memcpy(sfx, m + ENT_HEAD + p, kl - p);
        sfx += kl - p;
        prev = m + ENT_HEAD;
        plen = kl;
        uint32_t vl = get32(m + M_VLEN);
        const unsigned char *v = b->vals + b->ents[i].voff;
        size_t q = 0, vlim = vl < pvl ? vl : pvl;
        while (q < vlim && pv[q] == v[q])
            q++;
        if (sorted) {
            vpl[i] = (uint32_t)q;
            memcpy(sorted + vpos, v + q, vl - q);
        }
        vpos += vl - q;
        pv = v;
        pvl = vl;
    }
    *vposp = vpos;
    return sfx;
}

/* sb_seal's number columns from p on: value lengths, shared value
 * prefixes (vpl, or none), flags, exptimes and cas each as the difference
 * from the one before.  Returns where they end. */
static unsigned char *seal_numbers(sb_builder *b, unsigned char *p, const uint32_t *vpl)
{
    uint32_t n = b->n;
    for (uint32_t i = 0; i < n; i++)        /* value lengths */
        p = put_varint(p, get32(b->meta + b->ents[i].moff + M_VLEN));
    for (uint32_t i = 0; i < n; i++)        /* value prefixes shared */
        p = put_varint(p, vpl ? vpl[i] : 0);
    for (uint32_t i = 0; i < n; i++, p += 4)        /* flags */
        memcpy(p, b->meta + b->ents[i].moff + M_FLAGS, 4);
    int64_t pe = 0;
    for (uint32_t i = 0; i < n; i++) {      /* exptime: from the one before */
        int64_t e = (int64_t)get64(b->meta + b->ents[i].moff + M_EXP);
        p = put_varint(p, zigzag((int64_t)((uint64_t)e - (uint64_t)pe)));
        pe = e;
    }
    uint64_t pc = 0;
    for (uint32_t i = 0; i < n; i++) {      /* cas: from the one before */
        uint64_t c = get64(b->meta + b->ents[i].moff + M_CAS);
        p = put_varint(p, zigzag((int64_t)(c - pc)));
        pc = c;
    }
    return p;
}

/* Appends the compressed form of in to b->out at *at. */
static int squeeze(sb_builder *b, const unsigned char *in, size_t n, size_t *at, char *msg,
                   size_t msglen)
{
    codec_stream *s;
    int rc = codec_encoder(b->codec, b->level, &s);
    if (rc) {
        snprintf(msg, msglen, "cannot start the %s encoder", codec_name(b->codec));
        return rc;
    }
    size_t pos = 0;
    for (;;) {
        if ((rc = grow(&b->out, &b->ocap, *at + 64 * 1024)))
            break;
        size_t used, made;
        rc = codec_run(s, in + pos, n - pos, &used, b->out + *at, b->ocap - *at, &made, true);
        pos += used;
        *at += made;
        if (rc < 0) {
            snprintf(msg, msglen, "compress: %s", codec_error(s));
            break;
        }
        if (rc == CODEC_END) {
            rc = KURA_OK;
            break;
        }
    }
    codec_free(s);
    return rc;
}

int sb_seal(sb_builder *b, const unsigned char **out, size_t *len, uint64_t *raw, char *msg,
            size_t msglen)
{
    uint32_t n = b->n;
    if (b->ocap > 4 * SB_TARGET) {     /* the last block's, a large value's */
        free(b->out);
        b->out = NULL;
        b->ocap = 0;
    }
    if (n > 1)
        qsort_r(b->ents, n, sizeof(sb_ent), ent_cmp, b->meta);
    int rc = grow(&b->fields, &b->fcap, (size_t)n * SB_ITEM_FIXED + b->mlen);
    unsigned char *vcol = b->vals;     /* one item: its value as it is */
    unsigned char *sorted = NULL;
    uint32_t *vpl = NULL;
    if (!rc && n > 1) {
        /* the values in key order, each less what it shares with the one
         * before it: a column of their own (kept from block to block: a
         * fresh one would cost its pages zeroed each time) */
        if (!(rc = grow(&b->sorted, &b->scap, b->vlen ? b->vlen : 1)) &&
            !(rc = grow((unsigned char **)&b->vpl, &b->vplcap, n * sizeof(uint32_t)))) {
            sorted = b->sorted;
            vpl = b->vpl;
            vcol = sorted;
        }
    }
    if (rc) {
        snprintf(msg, msglen, "out of memory");
        return rc;
    }
    unsigned char *f = b->fields;
    size_t vpos;
    unsigned char *p = seal_numbers(b, seal_keys(b, sorted, vpl, &vpos), vpl);
    size_t flen = (size_t)(p - f);
    size_t at = SB_HEAD;
    rc = grow(&b->out, &b->ocap, SB_HEAD);
    if (!rc)
        rc = squeeze(b, f, flen, &at, msg, msglen);
    size_t fcomp = at - SB_HEAD;
    if (!rc)
        rc = squeeze(b, vcol, vpos, &at, msg, msglen);
    if (!rc) {
        unsigned char *h = b->out;
        memcpy(h, b->wide ? SB_MAGIC_WIDE : SB_MAGIC, 4);
        put32(h + 4, n);
        put32(h + 8, (uint32_t)flen);
        put32(h + 12, (uint32_t)fcomp);
        put32(h + 16, (uint32_t)vpos);
        put32(h + 20, (uint32_t)(at - SB_HEAD - fcomp));
        put32(h + 24, crc32c_update(crc32c_update(0, f, flen), vcol, vpos));
        put32(h + 28, crc32c_update(crc32c_update(0, h, 28), h + SB_HEAD, at - SB_HEAD));
        *out = b->out;
        *len = at;
        *raw = flen + vpos;
    } else if (rc == KURA_ENOMEM) {
        snprintf(msg, msglen, "out of memory");
    }
    b->n = 0;
    b->mlen = b->vlen = b->est = 0;
    b->wide = false;
    /* a block of one large value gives its memory back */
    if (b->vcap > 2 * SB_TARGET) {
        free(b->vals);
        b->vals = NULL;
        b->vcap = 0;
    }
    return rc;
}

/* ---- reading ------------------------------------------------------------ */

/* Where each column of a block is read from; one step hands out an item. */
typedef struct sb_cur {
    const unsigned char *pfx, *sfl, *sfx, *vl, *vp, *fl, *ex, *cs, *val;
    uint32_t i;
    size_t klen;
    size_t w;                   /* bytes of a pfx or sfl entry: 1, or 2 (wide) */
    const unsigned char *pv;    /* the value before (in the column or in vbuf) */
    size_t pvlen;
    int64_t exp;
    uint64_t cas;
} sb_cur;

struct sb_reader {
    kura_codec codec;
    unsigned char *comp;
    size_t ccap;
    unsigned char *fields;
    size_t fcap;
    unsigned char *vals;
    size_t vcap;
    unsigned char *vbuf;        /* a value rebuilt from the one before and its suffix */
    size_t vbcap;
    uint32_t n;
    size_t flen, vlen;
    bool wide;                  /* the loaded block is SB_MAGIC_WIDE */
    sb_cur cur;
    unsigned char key[KURA_KEY_MAX];
};

sb_reader *sb_reader_new(kura_codec codec)
{
    sb_reader *r = calloc(1, sizeof(*r));
    if (r)
        r->codec = codec;
    return r;
}

void sb_reader_free(sb_reader *r)
{
    if (!r)
        return;
    free(r->comp);
    free(r->fields);
    free(r->vals);
    free(r->vbuf);
    free(r);
}

uint32_t sb_items(const sb_reader *r) { return r->n; }

size_t sb_footprint(const sb_reader *r) { return r->ccap + r->fcap + r->vcap + r->vbcap; }

static int bad(char *err, size_t errlen, uint64_t off, const char *why)
{
    snprintf(err, errlen, "the block at offset %llu %s", (unsigned long long)off, why);
    return KURA_ECORRUPT;
}

/* Decompresses in (inlen bytes) into exactly rawlen bytes at out. */
static int unsqueeze(kura_codec c, const unsigned char *in, size_t inlen, unsigned char *out,
                     size_t rawlen)
{
    codec_stream *s;
    int rc = codec_decoder(c, &s);
    if (rc)
        return rc;
    size_t pos = 0, got = 0;
    for (;;) {
        size_t used, made;
        rc = codec_run(s, in + pos, inlen - pos, &used, out + got, rawlen - got, &made, true);
        pos += used;
        got += made;
        if (rc < 0)
            break;
        if (rc == CODEC_END) {
            rc = pos == inlen && got == rawlen ? KURA_OK : KURA_ECORRUPT;
            break;
        }
        if (!used && !made) {   /* more bytes than its length says */
            rc = KURA_ECORRUPT;
            break;
        }
    }
    codec_free(s);
    return rc;
}

/* Skips n varints from p (not past end): their end, or NULL. */
static const unsigned char *skip_varints(const unsigned char *p, const unsigned char *end,
                                         uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v;
        if (!(p = get_varint(p, end, &v)))
            return NULL;
    }
    return p;
}

/* One item from the columns at c (key into key; a value that shares a
 * prefix with the one before into r->vbuf, unless dry), checked against
 * their extents: 0, or -1 when a field does not fit. */
static int cur_step(sb_cur *c, sb_reader *r, unsigned char *key, bool dry, kura_item *it)
{
    const unsigned char *fend = r->fields + r->flen;
    size_t p = get_width(c->pfx, c->w), s = get_width(c->sfl, c->w);
    c->pfx += c->w;
    c->sfl += c->w;
    if (p > c->klen || p + s > KURA_KEY_MAX)
        return -1;
    memcpy(key + p, c->sfx, s);
    c->sfx += s;
    c->klen = p + s;
    uint64_t vl, vp, ex, cs;
    if (!(c->vl = get_varint(c->vl, fend, &vl)) || !(c->vp = get_varint(c->vp, fend, &vp)) ||
        vl > SB_VAL_MAX || vp > vl || vp > c->pvlen ||
        vl - vp > (uint64_t)(r->vals + r->vlen - c->val))
        return -1;
    if (!(c->ex = get_varint(c->ex, fend, &ex)) || !(c->cs = get_varint(c->cs, fend, &cs)))
        return -1;
    c->exp = (int64_t)((uint64_t)c->exp + (uint64_t)unzigzag(ex));
    c->cas += (uint64_t)unzigzag(cs);
    it->key = (const char *)key;
    it->klen = c->klen;
    it->flags = get32(c->fl);
    c->fl += 4;
    it->exptime = c->exp;
    it->cas = c->cas;
    it->vlen = (size_t)vl;
    if (!vp) {
        it->val = c->val;
    } else if (dry) {
        it->val = NULL;
        if (vl > r->vbcap)
            r->vbcap = (size_t)vl;      /* columns() sizes vbuf by the largest */
    } else {
        if (c->pv != r->vbuf)
            memcpy(r->vbuf, c->pv, (size_t)vp);
        memcpy(r->vbuf + vp, c->val, (size_t)(vl - vp));
        it->val = r->vbuf;
    }
    c->pv = it->val;
    c->pvlen = (size_t)vl;
    c->val += vl - vp;
    c->i++;
    return 0;
}

/* Finds the columns of the loaded block and walks every item once, so
 * that sb_next hands out only items whose fields all fit. */
static int columns(sb_reader *r)
{
    const unsigned char *f = r->fields, *end = f + r->flen;
    uint32_t n = r->n;
    size_t w = r->wide ? 2 : 1;
    if (r->flen / (2 * w) < (size_t)n)
        return -1;
    size_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += get_width(f + w * (n + i), w);
    sb_cur c = { .pfx = f, .sfl = f + w * n, .sfx = f + 2 * w * n, .w = w };
    if (sum > r->flen - 2 * w * n)
        return -1;
    c.vl = c.sfx + sum;
    c.vp = skip_varints(c.vl, end, n);
    const unsigned char *q = c.vp ? skip_varints(c.vp, end, n) : NULL;
    if (!q || (size_t)(end - q) < 4 * (size_t)n)
        return -1;
    c.fl = q;
    c.ex = q + 4 * (size_t)n;
    if (!(c.cs = skip_varints(c.ex, end, n)) || skip_varints(c.cs, end, n) != end)
        return -1;
    c.val = r->vals;
    r->cur = c;
    unsigned char key[KURA_KEY_MAX];
    kura_item it;
    size_t vbcap = r->vbcap, full = 0;
    r->vbcap = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (cur_step(&c, r, key, true, &it))
            return -1;
        full += it.vlen;
    }
    /* several items' values, rebuilt, stay within the target as written */
    if (c.val != r->vals + r->vlen || (n > 1 && full > SB_TARGET))
        return -1;
    size_t need = r->vbcap;
    r->vbcap = vbcap;
    if (need > r->vbcap) {
        unsigned char *nb = realloc(r->vbuf, need);
        if (!nb)
            return -2;
        r->vbuf = nb;
        r->vbcap = need;
    }
    return 0;
}

int sb_load(sb_reader *r, int fd, uint64_t off, uint64_t end, uint64_t *next, uint64_t *raw,
            char *err, size_t errlen)
{
    unsigned char h[SB_HEAD];
    r->n = 0;
    if (end - off < SB_HEAD)
        return bad(err, errlen, off, "is cut short");
    ssize_t got = pread(fd, h, SB_HEAD, (off_t)off);
    if (got != SB_HEAD) {
        snprintf(err, errlen, "read: %s", got < 0 ? strerror(errno) : "the file shrank");
        return KURA_ESYS;
    }
    uint32_t n = get32(h + 4);
    size_t flen = get32(h + 8), fcomp = get32(h + 12), vlen = get32(h + 16),
           vcomp = get32(h + 20);
    bool wide = memcmp(h, SB_MAGIC_WIDE, 4) == 0;
    if (memcmp(h, SB_MAGIC, 4) && !wide)
        return bad(err, errlen, off, "is not a block");
    if (fcomp + vcomp > end - off - SB_HEAD)
        return bad(err, errlen, off, "runs past the end of the file");
    /* several items stay within the target; one item may be larger */
    if (n == 0 || (n > 1 && flen + vlen > SB_TARGET) ||
        (n == 1 && (flen > SB_ITEM_FIXED + KURA_KEY_MAX || vlen > SB_VAL_MAX)))
        return bad(err, errlen, off, "has impossible lengths");
    if (r->vcap > 2 * SB_TARGET && vlen <= SB_TARGET) {   /* after a large value */
        free(r->vals);
        free(r->comp);
        r->vals = r->comp = NULL;
        r->vcap = r->ccap = 0;
    }
    if (grow(&r->comp, &r->ccap, fcomp + vcomp) || grow(&r->fields, &r->fcap, flen) ||
        grow(&r->vals, &r->vcap, vlen)) {
        snprintf(err, errlen, "out of memory");
        return KURA_ENOMEM;
    }
    got = fcomp + vcomp ? pread(fd, r->comp, fcomp + vcomp, (off_t)(off + SB_HEAD)) : 0;
    if (got < 0 || (size_t)got != fcomp + vcomp) {
        snprintf(err, errlen, "read: %s", got < 0 ? strerror(errno) : "the file shrank");
        return KURA_ESYS;
    }
    if (get32(h + 28) != crc32c_update(crc32c_update(0, h, 28), r->comp, fcomp + vcomp))
        return bad(err, errlen, off, "fails its checksum (damaged)");
    if (unsqueeze(r->codec, r->comp, fcomp, r->fields, flen) ||
        unsqueeze(r->codec, r->comp + fcomp, vcomp, r->vals, vlen))
        return bad(err, errlen, off, "does not decompress to its lengths");
    if (get32(h + 24) != crc32c_update(crc32c_update(0, r->fields, flen), r->vals, vlen))
        return bad(err, errlen, off, "decompresses to bytes that fail their checksum");
    r->n = n;
    r->flen = flen;
    r->vlen = vlen;
    r->wide = wide;
    int cr = columns(r);
    if (cr) {
        r->n = 0;
        if (cr == -2) {
            snprintf(err, errlen, "out of memory");
            return KURA_ENOMEM;
        }
        return bad(err, errlen, off, "has fields that do not fit its columns");
    }
    *next = off + SB_HEAD + fcomp + vcomp;
    *raw = flen + vlen;
    return KURA_OK;
}

int sb_next(sb_reader *r, kura_item *it)
{
    if (r->cur.i >= r->n)
        return 1;
    cur_step(&r->cur, r, r->key, false, it);    /* checked by columns() */
    return 0;
}

/*
 * tt_update.c - the Tokyo Tyrant commands that change a record from what
 * it holds (putcat, putshl, addint, adddouble) and the store call every
 * change goes through.
 *
 * putcat appends, or adds where there is nothing to append to.  putshl,
 * addint and adddouble compute the new value from the record's.  Each is
 * one engine_modify: the new value is computed under the key's lock from
 * the record as it is, and stored with its flags and expiry, so two
 * clients adding to one record never lose an add and never fail for each
 * other.  What they store is what Tokyo Cabinet stores: addint a 4-byte
 * little-endian int, adddouble an 8-byte IEEE double in the machine's
 * order (docs/protocol.md says how memcached's commands see them).
 */
#include <math.h>
#include <string.h>

#include "kura/bytes.h"
#include "tt_int.h"

/* ---- reading a record ------------------------------------------------------------- */

static int copy_value(void *arg, const kura_item *it)
{
    kura_buf *buf = arg;
    buf->len = 0;
    return kura_buf_append(buf, it->val, it->vlen) ? 0 : KURA_ENOMEM;
}

int tt_read(tt_req *r, const char *key, size_t klen)
{
    return engine_get(r->s->engine, r->s->stats, key, klen, NULL, copy_value, &r->st->scratch,
                      NULL);
}

/* ---- writes ------------------------------------------------------------------------- */

int tt_store(tt_req *r, int cmd, const char *key, size_t klen, const void *val, size_t vlen)
{
    kura_item it = { .key = key, .klen = klen, .val = val, .vlen = vlen };
    r->s->dirty = true;
    KURA_STAT_INC(r->s->stats, cmd_set);
    return engine_store(r->s->engine, r->s->stats, cmd, &it, NULL, NULL);
}

/* One engine_modify, counted as a set: KURA_STORED, KURA_NOT_STORED (fn
 * refused) or an error (KURA_ETOOBIG: past -I). */
static int modify(tt_req *r, const char *key, size_t klen, engine_modify_fn fn, void *arg)
{
    r->s->dirty = true;
    KURA_STAT_INC(r->s->stats, cmd_set);
    int rc = engine_modify(r->s->engine, key, klen, fn, arg, NULL);
    if (rc == KURA_OK) {
        KURA_STAT_INC(r->s->stats, total_items);
        return KURA_STORED;
    }
    return rc < 0 ? rc : KURA_NOT_STORED;
}

/* The record's flags and expiry kept; a new record has neither. */
static void keep_meta(const kura_item *cur, engine_mod *out)
{
    out->flags = cur ? cur->flags : 0;
    out->exptime = cur ? cur->exptime : 0;
}

/* putcat: the value appended (refused, as memcached's append is, when the
 * record would pass -I), or the record added with it. */
typedef struct cat_arg {
    const char *val;
    size_t vlen;
    size_t item_max;
} cat_arg;

static int cat_modify(void *arg, const kura_item *cur, engine_mod *out)
{
    cat_arg *a = arg;
    keep_meta(cur, out);
    if (cur && kura_item_wire_total(cur->klen, (uint64_t)cur->vlen + a->vlen, cur->flags) >
                   a->item_max)
        return KURA_NOT_STORED;
    if (cur) {
        out->part[0].base = cur->val;
        out->part[0].len = cur->vlen;
    }
    out->part[1].base = a->val;
    out->part[1].len = a->vlen;
    return KURA_OK;
}

int tt_put_cat(tt_req *r, const char *key, size_t klen, const char *val, size_t vlen)
{
    cat_arg a = { val, vlen, engine_item_size_max(r->s->engine) };
    return modify(r, key, klen, cat_modify, &a);
}

/* putshl: the value appended, then only its last `width` bytes kept; a
 * new record is the value as given (as Tokyo Tyrant's putshl stores it). */
typedef struct shl_arg {
    const char *val;
    size_t vlen, width;
} shl_arg;

static int shl_modify(void *arg, const kura_item *cur, engine_mod *out)
{
    shl_arg *a = arg;
    keep_meta(cur, out);
    if (!cur) {
        out->part[0].base = a->val;
        out->part[0].len = a->vlen;
        return KURA_OK;
    }
    size_t total = cur->vlen + a->vlen, keep = total < a->width ? total : a->width;
    size_t from_old = keep > a->vlen ? keep - a->vlen : 0;
    out->part[0].base = (const char *)cur->val + cur->vlen - from_old;
    out->part[0].len = from_old;
    out->part[1].base = a->val + a->vlen - (keep - from_old);
    out->part[1].len = keep - from_old;
    return KURA_OK;
}

/* addint: a 4-byte little-endian int (Tokyo Cabinet's native int on the
 * little-endian machines it ran on); any other size refuses. */
typedef struct int_arg {
    int32_t add, sum;
    unsigned char buf[4];
} int_arg;

static int int_modify(void *arg, const kura_item *cur, engine_mod *out)
{
    int_arg *a = arg;
    uint32_t v = 0;
    if (cur) {
        if (cur->vlen != 4)
            return KURA_NOT_STORED;
        v = get32(cur->val);
    }
    v += (uint32_t)a->add;              /* wraps, as the C int sum does in practice */
    a->sum = (int32_t)v;
    put32(a->buf, v);
    keep_meta(cur, out);
    out->part[0].base = a->buf;
    out->part[0].len = 4;
    return KURA_OK;
}

/* adddouble: an 8-byte native double (IEEE 754, little-endian here). */
typedef struct dbl_arg {
    double add, sum;
    unsigned char buf[8];
} dbl_arg;

static int dbl_modify(void *arg, const kura_item *cur, engine_mod *out)
{
    dbl_arg *a = arg;
    double v = 0;
    if (cur) {
        if (cur->vlen != sizeof(double))
            return KURA_NOT_STORED;
        memcpy(&v, cur->val, sizeof(v));
    }
    a->sum = v + a->add;
    memcpy(a->buf, &a->sum, sizeof(a->sum));
    keep_meta(cur, out);
    out->part[0].base = a->buf;
    out->part[0].len = sizeof(double);
    return KURA_OK;
}

/* The protocol's form of a real number: two big-endian 64-bit integers,
 * the integral part and the fraction in trillionths; both INT64_MIN is
 * NaN, an integral part of INT64_MAX / INT64_MIN an infinity. */
#define TT_TRILLION 1000000000000.0

static double unpack_double(const unsigned char *p)
{
    int64_t integ = (int64_t)get_be64(p), fract = (int64_t)get_be64(p + 8);
    if (integ == INT64_MIN && fract == INT64_MIN)
        return NAN;
    if (integ == INT64_MAX)
        return INFINITY;
    if (integ == INT64_MIN)
        return -INFINITY;
    return (double)integ + (double)fract / TT_TRILLION;
}

static void pack_double(double d, unsigned char *p)
{
    double ipart, fpart = modf(d, &ipart);
    int64_t integ, fract;
    if (isnormal(ipart) || ipart == 0) {
        /* past int64's range C leaves the conversion undefined; x86, where
         * ttserver ran, gives INT64_MIN, and so does this */
        integ = ipart >= -9223372036854775808.0 && ipart < 9223372036854775808.0
                    ? (int64_t)ipart : INT64_MIN;
        fract = (int64_t)(fpart * TT_TRILLION);
    } else if (isinf(ipart)) {
        integ = ipart > 0 ? INT64_MAX : INT64_MIN;
        fract = 0;
    } else {
        integ = fract = INT64_MIN;
    }
    put_be32(p, (uint32_t)((uint64_t)integ >> 32));
    put_be32(p + 4, (uint32_t)integ);
    put_be32(p + 8, (uint32_t)((uint64_t)fract >> 32));
    put_be32(p + 12, (uint32_t)fract);
}

int tt_putshl(tt_req *r, const char *key, size_t klen, const char *val, size_t vlen,
              size_t width)
{
    shl_arg a = { val, vlen, width };
    return modify(r, key, klen, shl_modify, &a);
}

int tt_addint(tt_req *r, const char *key, size_t klen, int32_t add, int32_t *sum)
{
    int_arg a = { .add = add };
    int rc = modify(r, key, klen, int_modify, &a);
    *sum = a.sum;
    return rc;
}

int tt_adddouble(tt_req *r, const char *key, size_t klen, const unsigned char add[16],
                 unsigned char sum[16])
{
    dbl_arg a = { .add = unpack_double(add) };
    if (isnan(a.add))
        return KURA_NOT_STORED;
    int rc = modify(r, key, klen, dbl_modify, &a);
    if (rc == KURA_STORED && isnan(a.sum))
        return KURA_NOT_STORED;         /* stored, but ttserver answers a NaN sum 1 */
    pack_double(a.sum, sum);
    return rc;
}

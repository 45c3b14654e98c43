/*
 * tt_update.c - the Tokyo Tyrant commands that change a record from what
 * it holds (putcat, putshl, addint, adddouble) and the store call every
 * change goes through.
 *
 * putcat appends, or adds where there is nothing to append to.  putshl,
 * addint and adddouble read the record, compute the new value and store
 * it with the engine's cas, keeping the record's flags and expiry; if
 * another client changed it meanwhile the whole is tried again (at most
 * TT_RMW_TRIES times, then the request fails), so no add is lost.  What
 * they store is what Tokyo Cabinet stores: addint a 4-byte little-endian
 * int, adddouble an 8-byte IEEE double in the machine's order
 * (docs/protocol.md says how memcached's commands see them).
 */
#include <math.h>
#include <string.h>

#include "kura/bytes.h"
#include "tt_int.h"

#define TT_RMW_TRIES 16                 /* a read-modify-write losing this often: failure */

/* ---- reading a record ------------------------------------------------------------- */

typedef struct tt_old {
    kura_buf *buf;
    uint32_t flags;
    int64_t exptime;
    uint64_t cas;
} tt_old;

static int copy_value(void *arg, const kura_item *it)
{
    tt_old *o = arg;
    o->buf->len = 0;
    o->flags = it->flags;
    o->exptime = it->exptime;
    o->cas = it->cas;
    return kura_buf_append(o->buf, it->val, it->vlen) ? 0 : KURA_ENOMEM;
}

int tt_read(tt_req *r, const char *key, size_t klen)
{
    tt_old o = { .buf = &r->st->scratch };
    int rc = engine_get(r->s->engine, r->s->stats, key, klen, NULL, copy_value, &o, NULL);
    return rc;
}

/* ---- writes ------------------------------------------------------------------------- */

int tt_store(tt_req *r, int cmd, const char *key, size_t klen, const void *val, size_t vlen,
                 uint32_t flags, int64_t exptime, uint64_t cas_in)
{
    if (!engine_item_fits(r->s->engine, klen, vlen, flags))
        return KURA_ETOOBIG;
    kura_item it = { .key = key, .klen = klen, .val = val, .vlen = vlen, .flags = flags,
                     .exptime = exptime };
    engine_store_opts o = { .cas_in = cas_in };
    r->s->dirty = true;
    KURA_STAT_INC(r->s->stats, cmd_set);
    return engine_store(r->s->engine, r->s->stats, cmd, &it, &o, NULL);
}

/* putcat: append, or add when there is nothing to append to (retried if
 * another client adds or removes the record in between). */
int tt_put_cat(tt_req *r, const char *key, size_t klen, const char *val, size_t vlen)
{
    for (int i = 0; i < TT_RMW_TRIES; i++) {
        int rc = tt_store(r, KURA_CMD_APPEND, key, klen, val, vlen, 0, 0, 0);
        if (rc != KURA_NOT_STORED)
            return rc;
        rc = tt_store(r, KURA_CMD_ADD, key, klen, val, vlen, 0, 0, 0);
        if (rc != KURA_NOT_STORED)
            return rc;
    }
    return KURA_NOT_STORED;
}

/* A read-modify-write: modify(arg, old, oldlen, found, &new, &newlen)
 * computes the new value (0) or refuses (1); it is stored with the old
 * record's flags and expiry if the record is unchanged since the read,
 * else the whole is tried again. */
typedef int (*tt_modify_fn)(void *arg, const char *old, size_t oldlen, bool found,
                            const void **val, size_t *vlen);

static int read_modify_write(tt_req *r, const char *key, size_t klen, tt_modify_fn modify,
                             void *arg)
{
    for (int i = 0; i < TT_RMW_TRIES; i++) {
        tt_old o = { .buf = &r->st->scratch };
        int rc = engine_get(r->s->engine, r->s->stats, key, klen,
                            &(engine_get_opts){ .no_bump = true }, copy_value, &o, NULL);
        if (rc < 0)
            return rc;
        bool found = rc == KURA_OK;
        const void *val;
        size_t vlen;
        if (modify(arg, found ? o.buf->data : NULL, found ? o.buf->len : 0, found, &val, &vlen))
            return KURA_NOT_STORED;
        rc = found ? tt_store(r, KURA_CMD_CAS, key, klen, val, vlen, o.flags, o.exptime, o.cas)
                   : tt_store(r, KURA_CMD_ADD, key, klen, val, vlen, 0, 0, 0);
        if (rc == KURA_STORED || rc < 0)
            return rc;
    }
    return KURA_NOT_STORED;
}

/* putshl: the value appended, then only its last `width` bytes kept; a
 * new record is the value as given (as Tokyo Tyrant's putshl stores it). */
typedef struct shl_arg {
    const char *val;
    size_t vlen, width;
    kura_buf *tmp;                      /* holds the old value (read_modify_write's read) */
} shl_arg;

static int shl_modify(void *arg, const char *old, size_t oldlen, bool found, const void **val,
                      size_t *vlen)
{
    shl_arg *a = arg;
    if (!found) {
        *val = a->val;
        *vlen = a->vlen;
        return 0;
    }
    size_t total = oldlen + a->vlen, keep = total < a->width ? total : a->width;
    size_t from_old = keep > a->vlen ? keep - a->vlen : 0;
    /* in place: old is the start of a->tmp (the value just read) */
    if (from_old)
        memmove(a->tmp->data, old + oldlen - from_old, from_old);
    a->tmp->len = from_old;
    if (!kura_buf_append(a->tmp, a->val + a->vlen - (keep - from_old), keep - from_old))
        return 1;
    *val = a->tmp->data;
    *vlen = a->tmp->len;
    return 0;
}

/* addint: a 4-byte little-endian int (Tokyo Cabinet's native int on the
 * little-endian machines it ran on); any other size refuses. */
typedef struct int_arg {
    int32_t add, sum;
    unsigned char buf[4];
} int_arg;

static int int_modify(void *arg, const char *old, size_t oldlen, bool found, const void **val,
                      size_t *vlen)
{
    int_arg *a = arg;
    uint32_t v = 0;
    if (found) {
        if (oldlen != 4)
            return 1;
        v = get32((const unsigned char *)old);
    }
    v += (uint32_t)a->add;              /* wraps, as the C int sum does in practice */
    a->sum = (int32_t)v;
    put32(a->buf, v);
    *val = a->buf;
    *vlen = 4;
    return 0;
}

/* adddouble: an 8-byte native double (IEEE 754, little-endian here). */
typedef struct dbl_arg {
    double add, sum;
    unsigned char buf[8];
} dbl_arg;

static int dbl_modify(void *arg, const char *old, size_t oldlen, bool found, const void **val,
                      size_t *vlen)
{
    dbl_arg *a = arg;
    double v = 0;
    if (found) {
        if (oldlen != sizeof(double))
            return 1;
        memcpy(&v, old, sizeof(v));
    }
    a->sum = v + a->add;
    memcpy(a->buf, &a->sum, sizeof(a->sum));
    *val = a->buf;
    *vlen = sizeof(double);
    return 0;
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
    shl_arg a = { val, vlen, width, &r->st->scratch };
    return read_modify_write(r, key, klen, shl_modify, &a);
}

int tt_addint(tt_req *r, const char *key, size_t klen, int32_t add, int32_t *sum)
{
    int_arg a = { .add = add };
    int rc = read_modify_write(r, key, klen, int_modify, &a);
    *sum = a.sum;
    return rc;
}

int tt_adddouble(tt_req *r, const char *key, size_t klen, const unsigned char add[16],
                 unsigned char sum[16])
{
    dbl_arg a = { .add = unpack_double(add) };
    if (isnan(a.add))
        return KURA_NOT_STORED;
    int rc = read_modify_write(r, key, klen, dbl_modify, &a);
    if (rc == KURA_STORED && isnan(a.sum))
        return KURA_NOT_STORED;         /* stored, but ttserver answers a NaN sum 1 */
    pack_double(a.sum, sum);
    return rc;
}

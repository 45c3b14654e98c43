/*
 * hashdb_check.c - the hash file's full check (include/kura/storecheck.h),
 * for kuractl check.
 *
 * Opening a hash file reads only the checkpoint and the log written after
 * it, and a record's checksum is checked when the record is read: damage
 * in a record nobody reads, or in a checkpoint that disagrees with the
 * log, can sit unnoticed.  This reads everything:
 *   1. every segment record by record through the log's scanner (the same
 *      checks recovery makes: header sane, CRC-32C over header, key and
 *      value); a record that fails is reported with its place and, when
 *      its header still decodes, its key; the scan resyncs to the next
 *      valid record.  A run of zeros to a segment's end is a preallocated
 *      tail, never damage.  Each PUT or DEL record of a key in the index
 *      must not be newer (by sequence number) than the version the index
 *      names: else the index missed a change.
 *   2. every index entry's record read back and compared: a PUT, the same
 *      key, lengths, cas and expiry time, its checksum right.
 * The store is open read-only and nothing else uses it, so the stripe
 * locks are taken only to keep the contract of hdx_find.  ckpt_mu is held
 * throughout all the same: a store opened for writing (a test's) has a
 * background thread whose checkpoint may remove a compacted segment's file
 * (hd_retired_drop) while the scan reads it.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kura/codec.h"
#include "kura/crc32c.h"
#include "kura/grow.h"
#include "kura/storecheck.h"
#include "hashdb_int.h"

typedef struct check {
    hashdb *db;
    kura_check_report *rep;
    const kura_check_cb *cb;
    uint64_t done, total;
} check;

static void say(check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(check *c, const char *fmt, ...)
{
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (c->cb && c->cb->damage)
        c->cb->damage(c->cb->arg, line);
}

/* A key for a message: printable bytes as they are, others as \xNN. */
static void show_key(char *out, size_t cap, const char *k, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char ch = (unsigned char)k[i];
        if (ch > ' ' && ch < 0x7f && ch != '\\')
            out[o++] = (char)ch;
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
    }
    out[o] = '\0';
}

typedef struct seg_list {
    uint32_t *ids;
    size_t n, cap;
    uint64_t bytes;
} seg_list;

static void collect(void *arg, hd_seg *sg)
{
    seg_list *l = arg;
    if (kura_grow(&l->ids, &l->cap, l->n + 1, sizeof(*l->ids), 64))
        return;                 /* counted short: the caller sees n < segments */
    l->ids[l->n++] = sg->id;
    l->bytes += sg->size;
}

/* True if [off, end) of fd is all zeros. */
static bool zeros_to_end(const kura_io *io, int fd, uint64_t off, uint64_t end)
{
    unsigned char b[4096];
    while (off < end) {
        size_t n = end - off < sizeof(b) ? (size_t)(end - off) : sizeof(b);
        if (io->pread(io, fd, b, n, (off_t)off) != (ssize_t)n)
            return false;
        for (size_t i = 0; i < n; i++)
            if (b[i])
                return false;
        off += n;
    }
    return true;
}

/* What the bytes at a damaged place still say: the key, if the header decodes. */
static void damaged_key(const kura_io *io, hd_seg *sg, uint64_t off, char *out, size_t cap)
{
    unsigned char b[HD_REC_HDR_MAX + KURA_KEY_MAX];
    hd_rec r;
    snprintf(out, cap, "(header unreadable)");
    ssize_t got = io->pread(io, sg->fd, b, sizeof(b), (off_t)off);
    if (got < 8 || hd_rec_decode(b, (size_t)got, sg->version, &r) != 0)
        return;
    if ((size_t)r.hlen + r.klen > (size_t)got) {
        snprintf(out, cap, "(%s record, no key)", r.type == HD_REC_STATE ? "state" : "a");
        return;
    }
    char k[KURA_KEY_MAX * 4 + 1];
    show_key(k, sizeof(k), (const char *)b + r.hlen, r.klen);
    snprintf(out, cap, "%s of key '%s' (value %" PRIu32 " bytes)",
             r.type == HD_REC_DEL ? "deletion" : "record", k, r.vlen);
}

/* A compressed record whose checksum holds must still decompress to
 * exactly its raw length (an encoder's fault, or a codec of another
 * build): else it is damage, as a failed checksum is. */
static void check_unpacks(check *c, hd_seg *sg, uint64_t off, const hd_rec *r,
                          const unsigned char *p)
{
    const unsigned char *val;
    int rc = hd_zcomp_unpack(r, p, &val);
    if (rc == KURA_OK)
        return;
    char k[KURA_KEY_MAX * 4 + 1];
    show_key(k, sizeof(k), (const char *)p + r->hlen, r->klen);
    say(c, "%s/%08x.seg offset %" PRIu64 ": key '%s': its %s value does not decompress to "
        "its %" PRIu32 " bytes: %s", c->db->dir, sg->id, off, k,
        codec_name((kura_codec)r->codec), r->rawlen, kura_strerror(rc));
    c->rep->damaged++;
    c->rep->damaged_bytes += hd_rec_size(r->hlen, r->klen, r->vlen);
}

/* A record of an indexed key newer than the version the index names? */
static void check_against_index(check *c, hd_seg *sg, uint64_t off, const hd_rec *r,
                                const unsigned char *p)
{
    hashdb *db = c->db;
    const char *key = (const char *)p + r->hlen;
    uint64_t h = hd_hash(db, key, r->klen);
    hd_stripe *st = hd_stripe_of(db, h);
    hd_ent ev;
    pthread_rwlock_rdlock(&st->lock);
    hd_ent *e = hdx_find(db, st, h, key, r->klen, &ev);
    uint64_t eseq = e ? e->seq : 0;
    pthread_rwlock_unlock(&st->lock);
    if (e && r->seq > eseq) {
        char k[KURA_KEY_MAX * 4 + 1];
        show_key(k, sizeof(k), key, r->klen);
        say(c, "%s/%08x.seg offset %" PRIu64 ": key '%s': a %s newer (seq %" PRIu64 ") than "
            "the version the index names (seq %" PRIu64 ")", db->dir, sg->id, off, k,
            r->type == HD_REC_DEL ? "deletion" : "version", r->seq, eseq);
        c->rep->index_bad++;
    }
}

static int scan_segment(check *c, hd_seg *sg)
{
    hashdb *db = c->db;
    hd_scan sc;
    hd_rec r;
    const unsigned char *p;
    uint64_t off = HD_SEG_HDR;
    int rc = KURA_OK;
    hd_scan_init(db, &sc, sg);
    while (off < sg->size) {
        int s = hd_scan_rec(&sc, off, &r, &p);
        if (s == 1)
            break;
        if (s == KURA_OK) {
            uint64_t len = hd_rec_size(r.hlen, r.klen, r.vlen);
            c->rep->records++;
            if (hd_rec_is_put(r.type))
                c->rep->puts++;
            else if (r.type == HD_REC_DEL)
                c->rep->dels++;
            if (r.klen)
                check_against_index(c, sg, off, &r, p);
            if (r.type == HD_REC_ZPUT)
                check_unpacks(c, sg, off, &r, p);
            off += len;
            c->rep->bytes += len;
            if (c->cb && c->cb->progress)
                c->cb->progress(c->cb->arg, c->done + off, c->total);
            continue;
        }
        if (s != KURA_ECORRUPT) {
            say(c, "%s/%08x.seg offset %" PRIu64 ": %s", db->dir, sg->id, off, kura_strerror(s));
            c->rep->damaged++;
            rc = s == KURA_ENOMEM ? s : KURA_OK;
            break;
        }
        if (zeros_to_end(db->io, sg->fd, off, sg->size))
            break;              /* a preallocated tail: never written */
        uint64_t next = hd_scan_resync(&sc, off);
        char what[KURA_KEY_MAX * 4 + 80];
        damaged_key(db->io, sg, off, what, sizeof(what));
        say(c, "%s/%08x.seg offset %" PRIu64 ": damaged %s: %" PRIu64 " bytes fail their "
            "checksum or header", db->dir, sg->id, off, what, next - off);
        c->rep->damaged++;
        c->rep->damaged_bytes += next - off;
        off = next;
    }
    hd_scan_done(&sc);
    return rc;
}

/* The record an entry names, read back and compared with it. */
static void check_entry(check *c, hd_ent *e)
{
    hashdb *db = c->db;
    uint64_t rlen = hd_rec_size(e->hlen, e->klen, e->vlen);
    const unsigned char *p, *val;
    uint32_t version;
    hd_rec r;
    const char *why = NULL;
    char k[KURA_KEY_MAX * 4 + 1];
    c->rep->entries++;
    int rc = sl_read(&db->log, e->seg, e->off, rlen, &p, &version);
    if (rc == KURA_NOTFOUND)
        why = "its segment is missing";
    else if (rc == KURA_ECORRUPT)
        why = "its segment ends before the record";
    else if (rc)
        why = kura_strerror(rc);
    else if (hd_rec_decode(p, e->hlen, version, &r) != 0 || r.hlen != e->hlen)
        why = "no record header there";
    else if (r.type != (hd_ent_zcomp(e) ? HD_REC_ZPUT : HD_REC_PUT) ||
             r.klen != e->klen || r.vlen != e->vlen || r.rawlen != hd_ent_rawlen(e))
        why = "the record there is of another type or length";
    else if (memcmp(p + r.hlen, e->key, e->klen) != 0)
        why = "the record there is of another key";
    else if (hd_rec_crc(p, r.hlen, crc32c_update(0, p + r.hlen, rlen - r.hlen)) != r.crc)
        why = "the record fails its checksum";
    else if (r.cas != e->cas || r.exptime != e->exptime)
        why = "the record's cas or expiry time differs from the index's";
    else if (r.type == HD_REC_ZPUT && hd_zcomp_unpack(&r, p, &val) != KURA_OK)
        why = "the record's value does not decompress to its length";
    if (!why)
        return;
    show_key(k, sizeof(k), e->key, e->klen);
    say(c, "key '%s': index entry -> %s/%08x.seg offset %" PRIu32 ": %s", k, db->dir, e->seg,
        e->off, why);
    c->rep->index_bad++;
}

/* A slot whose record cannot be read back at all (the index holds no key
 * to name it by). */
static void bad_slot(check *c, const hd_slot *sl, int rc)
{
    c->rep->entries++;
    say(c, "index slot -> %s/%08x.seg offset %" PRIu32 ": %s", c->db->dir, sl->seg, sl->off,
        rc == KURA_NOTFOUND ? "its segment is missing"
        : rc == KURA_ECORRUPT ? "no record of its length there" : kura_strerror(rc));
    c->rep->index_bad++;
}

int hashdb_check(kura_store *s, kura_check_report *rep, const kura_check_cb *cb)
{
    hashdb *db = (hashdb *)s;
    check c = { .db = db, .rep = rep, .cb = cb };
    seg_list l = { 0 };
    int rc = KURA_OK;
    memset(rep, 0, sizeof(*rep));
    pthread_mutex_lock(&db->ckpt_mu);
    sl_seg_each(&db->log, collect, &l);
    c.total = l.bytes;
    for (size_t i = 0; i < l.n && rc == KURA_OK; i++) {
        hd_seg *sg = hd_seg_get(db, l.ids[i]);
        if (!sg)
            continue;
        rep->segments++;
        rc = scan_segment(&c, sg);
        c.done += sg->size;
    }
    free(l.ids);
    for (int i = 0; i < HD_STRIPES && rc == KURA_OK; i++) {
        hd_stripe *st = &db->stripes[i];
        pthread_rwlock_rdlock(&st->lock);
        for (size_t j = 0; j < st->nslot; j++) {
            hd_ent ev;
            int arc = hdx_at(db, st, j, &ev);
            if (arc == KURA_OK && !ev.dead)
                check_entry(&c, &ev);
            else if (arc != KURA_NOTFOUND)
                bad_slot(&c, &st->slot[j], arc);
        }
        pthread_rwlock_unlock(&st->lock);
    }
    pthread_mutex_unlock(&db->ckpt_mu);
    return rc;
}

/*
 * hashdb_int.h - private to the hash file backend (src/store/hash/hashdb*.c).
 *
 * The hash file is log-structured (docs/formats.md has the byte layout and
 * the reasons):
 *   - a database "x.kh" is a directory holding numbered segment files
 *     (00000001.seg, ...) to which records are only ever appended, two
 *     checkpoint files (checkpoint, checkpoint.prev) and a LOCK file;
 *   - an in-memory index, split into HD_STRIPES stripes each with its own
 *     rwlock and its own growable open-addressed table of 16-byte slots,
 *     maps every key to the place of its newest record (a slot holds a
 *     tag of the key's hash and the place; the key and the rest are the
 *     record's);
 *   - a checkpoint is a dump of the slots plus the engine's state and the
 *     log position P from which replay must start; opening loads the newest
 *     valid checkpoint and replays only the records written after P;
 *   - compaction copies the live records out of old, fragmented segments to
 *     the end of the log, one record per stripe lock, then unlinks them.
 *
 * The log itself (segment files, appends, group commit, scanning) is the
 * module src/log/ (include/kura/seglog.h), embedded here as db->log: this
 * backend supplies the record framing through its callbacks
 * (hashdb_rec.c) and keeps the index, checkpoints, compaction and the
 * sweep.  This header is the backend's; the log's fields are the log's.
 *
 * Lock order: stripe lock -> log.mu -> log.cmu.  log.seg_mu (the segment
 * table's writers) is never held together with a stripe lock by a writer.  A
 * stripe's wlock is taken with its lock held and the lock again with wlock
 * held (a large copy, hd_copy_begin/end), but only by the one writer that
 * set `copying`; everyone else takes wlock holding nothing.
 */
#ifndef KURA_HASHDB_INT_H
#define KURA_HASHDB_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "kura/dbfile.h"
#include "kura/lockorder.h"
#include "kura/logf.h"
#include "kura/seglog.h"
#include "kura/bytes.h"
#include "kura/siphash.h"
#include "kura/store.h"

#define HD_STRIPES      1024            /* power of two */
/* Segments: without #segsiz, a new database's first is sealed past
 * HD_SEG_FIRST and each next one past twice its predecessor's size, up to
 * HD_SEGSIZ (sl_config.segsiz_first): an empty store takes 1 MiB of disk,
 * not a whole segment's 128 MiB reserved at once, and reaches full-size
 * segments after 255 MiB of records.  #segsiz=N makes every segment N. */
#define HD_SEGSIZ       (128ULL << 20)
#define HD_SEG_FIRST    (1ULL << 20)
#define HD_SEG_SLOTS    SL_SEG_SLOTS    /* live segment ids must span fewer */
#define HD_SEG_HDR      SL_SEG_HDR      /* bytes of a segment file header */
#define HD_REC_HDR_V1   40              /* bytes of a version 1 record header */
#define HD_REC_HDR_MAX  56              /* of a version 2 or 3 header: 8 + five varints,
                                           and for a compressed PUT a codec byte
                                           and a varint (48 without them); a
                                           version 4 header is at most 53, a
                                           version 5 one 55 (a long key's
                                           length: HD_V5_KLONG) */
#define HD_REC_MAGIC_V1 0x684b          /* "Kh" little-endian, bytes 4..5 */
#define HD_REC_MAGIC    0x724b          /* "Kr": a version 2 record */
#define HD_SEG_MAGIC    "KURAHSEG"
#define HD_CKPT_MAGIC   "KURAHCKP"
#define HD_CKPT_END     "KURAHEND"
#define HD_VERSION      5               /* of new segments (records); 1 to 4 are
                                           read.  3 may hold HD_REC_ZPUT, 4 has
                                           the short header (HD_V4_*), 5 keys
                                           longer than 255 bytes (HD_V5_KLONG):
                                           an older kurad refuses each (formats.md) */
#define HD_VERSIONS     (1u << 1 | 1u << 2 | 1u << 3 | 1u << 4 | 1u << 5)   /* read */
/* Version 5: a PUT, ZPUT or DEL whose klen byte (byte 5) is this holds its
 * key's length as a varint right after it (a key of 0 or more than 255
 * bytes; a STATE record's klen byte is 0 and means no key). */
#define HD_V5_KLONG     0

/* A version 4 header's descriptor, its byte 4: which optional fields
 * follow (hashdb_rec.c, docs/formats.md). */
#define HD_V4_TYPE      0x03            /* the record's type - 1 */
#define HD_V4_FLAGS     0x04            /* a varint of the flags (not 0) */
#define HD_V4_EXPTIME   0x08            /* a varint of the exptime (zigzag, not 0) */
#define HD_V4_CAS       0x30            /* how the cas is had: */
#define HD_V4_CAS_ZERO  0x00            /*   0 */
#define HD_V4_CAS_SEQ   0x10            /*   the sequence number */
#define HD_V4_CAS_DELTA 0x20            /*   seq + a varint (zigzag, not 0) */
#define HD_V4_CAS_BAD   0x30            /*   (no record) */
#define HD_V4_MARK_MASK 0xc0
#define HD_V4_MARK      0x80            /* the top two bits: 10 (a byte of a
                                           zeroed tail is no header) */

/* HD_REC_ZPUT: a PUT whose value is stored compressed (hashdb_zcomp.c);
 * only in segments of version 3 and later. */
enum hd_rec_type { HD_REC_PUT = 1, HD_REC_DEL = 2, HD_REC_STATE = 3, HD_REC_ZPUT = 4 };
static inline bool hd_rec_is_put(int type)
{
    return type == HD_REC_PUT || type == HD_REC_ZPUT;
}

/* A decoded record header. */
typedef struct hd_rec {
    uint32_t crc;
    uint8_t hlen;               /* bytes of the header: 40 in version 1,
                                   13 to 54 in versions 2 and 3, 8 to 53
                                   in version 4 */
    uint8_t type;
    uint16_t klen;              /* up to KURA_KEY_MAX */
    uint8_t codec;              /* HD_REC_ZPUT: its kura_codec (else 0) */
    uint32_t vlen;              /* of the value as stored: the record's extent */
    uint32_t rawlen;            /* HD_REC_ZPUT: the value's own length (else vlen) */
    uint32_t flags;
    int64_t exptime;
    uint64_t cas;
    uint64_t seq;
} hd_rec;

static inline uint64_t hd_rec_size(size_t hlen, size_t klen, size_t vlen)
{
    return (uint64_t)hlen + klen + vlen;
}

/* One key in the index: a slot of its stripe's open-addressed table, 16
 * bytes and nothing else on the heap (docs/design.md says why).  The key,
 * cas, expiry time, flags, lengths and sequence number are the record's:
 * read through the log's read mapping (sl_read) when the tag matches.
 *
 * tag: bits 20..47 of the key's hash above 4 bits of marks (HD_FETCHED...);
 * the hash bits place the slot (hd_slot_home), so a table is rebuilt, and a
 * checkpoint reloaded, without reading a key.  seg: 0 in an empty slot,
 * HD_SEG_TOMB in a removed one.  rlen: the record's bytes (header, key,
 * value), so one read fetches it whole. */
typedef struct hd_slot {
    uint32_t tag;
    uint32_t seg;
    uint32_t off;               /* < 2^32: a record starts below segsiz <= 2 GiB */
    uint32_t rlen;
} hd_slot;
#define HD_SEG_TOMB     UINT32_MAX
#define HD_TAG_MARKS    0xfu

/* What an operation knows of one key: its slot and the fields of the record
 * it names, decoded (hdx_find, hdx_at).  On the caller's stack; valid while
 * the stripe's lock is held and no slot is added to the table. */
typedef struct hd_ent {
    hd_slot *sl;
    uint64_t cas;
    int64_t exptime;
    uint64_t seq;               /* sequence number of the record pointed at */
    uint32_t off, seg;
    uint32_t vlen;              /* of the value as stored (the record's extent) */
    uint32_t rawlen;            /* the value's own length (compressed: its raw one) */
    uint32_t flags;
    uint8_t hlen;
    uint16_t klen;
    uint8_t dead;               /* 1: a tombstone seen in replay (recovery only) */
    uint8_t marks;              /* HD_FETCHED | HD_FLAGGED | HD_ZCOMP */
    const char *key;            /* the key: the caller's, or kbuf */
    int unreadable;             /* hdx_find found no entry, but passed over a
                                   slot of the key's tag whose record could
                                   not be read: the status of that read */
    char kbuf[KURA_KEY_MAX + 1];
} hd_ent;

/* Marks, in a slot's tag.  HD_FLAGGED and HD_ZCOMP change under the
 * stripe's write lock only; HD_FETCHED is also set by readers, under the
 * read lock, with an atomic load and store of the tag: no locked
 * instruction, and concurrent readers store the same value, as nothing else
 * changes the tag while the read lock is held. */
#define HD_FETCHED      1       /* read at least once (stats only) */
#define HD_FLAGGED      2       /* its client flags are not 0: memcached counts
                                   4 more bytes for such an item */
#define HD_ZCOMP        4       /* its record is an HD_REC_ZPUT */
#define HD_DEAD         8       /* a tombstone seen in replay (recovery only):
                                   the slot names the DEL record */

/* Whether e's record is compressed. */
static inline bool hd_ent_zcomp(const hd_ent *e)
{
    return e->marks & HD_ZCOMP;
}
/* The value's length as clients know it (memcached's sizes, listings,
 * "bytes"): the stored length, or for a compressed record its raw length. */
static inline uint32_t hd_ent_rawlen(const hd_ent *e)
{
    return e->rawlen;
}

/* Memory for the index: large mappings (advised to use huge pages once
 * they are some seconds old: hashdb_index.c says why), carved into slot
 * arrays.  Freed slot arrays are kept for reuse by size;
 * everything is unmapped at close. */
typedef struct hd_arena {
    pthread_mutex_t mu;
    struct hd_chunk *chunks;
    unsigned char *cur;
    size_t left;
    void *free_pow2[48];        /* freed power-of-two blocks, by log2 size */
    _Atomic uint64_t nslots;    /* slots of every stripe's table, kept as
                                   tables are made or rebuilt (stats) */
    siphash_key key;            /* the database's hash key (hd_hash): set at
                                   open, before the first key is hashed */
    bool loaded;                /* the open loaded a checkpoint's tables
                                   (hdx_load): hdx_populate has nothing to do */
} hd_arena;

/* Where a stripe's slot array is, kept apart from the stripes in one small
 * array (16 KiB) that stays in cache: an operation can then start loading
 * its slots' line and its stripe at once (hdx_prefetch) instead of one
 * after the other.  A copy of hd_stripe's slot and nslot, written with them
 * under the stripe's write lock; read without the lock, as a hint. */
typedef struct hd_bdir {
    hd_slot *slot;
    size_t nslot;
} hd_bdir;

/* Where the expiry sweep (hd_sweep, hashdb_compact.c) goes on, and what
 * its passes found.  One sweep at a time: `busy` is taken by exchange, and
 * a call that finds it taken returns at once.  The cursor and pass_bytes
 * belong to the sweep holding `busy`; the two atomics are read by stats. */
typedef struct hd_sweeper {
    _Atomic bool busy;
    uint32_t stripe;            /* the next call resumes at this stripe's */
    size_t slot;                /* slot (0: the stripe from its start) */
    uint64_t pass_bytes;        /* record bytes of dead items dropped so far
                                   in this pass */
    _Atomic uint64_t last_pass_bytes;   /* ... in the last complete pass */
    _Atomic uint64_t passes;    /* complete passes over the index */
    /* Quiet: the last complete pass met no entry that could ever die (none
     * with an expiry time) and, since that pass began, no record with one
     * was written and no flush_all came.  A quiet sweep reads nothing: with
     * 16-byte slots every entry examined is a record read, which on a file
     * larger than memory is a disk read. */
    uint64_t pass_expiring;     /* entries with an expiry time, this pass */
    uint64_t pass_oldest_cas;   /* the clock's flush watermark then */
    int64_t pass_flush_at;
    bool quiet;
    _Atomic bool idle;          /* the last call found it quiet (stats) */
} hd_sweeper;

/* Line-aligned; what every operation touches is in its first two lines
 * (the lock and slot, then nslot to bytes; the static assert in
 * hashdb_index.c keeps them there).
 *
 * The table is open-addressed: nslot 16-byte slots (hd_slot; a power of
 * two, at least 8).  A key's probe starts at the first slot of a line of 8
 * (two cache lines) chosen by its hash and goes on slot by slot; it ends at
 * an empty slot.  So a lookup reads a line of slots (all a missing key
 * costs) and only the records whose 28-bit tag matches: one record, nearly
 * always, which a get reads anyway. */
typedef struct hd_stripe {
    pthread_rwlock_t lock;      /* readers; writers (see hd_write_lock) */
    hd_slot *slot;
    size_t nslot;               /* power of two, >= 8 */
    size_t count;               /* used slots (entries, dead ones included) */
    size_t tombs;               /* HD_SEG_TOMB slots */
    _Atomic uint64_t items, bytes;  /* usage: counted entries, memcached bytes */
    hd_arena *arena;
    hd_bdir *dir;               /* this stripe's copy of slot and nslot */
    pthread_mutex_t wlock;      /* held through a large value's copy */
    bool copying;               /* a writer is in that copy; under `lock` */
    char pad[31];
} hd_stripe;

/* Locking a stripe.  Readers take `lock` for reading; whoever changes the
 * stripe's keys (a write, the sweep, compaction, a read reclaiming a dead
 * item) takes it for writing, with hd_write_lock.  A writer copying a large
 * value into the log lets the readers back in meanwhile: it takes wlock,
 * sets `copying` and releases `lock` (hd_copy_begin), and undoes that after
 * the copy (hd_copy_end).  Readers go on reading the old value instead of
 * waiting for the copy; other writers, and the checkpoint's dump, that get
 * `lock` while `copying` is set let go and wait on wlock, so nothing the
 * copying writer looked at changes under it.  Small writes take one lock;
 * wlock is only ever waited on during a copy.
 *
 * hd_lock_settled: `lock` for writing, or for reading by one who must not
 * see a copy's midpoint (the checkpoint's dump: the entry about to change
 * may point before P), once no copy is in progress. */
static inline void hd_lock_settled(hd_stripe *s, bool write)
{
    for (;;) {
        if (write)
            pthread_rwlock_wrlock(&s->lock);
        else
            pthread_rwlock_rdlock(&s->lock);
        if (!s->copying)
            return;
        pthread_rwlock_unlock(&s->lock);
        pthread_mutex_lock(&s->wlock);      /* the copy's end */
        pthread_mutex_unlock(&s->wlock);
    }
}
static inline void hd_write_lock(hd_stripe *s)
{
    lockorder_acquire(LOCK_RANK_STRIPE);
    hd_lock_settled(s, true);
}
static inline void hd_write_unlock(hd_stripe *s)
{
    pthread_rwlock_unlock(&s->lock);
    lockorder_release(LOCK_RANK_STRIPE);
}
/* Called with `lock` held for writing (hd_write_lock): wlock is free, as
 * `copying` is clear. */
static inline void hd_copy_begin(hd_stripe *s)
{
    pthread_mutex_lock(&s->wlock);
    s->copying = true;
    pthread_rwlock_unlock(&s->lock);
}
static inline void hd_copy_end(hd_stripe *s)
{
    pthread_rwlock_wrlock(&s->lock);
    s->copying = false;
    pthread_mutex_unlock(&s->wlock);
}
/* A value at least this large is copied into the log with readers let in. */
#define HD_COPY_UNLOCKED_MIN (64u << 10)
static inline bool hd_copy_unlocked(size_t vlen)
{
    return vlen >= HD_COPY_UNLOCKED_MIN;
}

/* A segment of the log (include/kura/seglog.h); its `live` and `keep` are
 * the hash file's. */
typedef sl_seg hd_seg;

/* Where a record landed. */
typedef struct hd_loc {
    uint32_t seg;
    uint32_t hlen;
    uint64_t off;
    uint64_t lsn;               /* log position just past the record */
    uint64_t seq;
} hd_loc;

/* A position in the log: replay starts here. */
typedef struct hd_pos {
    uint32_t seg;
    uint64_t off;
} hd_pos;

typedef struct hashdb {
    kura_store base;
    char *dir;
    int dirfd;
    int lockfd;
    kura_store_config cfg;
    const kura_io *io;          /* every file operation goes through it */

    /* parameters (the log's own are in log.cfg) */
    uint64_t bnum, ckpt_bytes;
    unsigned dfunit, frag_pct;
    int zcomp;                  /* kura_codec of new large values: 0 = none */
    uint64_t zmin;              /* values of at least this many bytes */

    hd_stripe *stripes;         /* HD_STRIPES of them */
    hd_bdir *bdir;              /* HD_STRIPES of them */
    hd_arena arena;

    /* the log: segments, appends, group commit (src/log/).  Its append
     * lock also guards what must stay consistent with the log's order:
     * the fields below marked "log lock", touched only in the framing
     * callback and in functions run by sl_locked */
    sl_log log;
    uint64_t seq;               /* open only: the highest sequence number
                                   seen, handed to the log as its record
                                   number (the log's recno is seq after) */
    uint64_t max_cas_seen;      /* log lock */
    kura_store_state state;     /* last saved by the engine; log lock */
    uint64_t state_seq;         /* log lock */
    _Atomic uint64_t ckpt_lsn;  /* log position of the last checkpoint (or
                                   open): appended since = lsn - this */
    _Atomic uint64_t ckpt_rolls;    /* the log's rolls then */
    _Atomic uint64_t corrupt_reads;

    /* checkpoints */
    pthread_mutex_t ckpt_mu;    /* one checkpoint or compaction at a time */
    hd_pos ckpt_cur, ckpt_prev;
    uint64_t ckpt_count;
    /* compacted segments whose files wait for two checkpoints (ckpt_mu):
     * a checkpoint's slots name records by place, not by key, so a segment
     * one of the checkpoints may name must stay until neither can
     * (hashdb_compact.c) */
    struct hd_retired { uint32_t id; uint64_t at; } *retired;
    size_t nretired, retired_cap;
    bool need_ckpt;             /* open wants a checkpoint written at once */

    /* background thread; and the interval syncer (-sync interval only) */
    kura_bg bg;
    double bg_last_ckpt, bg_retry_at, bg_backoff;  /* the background thread's own */

    /* last clock an operation passed in (compaction judges liveness by it) */
    _Atomic int64_t clk_now;
    _Atomic uint64_t clk_oldest;
    _Atomic bool clk_seen;

    /* counters */
    _Atomic uint64_t reclaimed, expired_unfetched;
    _Atomic uint64_t flushed_gone, flushed_gone_bytes;  /* hd_count_reclaim */
    _Atomic bool expiry_written; /* a record with an expiry time was written
                                    since the sweep's pass began (its quiet) */
    _Atomic uint64_t compactions, compacted_bytes, checkpoints;
    _Atomic uint64_t zcomp_records, zcomp_saved;    /* written since open */
    hd_sweeper sweep;
    uint64_t recovered_records, recovery_lost, truncated_bytes;
    bool recovering;            /* open: segments' live bytes are summed at
                                   the end (finish_index), not kept */
    struct hd_cksum *cksum;     /* open: HD_STRIPES of them while a version 8
                                   checkpoint's tables load, or NULL */
} hashdb;

/* hashdb_index.c - caller holds the stripe's lock (write lock to change). */
/* SipHash-1-3 under the database's random key (hashdb_index.c says why the
 * index hashes with a key, and why the key is the database's); O(klen),
 * about 8 ns for an 8-byte key. */
static inline uint64_t hd_hash(const hashdb *db, const char *key, size_t klen)
{
    return siphash13(&db->arena.key, key, klen);
}
static inline hd_stripe *hd_stripe_of(hashdb *db, uint64_t h)
{
    return &db->stripes[h & (HD_STRIPES - 1)];
}
/* The hash bits a slot keeps (bits 20..47), shifted above the marks. */
static inline uint32_t hd_tag_of(uint64_t h)
{
    return (uint32_t)(h >> 20) << 4;
}
/* The first slot of a probe: the start of a line of 8 slots.  From the
 * tag alone (bits 20.. of the hash), so tables up to 2^31 slots can be
 * rebuilt without the keys. */
static inline size_t hd_tag_home(uint32_t tag, size_t nslot)
{
    return (size_t)(tag >> 4) * 8 & (nslot - 1);
}
static inline size_t hd_slot_home(uint64_t h, size_t nslot)
{
    return hd_tag_home(hd_tag_of(h), nslot);
}
static inline bool hd_slot_used(const hd_slot *sl)
{
    return sl->seg != 0 && sl->seg != HD_SEG_TOMB;
}
/* A slot's marks: an atomic load, readers may be setting HD_FETCHED. */
static inline unsigned hd_slot_marks(const hd_slot *sl)
{
    return __atomic_load_n(&sl->tag, __ATOMIC_RELAXED) & HD_TAG_MARKS;
}
/* Starts loading h's stripe and slot line before the stripe lock is taken
 * (no lock needed: a stale table only prefetches a line that is still
 * mapped, slot arrays staying in the arena until close, and a prefetch
 * never faults). */
static inline void hdx_prefetch(hashdb *db, uint64_t h)
{
    hd_stripe *s = hd_stripe_of(db, h);
    hd_bdir *d = &db->bdir[h & (HD_STRIPES - 1)];
    hd_slot *slot = __atomic_load_n(&d->slot, __ATOMIC_RELAXED);
    size_t nslot = __atomic_load_n(&d->nslot, __ATOMIC_RELAXED);
    __builtin_prefetch(s, 1);
    __builtin_prefetch((char *)s + 64, 1);
    __builtin_prefetch(&slot[hd_slot_home(h, nslot)]);
}
int hdx_init(hashdb *db, uint64_t bnum);
void hdx_free(hashdb *db);
/* The key's entry, decoded into *e (e->key is the caller's key), or NULL.
 * A slot whose tag matches but whose record cannot be read is passed over. */
hd_ent *hdx_find(hashdb *db, hd_stripe *s, uint64_t h, const char *key, size_t klen, hd_ent *e);
/* Slot i decoded into *e (its key copied): KURA_OK, KURA_NOTFOUND for an
 * empty slot, or the status of reading its record (e->sl, seg, off and
 * marks are set then).  For walking a table by index (an entry may be
 * removed while its table is walked so; none may be inserted). */
int hdx_at(hashdb *db, hd_stripe *s, size_t i, hd_ent *e);
/* Decodes the record sl names into *e; KURA_OK or why not. */
int hdx_decode(hashdb *db, hd_slot *sl, hd_ent *e);
/* Room for one more slot (hdx_insert), made before an append so that
 * running out of memory changes nothing: false when memory is out.  May
 * rebuild the table: views taken before are stale. */
bool hdx_room(hd_stripe *s);
/* A new slot for a key of hash h, after hdx_room; the caller fills it
 * (hdx_set). */
hd_slot *hdx_insert(hd_stripe *s, uint64_t h);
/* Points sl at a record (its tag's hash bits stay). */
static inline void hdx_set(hd_slot *sl, uint32_t seg, uint64_t off, uint64_t rlen,
                           unsigned marks)
{
    sl->seg = seg;
    sl->off = (uint32_t)off;
    sl->rlen = (uint32_t)rlen;
    __atomic_store_n(&sl->tag, (sl->tag & ~HD_TAG_MARKS) | (marks & HD_TAG_MARKS),
                     __ATOMIC_RELAXED);
}
void hdx_remove(hd_stripe *s, hd_slot *sl);
/* Sizes every stripe for count keys: what a conversion asks first. */
void hdx_reserve(hashdb *db, uint64_t count);
/* Gives the (empty) stripe s an empty table of nslot slots, for a
 * checkpoint's (hdx_put); at open only, before its table was ever
 * written.  False when memory is out. */
bool hdx_load(hd_stripe *s, size_t nslot);
/* Makes the pages of s's new table present at once (the loader threads,
 * each for the tables it fills, so the kernel clears them in parallel). */
void hdx_prefault(hd_stripe *s);
/* Puts a checkpoint's slot back, placed by its tag (room made by hdx_load). */
void hdx_put(hd_stripe *s, const hd_slot *v);
/* Puts n slots, sorted by their home slots, into s's table, which
 * hdx_load just made (empty): one pass from its start to its end. */
void hdx_put_sorted(hd_stripe *s, const hd_slot *v, size_t n);
uint64_t hdx_items(hashdb *db, uint64_t *bytes);
uint64_t hdx_slots(hashdb *db);     /* slots of every table: O(1), no lock */
/* Chunks HUGE_AFTER seconds old (all: every chunk) advised for huge
 * pages: the background thread, hdx_init and the end of an open. */
void hdx_advise_huge(hashdb *db, bool all);
/* The end of an open that loaded no checkpoint's tables: every table in
 * use faulted in (MADV_POPULATE_WRITE, Linux 5.14: where it is missing,
 * the requests fault them in), so that no request takes those faults
 * under a stripe lock.  Changes no byte.  After a load it does nothing:
 * the loader made its tables present, and walking 256 MiB of present
 * pages again costs 40-80 ms of a restart. */
void hdx_populate(hashdb *db);

static inline hd_seg *hd_seg_get(hashdb *db, uint32_t id)
{
    return sl_seg_get(&db->log, id);
}

/* hashdb_rec.c - the record codec, and the log's framing callbacks */
/* Writes r's header (version 4, HD_VERSION; crc left 0) and returns its
 * length. */
size_t hd_rec_encode(unsigned char *hdr, const hd_rec *r);
/* Decodes a header of the given record format from the avail bytes at
 * hdr; 0 if it is sane (and fits), -1 if not. */
int hd_rec_decode(const unsigned char *hdr, size_t avail, uint32_t version, hd_rec *r);
/* The record's checksum: body_crc (over key ++ value) continued over the
 * header after its crc field. */
uint32_t hd_rec_crc(const unsigned char *hdr, size_t hlen, uint32_t body_crc);
/* The log's scan callback (sl_config.check); its arg is an hd_rec * that
 * receives the decoded header. */
long long hd_rec_check(void *arg, const unsigned char *p, size_t avail, uint32_t version,
                       size_t *need);
/* A value as stored: compressed (codec not 0: v0/l0 hold the compressed
 * bytes, rawlen the value's length), or as it is (codec 0). */
typedef struct hd_zval {
    uint8_t codec;
    uint32_t rawlen;
} hd_zval;

/* Appends one record; seq 0 takes a new sequence number.  The value is
 * v0 ++ v1; body_crc is crc32c over key ++ value (computed by the caller,
 * outside the locks).  z: NULL, or a PUT's value compressed (the record is
 * then an HD_REC_ZPUT). */
int hd_append(hashdb *db, int type, const char *key, size_t klen,
              const void *v0, size_t l0, const void *v1, size_t l1,
              uint32_t body_crc, uint32_t flags, int64_t exptime, uint64_t cas,
              uint64_t seq, const hd_zval *z, hd_loc *out);
static inline int hd_commit(hashdb *db, uint64_t lsn)  /* durable up to lsn */
{
    return sl_commit(&db->log, lsn);
}
static inline void hd_writebehind(hashdb *db)        /* background thread */
{
    sl_writebehind(&db->log);
}
static inline int hd_sync_now(hashdb *db)             /* durable up to the end */
{
    return sl_sync_now(&db->log);
}
/* Reads and checks the PUT record e points at (plain or compressed, as e
 * says); *rec is valid while e's stripe lock is held.  The value is as
 * stored: hd_read_item decompresses. */
int hd_read_record(hashdb *db, const hd_ent *e, const unsigned char **rec, hd_rec *r);

/* hashdb_zcomp.c - compressed records (#zcomp, #zmin) */
/* The item e names, its value decompressed if it is stored so (into a
 * buffer of this thread's, valid until its next read): KURA_OK, or
 * KURA_ECORRUPT (logged and counted) for a record that fails any check,
 * decompression included.  *rec and *r: the record as stored.  Stripe
 * lock held. */
int hd_read_item(hashdb *db, const hd_ent *e, kura_item *it, const unsigned char **rec,
                 hd_rec *r);
/* Decompresses a ZPUT record's value (at rec + hlen + klen) into this
 * thread's buffer: KURA_OK and *val, KURA_ECORRUPT, KURA_ENOMEM. */
int hd_zcomp_unpack(const hd_rec *r, const unsigned char *rec, const unsigned char **val);
/* Compresses a value of n bytes for a PUT, if the database compresses and
 * it saves at least 1/8: true, and the bytes in this thread's buffer
 * (*out, valid until its next call) with *z saying how; false to store it
 * as it is.  Called outside the locks. */
bool hd_zcomp_pack(hashdb *db, const void *v0, size_t l0, const void *v1, size_t l1,
                   const unsigned char **out, size_t *outlen, hd_zval *z);
static inline int hd_errno_status(int e)
{
    return sl_errno_status(e);
}
static inline void hd_fail(hashdb *db, const char *what, int err)
{
    sl_fail(&db->log, what, err);
}
static inline int hd_fsync_dir(hashdb *db)
{
    return sl_fsync_dir(&db->log);
}
/* KURA_OK, or the status of the failure that stopped the store's writes
 * (a failed sync, sticky: sl_fail). */
static inline int hd_failed(hashdb *db)
{
    return sl_failed(&db->log);
}

/* Sequential reading of a segment (recovery and compaction): the log's
 * scanner, with the records decoded.  hd_scan_rec: KURA_OK and a valid
 * record at off (*p valid until the next call), 1 at the end of the file,
 * KURA_ECORRUPT when the bytes at off are no valid record, KURA_EIO on a
 * read error. */
typedef sl_scan hd_scan;
void hd_scan_init(hashdb *db, hd_scan *sc, const hd_seg *sg);
static inline void hd_scan_done(hd_scan *sc)
{
    sl_scan_done(sc);
}
int hd_scan_rec(hd_scan *sc, uint64_t off, hd_rec *r, const unsigned char **p);
uint64_t hd_scan_resync(hd_scan *sc, uint64_t off);   /* next valid record after off, or fsize */

/* hashdb_ckpt.c */
int hd_ckpt_write(hashdb *db);

/* hashdb_cktab.c - the tables in a checkpoint (docs/formats.md) */
#define CK7_STRIPE_HDR 32       /* nslot, used slots, items, bytes */
#define CK8_STRIPE_HDR 40       /* the same, then the encoded slots' length */
/* A checkpoint writer's buffers, reused from stripe to stripe. */
typedef struct hd_ckscratch {
    hd_slot *slots, *tmp;
    unsigned char *out;         /* the stripe as it goes in the file */
    size_t cap;                 /* slots each holds */
} hd_ckscratch;
/* Stripe s as checkpoint version `version` (7 or 8) writes it, header
 * first, in sc->out; its length (0: out of memory) and its items.  Takes
 * the stripe's read lock (settled) while it copies the slots. */
size_t hd_cktab_encode(hd_stripe *s, int version, hd_ckscratch *sc, uint64_t *items);
void hd_ckscratch_free(hd_ckscratch *sc);
/* Loads the tables of a checked version 7 or 8 checkpoint (p to end, in
 * the file mapped at map) into the empty index, stripes in parallel; each
 * header, slot and the total against count checked, the first bad place
 * named in err. */
int hd_cktab_load(hashdb *db, int version, const unsigned char *map, const unsigned char *p,
                  const unsigned char *end, uint64_t count, char *err, size_t errlen);
/* At open only: fn(db, i, worker, arg) for every stripe i, on up to 4
 * threads (this one among them; worker numbers them from 0) when `slots`
 * (the used slots the work covers) is at least 65536, each taking ranges
 * of neighbouring stripes;
 * all joined before it returns.  fn may change stripe i's table and counts
 * without its lock. */
typedef void hd_stripe_fn(hashdb *db, int i, int worker, void *arg);
void hd_each_stripe(hashdb *db, uint64_t slots, hd_stripe_fn *fn, void *arg);
/* One stripe's slots as a version 8 checkpoint loaded them, summed by
 * segment while they were decoded (they come in place order, a run per
 * segment): what finish_index needs of a stripe that replay did not change
 * (apply sets stale), without reading its table again. */
typedef struct hd_cksum {
    bool valid, stale;
    uint32_t n;
    struct hd_segsum {
        uint32_t seg;
        uint64_t bytes;             /* its slots' record lengths, summed */
    } *run;
} hd_cksum;
void hd_cksum_free(hashdb *db);
int hd_recover(hashdb *db, char *err, size_t errlen);

/* hashdb_compact.c */
int hd_compact_one(hashdb *db, bool force);
/* After a checkpoint (ckpt_mu held): removes the retired segments that no
 * checkpoint on disk can name any more. */
void hd_retired_drop(hashdb *db);
long hd_sweep(hashdb *db, const kura_clock *clk, size_t budget);
int hd_drop_dead(hashdb *db, hd_stripe *st, hd_ent *e, int liveness, const kura_clock *clk);

/* The last record this thread appended, and to which store: what a
 * connection's requests, answered by this thread, wait for under -sync
 * always (kura_store_ops.thread_seq).  Set by hd_append. */
extern _Thread_local const hashdb *hd_thread_db;
extern _Thread_local uint64_t hd_thread_lsn;

/* hashdb.c */
void hd_log_line(void *arg, int level, const char *line);
#define hd_log(db, level, ...) kura_logf(hd_log_line, db, level, __VA_ARGS__)
/* hd_append of a PUT record by a writer of st (its write locks held): a
 * large value is copied with the readers let back in (hd_write_lock). */
int hd_append_put(hashdb *db, hd_stripe *st, const char *key, size_t klen, const void *v0,
                  size_t l0, const void *v1, size_t l1, uint32_t bcrc, uint32_t flags,
                  int64_t exptime, uint64_t cas, uint64_t seq, const hd_zval *z,
                  hd_loc *loc);
void hd_ent_unref_bytes(hashdb *db, hd_stripe *st, hd_ent *e);
/* Counts the dead entry e (liveness lv under clk), about to go, as
 * reclaimed, and as flushed when under clk's watermark (kura_store_usage's
 * flushed_gone). */
void hd_count_reclaim(hashdb *db, const hd_ent *e, int lv, const kura_clock *clk);
void hd_ent_ref_bytes(hashdb *db, hd_stripe *st, hd_ent *e);


#endif

/*
 * tt_int.h - what the Tokyo Tyrant protocol's files share (tt.c: framing,
 * dispatch and the record commands; tt_update.c: the changes that read
 * first; tt_walk.c: the iterator and the commands that walk the store;
 * tt_misc.c: "misc" and "stat").
 *
 * A request is the magic byte 0xC8, a command byte, fixed big-endian
 * fields, then the bodies the fields announce (docs/protocol.md, "Tokyo
 * Tyrant's protocol").  tt.c checks and buffers a whole request before a
 * handler sees it, so a handler works on complete, bounded bytes.
 */
#ifndef KURA_TT_INT_H
#define KURA_TT_INT_H

#include "kura/bytes.h"
#include "kura/ere.h"
#include "kura/list.h"
#include "proto_int.h"

/* ttserver refuses (closes on) an argument longer than this (MAXARGSIZ)
 * or more arguments than this in one mget or misc (MAXARGNUM). */
#define TT_MAX_ARG (256u << 20)
#define TT_MAX_ARGS (1u << 20)
/* What kura buffers of one mget or misc request (keys and arguments):
 * a longer one closes the connection.  A value within -I always fits. */
#define TT_REQ_MAX (16u << 20)
/* A path, host or misc name: longer closes the connection (ttserver keeps
 * 1024 bytes of a host and refuses a misc name that long). */
#define TT_NAME_MAX 1024
/* The longest key Tokyo Tyrant's requests may carry (proto_key_ok): -kmax
 * (engine_key_max; KURA_KEY_MAX at most); a longer one is answered as a
 * failure (or, in mget, skipped) as no such key can be stored. */
#define TT_KEY_MAX(s) engine_key_max((s)->engine)
/* The most records one fwmkeys / misc regex / misc range reply lists, and
 * the bytes of keys and values it may hold: a reply is counted before it
 * is sent, so it is built whole; past either bound it stops, short. */
#define TT_LIST_MAX 100000
#define TT_LIST_BYTES (64u << 20)
/* Keys one call walks for such a reply before the worker's other
 * connections get a turn (the request then stays unconsumed, resumed on
 * the connection's next turn, as a memcached listing is).  make fuzz
 * builds 16 (-DTT_WALK_SLICE=16), so that a seed of a few dozen records
 * pauses and resumes its walks. */
#ifndef TT_WALK_SLICE
#define TT_WALK_SLICE 1024
#endif
/* misc regex's work is counted in the matcher's steps (ere.h), not keys:
 * a call stops before the key after the one that took it past
 * TT_WALK_STEPS (about a millisecond; one key costs at most 2 * ERE_PROG_MAX *
 * 251 steps, about 6 ms), and a key that would take more than
 * TT_REGEX_KEY_STEPS (only a key far past KURA_KEY_MAX could) fails the
 * request rather than hold the worker. */
#define TT_WALK_STEPS (1u << 18)
#define TT_REGEX_KEY_STEPS (16u << 20)

enum tt_cmd {
    TT_PUT = 0x10, TT_PUTKEEP = 0x11, TT_PUTCAT = 0x12, TT_PUTSHL = 0x13, TT_PUTNR = 0x18,
    TT_OUT = 0x20, TT_GET = 0x30, TT_MGET = 0x31, TT_VSIZ = 0x38, TT_ITERINIT = 0x50,
    TT_ITERNEXT = 0x51, TT_FWMKEYS = 0x58, TT_ADDINT = 0x60, TT_ADDDOUBLE = 0x61,
    TT_EXT = 0x68, TT_SYNC = 0x70, TT_OPTIMIZE = 0x71, TT_VANISH = 0x72, TT_COPY = 0x73,
    TT_RESTORE = 0x74, TT_SETMST = 0x78, TT_RNUM = 0x80, TT_SIZE = 0x81, TT_STAT = 0x88,
    TT_MISC = 0x90, TT_REPL = 0xa0,
};

/* ttserver's counters, in the order its "stat" lists them. */
#define TT_COUNTERS(X) \
    X(put) X(putkeep) X(putcat) X(putshl) X(putnr) X(out) X(get) X(mget) X(vsiz) \
    X(iterinit) X(iternext) X(fwmkeys) X(addint) X(adddouble) X(ext) X(sync) \
    X(optimize) X(vanish) X(copy) X(restore) X(setmst) X(rnum) X(size) X(stat) \
    X(misc) X(repl) X(put_miss) X(out_miss) X(get_miss)

enum tt_counter {
#define TT_COUNTER_ENUM(name) TTC_##name,
    TT_COUNTERS(TT_COUNTER_ENUM)
#undef TT_COUNTER_ENUM
    TTC_COUNT
};

/* Server-wide, as ttserver's are (relaxed: they are statistics). */
extern _Atomic uint64_t tt_counts[TTC_COUNT];
#define TT_COUNT(c) atomic_fetch_add_explicit(&tt_counts[TTC_##c], 1, memory_order_relaxed)

/* A walk that lists records into one reply (fwmkeys, misc regex and
 * range), kept between the calls it takes. */
enum tt_walk_kind { TT_WALK_FWM = 1, TT_WALK_REGEX, TT_WALK_RANGE };

typedef struct tt_walk {
    int kind;                           /* 0: no walk under way */
    kura_list_cursor cur;
    kura_buf res;                       /* the reply's elements so far */
    uint32_t count;                     /* elements in res */
    uint64_t max;                       /* records still wanted */
    ere *re;                            /* TT_WALK_REGEX: the compiled pattern */
} tt_walk;

/* The iterator of iterinit / iternext: a batch of keys copied out of a
 * listing step ([2-byte big-endian length][key] ...), handed out one at a
 * time. */
typedef struct tt_iter {
    kura_list_cursor cur;
    kura_buf keys;
    size_t pos;
    char start[KURA_KEY_MAX];           /* misc iterinit's key: first key >= it */
    size_t slen;
    bool have_start;
} tt_iter;

/* The session's state (s->state). */
typedef struct tt_state {
    uint64_t swallow;                   /* body bytes of a refused request to discard */
    tt_iter iter;
    tt_walk walk;
    kura_buf scratch;                   /* a value read (tt_read: misc getpart) */
    size_t scan_off;                    /* an mget's or misc's list, scanned so far */
    uint32_t scan_n;                    /* (bytes, elements) in the first unconsumed request */
} tt_state;

/* One complete request, as tt.c parsed it. */
typedef struct tt_req {
    kura_session *s;
    tt_state *st;
    kura_buf *out;
    uint8_t cmd;
    uint32_t f[4];                      /* the 32-bit fields, in order */
    uint64_t ts;                        /* restore's and setmst's 64-bit field */
    const char *body;                   /* what follows the fixed fields */
    size_t blen;
} tt_req;

/* Replies: a status byte; a status byte and a 32-bit number; an element
 * ([be32 length][bytes]).  False (the session closes) when memory runs
 * out. */
bool tt_code(tt_req *r, uint8_t code);
bool tt_code_u32(tt_req *r, uint8_t code, uint32_t n);
bool tt_elem(kura_buf *b, const void *p, size_t n);

/* The value of key, copied into st->scratch: KURA_OK, KURA_NOTFOUND or an
 * error.  The read counts as a get. */
int tt_read(tt_req *r, const char *key, size_t klen);

/* tt_update.c: each returns enum kura_store_result (KURA_STORED: done)
 * or a negative store error.  tt_store: one engine_store of the value,
 * flags 0, never expiring (counted as a set; the caller checked the key
 * and -I where it parsed them).  tt_put_cat: append, or add when absent.
 * tt_putshl, tt_addint, tt_adddouble: read-modify-write (tt_update.c says
 * how); adddouble's numbers are in the protocol's 16-byte form. */
int tt_store(tt_req *r, int cmd, const char *key, size_t klen, const void *val, size_t vlen);
int tt_put_cat(tt_req *r, const char *key, size_t klen, const char *val, size_t vlen);
int tt_putshl(tt_req *r, const char *key, size_t klen, const char *val, size_t vlen,
              size_t width);
int tt_addint(tt_req *r, const char *key, size_t klen, int32_t add, int32_t *sum);
int tt_adddouble(tt_req *r, const char *key, size_t klen, const unsigned char add[16],
                 unsigned char sum[16]);

/* tt_walk.c */
void tt_iterinit(tt_req *r, const char *start, size_t slen);
/* The next key of the iterator: KURA_OK with *key, *klen (valid until the
 * next call), KURA_NOTFOUND at the end, or an error. */
int tt_iternext(tt_req *r, const char **key, size_t *klen);
/* Starts (if none is under way) or continues a listing walk; true when
 * it is complete and its reply appended, false when the request must wait
 * for the connection's next turn (s->out_full is set). */
bool tt_walk_run(tt_req *r, int kind, const kura_list_spec *spec, uint64_t max,
                 const char *regex, size_t rlen);
void tt_walk_release(tt_walk *w);

/* tt_misc.c */
void tt_misc(tt_req *r);
void tt_stat(tt_req *r);

#endif

/*
 * proto_int.h - what the protocol files share and nothing outside
 * src/proto/ sees: the session's layout (the part every protocol uses, the
 * text protocol's state; the binary protocol keeps its own in binary.c),
 * the protocols' entry points, the command table's entries (cmdtab.c), the
 * text protocol's reply helpers and memcached's number rules, and the
 * commands implemented in other files of the text protocol (meta.c,
 * stats.c, digest.c, listing.c).
 */
#ifndef KURA_PROTO_INT_H
#define KURA_PROTO_INT_H

#include "kura/list.h"
#include "kura/proto.h"

#define TEXT_MAX_TOKENS 24              /* memcached's MAX_TOKENS, terminal token included */

/* ---- keys, checked where a protocol parses them ------------------------------------------ *
 *
 * Each protocol checks a key's length once, where it parses the request,
 * against its own limit, and answers a longer one in its own way; the
 * store checks its own limit again where it is entered (kura_key_ok,
 * store/update.c).  The limit is a parameter, not a constant at each
 * check, so that one protocol's can change without the others': the
 * memcached protocols' (text, meta, binary) is memcached's, their
 * replies to a longer key being memcached's byte for byte; Tokyo
 * Tyrant's is -kmax (tt_key_max, tt_int.h: engine_key_max). */
#define PROTO_MC_KEY_MAX KURA_KEY_MC_MAX  /* memcached's KEY_MAX_LENGTH */

/* True when a key of klen bytes is within the protocol's limit max. */
static inline bool proto_key_ok(size_t klen, size_t max)
{
    return klen <= max;
}

/* A protocol: process() has kura_session_process()'s contract (proto.h);
 * state_size bytes of zeroed state are given to it at s->state, allocated
 * when the protocol is chosen and freed with the session, after
 * release(state) (may be NULL) has freed what the state points to. */
typedef struct kura_proto {
    const char *name;
    size_t (*process)(kura_session *s, char *in, size_t len, kura_buf *out);
    size_t state_size;
    void (*release)(void *state);
} kura_proto;

extern const kura_proto kura_proto_text;
extern const kura_proto kura_proto_binary;
extern const kura_proto kura_proto_auth;        /* -Y: before any other (auth.c) */
extern const kura_proto kura_proto_tt;  /* Tokyo Tyrant's (tt.c) */
extern const kura_proto kura_proto_kt;  /* Kyoto Tycoon's, on -kt (kt.c) */

/* A connection's protocol session.  The first part is every protocol's:
 * set at creation, or read by the connection through proto.h's accessors;
 * the rest is the text protocol's (text.c, meta.c, listing.c). */
struct kura_session {
    kura_engine *engine;
    kura_thread_stats *stats;
    kura_server_info *server;
    const kura_cmdtab *cmds;
    int conn_id;                        /* for traces: the socket's descriptor */
    bool kt;                            /* accepted on -kt: Kyoto Tycoon's protocols */
    size_t need;                        /* input bytes needed before progress; 0 = any */
    bool close;                         /* close once the queued replies are sent */
    bool dirty;                         /* a request since the flag was cleared may have
                                           changed the store */
    bool out_full;                      /* paused (KURA_OUT_HIGH_WATER, or this call's
                                           share of work): send `out`, call again */
    kura_handoff handoff;               /* take set: the connection goes to a module */
    const kura_proto *proto;            /* chosen at the first byte; NULL before */
    void *state;                        /* the protocol's own (proto->state_size) */

    /* the text protocol's */
    uint64_t swallow;                   /* bytes of a refused value still to discard */
    bool noreply;                       /* the current request asked for no reply */
    const char *line_start;             /* the line being handled */
    const char *line_end;               /* end of the line being handled */
    size_t resume;                      /* a get paused here, as an offset into the
                                           first unconsumed line; 0 = none */
    size_t scan;                        /* bytes of the first unconsumed line already
                                           searched for its newline */
    kura_list_cursor list;              /* where a listing paused (listing.c) */
    void *paused;                       /* another paused command's state (digest.c), */
    void (*paused_free)(void *);        /* and how to free it */
    bool walk_admitted;                 /* a listing or digest under way counts in WALKS_MAX */
    kura_job *job;                      /* a job the current request waits for (kura_job) */
    void (*wake)(void *arg);            /* kura_session_config's */
    void *wake_arg;
};

/* value.c: a get's value appended to out, copied or (a large one its store
 * lets keep: item.h's kura_vref) referenced.  False when memory runs out. */
bool proto_append_value(kura_buf *out, const kura_item *it);
/* The size from which a value is referenced rather than copied: below it
 * the copy costs less than the hold, its release and an iovec more (about
 * the same at 8 KiB, 10% more at 4 KiB: docs/benchmarks.md, *Large values
 * sent by reference*). */
#define PROTO_VALUE_REF_MIN 8192
static inline bool proto_value_by_ref(const kura_item *it)
{
    return it->vref && it->vlen >= PROTO_VALUE_REF_MIN;
}

/* The binary protocols' request loop (binary.c, tt.c).  Between two
 * requests: true, with out_full set, once this call has answered its share
 * (KURA_REPLY_HIGH_WATER bytes queued, or KURA_REQUESTS_PER_CALL requests):
 * the rest waits for the connection's next turn. */
static inline bool session_turn_over(kura_session *s, const kura_buf *out, unsigned *turns)
{
    if (kura_buf_size(out) >= KURA_REPLY_HIGH_WATER || ++*turns > KURA_REQUESTS_PER_CALL) {
        s->out_full = true;
        return true;
    }
    return false;
}

/* Reads past what is left of a refused body (*swallow bytes) in
 * [*pos, len), as it arrives, never buffering it. */
static inline void session_swallow(size_t *pos, size_t len, uint64_t *swallow)
{
    size_t n = len - *pos < *swallow ? len - *pos : (size_t)*swallow;
    *pos += n;
    *swallow -= n;
}
/* Listings and digests under way at once in the process: each holds up to
 * about 2 MB between its turns (a batch of keys, or a digest's sums or key
 * list), so their number is bounded; one more is answered
 * WALKS_BUSY_REPLY. */
#define WALKS_MAX 64
#define WALKS_BUSY_REPLY "SERVER_ERROR too many listings under way: try again later"
/* Counts a walk starting on s; false (nothing counted) when WALKS_MAX are
 * under way.  walk_release ends the count (at the walk's end, or the
 * session's). */
bool walk_admit(kura_session *s);
void walk_release(kura_session *s);

/* Items a listing or a digest looks at in one call before it pauses (and
 * the connection lets the worker's other connections have a turn):
 * about a millisecond's walk. */
#define LIST_TURN_VISITS 2048

/* Frees a paused command's state (s->paused), if any. */
void session_pause_end(kura_session *s);

/* The text protocol's name for the session it serves. */
typedef kura_session text_session;

size_t text_process(text_session *s, char *in, size_t len, kura_buf *out);
size_t binary_process(kura_session *s, char *in, size_t len, kura_buf *out);

/* A session's SASL exchange (sasl.c); *slot is its sasl_conn_t, made on
 * first use, NULL before.  mechs: the mechanisms, space-separated; start
 * and step: 0 authenticated, 1 continue (out holds the challenge), -1
 * failed.  The out strings belong to the exchange until its next call. */
int session_sasl_mechs(void **slot, const char **out, unsigned *outlen);
int session_sasl_start(void **slot, const char *mech, const char *in, unsigned inlen,
                       const char **out, unsigned *outlen);
int session_sasl_step(void **slot, const char *in, unsigned inlen, const char **out,
                      unsigned *outlen);
void session_sasl_free(void **slot);

/* ---- the command table (cmdtab.c) ----------------------------------------------- */

typedef void (*text_handler)(text_session *, text_token *, int, kura_buf *);

/* One command.  A built-in (text.c) has handler, or neither handler nor fn
 * (a storage command: update_cmd says which); a registered one has fn and
 * ctx.  min/max count the terminal token, as memcached's WANT_TOKENS does;
 * -1 = any. */
typedef struct text_command {
    const char *name;
    text_handler handler;
    int update_cmd;
    int min_tokens, max_tokens;
    bool exact_pair;                    /* tokens must be min or max, nothing between */
    kura_cmd_fn fn;
    void *ctx;
} text_command;

/* The built-in commands (text.c), which kura_cmdtab_new() enters: a
 * text_command without fn and ctx. */
typedef struct text_builtin {
    const char *name;
    text_handler handler;               /* NULL: a storage command (update_cmd) */
    int update_cmd;
    int min_tokens, max_tokens;
    bool exact_pair;
} text_builtin;

const text_builtin *text_builtin_commands(size_t *n);

/* The command named [name, name+len), or NULL: one hash and one compare. */
const text_command *cmdtab_find(const kura_cmdtab *t, const char *name, size_t len);

/* "stats <group>" (group NULL: plain "stats"): calls every registered
 * provider of the group in order of registration; false if there is none
 * (for a named group: the group is unknown). */
bool cmdtab_stats(const kura_cmdtab *t, const char *group, size_t glen, kura_stat_fn emit,
                  void *arg);

/* Replies "str\r\n" unless the request asked for none (text.c). */
void text_reply(text_session *s, kura_buf *out, const char *str);
/* The same, counted as a client error. */
void text_client_error(text_session *s, kura_buf *out, const char *str);
/* SERVER_ERROR for a negative store status. */
void text_server_error(text_session *s, kura_buf *out, int rc);

/* memcached's safe_strtoull / safe_strtoul / safe_strtol on a token. */
bool text_safe_u64(const text_token *t, uint64_t *out);
bool text_safe_u32(const text_token *t, uint32_t *out);
bool text_safe_i32(const text_token *t, int32_t *out);

/* ---- "stats detail": per-prefix counts (detail.c) ---------------------------- */

enum { DETAIL_GET, DETAIL_SET, DETAIL_DEL };
extern _Atomic bool detail_on;
void detail_record(const char *key, size_t nkey, int op, bool hit);
/* A request's key, counted under its prefix while "stats detail on". */
static inline void detail_note(const char *key, size_t nkey, int op, bool hit)
{
    if (atomic_load_explicit(&detail_on, memory_order_relaxed))
        detail_record(key, nkey, op, hit);
}
void detail_set(bool on);
char detail_delimiter(void);
uint64_t detail_dropped(void);
/* Appends memcached's "PREFIX p get N hit N set N del N" lines and END;
 * false when memory ran out. */
bool detail_dump(kura_buf *out);
void detail_clear(void);                /* "stats reset" */

/* "stats ..." (stats.c); ntok counts the terminal token. */
void text_stats(text_session *s, const text_token *tok, int ntok, kura_buf *out);

/* The meta commands (meta.c), called from the text command table. */
void meta_get(text_session *s, text_token *tok, int ntok, kura_buf *out);
void meta_delete(text_session *s, text_token *tok, int ntok, kura_buf *out);
void meta_arith(text_session *s, text_token *tok, int ntok, kura_buf *out);
void meta_noop(text_session *s, text_token *tok, int ntok, kura_buf *out);
void meta_debug(text_session *s, text_token *tok, int ntok, kura_buf *out);

/* ms: its value follows the line.  meta_set_parse answers the request
 * (error, refused value swallowed) and returns 0, or returns 1 with req
 * filled and the value's length in req->vlen; meta_set_complete applies it
 * once vlen + 2 bytes are at data. */
typedef struct meta_set_req {
    int cmd;                            /* enum kura_store_cmd */
    char key[PROTO_MC_KEY_MAX];         /* decoded if base64 */
    size_t klen;
    bool key_binary;
    uint32_t flags;
    int32_t exptime;
    uint64_t cas;
    bool invalidate;
    uint64_t vlen;
    const text_token *tok;              /* the request's tokens, for the reply's flags */
    int ntok;
} meta_set_req;

int meta_set_parse(text_session *s, text_token *tok, int ntok, kura_buf *out, meta_set_req *req);
void meta_set_complete(text_session *s, meta_set_req *req, const char *data, kura_buf *out);

#endif

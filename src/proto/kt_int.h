/*
 * kt_int.h - what Kyoto Tycoon's protocol files share (kt.c: the session,
 * its framing and the HTTP replies; kt_http.c: the HTTP request decoder;
 * kt_tsv.c: tab-separated values and their column encodings; kt_rest.c:
 * the RESTful interface; kt_rpc.c and kt_rpc2.c: the RPC procedures;
 * kt_cur.c: the cursors; kt_bin.c: the binary protocol).
 *
 * Kyoto Tycoon 0.9 (ktserver) speaks HTTP/1.x on one port: RESTful
 * GET/HEAD/PUT/DELETE of /KEY and RPC as POST /rpc/NAME with a TSV body;
 * a request whose first byte is 0 or 0x80 and above is its binary protocol
 * instead (set_bulk, remove_bulk, get_bulk, play_script, replication), on
 * the same connection.  docs/protocol.md, "Kyoto Tycoon's protocols".
 *
 * The decoders (kt_http_parse, kt_tsv_parse, kt_bin_parse) are pure: a
 * buffer in, spans out, nothing allocated, so the fuzz target can call
 * them alone.
 */
#ifndef KURA_KT_INT_H
#define KURA_KT_INT_H

#include <string.h>

#include "kura/bytes.h"
#include "kura/ere.h"
#include "kura/list.h"
#include "proto_int.h"

/* ---- bounds ------------------------------------------------------------------------ */

/* One line of the request head (request line or a header): ktserver reads
 * lines into 8 KiB (LINEBUFSIZ). */
#define KT_LINE_MAX 8192
/* The whole head (request line and headers), and the headers in it. */
#define KT_HEAD_MAX (64u << 10)
#define KT_HEADERS_MAX 100
/* A body: past this (or past -I plus 64 KiB for a PUT) the request is
 * answered 413 and the connection closed, as ktserver past 256 MiB. */
#define KT_BODY_MAX (16u << 20)
/* A binary request (all its records); past it the connection closes. */
#define KT_BIN_MAX (16u << 20)
/* ktserver's DATAMAXSIZ: a larger key or value in a binary request is an
 * error. */
#define KT_DATA_MAX (1u << 28)
/* A request must be complete this long after its first byte arrived
 * (drip-feeding clients), and an idle connection is closed after it
 * unless -tout says otherwise: ktserver's default -tout. */
#define KT_REQ_DEADLINE_MS KURA_KT_IDLE_MS
/* The bytes of one reply body and the keys one match_* lists. */
#define KT_OUT_MAX (64u << 20)
#define KT_LIST_MAX 100000
/* Cursors per connection (CUR=N); one more is answered 400. */
#define KT_CURSORS_MAX 64
/* The longest key Kyoto Tycoon's requests may carry (proto_key_ok): -kmax,
 * as Tokyo Tyrant's (TT_KEY_MAX); the empty key is one, as in ktserver.  A
 * longer one is answered as ktserver answers a failed record operation: a
 * store fails (500, "DB: 2: invalid operation"), a read or remove misses. */
#define KT_KEY_MAX(s) engine_key_max((s)->engine)
/* Keys a match_* walk looks at per call before the worker's other
 * connections get a turn; the matcher's steps as misc regex counts them
 * (tt_int.h). */
#ifndef KT_WALK_SLICE
#define KT_WALK_SLICE 1024
#endif
#define KT_WALK_STEPS (1u << 18)
#define KT_REGEX_KEY_STEPS (16u << 20)

/* What ktserver calls itself in Server: and report's conf_kt_version. */
#define KT_VERSION "0.9.56"

/* A span of bytes (p NULL: absent). */
typedef struct kt_span {
    const char *p;
    size_t n;
} kt_span;

static inline bool kt_span_is(kt_span s, const char *lit)
{
    size_t n = strlen(lit);
    return s.p && s.n == n && memcmp(s.p, lit, n) == 0;
}

/* ---- the HTTP request decoder (kt_http.c) ------------------------------------------ */

enum kt_method { KT_GET = 1, KT_HEAD, KT_POST, KT_PUT, KT_DELETE, KT_OTHER };

typedef struct kt_http_req {
    int method;
    bool http11;
    bool keep;                          /* keep-alive after this request */
    kt_span path;                       /* the target before '?', as sent (URL-encoded) */
    kt_span query;                      /* after '?' */
    kt_span ctype, mode, xt, auth, host;    /* the headers kura reads */
    int64_t clen;                       /* Content-Length; -1 none */
    bool chunked;
    int nheaders;
    size_t head_len;                    /* request line and headers, blank line included */
    size_t body_len;                    /* bytes of body that follow */
    const char *why;                    /* an error's reason */
} kt_http_req;

/* What kt_http_parse found besides an HTTP status to answer (400 ...). */
#define KT_HTTP_DONE 0                  /* a whole head: req filled */
#define KT_HTTP_NEED (-1)               /* more bytes are needed */
#define KT_HTTP_DROP (-2)               /* close without a reply, as ktserver */

/* Parses the head of the request at buf[0, len): KT_HTTP_DONE with req
 * filled (the body is the body_len bytes after head_len: not checked to
 * be there), KT_HTTP_NEED, KT_HTTP_DROP (no request line ktserver reads:
 * no method, target or HTTP/1.0|1.1), or an HTTP status to answer before
 * closing (400 a bad header or length, 413 a body past body_max, 414 a
 * request line past KT_LINE_MAX, 431 a header line past it, the head past
 * KT_HEAD_MAX, or more than KT_HEADERS_MAX headers, 501 chunked).  O(len);
 * reads nothing past len. */
int kt_http_parse(const char *buf, size_t len, size_t body_max, kt_http_req *req);

/* ---- TSV and its encodings (kt_tsv.c) ----------------------------------------------- */

/* A request's parameters, decoded: pairs sorted by name, one per name
 * (the last given wins, as ktserver's map assignment does). */
typedef struct kt_pair {
    kt_span k, v;
    uint32_t seq;                       /* order given: ties keep the last */
} kt_pair;

typedef struct kt_params {
    kt_pair *v;
    size_t n, cap;
} kt_params;

/* The encoding named by a Content-Type's colenc= ('B', 'Q', 'U'; 0 none);
 * *tsv false when the type is neither TSV nor a form (the body is then
 * not read), *form true for application/x-www-form-urlencoded. */
int kt_content_enc(kt_span ctype, bool *tsv, bool *form);

/* Decodes in place: base64, quoted-printable or %XX (+ as space for a
 * form); returns the new length (never longer). */
size_t kt_decode(char *p, size_t n, int enc);

/* Adds the pairs of a TSV body (lines "name\tvalue", \r\n or \n; a line
 * without a tab is skipped) or of a form / query string (name=value
 * joined by & or ;), decoding each field in place (enc as above; 'F' for
 * a form).  The spans point into buf.  False when memory runs out or the
 * pairs pass max. */
bool kt_tsv_parse(char *buf, size_t len, int enc, kt_params *out, size_t max);
bool kt_form_parse(char *buf, size_t len, kt_params *out, size_t max);
/* Sorts by name, one per name (the last). */
void kt_params_finish(kt_params *p);
/* The value of name, or a span with p NULL. */
kt_span kt_param(const kt_params *p, const char *name);
void kt_params_free(kt_params *p);

/* The output of a procedure, as ktserver's map: set adds or replaces. */
typedef struct kt_outmap {
    kura_buf bytes;                     /* names and values, back to back */
    struct kt_opair { size_t k, kn, v, vn; uint32_t seq; } *v;
    size_t n, cap;
    bool full;                          /* a set was refused past KT_OUT_MAX */
} kt_outmap;

bool kt_out_set(kt_outmap *m, const char *k, size_t kn, const void *v, size_t vn);
bool kt_out_setf(kt_outmap *m, const char *k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends the map as a TSV body in name order (one per name, the last
 * set), encoded as ktserver chooses (base64 or %XX when a field has a
 * control byte or is past 255 bytes, the shorter); *enc gets the letter
 * (0 none). */
bool kt_out_write(kt_outmap *m, kura_buf *body, int *enc);
void kt_out_reset(kt_outmap *m);
void kt_out_free(kt_outmap *m);

/* ---- the binary protocol's decoder (kt_bin.c) ----------------------------------------- */

enum { KT_BIN_NOP = 0xB0, KT_BIN_REPL = 0xB1, KT_BIN_SCRIPT = 0xB4, KT_BIN_SET_BULK = 0xB8,
       KT_BIN_REMOVE_BULK = 0xB9, KT_BIN_GET_BULK = 0xBA, KT_BIN_ERROR = 0xBF };
#define KT_BIN_NOREPLY 1u

typedef struct kt_bin_req {
    uint8_t magic;
    uint32_t flags;
    uint32_t rnum;
    size_t len;                         /* the whole request's bytes */
    size_t recs;                        /* where its records start */
    kt_span name;                       /* play_script's */
    bool bad;                           /* a length past KT_DATA_MAX: an error reply */
} kt_bin_req;

/* What kt_bin_parse found besides KT_HTTP_NEED. */
#define KT_BIN_DONE 0
#define KT_BIN_CLOSE (-3)               /* unknown magic, replication, past KT_BIN_MAX */

/* Parses the binary request at buf[0, len): KT_BIN_DONE with req filled,
 * KT_HTTP_NEED (*need: at least this many bytes), or KT_BIN_CLOSE.
 * *scan carries the records already checked between calls on the same
 * request (zero it for a new one). */
int kt_bin_parse(const char *buf, size_t len, kt_bin_req *req, size_t *need, size_t scan[2]);

/* One record of a parsed request at *off (advanced): set_bulk's dbidx,
 * key, value and xt; the others' dbidx and key. */
void kt_bin_record(const char *buf, const kt_bin_req *req, size_t *off, uint16_t *db,
                   kt_span *key, kt_span *val, int64_t *xt);

/* ---- the session --------------------------------------------------------------------------- */

typedef struct kt_cursor {
    int64_t id;
    kura_list_cursor walk;
    kura_buf keys;                      /* a batch: [1 byte length][key] ... */
    size_t pos;                         /* the current key in keys */
    bool have_start;                    /* the walk starts at start (else the first key) */
    bool start_open;                    /* ... after start, start left out */
    bool back;                          /* the walk goes down (cur_jump_back, cur_step_back) */
    bool resuming;                      /* a jump or step paused before its key was found */
    char start[KURA_KEY_MAX];
    size_t slen;
} kt_cursor;

typedef struct kt_walk {
    int kind;                           /* 0 none, 1 prefix, 2 regex, 3 similar */
    kura_list_cursor cur;
    ere *re;
    uint64_t max;
    uint64_t count;
    kura_buf keys;                      /* [4 length][4 distance][key] ... */
} kt_walk;

typedef struct kt_state {
    int64_t started_ms;                 /* the first byte of the pending request; 0 none */
    kura_buf body;                      /* the request's body, decoded in place */
    kt_params in;
    kt_outmap out;
    kura_buf reply;                     /* the reply body being built */
    kt_walk walk;
    kt_cursor *curs[KT_CURSORS_MAX];
    size_t bin_scan[2];
    size_t bin_off;                     /* a paused binary request's next record */
    bool authed;                        /* -Y: Basic credentials were good */
} kt_state;

/* One request as the session handles it. */
typedef struct kt_req {
    kura_session *s;
    kt_state *st;
    kura_buf *out;
    kt_http_req h;
    const char *body;
    size_t blen;
} kt_req;

/* kt.c: whether the pending request is past its deadline (-tout when
 * shorter than KT_REQ_DEADLINE_MS). */
bool kt_late(kura_session *s, const kt_state *st);
/* kt.c: the reply, "HTTP/1.1 code ..." with Server, Date, Connection
 * (closing), Content-Length and the extra headers given as "Name: value"
 * lines (each ending \r\n, in name order); no body for HEAD. */
void kt_respond(kt_req *r, int code, const char *headers, const void *body, size_t blen);
/* An error reply whose body is "code name (msg)\n", then close (ktserver's
 * send_error). */
void kt_fail(kt_req *r, int code, const char *msg);
/* The reason phrase of a status. */
const char *kt_status_name(int code);
/* An RFC 1123 date of t (Unix seconds) into buf (48 bytes). */
void kt_date(int64_t t, char *buf);
/* A KT xt (relative seconds, or absolute when negative; INT64_MAX none)
 * as an exptime the engine takes (engine_abs_exptime's form). */
int64_t kt_exptime(kura_engine *e, int64_t xt);
/* The store's result as ktserver's "DB: code: name: message". */
const char *kt_db_error(int rc);

/* Whether a DB parameter (absent, "0" or this database's name) names the
 * one database kura serves. */
bool kt_our_db(kura_session *s, kt_span db);

/* kt_rpc.c: what the procedures share.  kt_atoi reads a number as Kyoto
 * Cabinet's atoi (spaces, sign, digits up to the first other byte);
 * kt_param_xt the xt parameter (INT64_MAX absent); kt_error sets ERROR
 * and returns code; kt_db_fail sets ERROR to the store's result and
 * returns 450 (logic) or 500. */
int64_t kt_atoi(kt_span v);
int64_t kt_param_xt(const kt_req *r);
int kt_error(kt_req *r, int code, const char *msg);
int kt_db_fail(kt_req *r, int rc, bool logic);

/* What a read copies out: the value (when want_val, into val), its
 * expiry (absolute, 0 never), size and cas. */
typedef struct rec {
    kura_buf *val;
    bool want_val;
    int64_t exptime;
    uint64_t vlen, cas;
} rec;
/* KURA_OK, KURA_NOTFOUND (a key past -kmax too) or an error. */
int kt_read(kt_req *r, const char *key, size_t klen, rec *g);

/* kt_rest.c */
void kt_rest(kt_req *r, const char *key, size_t klen);

/* kt_rpc.c: runs /rpc/NAME with r->st->in; false when it paused (a walk's
 * slice ran out: the same request runs again later). */
bool kt_rpc(kt_req *r, const char *name, size_t nlen);

/* kt_rpc2.c: the procedures on several records, and match_*. */
int kt_rpc_bulk(kt_req *r, const char *name);
int kt_rpc_match(kt_req *r, int kind, bool *paused);   /* 1 prefix, 2 regex, 3 similar */
void kt_walk_release(kura_session *s, kt_walk *w);

/* kt_cur.c: a cursor procedure (name after "cur_"); its HTTP status. */
int kt_rpc_cursor(kt_req *r, const char *name);
void kt_cursors_free(kt_state *st);

/* kt_bin.c: handles the binary request at in (avail bytes); the bytes
 * used, or 0 when more are needed (s->need set). */
size_t kt_bin(kura_session *s, kt_state *st, const char *in, size_t avail, kura_buf *out);

#endif

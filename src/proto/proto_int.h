/*
 * proto_int.h - what the protocol files (text.c, meta.c, binary.c, stats.c)
 * share and nothing outside src/proto/ sees: the text protocol's reply
 * helpers and memcached's number rules, and the meta commands' entry points
 * in the text command table.
 */
#ifndef KURA_PROTO_INT_H
#define KURA_PROTO_INT_H

#include "kura/proto.h"

#define TEXT_MAX_TOKENS 24              /* memcached's MAX_TOKENS, terminal token included */

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
    char key[KURA_KEY_MAX];             /* decoded if base64 */
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

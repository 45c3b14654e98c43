/*
 * cmdtab.h - the text protocol's command table, which the server's modules
 * register into.
 *
 * The protocol layer serves memcached's commands (get, set, meta, stats,
 * ...) and knows nothing of the server around it.  A command that belongs
 * to the server is registered at start-up by the module that owns it:
 * "repl" and the replication stats by the server's replication glue
 * (src/server/replctl.c, which owns the repl_master), "snapshot" and "stats
 * snapshot" by the snapshot daemon (src/server/snapd.c), "shutdown" by the
 * server; "digest" (src/proto/digest.c) and the listings (src/proto/
 * listing.c: "lru_crawler", "keys", "rget") are kura's own commands on the
 * engine alone, so they stay beside the protocol, as modules the server
 * registers with digest_register() and listing_register() (proto.h), not
 * as built-ins.  A command not registered is unknown ("ERROR").
 *
 * Registration happens before any session uses the table (before the
 * workers start); after that the table is only read, so lookups take no
 * lock.  A lookup hashes the command's name into an open-addressed index:
 * one short hash and one comparison, whatever the number of commands.
 *
 * A registered handler is called with the request line's tokens (split as
 * memcached splits them, at most 23 plus the terminal one) and appends its
 * replies to `out`; the kura_session_* helpers below answer as the text
 * protocol does (noreply honoured, client errors counted), and
 * kura_session_hand_off() gives the connection to the module that answers
 * (the connection then stops being a memcached one: "repl").
 */
#ifndef KURA_CMDTAB_H
#define KURA_CMDTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/buf.h"
#include "kura/store.h"

/* One token of a request line: a span of the read buffer, not NUL-terminated.
 * The terminal token has length 0 and value NULL, or the unread rest. */
typedef struct text_token {
    const char *value;
    size_t length;
} text_token;

typedef struct kura_session kura_session;   /* proto.h */
typedef struct kura_cmdtab kura_cmdtab;

/* A registered command's handler: ctx as registered; tok[0] is the
 * command's name; ntok counts the terminal token. */
typedef void (*kura_cmd_fn)(void *ctx, kura_session *s, text_token *tok, int ntok,
                            kura_buf *out);

typedef struct kura_command {
    const char *name;                   /* at most KURA_CMD_NAME_MAX bytes */
    kura_cmd_fn fn;
    void *ctx;
    /* token counts the line must have, command and terminal token
     * included (memcached's WANT_TOKENS); -1: no bound.  Outside them the
     * request is answered "ERROR" without calling fn. */
    int min_tokens, max_tokens;
} kura_command;

#define KURA_CMD_NAME_MAX 32

/* A stats group's lines: one emit(arg, name, value) per "STAT name value". */
typedef void (*kura_stats_fn)(void *ctx, kura_stat_fn emit, void *arg);

/* A table holding the text protocol's built-in commands (memcached's and
 * the meta commands); NULL when memory runs out. */
kura_cmdtab *kura_cmdtab_new(void);
void kura_cmdtab_free(kura_cmdtab *t);

/* Adds a command (the struct is copied; name must outlive the table).
 * KURA_OK; KURA_EXISTS if the name is taken; KURA_EINVAL for a name that
 * is empty or too long; KURA_ENOMEM when the table is full.  Not safe
 * against concurrent lookups: register before the table is used. */
int kura_cmdtab_add(kura_cmdtab *t, const kura_command *c);

/* Adds a stats provider: "stats <group>" answers the lines of every
 * provider of the group, in the order they were added, then END (the
 * built-in groups - settings, items, slabs, ... - come first and cannot be
 * replaced; a group nobody provides is "ERROR").  group NULL: fn's lines
 * are appended to plain "stats", after the backend's.  KURA_OK, KURA_EINVAL
 * (a name as kura_cmdtab_add refuses), KURA_ENOMEM (the table is full);
 * the same caveat as kura_cmdtab_add's. */
int kura_cmdtab_add_stats(kura_cmdtab *t, const char *group, kura_stats_fn fn, void *ctx);

/* ---- for registered handlers ---------------------------------------------- */

/* "str\r\n", unless the request asked for no reply. */
void kura_session_reply(kura_session *s, kura_buf *out, const char *str);
/* The same, counted as a client error ("stats": kura_client_errors). */
void kura_session_client_error(kura_session *s, kura_buf *out, const char *str);

/* memcached's safe_strtoull / safe_strtoul on a token (the latter keeps
 * the low 32 bits, as memcached does); false on anything else. */
bool kura_token_u64(const text_token *t, uint64_t *out);
bool kura_token_u32(const text_token *t, uint32_t *out);

/* A connection handed to a module: once the replies queued before it are
 * sent, the connection leaves its worker and calls take(ctx, fd, arg) with
 * its socket, which take then owns (closes, on failure too).  arg carries
 * what the command parsed for the taker.  The connection is still counted
 * (curr_connections, -c): the taker takes one off when it closes fd. */
#define KURA_HANDOFF_ARGS 5
typedef struct kura_handoff {
    void (*take)(void *ctx, int fd, const uint64_t arg[KURA_HANDOFF_ARGS]);
    void *ctx;
    uint64_t arg[KURA_HANDOFF_ARGS];
} kura_handoff;

/* Asks for the hand-off; the session answers nothing more (what the client
 * sent after this request is dropped). */
void kura_session_hand_off(kura_session *s, const kura_handoff *h);

#endif

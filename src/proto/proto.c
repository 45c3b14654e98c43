/*
 * proto.c - a connection's session, whatever the protocol: creation, the
 * one entry point, and what the connection reads back (proto.h).
 *
 * memcached decides a connection's protocol once, from the first byte it
 * receives: the binary request magic (0x80) means the binary protocol, any
 * other byte the text protocol (whose command table also holds the meta
 * commands).  kura does the same, so a client that speaks binary from its
 * first request is answered in binary, and one that starts in text stays
 * in text (a 0x80 later in a text connection is just a bad command).  The
 * chosen protocol's private state is allocated then, once.
 *
 * A connection accepted on -kt speaks Kyoto Tycoon's protocols (kt.c),
 * which handle -Y themselves (HTTP Basic credentials), whatever it sends.
 *
 * Tokyo Tyrant's binary protocol is chosen the same way, by its magic
 * 0xC8, as ttserver tells it from the memcached text protocol on the same
 * port (ttserver looks at every request's first byte; kura at the
 * connection's, as it does for memcached's binary protocol: a client
 * speaks one protocol on a connection).
 */
#include <stdlib.h>

#include "kura/observer.h"
#include "proto_int.h"

#define BINARY_REQ_MAGIC 0x80
#define TT_REQ_MAGIC 0xC8

kura_session *kura_session_new(const kura_session_config *cfg)
{
    kura_session *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->engine = cfg->engine;
    s->stats = cfg->stats;
    s->server = cfg->server;
    s->cmds = cfg->cmds;
    s->conn_id = cfg->conn_id;
    s->kt = cfg->kt;
    return s;
}

static _Atomic int walks_under_way;

bool walk_admit(kura_session *s)
{
    if (s->walk_admitted)
        return true;
    if (atomic_fetch_add(&walks_under_way, 1) >= WALKS_MAX) {
        atomic_fetch_sub(&walks_under_way, 1);
        return false;
    }
    s->walk_admitted = true;
    return true;
}

void walk_release(kura_session *s)
{
    if (s->walk_admitted)
        atomic_fetch_sub(&walks_under_way, 1);
    s->walk_admitted = false;
}

void session_pause_end(kura_session *s)
{
    if (s->paused_free)
        s->paused_free(s->paused);
    s->paused = NULL;
    s->paused_free = NULL;
}

void kura_session_free(kura_session *s)
{
    if (!s)
        return;
    session_pause_end(s);               /* a client gone mid-listing: its walk goes too */
    engine_list_end(&s->list);
    walk_release(s);
    if (s->state && s->proto->release)
        s->proto->release(s->state);
    free(s->state);
    free(s);
}

size_t kura_session_process(kura_session *s, char *in, size_t len, kura_buf *out)
{
    engine_observe_conn(s->conn_id);    /* the cfd of this thread's "watch" lines */
    if (!s->proto) {
        if (len == 0)
            return 0;
        /* With -Y every connection starts at the authentication gate,
         * whatever it sends: the one place that decides whether a command
         * may run at all (auth.c); Tokyo Tyrant's protocol, which has no
         * authentication, is then not served (as memcached's binary one).
         * With -S (and no -Y, which memcached lets win) every connection
         * speaks the binary protocol, as memcached binds it with -S: any
         * other first byte closes the connection once a header's 24 bytes
         * are in (binary.c's bad magic), so text, meta, kura's own
         * commands and Tokyo Tyrant's protocol are not served. */
        unsigned char first = (unsigned char)in[0];
        const kura_proto *p = s->kt                     ? &kura_proto_kt
                              : s->server->auth          ? &kura_proto_auth
                              : s->server->sasl           ? &kura_proto_binary
                              : first == BINARY_REQ_MAGIC ? &kura_proto_binary
                              : first == TT_REQ_MAGIC     ? &kura_proto_tt
                                                          : &kura_proto_text;
        if (p->state_size && !(s->state = calloc(1, p->state_size))) {
            s->close = true;            /* as any other allocation failure of a request */
            return len;
        }
        s->proto = p;
    }
    return s->proto->process(s, in, len, out);
}

size_t kura_session_need(const kura_session *s) { return s->need; }
bool kura_session_closing(const kura_session *s) { return s->close; }
bool kura_session_out_full(const kura_session *s) { return s->out_full; }

bool kura_session_take_dirty(kura_session *s)
{
    bool d = s->dirty;
    s->dirty = false;
    return d;
}

const kura_handoff *kura_session_handoff(const kura_session *s)
{
    return s->handoff.take ? &s->handoff : NULL;
}

void kura_session_hand_off(kura_session *s, const kura_handoff *h)
{
    s->handoff = *h;
    s->close = true;
}

/*
 * watchcmd.c - the "watch" command (memcached 1.6's log stream): parses
 * its words and hands the connection to the stream's thread
 * (src/watch/watch.c), as memcached gives a watcher's connection to its
 * logger thread.  The connection stays counted in curr_connections until
 * the stream ends.
 */
#include <string.h>

#include "kura/watch.h"
#include "server.h"

#define WATCH_WORDS_MAX 24              /* memcached's MAX_TOKENS */

static void watch_gone(void *ctx)
{
    kura_server *srv = ctx;
    atomic_fetch_sub(&srv->info.curr_connections, 1);
}

static void watch_take(void *ctx, int fd, const uint64_t arg[KURA_HANDOFF_ARGS])
{
    kura_watch_add(fd, (unsigned)arg[0], arg[1] != 0, watch_gone, ctx);
}

/* watch [fetchers] [mutations] [evictions] [connevents] [noreply]: the
 * words memcached 1.6.18 takes; any other is ERROR */
static void cmd_watch(void *ctx, kura_session *s, text_token *tok, int ntok, kura_buf *out)
{
    const char *words[WATCH_WORDS_MAX];
    size_t lens[WATCH_WORDS_MAX];
    int n = 0;
    bool quiet = false;
    for (int i = 1; i < ntok - 1 && n < WATCH_WORDS_MAX; i++) {        /* tok[ntok - 1] is the terminal token */
        if (i == ntok - 2 && tok[i].length == 7 && memcmp(tok[i].value, "noreply", 7) == 0) {
            quiet = true;                       /* memcached streams without its OK */
            continue;
        }
        words[n] = tok[i].value;
        lens[n++] = tok[i].length;
    }
    int flags = kura_watch_parse(words, lens, n);
    if (flags < 0) {
        kura_session_reply(s, out, "ERROR");
        return;
    }
    kura_handoff h = { watch_take, ctx, { (uint64_t)flags, quiet } };
    kura_session_hand_off(s, &h);
}

int watch_register(kura_server *srv)
{
    const kura_command c = { "watch", cmd_watch, srv, 2, -1 };
    return kura_cmdtab_add(srv->cmds, &c) == KURA_OK ? 0 : -1;
}

/*
 * session.c - the protocol targets' common part (fuzz_text.c, fuzz_meta.c,
 * fuzz_binary.c, fuzz_tt.c, fuzz_kt.c): one connection's session over an engine on
 * the in-memory cache, fed the input as a connection feeds it, through the
 * narrowest public entry point of the protocol layer, kura_session_process()
 * (include/kura/proto.h).  This file is the one to change when the
 * session interface changes.
 *
 * The input arrives in chunks, as reads would bring it (the chunk size is
 * drawn from the input's last byte, so that requests split at every place
 * are tried), the session's `need` and `out_full` honoured, the replies
 * dropped as a connection would send them.  A fresh store and engine per
 * input keep runs deterministic (no item or cas carried from one input to
 * the next); the command table, which a session only reads, is made once.
 * What the fresh engine costs is most of an input's time under the
 * sanitizers, so it is kept small: a cache of 4 stripes under make fuzz
 * (the Makefile's FUZZ_CFLAGS; 256 in the replay build) with one block of
 * 64 buckets, a table of 64 sets of access marks (fuzz_engine_open), 4
 * journal slots and 4 locks of access marks (FUZZ_CFLAGS again).  A
 * `keys`, metadump or digest in an input visits every stripe: at 256 they
 * were most of the text and Tokyo Tyrant targets' time.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kura/cmdtab.h"
#include "kura/proto.h"
#include "fuzz.h"

void fuzz_session(const uint8_t *data, size_t size)
{
    fuzz_session_as(data, size, false);
}

void fuzz_session_as(const uint8_t *data, size_t size, bool kt)
{
    size_t item_max = 64 << 10;
    kura_engine *e = fuzz_engine_open(item_max);
    static kura_thread_stats stats[2];
    static kura_server_info info;
    memset(stats, 0, sizeof(stats));
    memset(&info, 0, sizeof(info));
    info.nthreads = 1;
    info.thread_stats = stats;
    info.maxconns = 1024;
    info.item_size_max = item_max;
    info.dbname = "*";
    info.sync_mode = "none";
    pthread_mutex_init(&info.reset_lock, NULL);
    /* the built-in commands, and the listings and digest as kurad registers
     * them: the server's own (repl, snapshot, shutdown) need a server.  Made
     * once: a session only reads it, as kurad's workers share theirs */
    static kura_cmdtab *cmds;
    if (!cmds && (!(cmds = kura_cmdtab_new()) || digest_register(cmds) != KURA_OK ||
                  listing_register(cmds) != KURA_OK))
        abort();
    kura_session_config cfg = { .engine = e, .stats = &stats[0], .server = &info, .cmds = cmds,
                                .kt = kt };
    kura_session *s = kura_session_new(&cfg);
    if (!s)
        abort();

    size_t chunk = size ? 1 + (size_t)data[size - 1] % 97 : 1, pos = 0;
    kura_buf in = { 0 }, out = { 0 };
    while (!kura_session_closing(s)) {
        size_t need = kura_session_need(s);
        bool full = kura_session_out_full(s);
        if (pos < size && (in.len == 0 || (need && in.len < need) || !full)) {
            size_t n = size - pos < chunk ? size - pos : chunk;
            if (!kura_buf_append(&in, data + pos, n))
                abort();
            pos += n;
        }
        if (in.len == 0 || (need && in.len < need)) {
            if (pos == size)
                break;
            continue;
        }
        out.len = 0;
        size_t used = kura_session_process(s, in.data, in.len, &out);
        if (used > in.len)
            abort();
        memmove(in.data, in.data + used, in.len - used);
        in.len -= used;
        if (kura_session_handoff(s))
            break;                      /* the connection would go to another module */
        if (used == 0 && !kura_session_out_full(s) && pos == size)
            break;
    }
    kura_session_free(s);
    kura_buf_free(&in);
    kura_buf_free(&out);
    engine_close(e);
    pthread_mutex_destroy(&info.reset_lock);
}

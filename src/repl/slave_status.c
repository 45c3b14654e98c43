/*
 * slave_status.c - stats repl's replica lines (docs/replication.md lists
 * them): the state, the position and lag, the counters.  Read from any
 * thread: every field is atomic or read under the replica's lock.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kura/hlc.h"
#include "slave_int.h"

static const char *const state_names[] = {
    [REPL_ST_CONNECTING] = "connecting", [REPL_ST_CONNECTED] = "connected",
    [REPL_ST_COPYING] = "copying", [REPL_ST_RECONNECTING] = "reconnecting",
    [REPL_ST_DIVERGED] = "diverged", [REPL_ST_REFUSED] = "refused",
    [REPL_ST_STOPPED] = "stopped",
};

void repl_slave_stats(repl_slave *s, bool all, kura_stat_fn emit, void *arg)
{
    char b[300];
    snprintf(b, sizeof(b), "%s:%d", s->host, s->port);
    if (all)
        emit(arg, "repl_master", b);
    int st = atomic_load(&s->state);
    emit(arg, "repl_state", state_names[st]);
    uint64_t at = atomic_load(&s->next_attempt_ms), now = mono_ms();
    repl_emit_u64(emit, arg, "repl_next_attempt_ms", at > now ? at - now : 0);
    if (all) {
        char e[sizeof(s->last_error)];
        pthread_mutex_lock(&s->lock);
        memcpy(e, s->last_error[0] ? s->last_error : "-", s->last_error[0] ? sizeof(e) : 2);
        pthread_mutex_unlock(&s->lock);
        emit(arg, "repl_last_error", e);
    }
    snprintf(b, sizeof(b), "%016" PRIx64, atomic_load(&s->master_hid));
    emit(arg, "repl_master_hid", b);
    repl_emit_u64(emit, arg, "repl_connected", atomic_load(&s->connected));
    repl_emit_u64(emit, arg, "repl_copying", atomic_load(&s->copying));
    uint64_t pos = atomic_load(&s->pos), last = atomic_load(&s->master_last);
    repl_emit_u64(emit, arg, "repl_position", pos);
    /* known only while connected, from a position, and while the master's
     * newest row is known: its heartbeats carry it, and one came in the
     * last LAG_FRESH_MS (rows alone say nothing of what the master has
     * beyond them) */
    uint64_t hb = atomic_load(&s->hb_at_ms);
    if (st == REPL_ST_CONNECTED && pos && hb && now - hb <= LAG_FRESH_MS) {
        uint64_t lag = last > pos ? hlc_us(last) - hlc_us(pos) : 0;
        repl_emit_u64(emit, arg, "repl_lag_us", lag);
        snprintf(b, sizeof(b), "%.3f", (double)lag / 1e6);
        emit(arg, "repl_lag_seconds", b);
    } else {
        emit(arg, "repl_lag_us", "unknown");
        emit(arg, "repl_lag_seconds", "unknown");
    }
    repl_emit_u64(emit, arg, "repl_rows_applied", atomic_load(&s->applied));
    repl_emit_u64(emit, arg, "repl_rows_own_skipped", atomic_load(&s->skipped));
    repl_emit_u64(emit, arg, "repl_connects", atomic_load(&s->connects));
    repl_emit_u64(emit, arg, "repl_copies_received", atomic_load(&s->copies));
    repl_emit_u64(emit, arg, "repl_divergences", atomic_load(&s->divergences));
    repl_emit_u64(emit, arg, "repl_rts_errors", atomic_load(&s->rts_errors));
}

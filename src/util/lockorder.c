/*
 * lockorder.c - the lock-rank checker of lockorder.h.
 *
 * Each thread keeps the ranks it holds on a small stack of its own, so a
 * check costs a few compares and no shared state.  Releases may come in
 * any order (a lock dropped while a later one is kept): release removes
 * the last entry of its rank.  The stripe rank may nest (lockorder.h says
 * why); every other rank is taken once at most.  An inversion, or more locks held at once
 * than the stack holds, writes one line to stderr and aborts.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kura/lockorder.h"

#define LOCKORDER_DEPTH 16

static _Thread_local int held[LOCKORDER_DEPTH];
static _Thread_local int nheld;

static const char *const names[LOCK_RANK_COUNT] = {
    [LOCK_RANK_NONE] = "none",
    [LOCK_RANK_STRIPE] = "stripe or tree",
    [LOCK_RANK_ENGINE_STATE] = "engine state",
    [LOCK_RANK_STORE_STATE] = "store state",
    [LOCK_RANK_STORE_LOG] = "store log",
    [LOCK_RANK_ULOG] = "update log",
    [LOCK_RANK_ULOG_SEG] = "update log segments",
    [LOCK_RANK_REPL] = "replication",
};

const char *lockorder_name(int rank)
{
    return rank >= 0 && rank < LOCK_RANK_COUNT ? names[rank] : "?";
}

void lockorder_check_acquire(int rank)
{
    if (rank == LOCK_RANK_NONE)
        return;
    for (int i = 0; i < nheld; i++)
        if (held[i] > rank || (held[i] == rank && rank != LOCK_RANK_STRIPE)) {
            fprintf(stderr, "lock order: taking the %s lock while holding the %s lock\n",
                    lockorder_name(rank), lockorder_name(held[i]));
            abort();
        }
    if (nheld == LOCKORDER_DEPTH) {
        fprintf(stderr, "lock order: more than %d ranked locks held\n", LOCKORDER_DEPTH);
        abort();
    }
    held[nheld++] = rank;
}

void lockorder_check_release(int rank)
{
    if (rank == LOCK_RANK_NONE)
        return;
    for (int i = nheld - 1; i >= 0; i--)
        if (held[i] == rank) {
            for (int k = i; k < nheld - 1; k++)
                held[k] = held[k + 1];
            nheld--;
            return;
        }
}

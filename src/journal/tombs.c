/*
 * tombs.c - a dual master's recent deletes.
 *
 * A dual master orders two changes of a key by their timestamps (the cas of
 * an item is its clock reading, engine_set_dual).  An item carries its own;
 * a deleted key carries nothing, so the time of each delete is kept here
 * for TOMB_KEEP_US, or until TOMB_SLOTS/2 newer ones push it out: within
 * that window a set older than the delete, arriving after it from the
 * other master, is not applied (journal_lww, below).  Keys are kept as
 * 64-bit hashes (a collision could only hold back an older set of another
 * key), in an open-addressed table under one mutex, taken after the key's
 * lock.
 */
#include <stdlib.h>
#include <string.h>

#include "journal_int.h"

#define TOMB_SLOTS (1u << 16)
#define TOMB_KEEP_US (600ull * 1000000)

typedef struct tomb {
    uint64_t h, ts;                     /* ts 0: empty */
} tomb;

struct tombs {
    pthread_mutex_t mu;
    size_t n;
    tomb t[TOMB_SLOTS];
    tomb old[TOMB_SLOTS];               /* mu: tomb_purge's copy */
};

static uint64_t tomb_hash(const void *key, size_t klen)
{
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603ull ^ klen;
    for (size_t i = 0; i < klen; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 31);
}

static tomb *tomb_slot(struct tombs *tb, uint64_t h)
{
    size_t i = h & (TOMB_SLOTS - 1);
    while (tb->t[i].ts && tb->t[i].h != h)
        i = (i + 1) & (TOMB_SLOTS - 1);
    return &tb->t[i];
}

/* do_: tb->mu held.  Keeps the newer half when full: older deletes are
 * forgotten first. */
static void do_purge(struct tombs *tb, uint64_t newest)
{
    uint64_t cut = hlc_us(newest) > TOMB_KEEP_US ? hlc_make(hlc_us(newest) - TOMB_KEEP_US, 0)
                                                 : 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < TOMB_SLOTS; i++)
        if (tb->t[i].ts) {
            lo = tb->t[i].ts < lo ? tb->t[i].ts : lo;
            hi = tb->t[i].ts > hi ? tb->t[i].ts : hi;
        }
    if (lo + (hi - lo) / 2 > cut)
        cut = lo + (hi - lo) / 2;       /* at least half goes */
    memcpy(tb->old, tb->t, sizeof(tb->old));
    memset(tb->t, 0, sizeof(tb->t));
    tb->n = 0;
    for (size_t i = 0; i < TOMB_SLOTS; i++)
        if (tb->old[i].ts > cut) {
            *tomb_slot(tb, tb->old[i].h) = tb->old[i];
            tb->n++;
        }
}

void tombs_put(struct tombs *tb, const void *key, size_t klen, uint64_t ts)
{
    uint64_t h = tomb_hash(key, klen);
    pthread_mutex_lock(&tb->mu);
    if (tb->n >= TOMB_SLOTS / 2)
        do_purge(tb, ts);
    tomb *t = tomb_slot(tb, h);
    if (!t->ts)
        tb->n++;
    t->h = h;
    if (ts > t->ts)
        t->ts = ts;
    pthread_mutex_unlock(&tb->mu);
}

/* The time of the last delete of key still remembered, 0 if none. */
uint64_t tombs_get(struct tombs *tb, const void *key, size_t klen)
{
    uint64_t h = tomb_hash(key, klen);
    pthread_mutex_lock(&tb->mu);
    uint64_t ts = tomb_slot(tb, h)->ts;
    pthread_mutex_unlock(&tb->mu);
    return ts;
}

struct tombs *tombs_new(void)
{
    struct tombs *tb = calloc(1, sizeof(*tb));
    if (tb)
        pthread_mutex_init(&tb->mu, NULL);
    return tb;
}

void tombs_free(struct tombs *tb)
{
    if (!tb)
        return;
    pthread_mutex_destroy(&tb->mu);
    free(tb);
}

int journal_set_dual(struct kura_journal *j)
{
    j->tombs = tombs_new();
    return j->tombs ? KURA_OK : KURA_ENOMEM;
}

bool journal_dual(struct kura_journal *j)
{
    return j->tombs != NULL;
}

/* A row is applied only over an older item (cas at most the row's: a
 * touch keeps the cas), and a set not over a newer delete. */
int journal_lww(struct kura_journal *j, journal_change *ch, const kura_item *cur,
                kura_update *up)
{
    const ul_row *r = ch->row;
    struct tombs *tb = j->tombs;
    if (r->type == UL_PUT) {
        if (cur ? r->cas < cur->cas : tombs_get(tb, r->key, r->klen) > r->cas)
            return KURA_OK;             /* what is here is newer */
        up->action = KURA_UPDATE_REPLACE;
        up->flags = r->flags;
        up->exptime = r->exptime;
        up->cas = r->cas;
        up->part[0].base = r->val;
        up->part[0].len = r->vlen;
    } else {
        if (!cur) {
            tombs_put(tb, r->key, r->klen, r->origin_ts);
            return KURA_OK;
        }
        if (cur->cas > r->origin_ts)
            return KURA_OK;             /* set after the delete was made */
        up->action = KURA_UPDATE_REMOVE;
    }
    int rc = journal_update(j, ch, r->key, r->klen, cur, up);
    if (rc)
        up->action = KURA_UPDATE_KEEP;
    return rc;
}

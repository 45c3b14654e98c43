/*
 * tlbuf.c - scratch buffers owned by the calling thread (see tlbuf.h).
 *
 * One pthread key for every slot: its destructor frees a thread's buffers
 * when the thread ends (a _Thread_local pointer alone would leak them).
 */
#include <pthread.h>
#include <stdlib.h>

#include "kura/tlbuf.h"

typedef struct tl_slots {
    unsigned char *p[TLB_NSLOTS];
    size_t cap[TLB_NSLOTS];
} tl_slots;

static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;
static int tl_key_ok;

static void tl_free(void *p)
{
    tl_slots *s = p;
    for (int i = 0; i < TLB_NSLOTS; i++)
        free(s->p[i]);
    free(s);
}

static void tl_init(void)
{
    tl_key_ok = pthread_key_create(&tl_key, tl_free) == 0;
}

static tl_slots *tl_get(void)
{
    pthread_once(&tl_once, tl_init);
    if (!tl_key_ok)
        return NULL;
    tl_slots *s = pthread_getspecific(tl_key);
    if (!s && (s = calloc(1, sizeof(*s))) && pthread_setspecific(tl_key, s) != 0) {
        free(s);
        s = NULL;
    }
    return s;
}

unsigned char *tlbuf(tlbuf_slot slot, size_t n)
{
    tl_slots *s = tl_get();
    if (!s)
        return NULL;
    if (s->cap[slot] < n || (s->cap[slot] > (4u << 20) && n < (64u << 10))) {
        size_t cap = n < 4096 ? 4096 : n;
        unsigned char *p = malloc(cap);
        if (!p)
            return NULL;
        free(s->p[slot]);
        s->p[slot] = p;
        s->cap[slot] = cap;
    }
    return s->p[slot];
}

void tlbuf_trim(tlbuf_slot slot, size_t keep)
{
    pthread_once(&tl_once, tl_init);
    tl_slots *s = tl_key_ok ? pthread_getspecific(tl_key) : NULL;
    if (s && s->cap[slot] > keep) {
        free(s->p[slot]);
        s->p[slot] = NULL;
        s->cap[slot] = 0;
    }
}

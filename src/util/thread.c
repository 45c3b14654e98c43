/*
 * thread.c - condition variables on the monotonic clock, and stopping a
 * thread that sleeps on one (thread.h).
 */
#include <time.h>

#include "kura/thread.h"

int kura_cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc)
        return rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!rc)
        rc = pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

void kura_thread_stop(pthread_t t, pthread_mutex_t *lock, pthread_cond_t *wake, bool *stop)
{
    pthread_mutex_lock(lock);
    *stop = true;
    pthread_cond_broadcast(wake);
    pthread_mutex_unlock(lock);
    pthread_join(t, NULL);
}

int64_t kura_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec kura_mono_after_ms(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = ts.tv_nsec + (ms % 1000) * 1000000;
    ts.tv_sec += (time_t)(ms / 1000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    return ts;
}

/*
 * thread.h - the chores every module with a thread of its own repeats:
 * a condition variable that times its waits by the monotonic clock,
 * stopping a thread that sleeps on one, and that clock in milliseconds.
 */
#ifndef KURA_THREAD_H
#define KURA_THREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* Initializes c so that pthread_cond_timedwait's deadlines are
 * CLOCK_MONOTONIC times: a step of the wall clock neither stretches nor
 * cuts a wait.  0 or an errno, as pthread_cond_init. */
int kura_cond_init_mono(pthread_cond_t *c);

/* Stops a thread that sleeps on wake under lock until *stop is set: sets
 * it (under lock), wakes every waiter and joins the thread.  The caller
 * knows the thread runs. */
void kura_thread_stop(pthread_t t, pthread_mutex_t *lock, pthread_cond_t *wake, bool *stop);

/* CLOCK_MONOTONIC in milliseconds: deadlines and timeouts that a step of
 * the wall clock must not move. */
int64_t kura_mono_ms(void);

/* The CLOCK_MONOTONIC time ms milliseconds from now, as
 * pthread_cond_timedwait takes it (on a kura_cond_init_mono condition). */
struct timespec kura_mono_after_ms(int64_t ms);

#endif

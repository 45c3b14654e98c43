/*
 * hlc.h - a hybrid logical clock: 64-bit timestamps that are unique and
 * strictly increasing in this process, close to the wall clock, and never
 * going back when the wall clock does (src/log/hlc.c).
 *
 * The update log (ulog.h) stamps every row with one.  A plain wall clock
 * would not do: two changes in the same microsecond would tie, and an NTP
 * step backwards would make a later row look older, so a slave asking for
 * "the rows after T" would miss or repeat some.  A pure counter would do
 * for order but say nothing about when; the hybrid keeps both.
 *
 * Layout: the high HLC_US_BITS (52) bits are microseconds since the Unix
 * epoch (2^52 us is 142 years: good until 2112), the low HLC_CTR_BITS (12)
 * a counter.  A new timestamp is max(last + 1, wall_us << 12): while the
 * wall clock moves it is the wall clock with counter 0; within one
 * microsecond, or while the wall clock stands behind the last timestamp
 * (it went back, or another server's rows were observed from the future),
 * it is the last one plus one.  4096 per microsecond then carry into the
 * microsecond field, which merely runs a little ahead of the wall clock
 * until it catches up: order is what matters, and it is kept.
 *
 * One clock is shared by every thread that stamps: hlc_now() is a
 * compare-and-swap loop on one atomic word, no lock.
 */
#ifndef KURA_HLC_H
#define KURA_HLC_H

#include <stdatomic.h>
#include <stdint.h>

#define HLC_CTR_BITS    12
#define HLC_US_BITS     (64 - HLC_CTR_BITS)

/* The wall clock in microseconds since the epoch; replaceable for tests. */
typedef uint64_t (*hlc_clock_fn)(void);

typedef struct hlc {
    _Atomic uint64_t last;      /* the largest timestamp handed out or observed */
    hlc_clock_fn clock;
} hlc;

/* clock NULL: CLOCK_REALTIME.  The clock starts at 0: nothing observed. */
void hlc_init(hlc *c, hlc_clock_fn clock);
/* A new timestamp, larger than every one before it from this clock and
 * every one observed.  Safe from any number of threads. */
uint64_t hlc_now(hlc *c);
/* As hlc_now, the smallest such timestamp whose low `bits` bits are tag
 * (bits <= HLC_CTR_BITS): two clocks with different tags never hand out
 * the same value, and of two readings in the same microsecond and counter
 * step the larger tag is the larger (a dual master's cas, engine.c). */
uint64_t hlc_now_tagged(hlc *c, uint32_t tag, int bits);
/* Moves the clock past ts (a row from another server, or the last
 * timestamp found in the update log at open): every later hlc_now() is
 * larger than ts. */
void hlc_observe(hlc *c, uint64_t ts);
/* The largest timestamp handed out or observed so far. */
uint64_t hlc_last(hlc *c);
/* The wall clock's reading (CLOCK_REALTIME) in microseconds. */
uint64_t hlc_wall_us(void);

static inline uint64_t hlc_make(uint64_t us, uint32_t ctr)
{
    return us << HLC_CTR_BITS | (ctr & ((1u << HLC_CTR_BITS) - 1));
}
static inline uint64_t hlc_us(uint64_t ts)
{
    return ts >> HLC_CTR_BITS;
}
static inline uint32_t hlc_ctr(uint64_t ts)
{
    return (uint32_t)(ts & ((1u << HLC_CTR_BITS) - 1));
}

#endif

/*
 * progress.c - the progress display of kuractl's long operations (check,
 * dump, load, restore, verify).
 *
 * On a terminal (stderr) a bar redrawn at most ten times a second, with
 * the count, the rate and the time left; to a file or pipe a plain line
 * every few seconds (KURACTL_PROGRESS_SECS, default 5), so a log of a
 * cron job shows the work moving without a carriage-return mess.  -q:
 * nothing.  Cheap to call per item: a clock read every 1024 calls.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double interval(const ctl_progress *p)
{
    if (p->tty)
        return 0.1;
    const char *e = getenv("KURACTL_PROGRESS_SECS");
    double v = e ? atof(e) : 5.0;
    return v >= 0 ? v : 5.0;
}

/* 1234567 -> "1.2M" */
static void human(double v, char *buf, size_t len)
{
    const char *u = "";
    if (v >= 1e9) {
        v /= 1e9;
        u = "G";
    } else if (v >= 1e6) {
        v /= 1e6;
        u = "M";
    } else if (v >= 1e3) {
        v /= 1e3;
        u = "k";
    }
    snprintf(buf, len, *u ? "%.1f%s" : "%.0f%s", v, u);
}

static void draw(ctl_progress *p, double t, bool final)
{
    double el = t - p->start;
    double rate = el > 0 ? (double)p->done / el : 0;
    char done[16], tot[16], r[16], eta[32] = "";
    human((double)p->done, done, sizeof(done));
    human((double)p->total, tot, sizeof(tot));
    human(rate, r, sizeof(r));
    if (p->total && rate > 0 && p->done < p->total && !final) {
        double left = (double)(p->total - p->done) / rate;
        snprintf(eta, sizeof(eta), ", ETA %d:%02d", (int)left / 60, (int)left % 60);
    }
    double frac = p->total ? (double)p->done / (double)p->total : 0;
    if (frac > 1)
        frac = 1;
    if (p->tty) {
        char bar[31];
        int full = (int)(frac * 30);
        for (int i = 0; i < 30; i++)
            bar[i] = i < full ? '#' : '.';
        bar[30] = '\0';
        if (p->total)
            fprintf(stderr, "\r%s [%s] %3d%% %s/%s %s, %s/s%s\033[K", p->what, bar,
                    (int)(frac * 100), done, tot, p->unit, r, eta);
        else
            fprintf(stderr, "\r%s %s %s, %s/s\033[K", p->what, done, p->unit, r);
        if (final)
            fputc('\n', stderr);
    } else if (p->total) {
        fprintf(stderr, "kuractl: %s: %d%% (%" PRIu64 " of %" PRIu64 " %s), %s/s%s%s\n",
                p->what, (int)(frac * 100), p->done, p->total, p->unit, r, eta,
                final ? ", done" : "");
    } else {
        fprintf(stderr, "kuractl: %s: %" PRIu64 " %s, %s/s%s\n", p->what, p->done, p->unit, r,
                final ? ", done" : "");
    }
    fflush(stderr);
    p->drawn = true;
}

void progress_start(ctl_progress *p, const char *what, const char *unit, uint64_t total)
{
    memset(p, 0, sizeof(*p));
    p->what = what;
    p->unit = unit;
    p->total = total;
    p->on = !g_ctl.quiet;
    p->tty = isatty(2);
    p->every = interval(p);
    p->start = p->last = mono();
}

void progress_set(ctl_progress *p, uint64_t done)
{
    p->done = done;
    if (!p->on || (p->every > 0 && (++p->calls & 1023) != 0))
        return;
    double t = mono();
    if (t - p->last >= p->every) {
        p->last = t;
        draw(p, t, false);
    }
}

/* The last state: on a terminal the bar completed, elsewhere a closing
 * line, only if a line was printed before (a quick job stays silent). */
void progress_end(ctl_progress *p)
{
    if (p->on && p->drawn)
        draw(p, mono(), true);
}

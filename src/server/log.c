/*
 * log.c - one timestamped line per event, to stderr.
 *
 * Levels: errors always; info by default; -v adds connection-level events;
 * -vv adds every request.  Lines are written with one write() so lines from
 * several threads never interleave.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

static int log_level = LOG_INFO;

void log_init(int verbosity)
{
    log_level = LOG_INFO + verbosity;
}

void log_msg(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    char line[1024];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ".%06ld %s ", (long)tv.tv_usec,
                          level == LOG_ERR ? "ERROR" : "INFO");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += (size_t)m < sizeof(line) - n - 1 ? (size_t)m : sizeof(line) - n - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

/*
 * logf.c - a log line formatted once (include/kura/logf.h), for the
 * modules' wrappers over a hook or a sink of their own.
 */
#include <stdio.h>

#include "kura/logf.h"

void kura_vlogf(kura_log_sink *sink, void *arg, int level, const char *fmt, va_list ap)
{
    char line[KURA_LOG_LINE_MAX];
    vsnprintf(line, sizeof(line), fmt, ap);
    sink(arg, level, line);
}

void kura_logf(kura_log_sink *sink, void *arg, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kura_vlogf(sink, arg, level, fmt, ap);
    va_end(ap);
}

/* kura_logf_hook's sink: arg holds the hook */
typedef struct hook {
    void (*log)(int level, const char *line);
} hook;

static void to_hook(void *arg, int level, const char *line)
{
    hook *h = arg;
    if (h->log)
        h->log(level, line);
    else
        fprintf(stderr, "%s\n", line);
}

void kura_logf_hook(void (*log)(int level, const char *line), int level, const char *fmt, ...)
{
    hook h = { log };
    va_list ap;
    va_start(ap, fmt);
    kura_vlogf(to_hook, &h, level, fmt, ap);
    va_end(ap);
}

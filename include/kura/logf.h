/*
 * logf.h - a log line formatted once for every module that logs through a
 * hook: the server's log (kura_store_config.log, repl_config.log: NULL in
 * a tool or test that runs a module alone, which then writes to stderr),
 * or a sink of the module's own that adds its prefix (the hash file's,
 * the B+ tree's, the segment log's).  Each module's wrapper (hd_log,
 * bt_log, sl_logf, the replication's logf_) is a macro over these.
 */
#ifndef KURA_LOGF_H
#define KURA_LOGF_H

#include <stdarg.h>

#define KURA_LOG_LINE_MAX 1024          /* a longer line is cut */

typedef void kura_log_sink(void *arg, int level, const char *line);

/* Formats one line and hands it to sink(arg, level, line). */
void kura_vlogf(kura_log_sink *sink, void *arg, int level, const char *fmt, va_list ap);
void kura_logf(kura_log_sink *sink, void *arg, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Formats one line for the server's log hook log, or, with none, writes
 * it to stderr. */
void kura_logf_hook(void (*log)(int level, const char *line), int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

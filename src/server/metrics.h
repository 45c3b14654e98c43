/*
 * metrics.h - the Prometheus endpoint (-metrics [HOST:]PORT): what it
 * answers (metrics_expo.c) and the server that answers it (metrics.c).
 */
#ifndef KURA_METRICS_H
#define KURA_METRICS_H

#include <stddef.h>

#include "kura/buf.h"
#include "kura/proto.h"

/* /metrics: the Prometheus text exposition (version 0.0.4) of what "stats",
 * "stats settings", "stats slabs", "stats repl", "stats snapshot" and
 * "stats fsync" answer, appended to out.  0, or -1 when memory ran out. */
int metrics_render(const kura_stats_source *src, kura_buf *out);

/* /health: 200, or 503 with the reasons in why ("; " between them) when
 * the server takes no writes: a store or update log stopped by a failed
 * sync, a change refused for a full disk in the last minute, a replica
 * whose "repl_state" is diverged or refused. */
int metrics_health(const kura_stats_source *src, char *why, size_t len);

#endif

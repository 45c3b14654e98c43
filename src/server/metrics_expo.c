/*
 * metrics_expo.c - what /metrics and /health answer (metrics.h): the
 * Prometheus text exposition and the health verdict, both made from the
 * lines "stats" answers (kura_stats_lines, proto.h), so a figure is counted
 * in one place and Prometheus sees what a "stats" client sees.
 *
 * memcached's figures keep the names prometheus/memcached_exporter gives
 * them (memcached_current_items, memcached_commands_total{command,status},
 * ...), so a dashboard made for memcached works unchanged; what memcached
 * does not have is in kura_ families.  A line a group does not answer (no
 * update log, no snapshots, another backend) is left out, family and all.
 *
 * Replication is read generically, by line name, so that a rewrite of
 * src/repl/ that keeps or adds lines needs nothing here: "repl_state"
 * (whatever its value: a label), "repl_replica_<sid>" (a master's view of
 * each replica, "name,key=value,...,flag"), and the numbers the table
 * below lists.
 *
 * Not thread-safe by itself: the metrics thread alone calls it.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/grow.h"
#include "kura/kio.h"
#include "metrics.h"

/* ---- the lines of a group ------------------------------------------------ */

typedef struct mx_line {
    char *name, *value;
} mx_line;

typedef struct mx_lines {
    mx_line *v;
    size_t n, cap;
    bool oom;                           /* a line could not be kept */
} mx_lines;

static void collect(void *arg, const char *name, const char *value)
{
    mx_lines *l = arg;
    if (kura_grow(&l->v, &l->cap, l->n + 1, sizeof(*l->v), 128)) {
        l->oom = true;
        return;
    }
    char *n = strdup(name), *val = strdup(value);
    if (!n || !val) {
        free(n);
        free(val);
        l->oom = true;
        return;
    }
    l->v[l->n++] = (mx_line){ n, val };
}

static void lines_free(mx_lines *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].name);
        free(l->v[i].value);
    }
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/* The value of the line named so, or NULL.  Linear: a group has a few
 * hundred lines at most, and a scrape looks up fewer than a hundred. */
static const char *get(const mx_lines *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].name, name) == 0)
            return l->v[i].value;
    return NULL;
}

static bool get_u64(const mx_lines *l, const char *name, uint64_t *out)
{
    const char *v = get(l, name);
    char *end;
    if (!v || !*v)
        return false;
    *out = strtoull(v, &end, 10);
    return *end == '\0';
}

/* The groups a scrape reads.  A group nobody provides stays empty. */
typedef struct mx_stats {
    mx_lines general, settings, slabs, repl, snapshot, fsync;
} mx_stats;

static int stats_read(const kura_stats_source *src, mx_stats *st)
{
    memset(st, 0, sizeof(*st));
    kura_stats_lines(src, NULL, 0, collect, &st->general);
    kura_stats_lines(src, "settings", 8, collect, &st->settings);
    kura_stats_lines(src, "slabs", 5, collect, &st->slabs);
    kura_stats_lines(src, "repl", 4, collect, &st->repl);
    kura_stats_lines(src, "snapshot", 8, collect, &st->snapshot);
    kura_stats_lines(src, "fsync", 5, collect, &st->fsync);
    return st->general.oom || st->settings.oom || st->slabs.oom || st->repl.oom ||
           st->snapshot.oom || st->fsync.oom ? -1 : 0;
}

static void stats_free(mx_stats *st)
{
    lines_free(&st->general);
    lines_free(&st->settings);
    lines_free(&st->slabs);
    lines_free(&st->repl);
    lines_free(&st->snapshot);
    lines_free(&st->fsync);
}

/* ---- exposition ------------------------------------------------------------ */

static void put(kura_buf *out, const char *s)
{
    kura_buf_append(out, s, strlen(s));
}

static void putf(kura_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(kura_buf *out, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > 0)
        kura_buf_append(out, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static void family(kura_buf *out, const char *name, const char *type, const char *help)
{
    putf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value as the text format wants it: \, " and newline escaped. */
static void put_label(kura_buf *out, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            kura_buf_append(out, "\\", 1);
        if (*v == '\n')
            put(out, "\\n");
        else
            kura_buf_append(out, v, 1);
    }
}

/* A stats value as a sample value: scale 1 keeps the text (a 64-bit
 * counter loses nothing to a double); else the number times scale. */
static bool sample_value(const char *v, double scale, char *buf, size_t len)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end)
        return false;                   /* not a number: not a sample */
    if (scale == 1)
        snprintf(buf, len, "%s", v);
    else
        snprintf(buf, len, "%.9g", d * scale);
    return true;
}

/* One stats line as one metric without labels. */
typedef struct mx_map {
    const char *stat, *metric, *type, *help;
    double scale;                       /* 0 = 1 */
} mx_map;

static void map_lines(kura_buf *out, const mx_lines *l, const mx_map *m, size_t n)
{
    char v[64];
    for (size_t i = 0; i < n; i++) {
        const char *val = get(l, m[i].stat);
        if (!val || !sample_value(val, m[i].scale ? m[i].scale : 1, v, sizeof(v)))
            continue;
        family(out, m[i].metric, m[i].type, m[i].help);
        putf(out, "%s %s\n", m[i].metric, v);
    }
}

#define N(a) (sizeof(a) / sizeof(a[0]))

/* memcached_exporter's names for memcached's "stats" lines (its
 * pkg/exporter/exporter.go).  Uptime is typed a gauge, not a counter as
 * the exporter has it, since a counter's name must end in _total
 * (promtool check metrics); a dashboard reads it the same. */
static const mx_map memcached_general[] = {
    { "uptime", "memcached_uptime_seconds", "gauge", "Number of seconds since the server started.", 0 },
    { "time", "memcached_time_seconds", "gauge", "current UNIX time according to the server.", 0 },
    { "rusage_user", "memcached_process_user_cpu_seconds_total", "counter",
      "Accumulated user time for this process.", 0 },
    { "rusage_system", "memcached_process_system_cpu_seconds_total", "counter",
      "Accumulated system time for this process.", 0 },
    { "bytes_read", "memcached_read_bytes_total", "counter",
      "Total number of bytes read by this server from network.", 0 },
    { "bytes_written", "memcached_written_bytes_total", "counter",
      "Total number of bytes sent by this server to network.", 0 },
    { "curr_connections", "memcached_current_connections", "gauge",
      "Current number of open connections.", 0 },
    { "total_connections", "memcached_connections_total", "counter",
      "Total number of connections opened since the server started running.", 0 },
    { "rejected_connections", "memcached_connections_rejected_total", "counter",
      "Total number of connections rejected due to hitting the -c limit.", 0 },
    { "conn_yields", "memcached_connections_yielded_total", "counter",
      "Total number of connections yielded running due to hitting the per-event request limit.", 0 },
    { "listen_disabled_num", "memcached_connections_listener_disabled_total", "counter",
      "Number of times the server disabled its listener.", 0 },
    { "bytes", "memcached_current_bytes", "gauge", "Current number of bytes used to store items.", 0 },
    { "limit_maxbytes", "memcached_limit_bytes", "gauge",
      "Number of bytes this server is allowed to use for storage.", 0 },
    { "curr_items", "memcached_current_items", "gauge",
      "Current number of items stored by this instance.", 0 },
    { "total_items", "memcached_items_total", "counter",
      "Total number of items stored during the life of this instance.", 0 },
    { "evictions", "memcached_items_evicted_total", "counter",
      "Total number of valid items removed from cache to free memory for new items.", 0 },
    { "reclaimed", "memcached_items_reclaimed_total", "counter",
      "Total number of times an entry was stored using memory from an expired entry.", 0 },
    { "store_too_large", "memcached_item_too_large_total", "counter",
      "The number of times an item exceeded the max-item-size when being stored.", 0 },
    { "store_no_memory", "memcached_item_no_memory_total", "counter",
      "The number of times an item could not be stored due to no more memory.", 0 },
    { "accepting_conns", "memcached_accepting_connections", "gauge",
      "The server is currently accepting new connections.", 0 },
};

static const mx_map memcached_settings[] = {
    { "maxconns", "memcached_max_connections", "gauge", "Maximum number of clients allowed.", 0 },
};

static const mx_map memcached_slabs[] = {
    { "total_malloced", "memcached_malloced_bytes", "gauge",
      "Number of bytes of memory allocated to slab pages.", 0 },
};

/* memcached_commands_total{command,status}, as the exporter derives it:
 * <op>_hits and <op>_misses, cas_badval, cmd_flush, and set as cmd_set
 * less the cas commands (which cmd_set counts too). */
static void commands_total(kura_buf *out, const mx_lines *g)
{
    static const char *const ops[] = { "get", "delete", "incr", "decr", "cas", "touch" };
    char name[32];
    uint64_t v, set, cas_h = 0, cas_m = 0, cas_b = 0;
    family(out, "memcached_commands_total", "counter",
           "Total number of all requests broken down by command (get, set, etc.) and status.");
    for (size_t i = 0; i < N(ops); i++) {
        snprintf(name, sizeof(name), "%s_hits", ops[i]);
        if (get_u64(g, name, &v))
            putf(out, "memcached_commands_total{command=\"%s\",status=\"hit\"} %" PRIu64 "\n",
                 ops[i], v);
        snprintf(name, sizeof(name), "%s_misses", ops[i]);
        if (get_u64(g, name, &v))
            putf(out, "memcached_commands_total{command=\"%s\",status=\"miss\"} %" PRIu64 "\n",
                 ops[i], v);
    }
    if (get_u64(g, "cas_badval", &cas_b))
        putf(out, "memcached_commands_total{command=\"cas\",status=\"badval\"} %" PRIu64 "\n",
             cas_b);
    if (get_u64(g, "cmd_flush", &v))
        putf(out, "memcached_commands_total{command=\"flush\",status=\"hit\"} %" PRIu64 "\n", v);
    get_u64(g, "cas_hits", &cas_h);
    get_u64(g, "cas_misses", &cas_m);
    if (get_u64(g, "cmd_set", &set)) {
        uint64_t cas = cas_h + cas_m + cas_b;
        putf(out, "memcached_commands_total{command=\"set\",status=\"hit\"} %" PRIu64 "\n",
             set > cas ? set - cas : 0);
    }
}

/* kura's own lines of plain "stats" */
static const mx_map kura_general_map[] = {
    { "kura_client_errors", "kura_client_errors_total", "counter",
      "Requests answered CLIENT_ERROR.", 0 },
    { "kura_unknown_commands", "kura_unknown_commands_total", "counter",
      "Requests naming no known command.", 0 },
    { "kura_protocol_closes", "kura_protocol_closes_total", "counter",
      "Connections closed for a protocol error.", 0 },
    { "kura_store_errors", "kura_store_errors_total", "counter",
      "Requests the store failed (SERVER_ERROR).", 0 },
    { "kura_disk_full_time", "kura_disk_full_time_seconds", "gauge",
      "When a change was last refused for a full disk (Unix time; 0: never).", 0 },
    { "kura_listing_runs", "kura_listing_runs_total", "counter",
      "Key listings started (lru_crawler metadump, keys, rget).", 0 },
    { "kura_digest_runs", "kura_digest_runs_total", "counter", "digest commands run.", 0 },
    { "auth_cmds", "kura_auth_attempts_total", "counter",
      "Authentication attempts (-Y), successful or not.", 0 },
    { "auth_errors", "kura_auth_failures_total", "counter", "Authentication attempts that failed.", 0 },
    /* the update log's (main.c's repl_stats) */
    { "ulog_bytes", "kura_ulog_bytes", "gauge", "Bytes of the update log's files.", 0 },
    { "ulog_files", "kura_ulog_files", "gauge", "Files of the update log.", 0 },
    { "ulog_sync_failed", "kura_ulog_sync_failed", "gauge",
      "1 once a sync of the update log failed: it takes no more changes.", 0 },
    { "ulog_pruned_files", "kura_ulog_pruned_files_total", "counter",
      "Update-log files deleted past -ulmax.", 0 },
    { "ulog_pruned_bytes", "kura_ulog_pruned_bytes_total", "counter",
      "Bytes of update-log files deleted past -ulmax.", 0 },
    /* replication: a master's */
    { "repl_replicas", "kura_repl_replicas", "gauge", "Replicas streaming from this server.", 0 },
    { "repl_term", "kura_repl_term", "gauge", "The replication term (rises with each promote).", 0 },
    { "repl_fenced", "kura_repl_fenced", "gauge",
      "1 while fenced: a master that heard of a newer term, refusing writes.", 0 },
    { "repl_rows_sent", "kura_repl_rows_sent_total", "counter", "Update-log rows sent to replicas.", 0 },
    { "repl_copies_sent", "kura_repl_copies_sent_total", "counter", "Full copies sent to replicas.", 0 },
    { "repl_syncrepl_timeouts", "kura_repl_syncrepl_timeouts_total", "counter",
      "Changes whose -syncrepl wait timed out.", 0 },
    /* a replica's */
    { "repl_connected", "kura_repl_connected", "gauge", "1 while connected to the master.", 0 },
    { "repl_copying", "kura_repl_copying", "gauge", "1 while receiving a full copy.", 0 },
    { "repl_lag_seconds", "kura_repl_lag_seconds", "gauge",
      "How far this replica's applied changes are behind its master's.", 0 },
    { "repl_rows_applied", "kura_repl_rows_applied_total", "counter",
      "Rows of the master's update log applied.", 0 },
    { "repl_connects", "kura_repl_connects_total", "counter", "Connections made to the master.", 0 },
    { "repl_copies_received", "kura_repl_copies_received_total", "counter",
      "Full copies received from the master.", 0 },
};

/* "stats snapshot" (snapd.c) */
static const mx_map kura_snapshot[] = {
    { "snapshot_count", "kura_snapshots_total", "counter", "Snapshots taken.", 0 },
    { "snapshot_failures", "kura_snapshot_failures_total", "counter", "Snapshots that failed.", 0 },
    { "snapshot_running", "kura_snapshot_running", "gauge", "1 while a snapshot is taken.", 0 },
    { "snapshot_last_time", "kura_snapshot_last_success_time_seconds", "gauge",
      "When the last snapshot was completed (Unix time; 0: none yet).", 0 },
    { "snapshot_last_ms", "kura_snapshot_last_duration_seconds", "gauge",
      "How long the last snapshot took.", 0.001 },
    { "snapshot_last_bytes", "kura_snapshot_last_size_bytes", "gauge",
      "Bytes of the last snapshot's file.", 0 },
    { "snapshot_last_items", "kura_snapshot_last_items", "gauge", "Items of the last snapshot.", 0 },
};

/* The store's lines: the backend's prefix (hash_, tree_, cache_) and a
 * suffix, one family labelled with the backend. */
static const mx_map store_map[] = {
    { "file_bytes", "kura_store_file_bytes", "gauge", "Bytes of the store's files.", 0 },
    { "live_bytes", "kura_store_live_bytes", "gauge", "Bytes of the records the store still reads.", 0 },
    { "dead_bytes", "kura_store_dead_bytes", "gauge",
      "Bytes of the store's files no record uses (compaction reclaims them).", 0 },
    { "compactions", "kura_store_compactions_total", "counter", "Segments compacted.", 0 },
    { "compacted_bytes", "kura_store_compacted_bytes_total", "counter",
      "Bytes reclaimed by compaction.", 0 },
    { "checkpoints", "kura_store_checkpoints_total", "counter", "Checkpoints written.", 0 },
    { "syncs", "kura_store_syncs_total", "counter", "Group-commit syncs of the store's log.", 0 },
    { "sync_errors", "kura_store_sync_failures_total", "counter", "Syncs of the store that failed.", 0 },
    { "write_errors", "kura_store_write_errors_total", "counter", "Writes of the store that failed.", 0 },
    { "read_errors", "kura_store_read_errors_total", "counter", "Reads of the store that failed.", 0 },
    { "corrupt_reads", "kura_store_corrupt_reads_total", "counter",
      "Records that failed their checksum when read.", 0 },
    { "writes_stopped", "kura_store_writes_stopped", "gauge",
      "1 once a failed sync stopped the store taking writes (until a restart).", 0 },
    { "mem_used", "kura_store_memory_bytes", "gauge", "Bytes the in-memory cache holds.", 0 },
};

static void store_lines(kura_buf *out, const mx_lines *g, const char *backend)
{
    static const char *const prefixes[] = { "hash_", "tree_", "cache_" };
    char name[64], v[64];
    for (size_t i = 0; i < N(store_map); i++)
        for (size_t p = 0; p < N(prefixes); p++) {
            snprintf(name, sizeof(name), "%s%s", prefixes[p], store_map[i].stat);
            const char *val = get(g, name);
            if (!val || !sample_value(val, 1, v, sizeof(v)))
                continue;
            family(out, store_map[i].metric, store_map[i].type, store_map[i].help);
            putf(out, "%s{backend=\"", store_map[i].metric);
            put_label(out, backend);
            putf(out, "\"} %s\n", v);
            break;
        }
}

/* kura_fsync_duration_seconds, a histogram, from "stats fsync". */
static void fsync_histogram(kura_buf *out, const mx_lines *f)
{
    char name[40];
    uint64_t v, count, sum;
    if (!get_u64(f, "fsync_count", &count) || !get_u64(f, "fsync_sum_us", &sum))
        return;
    family(out, "kura_fsync_duration_seconds", "histogram",
           "How long the stores' fsync and fdatasync calls took.");
    for (int i = 0; i < KIO_SYNC_BUCKETS - 1; i++) {
        snprintf(name, sizeof(name), "fsync_le_%u_us", kio_sync_bucket_us[i]);
        if (get_u64(f, name, &v))
            putf(out, "kura_fsync_duration_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
                 kio_sync_bucket_us[i] / 1e6, v);
    }
    putf(out, "kura_fsync_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", count);
    putf(out, "kura_fsync_duration_seconds_sum %.6f\n", sum / 1e6);
    putf(out, "kura_fsync_duration_seconds_count %" PRIu64 "\n", count);
}

/* "repl_replica_<sid> name,acked=N,lag_us=N,lag_rows=N[,flag...]": one
 * sample per replica (labelled with its server id) in each family; the
 * info family carries its name (address) and state (a flag, or state=). */
static void replica_lines(kura_buf *out, const mx_lines *r)
{
    static const struct {
        const char *key, *metric, *help;
        double scale;
    } fields[] = {
        { "lag_us", "kura_repl_replica_lag_seconds",
          "How far a replica's acknowledged changes are behind this master's last.", 1e-6 },
        { "lag_rows", "kura_repl_replica_lag_rows", "Update-log rows a replica has yet to read.", 1 },
        { "state", "kura_repl_replica_info", "A replica's name and state (1 per replica).", 0 },
    };
    for (size_t f = 0; f < N(fields); f++) {
        bool head = false;
        for (size_t i = 0; i < r->n; i++) {
            const char *sid = r->v[i].name;
            if (strncmp(sid, "repl_replica_", 13) != 0)
                continue;
            sid += 13;
            char copy[512], *save, *peer, *tok, state[64] = "streaming", val[64] = "";
            snprintf(copy, sizeof(copy), "%s", r->v[i].value);
            peer = strtok_r(copy, ",", &save);
            while ((tok = strtok_r(NULL, ",", &save))) {
                char *eq = strchr(tok, '=');
                if (!eq)
                    snprintf(state, sizeof(state), "%s", tok);
                else if (strncmp(tok, "state", (size_t)(eq - tok)) == 0 && eq - tok == 5)
                    snprintf(state, sizeof(state), "%s", eq + 1);
                else if (strlen(fields[f].key) == (size_t)(eq - tok) &&
                         strncmp(tok, fields[f].key, (size_t)(eq - tok)) == 0 &&
                         !sample_value(eq + 1, fields[f].scale, val, sizeof(val)))
                    val[0] = '\0';
            }
            if (fields[f].scale == 0)
                snprintf(val, sizeof(val), "1");
            if (!val[0])
                continue;
            if (!head)
                family(out, fields[f].metric, "gauge", fields[f].help);
            head = true;
            putf(out, "%s{replica=\"", fields[f].metric);
            put_label(out, sid);
            if (fields[f].scale == 0) {         /* the info metric: a new port, a new series */
                put(out, "\",peer=\"");
                put_label(out, peer ? peer : "");
                put(out, "\",state=\"");
                put_label(out, state);
            }
            putf(out, "\"} %s\n", val);
        }
    }
}

/* A string line as an info metric: metric{label="value"} 1. */
static void info_line(kura_buf *out, const mx_lines *l, const char *stat, const char *metric,
                      const char *label, const char *help)
{
    const char *v = get(l, stat);
    if (!v)
        return;
    family(out, metric, "gauge", help);
    putf(out, "%s{%s=\"", metric, label);
    put_label(out, v);
    put(out, "\"} 1\n");
}

int metrics_render(const kura_stats_source *src, kura_buf *out)
{
    mx_stats st;
    if (stats_read(src, &st) < 0) {
        stats_free(&st);
        return -1;
    }
    const mx_lines *g = &st.general;
    family(out, "memcached_up", "gauge", "Could the memcached server be reached.");
    put(out, "memcached_up 1\n");
    info_line(out, g, "version", "memcached_version", "version",
              "The version of this memcached server.");
    map_lines(out, g, memcached_general, N(memcached_general));
    map_lines(out, &st.settings, memcached_settings, N(memcached_settings));
    map_lines(out, &st.slabs, memcached_slabs, N(memcached_slabs));
    commands_total(out, g);

    const char *backend = get(&st.settings, "kura_backend");
    family(out, "kura_info", "gauge", "kura's version, backend and sync mode (always 1).");
    put(out, "kura_info{version=\"");
    put_label(out, KURA_VERSION);
    put(out, "\",backend=\"");
    put_label(out, backend ? backend : "");
    put(out, "\",sync=\"");
    put_label(out, get(&st.settings, "kura_sync") ? get(&st.settings, "kura_sync") : "");
    put(out, "\"} 1\n");
    map_lines(out, g, kura_general_map, N(kura_general_map));
    store_lines(out, g, backend ? backend : "");
    fsync_histogram(out, &st.fsync);
    info_line(out, &st.repl, "repl_role", "kura_repl_role", "role",
              "This server's part in replication: none, master, replica or dual (1).");
    info_line(out, &st.repl, "repl_state", "kura_repl_state", "state",
              "The replica's state as \"stats repl\" says it (1).");
    replica_lines(out, &st.repl);
    map_lines(out, &st.snapshot, kura_snapshot, N(kura_snapshot));
    stats_free(&st);
    return 0;
}

/* ---- health ------------------------------------------------------------------ */

/* How long after a change refused for a full disk /health says so: writes
 * may succeed again before then (space freed), but an operator's probe
 * every few seconds sees the refusal. */
#define DISK_FULL_WINDOW 60

static void reason(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void reason(char *why, size_t len, const char *fmt, ...)
{
    size_t used = strlen(why);
    if (used + 3 >= len)
        return;
    if (used) {
        strcpy(why + used, "; ");
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why + used, len - used, fmt, ap);
    va_end(ap);
}

int metrics_health(const kura_stats_source *src, char *why, size_t len)
{
    mx_lines g = {0}, r = {0};
    why[0] = '\0';
    kura_stats_lines(src, NULL, 0, collect, &g);
    kura_stats_lines(src, "repl", 4, collect, &r);
    if (g.oom || r.oom)
        reason(why, len, "out of memory reading the stats");
    for (size_t i = 0; i < g.n; i++) {
        size_t n = strlen(g.v[i].name);
        if (n > 15 && strcmp(g.v[i].name + n - 15, "_writes_stopped") == 0 &&
            strcmp(g.v[i].value, "0") != 0)
            reason(why, len, "the store takes no more writes after a failed write or sync (%s)",
                   g.v[i].name);
    }
    const char *v = get(&g, "ulog_sync_failed");
    if (v && strcmp(v, "0") != 0)
        reason(why, len, "the update log takes no more writes after a failed sync");
    uint64_t full, now;
    if (get_u64(&g, "kura_disk_full_time", &full) && full && get_u64(&g, "time", &now) &&
        now < full + DISK_FULL_WINDOW)
        reason(why, len, "disk full: a change was refused for want of space %" PRIu64 " s ago",
               now > full ? now - full : 0);
    v = get(&r, "repl_fenced");
    if (v && strcmp(v, "0") != 0)
        reason(why, len, "fenced: a newer term was heard, writes are refused (stats repl: "
               "repl_fenced 1; repl follow the new master, or repl promote)");
    v = get(&r, "repl_state");
    if (v && (strcmp(v, "diverged") == 0 || strcmp(v, "refused") == 0))
        reason(why, len, "replica %s (stats repl: repl_state %s)", v, v);
    lines_free(&g);
    lines_free(&r);
    return why[0] ? 503 : 200;
}

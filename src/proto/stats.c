/*
 * stats.c - the "stats" command family, with memcached's names.
 *
 * Monitoring tools (memcached_exporter, collectd, Munin plugins) read these
 * by name and mark a server down when names they expect are missing, so the
 * general list keeps memcached's names and order; counters kura does not
 * have (slab rebalancing, LRU segments) are reported as 0.  kura's own
 * figures follow with a kura_ prefix, and the backend adds its own lines;
 * every value in the general list is a number, since some tools parse them
 * all.  Strings (kura's version, the backend) are in "stats settings".
 * The server's modules add lines to the general list and groups of their
 * own through the command table (cmdtab.h); this file knows none of them.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "kura/kio.h"
#include "proto_int.h"

/* A group's lines go to an emitter (kura_stat_fn): "stats" formats them
 * as "STAT name value" lines (emit_line), the metrics server (src/server/
 * metrics.c) collects them, so both read the same figures. */
typedef struct stat_out {
    kura_stat_fn emit;
    void *arg;
} stat_out;

#define stat_str(o, name, val) (o)->emit((o)->arg, (name), (val))

static void stat_u64(const stat_out *o, const char *name, uint64_t v)
{
    char val[24];
    snprintf(val, sizeof(val), "%" PRIu64, v);
    stat_str(o, name, val);
}

/* "STAT name value\r\n" into the kura_buf at arg. */
static void emit_line(void *arg, const char *name, const char *value)
{
    char line[512];
    int n = snprintf(line, sizeof(line), "STAT %s %s\r\n", name, value);
    if (n > 0)
        kura_buf_append(arg, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* Every thread's counters summed, the main thread's block included. */
static void sum_threads(kura_server_info *si, kura_stats_totals *t)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i <= si->nthreads; i++)
        kura_stats_accumulate(t, &si->thread_stats[i]);
}

/* The counters as "stats" reports them: since the last "stats reset". */
static void totals(kura_server_info *si, kura_stats_totals *t)
{
    sum_threads(si, t);
    pthread_mutex_lock(&si->reset_lock);
#define KURA_STAT_SUB(name) t->name -= si->baseline.name;
    KURA_THREAD_STATS(KURA_STAT_SUB)
#undef KURA_STAT_SUB
    pthread_mutex_unlock(&si->reset_lock);
}

static void stats_general(const kura_stats_source *s, const stat_out *out)
{
    kura_server_info *si = s->server;
    kura_stats_totals t;
    kura_store_usage u = {0};
    struct rusage ru;
    char val[64];
    int64_t now = engine_now(s->engine);

    totals(si, &t);
    engine_usage(s->engine, &u);
    getrusage(RUSAGE_SELF, &ru);

    stat_u64(out, "pid", (uint64_t)si->pid);
    stat_u64(out, "uptime", (uint64_t)(now - si->started));
    stat_u64(out, "time", (uint64_t)now);
    stat_str(out, "version", KURA_MEMCACHED_VERSION);
    stat_str(out, "libevent", si->libevent_version ? si->libevent_version : "unknown");
    stat_u64(out, "pointer_size", sizeof(void *) * 8);
    snprintf(val, sizeof(val), "%ld.%06ld", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
    stat_str(out, "rusage_user", val);
    snprintf(val, sizeof(val), "%ld.%06ld", (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    stat_str(out, "rusage_system", val);
    stat_u64(out, "max_connections", (uint64_t)si->maxconns);
    stat_u64(out, "curr_connections", atomic_load(&si->curr_connections));
    stat_u64(out, "total_connections", atomic_load(&si->total_connections));
    stat_u64(out, "rejected_connections", atomic_load(&si->rejected_connections));
    stat_u64(out, "connection_structures", atomic_load(&si->conn_structures));
    stat_u64(out, "cmd_get", t.cmd_get);
    stat_u64(out, "cmd_set", t.cmd_set);
    stat_u64(out, "cmd_flush", t.cmd_flush);
    stat_u64(out, "cmd_touch", t.cmd_touch);
    stat_u64(out, "cmd_meta", 0);
    stat_u64(out, "get_hits", t.get_hits);
    stat_u64(out, "get_misses", t.get_misses);
    stat_u64(out, "get_expired", t.get_expired);
    stat_u64(out, "get_flushed", t.get_flushed);
    stat_u64(out, "delete_misses", t.delete_misses);
    stat_u64(out, "delete_hits", t.delete_hits);
    stat_u64(out, "incr_misses", t.incr_misses);
    stat_u64(out, "incr_hits", t.incr_hits);
    stat_u64(out, "decr_misses", t.decr_misses);
    stat_u64(out, "decr_hits", t.decr_hits);
    stat_u64(out, "cas_misses", t.cas_misses);
    stat_u64(out, "cas_hits", t.cas_hits);
    stat_u64(out, "cas_badval", t.cas_badval);
    stat_u64(out, "touch_hits", t.touch_hits);
    stat_u64(out, "touch_misses", t.touch_misses);
    stat_u64(out, "store_too_large", t.store_too_large);
    stat_u64(out, "store_no_memory", t.store_no_memory);
    stat_u64(out, "auth_cmds", t.auth_cmds);
    stat_u64(out, "auth_errors", t.auth_errors);
    stat_u64(out, "bytes_read", t.bytes_read);
    stat_u64(out, "bytes_written", t.bytes_written);
    stat_u64(out, "limit_maxbytes", u.limit_maxbytes ? u.limit_maxbytes : si->maxbytes);
    stat_u64(out, "accepting_conns", 1);
    stat_u64(out, "listen_disabled_num", atomic_load(&si->listen_disabled_num));
    stat_u64(out, "time_in_listen_disabled_us", 0);
    stat_u64(out, "threads", (uint64_t)si->nthreads);
    stat_u64(out, "conn_yields", t.conn_yields);
    if (si->tls_stats)                  /* memcached's place: after the log_* lines */
        si->tls_stats(NULL, false, out->emit, out->arg);
    stat_u64(out, "bytes", u.bytes);
    stat_u64(out, "curr_items", u.curr_items);
    stat_u64(out, "total_items", t.total_items);
    stat_u64(out, "expired_unfetched", u.expired_unfetched);
    stat_u64(out, "evicted_unfetched", u.evicted_unfetched);
    stat_u64(out, "evicted_active", 0);
    stat_u64(out, "evictions", u.evictions);
    stat_u64(out, "reclaimed", u.reclaimed);
    /* kura's own */
    stat_u64(out, "kura_client_errors", t.client_errors);
    stat_u64(out, "kura_unknown_commands", t.unknown_commands);
    stat_u64(out, "kura_protocol_closes", t.protocol_closes);
    stat_u64(out, "kura_store_errors", t.store_errors);
    stat_u64(out, "kura_listing_runs", t.listing_runs);
    stat_u64(out, "kura_digest_runs", t.digest_runs);
    stat_u64(out, "kura_detail_dropped", detail_dropped());
    stat_u64(out, "kura_disk_full_time", (uint64_t)engine_disk_full_at(s->engine));
    engine_backend_stats(s->engine, out->emit, out->arg);
    cmdtab_stats(s->cmds, NULL, 0, out->emit, out->arg);   /* the server's modules' */
}

static void stats_settings(const kura_stats_source *s, const stat_out *out)
{
    kura_server_info *si = s->server;
    stat_u64(out, "maxbytes", si->maxbytes);
    stat_u64(out, "maxconns", (uint64_t)si->maxconns);
    stat_u64(out, "tcpport", (uint64_t)si->tcpport);
    stat_u64(out, "udpport", 0);
    stat_str(out, "inter", si->inter ? si->inter : "NULL");
    stat_u64(out, "verbosity", (uint64_t)atomic_load(&si->verbosity));
    stat_u64(out, "oldest", 0);
    stat_str(out, "evictions", "on");
    stat_str(out, "domain_socket", si->domain_socket ? si->domain_socket : "NULL");
    char umask_str[8];
    snprintf(umask_str, sizeof(umask_str), "%o", (unsigned)si->unix_mode);
    stat_str(out, "umask", umask_str);
    stat_str(out, "shutdown_command", "no");
    stat_str(out, "growth_factor", "1.25");
    stat_u64(out, "chunk_size", 48);
    stat_u64(out, "num_threads", (uint64_t)si->nthreads);
    stat_u64(out, "num_threads_per_udp", (uint64_t)si->nthreads);
    char delim[2] = { detail_delimiter(), '\0' };
    stat_str(out, "stat_key_prefix", delim);
    stat_str(out, "detail_enabled", atomic_load(&detail_on) ? "yes" : "no");
    stat_u64(out, "reqs_per_event", 20);
    stat_str(out, "cas_enabled", "yes");
    stat_u64(out, "tcp_backlog", 1024);
    /* text and binary, by the first byte; -S: binary only (-Y wins over it) */
    stat_str(out, "binding_protocol", si->sasl && !si->auth ? "binary" : "auto-negotiate");
    stat_str(out, "auth_enabled_sasl", si->sasl ? "yes" : "no");
    stat_str(out, "auth_enabled_ascii", si->auth ? kura_auth_path(si->auth) : "no");
    stat_u64(out, "item_size_max", si->item_size_max);
    stat_str(out, "maxconns_fast", "yes");
    stat_u64(out, "hashpower_init", 0);
    stat_str(out, "slab_reassign", "no");
    stat_u64(out, "slab_automove", 0);
    stat_str(out, "lru_crawler", "no");
    stat_str(out, "flush_enabled", "yes");
    stat_str(out, "dump_enabled", "no");
    stat_str(out, "hash_algorithm", "kura");
    stat_u64(out, "idle_timeout", (uint64_t)si->idle_timeout);
    if (si->tls_stats)                  /* memcached's place: after the ext_* lines */
        si->tls_stats(NULL, true, out->emit, out->arg);
    stat_str(out, "kura_version", KURA_VERSION);
    stat_str(out, "kura_backend", engine_backend(s->engine));
    stat_str(out, "kura_database", si->dbname ? si->dbname : "*");
    stat_str(out, "kura_sync", si->sync_mode ? si->sync_mode : "none");
}

/* kura has no slab classes; it reports everything as class 1 so that tools
 * which sum over classes get the right totals.  The cache's segments are
 * its pages (stats_slabs: total_pages, total_malloced its memory). */
static void stats_items(const kura_stats_source *s, const stat_out *out)
{
    kura_store_usage u = {0};
    engine_usage(s->engine, &u);
    if (u.curr_items == 0)
        return;
    stat_u64(out, "items:1:number", u.curr_items);
    stat_u64(out, "items:1:number_hot", 0);
    stat_u64(out, "items:1:number_warm", 0);
    stat_u64(out, "items:1:number_cold", u.curr_items);
    stat_u64(out, "items:1:age_hot", 0);
    stat_u64(out, "items:1:age_warm", 0);
    stat_u64(out, "items:1:age", 0);
    stat_u64(out, "items:1:mem_requested", u.bytes);
    stat_u64(out, "items:1:evicted", u.evictions);
    stat_u64(out, "items:1:evicted_nonzero", 0);
    stat_u64(out, "items:1:evicted_time", 0);
    stat_u64(out, "items:1:outofmemory", 0);
    stat_u64(out, "items:1:tailrepairs", 0);
    stat_u64(out, "items:1:reclaimed", u.reclaimed);
    stat_u64(out, "items:1:expired_unfetched", u.expired_unfetched);
    stat_u64(out, "items:1:evicted_unfetched", u.evicted_unfetched);
    stat_u64(out, "items:1:evicted_active", 0);
    stat_u64(out, "items:1:crawler_reclaimed", 0);
    stat_u64(out, "items:1:crawler_items_checked", 0);
    stat_u64(out, "items:1:lrutail_reflocked", 0);
}

static void stats_slabs(const kura_stats_source *s, const stat_out *out)
{
    kura_server_info *si = s->server;
    kura_store_usage u = {0};
    kura_stats_totals t;
    engine_usage(s->engine, &u);
    totals(si, &t);
    /* the cache's segments are the pages (store.h: pages, page_size) */
    uint64_t pages = u.page_size ? u.pages : u.curr_items;
    if (u.curr_items > 0) {
        stat_u64(out, "1:chunk_size", u.curr_items ? u.bytes / u.curr_items : 0);
        stat_u64(out, "1:chunks_per_page", pages ? (u.curr_items + pages - 1) / pages : 1);
        stat_u64(out, "1:total_pages", pages);
        stat_u64(out, "1:total_chunks", u.curr_items);
        stat_u64(out, "1:used_chunks", u.curr_items);
        stat_u64(out, "1:free_chunks", 0);
        stat_u64(out, "1:free_chunks_end", 0);
        stat_u64(out, "1:get_hits", t.get_hits);
        stat_u64(out, "1:cmd_set", t.cmd_set);
        stat_u64(out, "1:delete_hits", t.delete_hits);
        stat_u64(out, "1:incr_hits", t.incr_hits);
        stat_u64(out, "1:decr_hits", t.decr_hits);
        stat_u64(out, "1:cas_hits", t.cas_hits);
        stat_u64(out, "1:cas_badval", t.cas_badval);
        stat_u64(out, "1:touch_hits", t.touch_hits);
    }
    stat_u64(out, "active_slabs", u.curr_items ? 1 : 0);
    stat_u64(out, "total_malloced", u.page_size ? u.mem_used : u.bytes);
}

static bool sub_is(const text_token *t, const char *s)
{
    size_t n = strlen(s);
    return t->value && t->length == n && memcmp(t->value, s, n) == 0;
}

/* "stats fsync": how long the stores' fsync and fdatasync calls took
 * (kio.h), as cumulative counts of calls at most so many microseconds long
 * - a histogram as Prometheus has them. */
static void stats_fsync(const stat_out *out)
{
    kio_sync_latency l;
    char name[40];
    kio_get_sync_latency(&l);
    stat_u64(out, "fsync_count", l.count);
    stat_u64(out, "fsync_sum_us", l.sum_us);
    uint64_t below = 0;
    for (int i = 0; i < KIO_SYNC_BUCKETS; i++) {
        below += l.bucket[i];
        snprintf(name, sizeof(name), "fsync_le_%u_us", kio_sync_bucket_us[i]);
        stat_u64(out, name, below);
    }
}

bool kura_stats_lines(const kura_stats_source *s, const char *group, size_t glen,
                      kura_stat_fn emit, void *arg)
{
    const stat_out out = { emit, arg };
    text_token g = { group, glen };
    if (!group)
        stats_general(s, &out);
    else if (sub_is(&g, "settings"))
        stats_settings(s, &out);
    else if (sub_is(&g, "items"))
        stats_items(s, &out);
    else if (sub_is(&g, "slabs"))
        stats_slabs(s, &out);
    else if (sub_is(&g, "sizes"))
        stat_str(&out, "sizes_status", "disabled");
    else if (sub_is(&g, "fsync"))
        stats_fsync(&out);
    else
        return cmdtab_stats(s->cmds, group, glen, emit, arg);   /* the server's modules' */
    return true;
}

#define END_LINE(out) KURA_BUF_LIT(out, "END\r\n")

void text_stats(text_session *s, const text_token *tok, int ntok, kura_buf *out)
{
    const kura_stats_source src = { s->engine, s->server, s->cmds };
    if (sub_is(&tok[1], "reset")) {
        kura_server_info *si = s->server;
        kura_stats_totals now;
        sum_threads(si, &now);
        pthread_mutex_lock(&si->reset_lock);
        si->baseline = now;
        pthread_mutex_unlock(&si->reset_lock);
        atomic_store(&si->total_connections, 0);
        atomic_store(&si->rejected_connections, 0);
        detail_clear();                 /* memcached's stats_reset clears them too */
        KURA_BUF_LIT(out, "RESET\r\n");
        return;
    } else if (sub_is(&tok[1], "detail")) {
        if (ntok >= 4 && (sub_is(&tok[2], "on") || sub_is(&tok[2], "off"))) {
            detail_set(sub_is(&tok[2], "on"));
            KURA_BUF_LIT(out, "OK\r\n");
        } else if (ntok >= 4 && sub_is(&tok[2], "dump")) {
            if (!detail_dump(out))
                s->close = true;        /* no memory for the reply: as a get's */
        } else {
            KURA_BUF_LIT(out, "CLIENT_ERROR usage: stats detail on|off|dump\r\n");
        }
        return;
    } else if (!kura_stats_lines(&src, ntok == 2 ? NULL : tok[1].value, tok[1].length,
                                 emit_line, out)) {
        KURA_BUF_LIT(out, "ERROR\r\n");  /* nor a group the server's modules registered */
        return;
    }
    END_LINE(out);
}

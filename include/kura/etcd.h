/*
 * etcd.h - the few calls of etcd v3 that failover needs, through etcd's
 * JSON gateway (POST /v3/..., keys and values in base64): leases (grant,
 * keep alive, time to live), a put, a create-if-absent transaction, a
 * prefix range and a conditional delete.  Used by kurad's failover thread
 * (src/ha/ha.c) and kuractl's "ha" commands.
 *
 * Blocking, one request at a time per client, every one bounded: a
 * deadline for the whole request (connect, TLS, send, reply), a cap on the
 * reply's size (ETCD_REPLY_MAX), HTTP/1.0 so that etcd ends each reply by
 * closing (no chunks, no connection kept).  A transport failure moves to
 * the next endpoint of the list for the next call.  With a user and a
 * password, the client authenticates (/v3/auth/authenticate) and sends the
 * token; a reply saying the token is invalid makes it authenticate again.
 * https:// endpoints verify etcd's certificate (the CAs of ca_file, else
 * the system's).  Not thread-safe: one thread per client.
 */
#ifndef KURA_ETCD_H
#define KURA_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETCD_REPLY_MAX (4u << 20)       /* bytes of one reply, headers and all */
#define ETCD_ENDPOINTS_MAX 8

typedef struct etcd_client etcd_client;

typedef struct etcd_kv {
    char *key, *value;                  /* decoded, NUL-terminated (malloc'd) */
    size_t value_len;
    int64_t create_rev, mod_rev, lease;
} etcd_kv;

/* urls: "http[s]://HOST:PORT[,...]" (HOST may be [V6]).  user NULL: no
 * authentication.  timeout_ms: each request's deadline.  0, or -1 with
 * the reason in err. */
int etcd_open(const char *urls, const char *user, const char *password, const char *ca_file,
              int timeout_ms, etcd_client **out, char *err, size_t errlen);
void etcd_close(etcd_client *c);
/* The reason the last call failed ("" after a success). */
const char *etcd_error(const etcd_client *c);
/* The endpoint the next call goes to. */
const char *etcd_endpoint(const etcd_client *c);

/* A lease of ttl seconds: its id and the TTL etcd granted.  0 or -1. */
int etcd_lease_grant(etcd_client *c, int ttl, int64_t *id, int *granted);
/* Renews it: *ttl the seconds it now has, 0 when etcd no longer has it.
 * 0 or -1 (no answer: nothing is known). */
int etcd_lease_keepalive(etcd_client *c, int64_t id, int *ttl);
/* The seconds left (-1: gone).  0 or -1. */
int etcd_lease_ttl(etcd_client *c, int64_t id, int *ttl);
int etcd_lease_revoke(etcd_client *c, int64_t id);
/* Puts key = value (under lease, 0: none).  0 or -1. */
int etcd_put(etcd_client *c, const char *key, const char *value, int64_t lease);
/* Puts key = value under lease only if key does not exist: *won says. */
int etcd_create(etcd_client *c, const char *key, const char *value, int64_t lease, bool *won);
/* Deletes key if its mod revision is still mod_rev (0: whatever it is):
 * *deleted says.  0 or -1. */
int etcd_delete(etcd_client *c, const char *key, int64_t mod_rev, bool *deleted);
/* Every key under prefix, in key order: *kvs (free with etcd_kvs_free),
 * *n, and the store's revision when read.  0 or -1. */
int etcd_range_prefix(etcd_client *c, const char *prefix, etcd_kv **kvs, int *n, int64_t *rev);
void etcd_kvs_free(etcd_kv *kvs, int n);

#endif

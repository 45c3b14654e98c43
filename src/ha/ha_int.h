/*
 * ha_int.h - what the failover module's files share: the small JSON reader
 * of etcd's replies (json.c).
 */
#ifndef KURA_HA_INT_H
#define KURA_HA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/etcd.h"

/* A JSON value as a span of the reply: [p, end). */
typedef struct json_span {
    const char *p, *end;
} json_span;

/* The value after p (white space skipped): its span, or false when the
 * text there is not one whole value (bounded by end, nesting 64). */
bool json_value(const char *p, const char *end, json_span *out);
/* The member called name of the object v ({...}): false when v is not an
 * object or has none. */
bool json_member(json_span v, const char *name, json_span *out);
/* The i-th element of the array v ([...]): false past its end.  O(i). */
bool json_element(json_span v, int i, json_span *out);
/* The array v's element after *el (el->p NULL: its first) into *el:
 * false past its end.  A walk over every element is O(n). */
bool json_next(json_span v, json_span *el);
/* A number, bare or quoted as etcd's int64s are ("123"): 0 when neither. */
int64_t json_int(json_span v);
/* true when v is the literal true. */
bool json_true(json_span v);
/* A string of base64 (etcd's keys and values) decoded into a new
 * NUL-terminated buffer: NULL when v is not a string or memory ran out. */
char *json_base64(json_span v, size_t *len);
/* A plain string's bytes into buf (escapes other than \" and \\ kept as
 * they are; cut to len - 1): false when v is not a string. */
bool json_string(json_span v, char *buf, size_t len);

/* etcd.c's decoders of etcd's bytes, apart from the sockets (the fuzz
 * target drives them):
 * An HTTP reply raw[0..n) (NUL at raw[n]): its status code and where its
 * body starts.  0, or -1 when it is not one. */
int etcd_http_split(const char *raw, size_t n, int *code, size_t *body_off);
/* A range reply's body: every key-value (etcd_kvs_free), its count and
 * the revision.  0, or -1 with why (a key or value that does not decode,
 * no memory). */
int etcd_range_decode(json_span top, etcd_kv **kvs, int *n, int64_t *rev, const char **why);

#endif

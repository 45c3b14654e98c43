/*
 * ha_int.h - what the failover module's files share: the small JSON reader
 * of etcd's replies (json.c).
 */
#ifndef KURA_HA_INT_H
#define KURA_HA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
/* The i-th element of the array v ([...]): false past its end. */
bool json_element(json_span v, int i, json_span *out);
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

#endif

/*
 * json.c - just enough JSON to read etcd's gateway replies: a value's
 * span, an object's member by name, an array's element by index, numbers
 * (etcd quotes its int64s), true, base64 strings.  It reads in place and
 * allocates only a decoded string.  Every walk is bounded by the reply's
 * end and a nesting depth, so a damaged or hostile reply is "not found",
 * never a read past the buffer.  O(n) per lookup; replies are small.
 */
#include <stdlib.h>
#include <string.h>

#include "ha_int.h"
#include "kura/base64.h"

#define JSON_DEPTH 64

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past the string at p (its opening quote), or NULL. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

static const char *skip_value(const char *p, const char *end, int depth)
{
    p = skip_ws(p, end);
    if (p >= end || depth > JSON_DEPTH)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = skip_ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (p >= end || *p != '"' || !(p = skip_string(p, end)))
                    return NULL;
                p = skip_ws(p, end);
                if (p >= end || *p != ':')
                    return NULL;
                p++;
            }
            if (!(p = skip_value(p, end, depth + 1)))
                return NULL;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            return p < end && *p == close ? p + 1 : NULL;
        }
    }
    /* a number or a literal: up to a delimiter */
    const char *s = p;
    while (p < end && !strchr(",}] \t\r\n", *p))
        p++;
    return p > s ? p : NULL;
}

bool json_value(const char *p, const char *end, json_span *out)
{
    p = skip_ws(p, end);
    const char *e = skip_value(p, end, 0);
    if (!e)
        return false;
    *out = (json_span){ p, e };
    return true;
}

bool json_member(json_span v, const char *name, json_span *out)
{
    size_t nl = strlen(name);
    const char *p = v.p, *end = v.end;
    if (p >= end || *p != '{')
        return false;
    p = skip_ws(p + 1, end);
    while (p < end && *p == '"') {
        const char *ks = p + 1, *ke = skip_string(p, end);
        if (!ke)
            return false;
        p = skip_ws(ke, end);
        if (p >= end || *p != ':')
            return false;
        json_span val;
        if (!json_value(p + 1, end, &val))
            return false;
        if ((size_t)(ke - 1 - ks) == nl && memcmp(ks, name, nl) == 0) {
            *out = val;
            return true;
        }
        p = skip_ws(val.end, end);
        if (p < end && *p == ',')
            p = skip_ws(p + 1, end);
    }
    return false;
}

bool json_element(json_span v, int i, json_span *out)
{
    json_span el = { NULL, NULL };
    for (int k = 0; k <= i; k++)
        if (!json_next(v, &el))
            return false;
    *out = el;
    return true;
}

bool json_next(json_span v, json_span *el)
{
    const char *p = el->p ? skip_ws(el->end, v.end) : v.p < v.end && *v.p == '[' ?
                                                      skip_ws(v.p + 1, v.end) : NULL;
    if (!p || p >= v.end)
        return false;
    if (el->p) {
        if (*p != ',')
            return false;
        p++;
    }
    return *p != ']' && json_value(p, v.end, el);
}

int64_t json_int(json_span v)
{
    const char *p = v.p;
    if (p < v.end && *p == '"')
        p++;
    bool neg = p < v.end && *p == '-';
    if (neg)
        p++;
    int64_t n = 0;
    while (p < v.end && *p >= '0' && *p <= '9' && n < INT64_MAX / 10)
        n = n * 10 + (*p++ - '0');
    return neg ? -n : n;
}

bool json_true(json_span v)
{
    return v.end - v.p == 4 && memcmp(v.p, "true", 4) == 0;
}

char *json_base64(json_span v, size_t *len)
{
    if (v.end - v.p < 2 || *v.p != '"')
        return NULL;
    size_t n = (size_t)(v.end - v.p - 2);
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    *len = kura_base64_decode(v.p + 1, n, (unsigned char *)out, n);
    out[*len] = '\0';
    return out;
}

bool json_string(json_span v, char *buf, size_t len)
{
    if (v.end - v.p < 2 || *v.p != '"' || len == 0)
        return false;
    size_t o = 0;
    for (const char *p = v.p + 1; p < v.end - 1 && o + 1 < len; p++) {
        if (*p == '\\' && p + 1 < v.end - 1 && (p[1] == '"' || p[1] == '\\'))
            p++;
        buf[o++] = *p;
    }
    buf[o] = '\0';
    return true;
}

/*
 * fuzz_etcd.c - what failover reads of etcd's replies (src/ha/etcd.c,
 * json.c): an etcd server, or whatever answers at its address, sends the
 * bytes, which kurad's failover thread and kuractl ha decode.
 *
 * Input: an HTTP reply as it comes off the socket (NUL-terminated, as
 * read_all leaves it).  etcd_http_split finds the status and the body;
 * the body is read as JSON and decoded the ways the calls do: a range's
 * key-values (etcd_range_decode, every key and value decoded, the count
 * what a walk of the array finds), a keepalive's result.TTL, a txn's
 * succeeded, a lease's ID, an error's message.  Nothing is read past the
 * reply (a sanitizer sees it: the copy is exactly its size plus the NUL).
 */
#include <stdlib.h>
#include <string.h>

#include "../../src/ha/ha_int.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *raw = malloc(size + 1);
    if (!raw)
        return 0;
    memcpy(raw, data, size);
    raw[size] = '\0';
    int code;
    size_t off;
    json_span top, v, r;
    if (etcd_http_split(raw, size, &code, &off) == 0) {
        if (off > size || code < 100 || code > 999)
            abort();
        if (json_value(raw + off, raw + size, &top)) {
            if (top.p < raw + off || top.end > raw + size)
                abort();
            etcd_kv *kvs;
            int n;
            int64_t rev;
            const char *why;
            if (etcd_range_decode(top, &kvs, &n, &rev, &why) == 0) {
                json_span arr, el = { NULL, NULL };
                int walked = 0;
                if (json_member(top, "kvs", &arr))
                    while (json_next(arr, &el))
                        walked++;
                if (walked != n)
                    abort();
                for (int i = 0; i < n; i++)
                    if (!kvs[i].key || !kvs[i].value || strlen(kvs[i].value) > kvs[i].value_len)
                        abort();
                etcd_kvs_free(kvs, n);
            }
            char msg[200];
            size_t len;
            if (json_member(top, "result", &r) && json_member(r, "TTL", &v))
                (void)json_int(v);
            if (json_member(top, "succeeded", &v))
                (void)json_true(v);
            if (json_member(top, "ID", &v))
                (void)json_int(v);
            if (json_member(top, "message", &v) && json_string(v, msg, sizeof(msg)) &&
                strlen(msg) >= sizeof(msg))
                abort();
            if (json_member(top, "token", &v)) {
                char *t = json_base64(v, &len);
                free(t);
            }
        }
    }
    free(raw);
    return 0;
}

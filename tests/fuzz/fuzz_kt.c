/*
 * fuzz_kt.c - Kyoto Tycoon's protocols as a -kt connection speaks them
 * (src/proto/kt.c and kt_*.c): the HTTP request head (kt_http.c), the
 * body as TSV with its column encodings, a form or a query string
 * (kt_tsv.c), the RESTful requests, every RPC procedure with its
 * parameters, the cursors and the match walks paused and resumed, and the
 * binary protocol's requests (kt_bin.c) on the same connection, through
 * session.c over a fresh engine.
 *
 * Input: the bytes a client sends, as they are: the session is of kt's
 * kind (kura_session_config.kt), so any first byte is Kyoto Tycoon's (a
 * byte of 0 or from 0x80 a binary request, anything else HTTP), and the
 * fuzzer spends no inputs on the memcached protocols.  The decoders alone,
 * with their results checked, are fuzz_kt_decode.c's.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_session_as(data, size, true);
    return 0;
}

/*
 * proto.c - one entry point for the connection, whatever the protocol.
 *
 * memcached decides a connection's protocol once, from the first byte it
 * receives: the binary request magic (0x80) means the binary protocol, any
 * other byte the text protocol (whose command table also holds the meta
 * commands).  kura does the same, so a client that speaks binary from its
 * first request is answered in binary, and one that starts in text stays
 * in text (a 0x80 later in a text connection is just a bad command).
 */
#include "kura/proto.h"

#define BINARY_REQ_MAGIC 0x80

const kura_proto kura_proto_text = { "text", text_process };
const kura_proto kura_proto_binary = { "binary", binary_process };

size_t kura_session_process(kura_session *s, char *in, size_t len, kura_buf *out)
{
    if (!s->proto) {
        if (len == 0)
            return 0;
        s->proto = (unsigned char)in[0] == BINARY_REQ_MAGIC ? &kura_proto_binary
                                                            : &kura_proto_text;
    }
    return s->proto->process(s, in, len, out);
}

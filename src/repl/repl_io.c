/*
 * repl_io.c - what both ends of a replication stream need: sending on a
 * non-blocking socket with a deadline, and rows into a send buffer.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "kura/grow.h"
#include "kura/repl.h"
#include "kura/tlsio.h"

int repl_send_all(int fd, const void *buf, size_t len, int timeout_ms)
{
    return kura_tls_send_all(fd, NULL, buf, len, timeout_ms);
}

int repl_buf_row(unsigned char **buf, size_t *len, size_t *cap, const ul_row *row)
{
    size_t need = *len + UL_ROW_HEAD_MAX + row->vlen + row->vlen2;
    if (kura_grow(buf, cap, need, 1, 64 * 1024))
        return KURA_ENOMEM;
    size_t h = ul_encode(*buf + *len, row);
    if (row->vlen)
        memcpy(*buf + *len + h, row->val, row->vlen);
    if (row->vlen2)
        memcpy(*buf + *len + h + row->vlen, row->val2, row->vlen2);
    *len += h + row->vlen + row->vlen2;
    return KURA_OK;
}

void repl_emit_u64(kura_stat_fn emit, void *arg, const char *name, uint64_t v)
{
    char b[32];
    snprintf(b, sizeof(b), "%" PRIu64, v);
    emit(arg, name, b);
}

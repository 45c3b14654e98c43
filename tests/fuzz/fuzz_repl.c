/*
 * fuzz_repl.c - the replication stream as a replica reads it
 * (src/repl/slave*.c): the master's first line (REPL or BOOT), then rows
 * decoded off the socket (ul_decode, whole or cut anywhere), marks
 * (heartbeats, COPY_DONE), a full copy applied over the store with the
 * keys it did not bring deleted, and every row applied to the engine.
 *
 * The stream's decoding is static in slave_stream.c and runs on the replica's own
 * thread, so the target drives the narrowest public entry, the replica
 * itself: repl_slave_start() follows a "master" that is this target, on a
 * loopback socket; the target accepts its connection, sends the input,
 * closes its side, reads (acks) until the replica closes, then stops it.
 * A socket pair handed to the replica would skip the TCP connect; it would
 * need a hook there (a connect function in repl_config).
 *
 * Input: a flags byte (fuzz.h: FUZZ_FIX_CRC repairs the CRC of every row
 * after the first line; bit 2 makes the replica take writes, -rw, which
 * applies a copy without listing the keys it holds), then the bytes the
 * master sends.  A fresh engine on the cache and no rts file per input.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kura/repl.h"
#include "fuzz.h"

#define FUZZ_RW 2

static int listener(int *port)
{
    static int fd = -1, lport;
    if (fd < 0) {
        struct sockaddr_in a = { .sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof(a);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 4) != 0 ||
            getsockname(fd, (struct sockaddr *)&a, &al) != 0)
            abort();
        lport = ntohs(a.sin_port);
    }
    *port = lport;
    /* a connection the last input's replica made while it was being
     * stopped (a reconnect after its backoff, on a slow machine) */
    int stale;
    while ((stale = accept4(fd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
        close(stale);
    return fd;
}

/* Accepts the replica's connection (poll and accept retried when a signal,
 * such as libFuzzer's timer, interrupts them). */
static int accept_replica(int lfd)
{
    for (;;) {
        struct pollfd pf = { .fd = lfd, .events = POLLIN };
        int r = poll(&pf, 1, 30000);
        if (r == 0 || (r < 0 && errno != EINTR))
            abort();                    /* the replica never connected */
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c >= 0)
            return c;
        if (errno != EINTR && errno != EAGAIN)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned char *msg = fuzz_dup(data + 1, size - 1);
    size_t len = size - 1;
    if (data[0] & FUZZ_FIX_CRC) {
        unsigned char *nl = memchr(msg, '\n', len);
        if (nl)
            fuzz_fix_ul_rows(nl + 1, len - (size_t)(nl + 1 - msg));
    }
    int port, lfd = listener(&port);
    const char *rts = fuzz_path("rts");
    unlink(rts);

    kura_engine *e = fuzz_engine_open(1 << 20);
    repl_config cfg = { .engine = e, .sid = 2, .row_max = 2 << 20,
                        .rw = (data[0] & FUZZ_RW) != 0, .log = fuzz_quiet };
    repl_slave *s;
    if (repl_slave_start(&cfg, "127.0.0.1", port, rts, &s) != KURA_OK)
        abort();
    int c = accept_replica(lfd);
    for (size_t off = 0; off < len;) {
        ssize_t n = send(c, msg + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;                      /* the replica gave up on the stream */
        off += (size_t)n;
    }
    shutdown(c, SHUT_WR);
    char sink[512];
    ssize_t n;
    while ((n = read(c, sink, sizeof(sink))) > 0 || (n < 0 && errno == EINTR))
        ;
    close(c);
    repl_slave_stop(s);
    engine_close(e);
    free(msg);
    return 0;
}

/*
 * tlsio.h - TLS on a non-blocking socket with OpenSSL, for the clients kura
 * has (a replica's link to its master: -mtls; kuractl -tls) and the I/O
 * calls the server's TLS connections share with them (src/server/tls.c).
 *
 * Built without OpenSSL (no libssl-dev), kura_tls_available() is false and
 * every call fails with a message saying so.
 */
#ifndef KURA_TLSIO_H
#define KURA_TLSIO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct ssl_st;
struct ssl_ctx_st;

bool kura_tls_available(void);

/* A client context: the peer's certificate must chain to ca_file's CAs
 * (NULL: the system's) and name the host it is asked for; cert_file: a
 * PEM file holding the client's own certificate and key, for a server that
 * asks (NULL: none).  NULL with err set. */
struct ssl_ctx_st *kura_tls_client_ctx(const char *ca_file, const char *cert_file, char *err,
                                       size_t errlen);
void kura_tls_ctx_free(struct ssl_ctx_st *ctx);

/* The client's handshake on fd (non-blocking, connected), verifying the
 * certificate names host; at most timeout_ms.  NULL with err set (the
 * verification's reason among them). */
struct ssl_st *kura_tls_connect(struct ssl_ctx_st *ctx, int fd, const char *host,
                                int timeout_ms, char *err, size_t errlen);

/* recv() and send()'s contract: bytes, 0 at the peer's close_notify, or -1
 * with errno EAGAIN (try again once the socket is ready) or another error. */
ssize_t kura_tls_recv(struct ssl_st *ssl, void *buf, size_t n);
ssize_t kura_tls_send(struct ssl_st *ssl, const void *buf, size_t n);
/* Bytes decrypted and not yet taken: a poll() on the socket would not see them. */
bool kura_tls_pending(struct ssl_st *ssl);
/* Sends close_notify if established (without waiting for the peer's), frees. */
void kura_tls_close(struct ssl_st *ssl, bool established);

/* Sends all of buf on fd (non-blocking; through ssl unless NULL), waiting
 * at most timeout_ms for the socket each time: 0, or -1 with errno. */
int kura_tls_send_all(int fd, struct ssl_st *ssl, const void *buf, size_t len, int timeout_ms);

/* A connection handed from a server's worker to a module (cmdtab.h's
 * hand-off passes a descriptor): the worker leaves its TLS state here
 * under the descriptor, the taker picks it up (NULL: plaintext). */
void kura_tls_stash(int fd, struct ssl_st *ssl);
struct ssl_st *kura_tls_unstash(int fd);

#endif

/*
 * tlsio.c - TLS on a non-blocking socket (tlsio.h): the client side a
 * replica and kuractl use, and the read and write calls the server's TLS
 * connections share with them.
 *
 * Renegotiation is off both ways (SSL_OP_NO_RENEGOTIATION), so after the
 * handshake a read only waits to read and a write only to write: the
 * callers' poll() on one direction is enough.  Reads read ahead (one
 * read() takes what the socket has, not a record header and then its
 * body), so what a poll() cannot see - bytes OpenSSL holds, decrypted or
 * not - is kura_tls_pending()'s to say.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "kura/tlsio.h"
#include "kura/thread.h"

/* ---- the hand-off stash: a few entries at most (replication streams
 * being handed over), a list under a lock ----------------------------- */

typedef struct stash_entry {
    int fd;
    struct ssl_st *ssl;
    struct stash_entry *next;
} stash_entry;

static pthread_mutex_t stash_mu = PTHREAD_MUTEX_INITIALIZER;
static stash_entry *stash;

void kura_tls_stash(int fd, struct ssl_st *ssl)
{
    stash_entry *e = malloc(sizeof(*e));
    if (!e) {
        /* the taker will see a plaintext socket and fail its first read:
         * the stream ends, which the peer retries */
        kura_tls_close(ssl, false);
        return;
    }
    e->fd = fd;
    e->ssl = ssl;
    pthread_mutex_lock(&stash_mu);
    e->next = stash;
    stash = e;
    pthread_mutex_unlock(&stash_mu);
}

struct ssl_st *kura_tls_unstash(int fd)
{
    struct ssl_st *ssl = NULL;
    pthread_mutex_lock(&stash_mu);
    for (stash_entry **pp = &stash; *pp; pp = &(*pp)->next)
        if ((*pp)->fd == fd) {
            stash_entry *e = *pp;
            *pp = e->next;
            ssl = e->ssl;
            free(e);
            break;
        }
    pthread_mutex_unlock(&stash_mu);
    return ssl;
}

/* Waits for fd to be ready for events until the deadline: 1, 0 (timed
 * out, errno ETIMEDOUT) or -1. */
static int wait_fd(int fd, short events, int64_t until)
{
    for (;;) {
        int64_t left = until - kura_mono_ms();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return 0;
        }
        struct pollfd pf = { .fd = fd, .events = events };
        int r = poll(&pf, 1, (int)left);
        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

int kura_tls_send_all(int fd, struct ssl_st *ssl, const void *buf, size_t len, int timeout_ms)
{
    const char *p = buf;
    while (len) {
        ssize_t n = ssl ? kura_tls_send(ssl, p, len) : send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            return -1;
        if (wait_fd(fd, POLLOUT, kura_mono_ms() + timeout_ms) <= 0)
            return -1;
    }
    return 0;
}

#ifdef KURA_HAVE_OPENSSL

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

bool kura_tls_available(void)
{
    return true;
}

static void ssl_error(char *err, size_t len, const char *what, const char *file)
{
    char why[256];
    ERR_error_string_n(ERR_get_error(), why, sizeof(why));
    snprintf(err, len, "%s%s%s: %s", what, file ? " " : "", file ? file : "", why);
    ERR_clear_error();
}

struct ssl_ctx_st *kura_tls_client_ctx(const char *ca_file, const char *cert_file, char *err,
                                       size_t errlen)
{
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        ssl_error(err, errlen, "cannot create a TLS context", NULL);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_read_ahead(ctx, 1);     /* a read() per buffer, not two per record */
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (ca_file ? !SSL_CTX_load_verify_locations(ctx, ca_file, NULL)
                : !SSL_CTX_set_default_verify_paths(ctx)) {
        ssl_error(err, errlen, "cannot load the CA certificates", ca_file);
    } else if (cert_file && (!SSL_CTX_use_certificate_chain_file(ctx, cert_file) ||
                             !SSL_CTX_use_PrivateKey_file(ctx, cert_file, SSL_FILETYPE_PEM) ||
                             !SSL_CTX_check_private_key(ctx))) {
        ssl_error(err, errlen, "cannot load the certificate and key", cert_file);
    } else {
        return ctx;
    }
    SSL_CTX_free(ctx);
    return NULL;
}

void kura_tls_ctx_free(struct ssl_ctx_st *ctx)
{
    SSL_CTX_free(ctx);
}

struct ssl_st *kura_tls_connect(struct ssl_ctx_st *ctx, int fd, const char *host,
                                int timeout_ms, char *err, size_t errlen)
{
    ERR_clear_error();
    SSL *ssl = SSL_new(ctx);
    if (!ssl || !SSL_set_fd(ssl, fd)) {
        ssl_error(err, errlen, "cannot start TLS", NULL);
        SSL_free(ssl);
        return NULL;
    }
    /* the name checked against the certificate (an address as an IP SAN),
     * and sent as SNI when it is a name */
    X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
    if (X509_VERIFY_PARAM_set1_ip_asc(vp, host) != 1) {
        X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        X509_VERIFY_PARAM_set1_host(vp, host, 0);
        SSL_set_tlsext_host_name(ssl, host);
    }
    ERR_clear_error();
    int64_t until = kura_mono_ms() + timeout_ms;
    for (;;) {
        int r = SSL_connect(ssl);
        if (r == 1)
            return ssl;
        int e = SSL_get_error(ssl, r);
        int w = e == SSL_ERROR_WANT_READ ? wait_fd(fd, POLLIN, until)
              : e == SSL_ERROR_WANT_WRITE ? wait_fd(fd, POLLOUT, until) : -2;
        if (w > 0)
            continue;
        long v = SSL_get_verify_result(ssl);
        if (w == 0)
            snprintf(err, errlen, "TLS handshake timed out");
        else if (v != X509_V_OK)
            snprintf(err, errlen, "TLS: the server's certificate does not verify: %s",
                     X509_verify_cert_error_string(v));
        else if (ERR_peek_error())
            ssl_error(err, errlen, "TLS handshake failed", NULL);
        else
            snprintf(err, errlen, "TLS handshake failed: %s",
                     e == SSL_ERROR_SYSCALL && errno ? strerror(errno) : "the server closed");
        ERR_clear_error();
        SSL_free(ssl);
        return NULL;
    }
}

/* recv() and send()'s contract from an SSL_read/SSL_write result */
static ssize_t io_result(SSL *ssl, int r)
{
    if (r > 0)
        return r;
    int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    ERR_clear_error();
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;                       /* close_notify */
    if (e != SSL_ERROR_SYSCALL || errno == 0 || errno == EAGAIN)
        errno = ECONNRESET;
    return -1;
}

ssize_t kura_tls_recv(struct ssl_st *ssl, void *buf, size_t n)
{
    return io_result(ssl, SSL_read(ssl, buf, n > 0x40000000 ? 0x40000000 : (int)n));
}

ssize_t kura_tls_send(struct ssl_st *ssl, const void *buf, size_t n)
{
    return io_result(ssl, SSL_write(ssl, buf, n > 0x40000000 ? 0x40000000 : (int)n));
}

bool kura_tls_pending(struct ssl_st *ssl)
{
    return SSL_has_pending(ssl) == 1;   /* read ahead too, not only decrypted */
}

void kura_tls_close(struct ssl_st *ssl, bool established)
{
    if (!ssl)
        return;
    if (established)
        SSL_shutdown(ssl);
    SSL_free(ssl);
    ERR_clear_error();
}

#else /* !KURA_HAVE_OPENSSL */

#define NO_TLS "this build has no TLS (Debian: apt-get install libssl-dev, then ./configure && make)"

bool kura_tls_available(void)
{
    return false;
}

struct ssl_ctx_st *kura_tls_client_ctx(const char *ca_file, const char *cert_file, char *err,
                                       size_t errlen)
{
    (void)ca_file; (void)cert_file;
    snprintf(err, errlen, "%s", NO_TLS);
    return NULL;
}

void kura_tls_ctx_free(struct ssl_ctx_st *ctx)
{
    (void)ctx;
}

struct ssl_st *kura_tls_connect(struct ssl_ctx_st *ctx, int fd, const char *host,
                                int timeout_ms, char *err, size_t errlen)
{
    (void)ctx; (void)fd; (void)host; (void)timeout_ms;
    snprintf(err, errlen, "%s", NO_TLS);
    return NULL;
}

ssize_t kura_tls_recv(struct ssl_st *ssl, void *buf, size_t n)
{
    (void)ssl; (void)buf; (void)n;
    errno = ENOTSUP;
    return -1;
}

ssize_t kura_tls_send(struct ssl_st *ssl, const void *buf, size_t n)
{
    (void)ssl; (void)buf; (void)n;
    errno = ENOTSUP;
    return -1;
}

bool kura_tls_pending(struct ssl_st *ssl)
{
    (void)ssl;
    return false;
}

void kura_tls_close(struct ssl_st *ssl, bool established)
{
    (void)ssl; (void)established;
}

#endif

/*
 * tls.c - TLS on the listening ports, as memcached 1.6 does it: -Z with
 * memcached's -o ssl_* options, "refresh_certs", the ssl_* lines of "stats
 * settings" and "stats".
 *
 * OpenSSL is used directly on the connection's non-blocking socket
 * (conn.c calls kura_tls_recv/send, tlsio.h, where it calls recv/send
 * otherwise),
 * so a TLS connection keeps the plaintext one's bounds: its read buffer,
 * its reply high-water mark and its share of the worker's turn.  OpenSSL
 * adds one record (16 KiB) each way per connection.
 *
 * The certificates live in one SSL_CTX, replaced whole by a refresh
 * ("refresh_certs", SIGHUP): a new context is built from the files and
 * swapped in under ctx_mu only if every file loaded, so a broken file
 * leaves the old certificates serving.  A connection takes its own
 * reference at accept (SSL_new), so the old context lives on until its
 * last connection closes.
 *
 * A handshake is bounded: HANDSHAKE_TIMEOUT seconds (or -tout's, if
 * shorter; -o ssl_handshake_timeout=N sets it, 0 for no bound) from accept, while it holds a slot of -c; one that fails
 * (garbage, plaintext, a timeout) closes the connection with no reply
 * (OpenSSL's alert at most) and counts in ssl_handshake_errors, as
 * memcached's does; a peer that closes without sending a byte (a port
 * check) is not counted.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kura/tlsio.h"
#include "server.h"

#define HANDSHAKE_TIMEOUT 10            /* seconds */

/* memcached's -o ssl_* values (its defaults) */
static struct {
    const char *chain_cert, *key, *ciphers, *ca_cert;
    int verify_mode;                    /* 0 none, 1 request, 2 require, 3 once */
    int keyformat;                      /* SSL_FILETYPE_PEM (1) or _ASN1 (2) */
    int wbuf_kb;
    bool session_cache, kernel_tls;
    int min_version;                    /* 0 tlsv1.0 .. 3 tlsv1.3 */
    int handshake_timeout;              /* kura's: seconds, 0 no bound; -1 not given */
} opt = { .keyformat = 1, .wbuf_kb = 16, .min_version = 2, .handshake_timeout = -1 };

static struct ssl_ctx_st *master_ctx;   /* -mtls: a replica's client context */

/* A file name or list of -o (given twice: the last, as memcached) */
static void set_str(const char **field, const char *v)
{
    free((char *)*field);
    *field = strdup(v);
}

/* The ssl_* keys of -o; anything else memcached's -o takes is refused
 * (kura has no such setting). */
static int parse_opts(const char *list)
{
    if (!list)
        return 0;
    char *copy = strdup(list), *save = NULL;
    if (!copy)
        return 2;
    int rc = 0;
    for (char *kv = strtok_r(copy, ",", &save); kv && !rc; kv = strtok_r(NULL, ",", &save)) {
        char *v = strchr(kv, '=');
        if (v)
            *v++ = '\0';
        char *end = NULL;
        long n = v ? strtol(v, &end, 10) : 0;
        bool num = v && *v && end && *end == '\0';
        if (!strcmp(kv, "ssl_chain_cert") && v && *v) {
            set_str(&opt.chain_cert, v);
        } else if (!strcmp(kv, "ssl_key") && v && *v) {
            set_str(&opt.key, v);
        } else if (!strcmp(kv, "ssl_ca_cert") && v && *v) {
            set_str(&opt.ca_cert, v);
        } else if (!strcmp(kv, "ssl_ciphers") && v && *v) {
            set_str(&opt.ciphers, v);
        } else if (!strcmp(kv, "ssl_keyformat")) {
            if (!num) {
                fprintf(stderr, "could not parse argument to ssl_keyformat\n");
                rc = 2;
            }
            opt.keyformat = (int)n;
        } else if (!strcmp(kv, "ssl_verify_mode")) {
            if (!num || n < 0 || n > 3) {
                fprintf(stderr, "Invalid ssl_verify_mode. Use help to see valid options.\n");
                rc = 2;
            }
            opt.verify_mode = (int)n;
        } else if (!strcmp(kv, "ssl_wbuf_size")) {
            if (!num || n <= 0 || n > 1024 * 1024) {
                fprintf(stderr, "could not parse argument to ssl_wbuf_size\n");
                rc = 2;
            }
            opt.wbuf_kb = (int)n;
        } else if (!strcmp(kv, "ssl_min_version")) {
            /* memcached's numbers; kura also takes the names it shows */
            static const char *names[][2] = { { "tlsv1.0", "tls1.0" }, { "tlsv1.1", "tls1.1" },
                                              { "tlsv1.2", "tls1.2" }, { "tlsv1.3", "tls1.3" } };
            int ver = num && n >= 0 && n <= 3 ? (int)n : -1;
            for (int i = 0; i < 4 && v && ver < 0; i++)
                if (!strcmp(v, names[i][0]) || !strcmp(v, names[i][1]))
                    ver = i;
            if (ver < 0) {
                fprintf(stderr, "could not parse argument to ssl_min_version\n");
                rc = 2;
            }
            opt.min_version = ver;
        } else if (!strcmp(kv, "ssl_handshake_timeout")) {
            if (!num || n < 0 || n > 86400) {
                fprintf(stderr, "could not parse argument to ssl_handshake_timeout\n");
                rc = 2;
            }
            opt.handshake_timeout = (int)n;
        } else if (!strcmp(kv, "ssl_session_cache") && !v) {
            opt.session_cache = true;
        } else if (!strcmp(kv, "ssl_kernel_tls") && !v) {
            opt.kernel_tls = true;
        } else {
            fprintf(stderr, "Illegal suboption \"%s%s%s\"\n", kv, v ? "=" : "", v ? v : "");
            rc = 2;
        }
    }
    free(copy);
    return rc;
}

/* -mtls: the replica's client context, made once (a "repl follow" later
 * uses it too); a CA file or certificate that does not load stops kurad */
static int configure_master_link(const kura_settings *s)
{
    char err[512];
    if (!s->mtls)
        return 0;
    master_ctx = kura_tls_client_ctx(s->mtls_ca, s->mtls_cert, err, sizeof(err));
    if (!master_ctx) {
        fprintf(stderr, "kurad: -mtls: %s\n", err);
        return 2;
    }
    return 0;
}

struct ssl_ctx_st *tls_master_ctx(void)
{
    return master_ctx;
}

#ifdef KURA_HAVE_OPENSSL

static bool enabled;                    /* -Z */

#include <openssl/err.h>
#include <openssl/ssl.h>

static const char *version_name(int v)
{
    static const char *names[] = { "tlsv1.0", "tlsv1.1", "tlsv1.2", "tlsv1.3" };
    return v >= 0 && v <= 3 ? names[v] : "unknown";
}

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static SSL_CTX *server_ctx;             /* under ctx_mu */
static _Atomic int64_t refreshed_at;    /* CLOCK_MONOTONIC seconds of the last good load */
static _Atomic uint64_t handshake_errors;
static int handshake_timeout = HANDSHAKE_TIMEOUT;

static int64_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec;
}

/* memcached's message for a file that did not load: what, the file, and
 * OpenSSL's first error ("... : error:80000002:system library::No such
 * file or directory"). */
static void load_error(char *err, size_t len, const char *what, const char *file)
{
    unsigned long e = ERR_get_error();
    char why[256];
    ERR_error_string_n(e, why, sizeof(why));
    if (file)
        snprintf(err, len, "%s: %s : %s", what, file, why);
    else
        snprintf(err, len, "%s : %s", what, why);
    ERR_clear_error();
}

/* A context with the options and every file loaded; NULL with err set. */
static SSL_CTX *build_ctx(char *err, size_t len)
{
    static const int versions[] = { TLS1_VERSION, TLS1_1_VERSION, TLS1_2_VERSION,
                                    TLS1_3_VERSION };
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        load_error(err, len, "Error creating the TLS context", NULL);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, versions[opt.min_version]);
    /* a peer that renegotiates could make a write wait for a read */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION
#ifdef SSL_OP_ENABLE_KTLS
                                 | (opt.kernel_tls ? SSL_OP_ENABLE_KTLS : 0)
#endif
                        );
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_read_ahead(ctx, 1);     /* a read() per buffer, not two per record */
    int vm = opt.verify_mode == 0 ? SSL_VERIFY_NONE
           : opt.verify_mode == 1 ? SSL_VERIFY_PEER
           : opt.verify_mode == 2 ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                                  : SSL_VERIFY_PEER | SSL_VERIFY_CLIENT_ONCE;
    SSL_CTX_set_verify(ctx, vm, NULL);
    if (opt.session_cache) {
        static const unsigned char sid[] = "kura";
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
        SSL_CTX_set_session_id_context(ctx, sid, sizeof(sid) - 1);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    }
    const char *key = opt.key ? opt.key : opt.chain_cert;
    if (opt.ciphers && !SSL_CTX_set_cipher_list(ctx, opt.ciphers))
        load_error(err, len, "Error setting the cipher list", opt.ciphers);
    else if (!SSL_CTX_use_certificate_chain_file(ctx, opt.chain_cert))
        load_error(err, len, "Error loading the certificate chain", opt.chain_cert);
    else if (!SSL_CTX_use_PrivateKey_file(ctx, key, opt.keyformat))
        load_error(err, len, "Error loading the key", key);
    else if (!SSL_CTX_check_private_key(ctx))
        load_error(err, len, "Error validating the certificate", NULL);
    else if (opt.ca_cert && !SSL_CTX_load_verify_locations(ctx, opt.ca_cert, NULL))
        load_error(err, len, "Error loading the CA certificate", opt.ca_cert);
    else {
        if (opt.ca_cert)
            SSL_CTX_set_client_CA_list(ctx, SSL_load_client_CA_file(opt.ca_cert));
        return ctx;
    }
    SSL_CTX_free(ctx);
    return NULL;
}

int tls_refresh(char *err, size_t len)
{
    SSL_CTX *ctx = build_ctx(err, len);
    if (!ctx)
        return -1;
    pthread_mutex_lock(&ctx_mu);
    SSL_CTX *old = server_ctx;
    server_ctx = ctx;
    pthread_mutex_unlock(&ctx_mu);
    SSL_CTX_free(old);                  /* its connections hold their own references */
    atomic_store(&refreshed_at, mono_now());
    return 0;
}

int tls_configure(kura_settings *s)
{
    if (parse_opts(s->ext_opts) || configure_master_link(s))
        return 2;
    enabled = s->ssl;
    if (!enabled)
        return 0;
    if (!opt.chain_cert) {
        fprintf(stderr, "kurad: -Z needs a certificate: -o ssl_chain_cert=FILE[,ssl_key=FILE]\n");
        return 2;
    }
    if (opt.handshake_timeout >= 0)
        handshake_timeout = opt.handshake_timeout;      /* given: as given, 0 no bound */
    else if (s->idle_timeout > 0 && s->idle_timeout < handshake_timeout)
        handshake_timeout = s->idle_timeout;
    char err[1024];
    if (tls_refresh(err, sizeof(err)) < 0) {
        fprintf(stderr, "kurad: -Z: %s\n", err);
        return 2;
    }
    return 0;
}

bool tls_enabled(void)
{
    return enabled;
}

int tls_handshake_timeout(void)
{
    return handshake_timeout;
}

struct ssl_st *tls_conn_start(int fd)
{
    pthread_mutex_lock(&ctx_mu);
    SSL *ssl = server_ctx ? SSL_new(server_ctx) : NULL;
    pthread_mutex_unlock(&ctx_mu);
    if (ssl && !SSL_set_fd(ssl, fd)) {
        SSL_free(ssl);
        return NULL;
    }
    if (ssl)
        SSL_set_accept_state(ssl);
    return ssl;
}

void tls_conn_failed(void)
{
    atomic_fetch_add(&handshake_errors, 1);
}

int tls_conn_handshake(struct ssl_st *ssl)
{
    ERR_clear_error();
    int r = SSL_do_handshake(ssl);
    if (r == 1)
        return 1;
    switch (SSL_get_error(ssl, r)) {
    case SSL_ERROR_WANT_READ:
        return 0;
    case SSL_ERROR_WANT_WRITE:
        return 2;
    default:
        if (BIO_number_read(SSL_get_rbio(ssl)) == 0) {
            /* connected and closed without a byte: a port check, not a
             * failed handshake (memcached does not count these either) */
            ERR_clear_error();
            return -1;
        }
        if (ERR_peek_error()) {
            char why[256];
            ERR_error_string_n(ERR_peek_error(), why, sizeof(why));
            log_msg(KURA_LOG_VERBOSE, "TLS handshake failed: %s", why);
        }
        ERR_clear_error();
        tls_conn_failed();
        return -1;
    }
}

static void stats_emit(void *ctx, bool settings, kura_stat_fn emit, void *arg)
{
    char b[32];
    (void)ctx;
    if (settings) {
        emit(arg, "ssl_enabled", enabled ? "yes" : "no");
        emit(arg, "ssl_chain_cert", opt.chain_cert ? opt.chain_cert : "(null)");
        emit(arg, "ssl_key", opt.key ? opt.key : "(null)");
        snprintf(b, sizeof(b), "%d", opt.verify_mode);
        emit(arg, "ssl_verify_mode", b);
        snprintf(b, sizeof(b), "%d", opt.keyformat);
        emit(arg, "ssl_keyformat", b);
        emit(arg, "ssl_ciphers", opt.ciphers ? opt.ciphers : "NULL");
        emit(arg, "ssl_ca_cert", opt.ca_cert ? opt.ca_cert : "NULL");
        snprintf(b, sizeof(b), "%d", opt.wbuf_kb * 1024);
        emit(arg, "ssl_wbuf_size", b);
        emit(arg, "ssl_session_cache", opt.session_cache ? "yes" : "no");
        emit(arg, "ssl_kernel_tls", opt.kernel_tls ? "yes" : "no");
        emit(arg, "ssl_min_version", version_name(opt.min_version));
    } else if (enabled) {
        snprintf(b, sizeof(b), "%llu", (unsigned long long)atomic_load(&handshake_errors));
        emit(arg, "ssl_handshake_errors", b);
        snprintf(b, sizeof(b), "%lld", (long long)(mono_now() - atomic_load(&refreshed_at)));
        emit(arg, "time_since_server_cert_refresh", b);
    }
}

/* "refresh_certs": memcached's replies ("OK", or the first file that did
 * not load with OpenSSL's reason; the old certificates stay). */
static void cmd_refresh_certs(void *ctx, kura_session *s, text_token *tok, int ntok,
                              kura_buf *out)
{
    (void)ctx; (void)tok; (void)ntok;
    char err[1024];
    if (!enabled) {
        kura_session_reply(s, out, "Error TLS not enabled");
        return;
    }
    if (tls_refresh(err, sizeof(err)) < 0) {
        log_msg(KURA_LOG_ERROR, "refresh_certs: %s; the old certificates stay", err);
        kura_session_reply(s, out, err);
        return;
    }
    log_msg(KURA_LOG_INFO, "refresh_certs: certificates reloaded");
    kura_session_reply(s, out, "OK");
}

int tls_register(kura_server *srv)
{
    const kura_command c = { "refresh_certs", cmd_refresh_certs, srv, 2, 3 };
    srv->info.tls_stats = stats_emit;
    return kura_cmdtab_add(srv->cmds, &c) == KURA_OK ? 0 : -1;
}

void tls_on_hup(void)
{
    char err[1024];
    if (!enabled)
        return;
    if (tls_refresh(err, sizeof(err)) < 0)
        log_msg(KURA_LOG_ERROR, "SIGHUP: TLS certificates not reloaded: %s; the old ones stay",
                err);
    else
        log_msg(KURA_LOG_INFO, "SIGHUP: TLS certificates reloaded");
}

void tls_shutdown(void)
{
    kura_tls_ctx_free(master_ctx);
    master_ctx = NULL;
    pthread_mutex_lock(&ctx_mu);
    SSL_CTX_free(server_ctx);
    server_ctx = NULL;
    pthread_mutex_unlock(&ctx_mu);
}

#else /* !KURA_HAVE_OPENSSL: -Z is refused; no refresh_certs (memcached built
       * without TLS has none) */

int tls_configure(kura_settings *s)
{
    if (parse_opts(s->ext_opts) || configure_master_link(s))
        return 2;
    if (s->ssl) {
        fprintf(stderr, "kurad: -Z: this kurad was built without OpenSSL (Debian: apt-get "
                "install libssl-dev, then ./configure && make)\n");
        return 2;
    }
    return 0;
}

bool tls_enabled(void) { return false; }
int tls_handshake_timeout(void) { return HANDSHAKE_TIMEOUT; }
int tls_refresh(char *err, size_t len) { snprintf(err, len, "Error TLS not enabled"); return -1; }
struct ssl_st *tls_conn_start(int fd) { (void)fd; return NULL; }
void tls_conn_failed(void) {}
int tls_conn_handshake(struct ssl_st *ssl) { (void)ssl; return -1; }
int tls_register(kura_server *srv) { (void)srv; return 0; }
void tls_on_hup(void) {}
void tls_shutdown(void) {}

#endif

/*
 * sasl.c - SASL for the binary protocol (-S), through Cyrus SASL
 * (libsasl2), set up as memcached 1.6 sets it up (its sasl_defs.c):
 *
 *   - the application name is "memcached", so the mechanisms, the sasldb
 *     and the rest come from a memcached.conf, found as memcached finds
 *     it: the directory in SASL_CONF_PATH, else /etc/sasl/memcached.conf,
 *     else /etc/sasl2/memcached.conf (a file, or a directory holding one);
 *     without any, sasl_server_init fails and kurad does not start;
 *   - MEMCACHED_SASL_PWDB names a file of "user:password" lines checked
 *     before libsasl2's own password check (memcached's --enable-sasl-pwdb;
 *     here read once at start, in -Y's format: options.c loads it);
 *   - each connection gets its sasl_conn_t on its first SASL request, for
 *     service "memcached" and this host's name (the default realm).
 *
 * Built only when libsasl2 is (the Makefile defines KURA_HAVE_SASL); without
 * it the functions say so, and -S is refused at start (options.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto_int.h"

#ifdef KURA_HAVE_SASL
#include <pthread.h>
#include <sasl/sasl.h>

static char hostname[256];
static const kura_auth *pwdb;
static void (*sasl_logger)(int level, const char *msg);

/* memcached's configuration lookup, as its SASL_CB_GETCONFPATH callback */
static int get_conf_path(void *context, char **path)
{
    static const char *const files[] = { "/etc/sasl/memcached.conf", "/etc/sasl2/memcached.conf" };
    static const char *const in_dirs[] = { "/etc/sasl/memcached.conf/memcached.conf",
                                           "/etc/sasl2/memcached.conf/memcached.conf" };
    static const char *const dirs[] = { "/etc/sasl", "/etc/sasl2" };
    (void)context;
    *path = getenv("SASL_CONF_PATH");
    for (int i = 0; !*path && i < 2; i++) {
        if (access(in_dirs[i], F_OK) == 0)
            *path = (char *)files[i];
        else if (access(files[i], F_OK) == 0)
            *path = (char *)dirs[i];
    }
    return *path ? SASL_OK : SASL_FAIL;
}

static int check_pwdb(sasl_conn_t *conn, void *context, const char *user, const char *pass,
                      unsigned passlen, struct propctx *propctx)
{
    (void)conn; (void)context; (void)propctx;
    return kura_auth_check(pwdb, user, strlen(user), pass, passlen) ? SASL_OK : SASL_NOAUTHZ;
}

static int log_line(void *context, int level, const char *message)
{
    (void)context;
    if (sasl_logger && level != SASL_LOG_NONE)
        sasl_logger(level <= SASL_LOG_FAIL ? 1 : 2, message);
    return SASL_OK;
}

/* libsasl2 takes every callback as int (*)(void); through void (*)(void),
 * which the compiler lets stand for any function type */
typedef int (*sasl_cb_fn)(void);
#define CB(fn) ((sasl_cb_fn)(void (*)(void))(fn))
static sasl_callback_t callbacks[] = {
    { SASL_CB_SERVER_USERDB_CHECKPASS, CB(check_pwdb), NULL },
    { SASL_CB_LOG, CB(log_line), NULL },
    { SASL_CB_GETCONFPATH, CB(get_conf_path), NULL },
    { SASL_CB_LIST_END, NULL, NULL },
};

bool kura_sasl_available(void) { return true; }

/* libsasl2's own mutexes do nothing unless the application gives real
 * ones (its plug-ins, the sasldb's among them, lock through them), and
 * kurad's workers authenticate at once. */
static void *mutex_new(void)
{
    pthread_mutex_t *m = malloc(sizeof(*m));
    if (m && pthread_mutex_init(m, NULL) != 0) {
        free(m);
        m = NULL;
    }
    return m;
}

static int mutex_lock(void *m) { return pthread_mutex_lock(m) ? SASL_FAIL : SASL_OK; }
static int mutex_unlock(void *m) { return pthread_mutex_unlock(m) ? SASL_FAIL : SASL_OK; }

static void mutex_free(void *m)
{
    pthread_mutex_destroy(m);
    free(m);
}

static void sasl_end(void)
{
    sasl_server_done();
}

int kura_sasl_init(const kura_auth *passwords, void (*log)(int level, const char *msg),
                   char *err, size_t errlen)
{
    pwdb = passwords;
    sasl_logger = log;
    /* without MEMCACHED_SASL_PWDB the list starts at the log callback */
    sasl_callback_t *list = pwdb ? callbacks : callbacks + 1;
    if (gethostname(hostname, sizeof(hostname) - 1) < 0)
        hostname[0] = '\0';
    sasl_set_mutex(mutex_new, mutex_lock, mutex_unlock, mutex_free);
    int rc = sasl_server_init(list, "memcached");
    if (rc != SASL_OK) {
        snprintf(err, errlen, "-S: cannot set up SASL (%s): %s", sasl_errstring(rc, NULL, NULL),
                 getenv("SASL_CONF_PATH") ? "is there a memcached.conf in SASL_CONF_PATH?"
                 : "no memcached.conf: set SASL_CONF_PATH to its directory, or create "
                   "/etc/sasl2/memcached.conf");
        return -1;
    }
    atexit(sasl_end);                   /* its plug-ins' memory, for leak checkers */
    return 0;
}

/* The connection's sasl_conn_t, made on first use; NULL if it cannot be
 * (then every call fails, answered as an authentication error). */
static sasl_conn_t *conn_of(void **slot)
{
    if (!*slot) {
        sasl_conn_t *c = NULL;
        if (sasl_server_new("memcached", hostname[0] ? hostname : NULL, NULL, NULL, NULL, NULL,
                            0, &c) != SASL_OK)
            return NULL;
        *slot = c;
    }
    return *slot;
}

int session_sasl_mechs(void **slot, const char **out, unsigned *outlen)
{
    sasl_conn_t *c = conn_of(slot);
    return c && sasl_listmech(c, NULL, "", " ", "", out, outlen, NULL) == SASL_OK ? 0 : -1;
}

static int result(int rc)
{
    return rc == SASL_OK ? 0 : rc == SASL_CONTINUE ? 1 : -1;
}

int session_sasl_start(void **slot, const char *mech, const char *in, unsigned inlen,
                       const char **out, unsigned *outlen)
{
    sasl_conn_t *c = conn_of(slot);
    return c ? result(sasl_server_start(c, mech, in, inlen, out, outlen)) : -1;
}

int session_sasl_step(void **slot, const char *in, unsigned inlen, const char **out,
                      unsigned *outlen)
{
    sasl_conn_t *c = conn_of(slot);
    return c ? result(sasl_server_step(c, in, inlen, out, outlen)) : -1;
}

void session_sasl_free(void **slot)
{
    if (*slot) {
        sasl_conn_t *c = *slot;
        sasl_dispose(&c);
    }
    *slot = NULL;
}

#else /* without libsasl2 */

bool kura_sasl_available(void) { return false; }

int kura_sasl_init(const kura_auth *passwords, void (*log)(int level, const char *msg),
                   char *err, size_t errlen)
{
    (void)passwords; (void)log;
    snprintf(err, errlen, "-S: this kurad was built without SASL (Debian: apt-get install "
             "libsasl2-dev, then ./configure && make)");
    return -1;
}

int session_sasl_mechs(void **slot, const char **out, unsigned *outlen)
{
    (void)slot; (void)out; (void)outlen;
    return -1;
}

int session_sasl_start(void **slot, const char *mech, const char *in, unsigned inlen,
                       const char **out, unsigned *outlen)
{
    (void)slot; (void)mech; (void)in; (void)inlen; (void)out; (void)outlen;
    return -1;
}

int session_sasl_step(void **slot, const char *in, unsigned inlen, const char **out,
                      unsigned *outlen)
{
    (void)slot; (void)in; (void)inlen; (void)out; (void)outlen;
    return -1;
}

void session_sasl_free(void **slot) { *slot = NULL; }

#endif

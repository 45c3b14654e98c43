/*
 * login.h - the client side of kurad's authentication (src/util/login.c),
 * for kuractl (-a FILE) and a replica (-mauth FILE).  A client, not the
 * protocols' server side: it sits in util/ beside the TLS client
 * (tlsio.h), so that a replica (repl/) logs in without reaching up into
 * the protocols (proto/).
 */
#ifndef KURA_LOGIN_H
#define KURA_LOGIN_H

#include <stddef.h>

/* The request that authenticates as user (a set whose value is "user
 * password"; its reply is STORED or CLIENT_ERROR ...) into buf: its
 * length, or -1 if cap is too small.  Send it only to a server that
 * answered "CLIENT_ERROR unauthenticated" (one without -Y would store it
 * as the item "auth"); kura_login does. */
#define KURA_AUTH_REQUEST_MAX 2100
int kura_auth_request(char *buf, size_t cap, const char *user, const char *pass);

/* A client's login (src/util/login.c): on a new connection, before any
 * request, whichever of -Y (text) or -S (SASL PLAIN over the binary
 * protocol) the server asks for; afterwards the connection speaks text.
 * io's send writes len bytes, read reads exactly len bytes; each 0 or -1
 * (closed, timed out), within the caller's deadlines. */
typedef struct kura_login_io {
    void *ctx;
    int (*send)(void *ctx, const void *buf, size_t len);
    int (*read)(void *ctx, void *buf, size_t len);
} kura_login_io;
enum {
    KURA_LOGIN_OK = 0,
    KURA_LOGIN_OPEN,                    /* the server asks nothing: connect again, speak text */
    KURA_LOGIN_REFUSED,                 /* wrong credentials: msg has the server's answer */
    KURA_LOGIN_LOST,                    /* the connection failed (the caller's error) */
    KURA_LOGIN_BAD,                     /* an answer no kurad gives: msg says what */
};
int kura_login(const kura_login_io *io, const char *user, const char *pass, char *msg,
               size_t msglen);

#endif

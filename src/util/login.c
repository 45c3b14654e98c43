/*
 * login.c - the client side of kurad's authentication, for kuractl (-a
 * FILE) and a replica (-mauth FILE): one exchange that works whichever
 * way the server was started (include/kura/login.h, kura_login).
 *
 * A client with credentials does not know whether the server wants -Y's
 * text login, -S's SASL over the binary protocol, or nothing.  -S serves
 * only requests that start with the binary magic (any other first byte
 * closes the connection once 24 bytes are in), -Y's gate answers a line,
 * and a server with neither decides the connection's protocol from its
 * first byte.  So the first request is one 24-byte binary header, SASL
 * "list mechanisms", whose last byte (the cas field's, which the request
 * ignores) is a newline:
 *   - -S answers the mechanisms (allowed before authentication), and the
 *     client authenticates with PLAIN; once that is answered
 *     "Authenticated", kurad serves the text protocol on the connection
 *     (binary.c), so every command of kura's is then available;
 *   - -Y's gate reads the 24 bytes as one line that is not a set and
 *     answers "CLIENT_ERROR unauthenticated"; the client then sends
 *     memcached's "set auth" with "user password";
 *   - a server with neither answers "Unknown command" in binary, and the
 *     connection is binary from then on: KURA_LOGIN_OPEN tells the caller
 *     to connect again and speak text without credentials (which are so
 *     never sent to a server that would store them as an item "auth").
 * Every reply is read whole and bounded (a binary body of at most
 * LOGIN_BODY_MAX, a line of at most LOGIN_LINE_MAX), through the
 * caller's I/O, which keeps its own deadlines.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kura/bytes.h"
#include "kura/login.h"

#define OP_SASL_LIST_MECHS 0x20
#define OP_SASL_AUTH 0x21
#define ST_UNKNOWN_COMMAND 0x81
#define LOGIN_BODY_MAX 4096
#define LOGIN_LINE_MAX 512

static const char unauth[] = "CLIENT_ERROR unauthenticated\r\n";

int kura_auth_request(char *buf, size_t cap, const char *user, const char *pass)
{
    /* the key, flags and expiry are ignored by the gate; the value is
     * "user password" */
    int n = snprintf(buf, cap, "set auth 0 0 %zu\r\n%s %s\r\n", strlen(user) + 1 + strlen(pass),
                     user, pass);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

static void bin_header(unsigned char *h, uint8_t op, uint16_t klen, uint32_t blen)
{
    memset(h, 0, 24);
    h[0] = 0x80;
    h[1] = op;
    put_be16(h + 2, klen);
    put_be32(h + 8, blen);
}

/* A binary reply's status and body (NUL-terminated in body); 0, or a
 * KURA_LOGIN_* failure. */
static int bin_reply(const kura_login_io *io, unsigned char *h, uint16_t *status, char *body,
                     char *msg, size_t msglen)
{
    uint32_t blen = get_be32(h + 8);
    if (blen > LOGIN_BODY_MAX) {
        snprintf(msg, msglen, "a binary reply of %u bytes to a login", blen);
        return KURA_LOGIN_BAD;
    }
    if (blen && io->read(io->ctx, body, blen) < 0)
        return KURA_LOGIN_LOST;
    body[blen] = '\0';
    *status = get_be16(h + 6);
    return 0;
}

/* SASL PLAIN, after the mechanisms were listed. */
static int sasl_plain(const kura_login_io *io, const char *mechs, const char *user,
                      const char *pass, char *msg, size_t msglen)
{
    size_t ul = strlen(user), pl = strlen(pass), ml = strlen(mechs);
    const char *p = mechs;
    while ((p = strstr(p, "PLAIN")) && !((p == mechs || p[-1] == ' ') &&
                                         (p + 5 == mechs + ml || p[5] == ' ')))
        p += 5;
    if (!p) {
        snprintf(msg, msglen, "SASL offers '%s' and kura's clients log in with PLAIN (add it "
                 "to mech_list in memcached.conf)", mechs);
        return KURA_LOGIN_REFUSED;
    }
    unsigned char req[24 + 5 + 2 + 2 * KURA_AUTH_REQUEST_MAX];
    if (ul + pl > 2 * KURA_AUTH_REQUEST_MAX) {
        snprintf(msg, msglen, "user and password too long");
        return KURA_LOGIN_REFUSED;
    }
    /* PLAIN's data: authzid (empty), NUL, user, NUL, password */
    size_t dlen = 1 + ul + 1 + pl;
    bin_header(req, OP_SASL_AUTH, 5, (uint32_t)(5 + dlen));
    memcpy(req + 24, "PLAIN", 5);
    req[29] = '\0';
    memcpy(req + 30, user, ul);
    req[30 + ul] = '\0';
    memcpy(req + 31 + ul, pass, pl);
    unsigned char h[24];
    char body[LOGIN_BODY_MAX + 1];
    uint16_t st;
    int rc;
    if (io->send(io->ctx, req, 24 + 5 + dlen) < 0 || io->read(io->ctx, h, 24) < 0)
        return KURA_LOGIN_LOST;
    if (h[0] != 0x81) {
        snprintf(msg, msglen, "not a binary reply to SASL PLAIN");
        return KURA_LOGIN_BAD;
    }
    if ((rc = bin_reply(io, h, &st, body, msg, msglen)))
        return rc;
    if (st == 0)
        return KURA_LOGIN_OK;
    snprintf(msg, msglen, "%s", body[0] ? body : "SASL status not 0");
    return KURA_LOGIN_REFUSED;
}

/* -Y's login, after the gate answered "CLIENT_ERROR unauthenticated". */
static int ascii_login(const kura_login_io *io, const char *user, const char *pass, char *msg,
                       size_t msglen)
{
    char req[KURA_AUTH_REQUEST_MAX], line[LOGIN_LINE_MAX + 1];
    int n = kura_auth_request(req, sizeof(req), user, pass);
    if (n < 0) {
        snprintf(msg, msglen, "user and password too long");
        return KURA_LOGIN_REFUSED;
    }
    if (io->send(io->ctx, req, (size_t)n) < 0)
        return KURA_LOGIN_LOST;
    size_t len = 0;
    for (;;) {                          /* the reply line, byte by byte from the caller's buffer */
        if (len == LOGIN_LINE_MAX) {
            snprintf(msg, msglen, "a reply line longer than %d bytes", LOGIN_LINE_MAX);
            return KURA_LOGIN_BAD;
        }
        if (io->read(io->ctx, line + len, 1) < 0)
            return KURA_LOGIN_LOST;
        if (line[len++] == '\n')
            break;
    }
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    line[len] = '\0';
    if (strcmp(line, "STORED") == 0)
        return KURA_LOGIN_OK;
    snprintf(msg, msglen, "%s", line);
    return KURA_LOGIN_REFUSED;
}

int kura_login(const kura_login_io *io, const char *user, const char *pass, char *msg,
               size_t msglen)
{
    unsigned char probe[24], h[24];
    char body[LOGIN_BODY_MAX + 1];
    uint16_t st;
    int rc;
    msg[0] = '\0';
    bin_header(probe, OP_SASL_LIST_MECHS, 0, 0);
    probe[23] = '\n';                   /* the end of a line for -Y's gate */
    if (io->send(io->ctx, probe, sizeof(probe)) < 0 || io->read(io->ctx, h, 24) < 0)
        return KURA_LOGIN_LOST;
    if (memcmp(h, unauth, 24) == 0) {
        char rest[sizeof(unauth) - 1 - 24];
        if (io->read(io->ctx, rest, sizeof(rest)) < 0)
            return KURA_LOGIN_LOST;
        if (memcmp(rest, unauth + 24, sizeof(rest)) == 0)
            return ascii_login(io, user, pass, msg, msglen);
    } else if (h[0] == 0x81) {
        if ((rc = bin_reply(io, h, &st, body, msg, msglen)))
            return rc;
        if (st == ST_UNKNOWN_COMMAND)
            return KURA_LOGIN_OPEN;
        if (st == 0)
            return sasl_plain(io, body, user, pass, msg, msglen);
        snprintf(msg, msglen, "%s", body[0] ? body : "SASL refused");
        return KURA_LOGIN_REFUSED;
    }
    snprintf(msg, msglen, "an answer to a login that is neither -Y's nor -S's");
    return KURA_LOGIN_BAD;
}

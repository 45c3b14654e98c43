/*
 * netaddr.h - network addresses as the options write them, parsed in one
 * place so that every option taking one (-host/-l, -metrics) accepts the
 * same forms and refuses the same mistakes with the same words.
 *
 * The forms: "HOST", "HOST:PORT", "[V6]", "[V6]:PORT" and a bare IPv6
 * address ("::1", no port: more than one colon and no brackets).  "localhost"
 * stands for the loopback addresses of both families (KURA_LOOPBACK).
 */
#ifndef KURA_NETADDR_H
#define KURA_NETADDR_H

#include <stddef.h>

/* What "localhost" and no -host mean: both loopbacks, as Redis' default
 * "bind 127.0.0.1 -::1" (a family the host lacks is skipped, logged). */
#define KURA_LOOPBACK_V4 "127.0.0.1"
#define KURA_LOOPBACK_V6 "::1"

/* Splits spec into host (room for hlen bytes, NUL included) and *port (0
 * when spec has none).  0, or -1 with the reason in why (a phrase, no
 * option name: "'[' without ']'", "port 70000 is not from 1 to 65535", ...).
 * The host may be empty (":PORT"); the caller says what that means. */
int kura_netaddr_split(const char *spec, char *host, size_t hlen, int *port, char *why,
                       size_t wlen);

/* -metrics' "[HOST:]PORT": a port alone ("9150": host "", the caller's
 * default) or an address with a port ("127.0.0.1:9150", "[::1]:9150",
 * "localhost:9150").  0, or -1 with the reason in why. */
int kura_netaddr_port_spec(const char *spec, char *host, size_t hlen, int *port, char *why,
                           size_t wlen);

/* Whether host names the loopback pair: "localhost" (any case). */
int kura_netaddr_is_localhost(const char *host);

/* A non-blocking TCP socket connected to host:port (each address
 * getaddrinfo gives, in turn), within timeout_ms per address.  The socket,
 * or -1 with the reason in why (strerror's words). */
int kura_netaddr_connect(const char *host, const char *port, int timeout_ms, char *why,
                         size_t wlen);

#endif

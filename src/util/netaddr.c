/*
 * netaddr.c - "HOST[:PORT]" and "[V6][:PORT]" split for the options that
 * take an address (include/kura/netaddr.h).  Pure string work: nothing is
 * resolved here, so a mistake in an option is found when the command line
 * is read (exit 2), not as an errno from bind() later.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kura/netaddr.h"

/* "1".."65535", digits only. */
static int parse_port(const char *p, int *port, char *why, size_t wlen)
{
    long v = 0;
    const char *q = p;
    while (*q >= '0' && *q <= '9' && v <= 65535)
        v = v * 10 + (*q++ - '0');
    if (q == p || *q || v < 1 || v > 65535) {
        snprintf(why, wlen, "port '%s' is not a number from 1 to 65535", p);
        return -1;
    }
    *port = (int)v;
    return 0;
}

static int copy_host(const char *h, size_t n, char *host, size_t hlen, char *why, size_t wlen)
{
    if (n >= hlen) {
        snprintf(why, wlen, "host name too long");
        return -1;
    }
    memcpy(host, h, n);
    host[n] = '\0';
    return 0;
}

int kura_netaddr_split(const char *spec, char *host, size_t hlen, int *port, char *why,
                       size_t wlen)
{
    *port = 0;
    if (spec[0] == '[') {
        const char *close = strchr(spec, ']');
        if (!close) {
            snprintf(why, wlen, "'[' without ']' (an IPv6 address is written [::1]:PORT)");
            return -1;
        }
        if (close == spec + 1) {
            snprintf(why, wlen, "nothing between '[' and ']'");
            return -1;
        }
        if (close[1] && close[1] != ':') {
            snprintf(why, wlen, "'%s' after ']' (an IPv6 address is written [::1]:PORT)",
                     close + 1);
            return -1;
        }
        if (close[1] && parse_port(close + 2, port, why, wlen) < 0)
            return -1;
        return copy_host(spec + 1, (size_t)(close - spec - 1), host, hlen, why, wlen);
    }
    if (strchr(spec, '[') || strchr(spec, ']')) {
        snprintf(why, wlen, "a bracket out of place (an IPv6 address is written [::1]:PORT)");
        return -1;
    }
    const char *colon = strchr(spec, ':');
    if (colon && strchr(colon + 1, ':'))        /* a bare IPv6 address: no port */
        return copy_host(spec, strlen(spec), host, hlen, why, wlen);
    if (colon && parse_port(colon + 1, port, why, wlen) < 0)
        return -1;
    return copy_host(spec, colon ? (size_t)(colon - spec) : strlen(spec), host, hlen, why, wlen);
}

int kura_netaddr_port_spec(const char *spec, char *host, size_t hlen, int *port, char *why,
                           size_t wlen)
{
    if (!spec[0]) {
        snprintf(why, wlen, "empty");
        return -1;
    }
    if (spec[0] >= '0' && spec[0] <= '9' && !strchr(spec, ':')) {
        host[0] = '\0';
        return parse_port(spec, port, why, wlen);
    }
    if (kura_netaddr_split(spec, host, hlen, port, why, wlen) < 0)
        return -1;
    if (!host[0] || !*port) {
        snprintf(why, wlen, "%s", !host[0] ? "no host before ':'"
                 : strchr(host, ':') && spec[0] != '[' ? "an IPv6 address with a port is "
                                                         "written [::1]:PORT"
                                     : "no port");
        return -1;
    }
    return 0;
}

int kura_netaddr_is_localhost(const char *host)
{
    return strcasecmp(host, "localhost") == 0;
}

int kura_netaddr_connect(const char *host, const char *port, int timeout_ms, char *why,
                         size_t wlen)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res, *ai;
    int g = getaddrinfo(host, port, &hints, &res), fd = -1;
    if (g) {
        snprintf(why, wlen, "%s", gai_strerror(g));
        return -1;
    }
    snprintf(why, wlen, "no address");
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        int soerr = errno;
        socklen_t sl = sizeof(soerr);
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        if (soerr == EINPROGRESS && poll(&p, 1, timeout_ms) == 1 &&
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
            break;
        snprintf(why, wlen, "%s", strerror(soerr == EINPROGRESS ? ETIMEDOUT : soerr));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

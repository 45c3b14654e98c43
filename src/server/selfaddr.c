/*
 * selfaddr.c - is an address this server?  "repl follow HOST:PORT" and
 * Tokyo Tyrant's setmst must refuse to make a server follow itself (it
 * would refuse every write and wait for its own rows forever), and HOST
 * can name this server in many spellings: "localhost", "127.1",
 * "::ffff:127.0.0.1", "0.0.0.0", any 127.x or interface address when it
 * listens on 0.0.0.0.  So the names are resolved first (the caller's
 * getaddrinfo) and each address is compared as a connect() to it would
 * arrive, with this server's listening sockets as they are bound
 * (listener_sockaddrs: every -l address and port, -plex's port too):
 *
 *  - a v4-mapped IPv6 address (::ffff:a.b.c.d) is the IPv4 address it
 *    maps: an IPv6 socket connects to it over IPv4;
 *  - the unspecified address (0.0.0.0, ::) as a destination is the
 *    loopback (Linux connects there so);
 *  - a listener bound to an address takes connections to that address and
 *    port; one bound to 0.0.0.0 (::) to any local IPv4 (IPv6) address at
 *    its port: the loopback ranges (127/8, ::1) and the addresses of the
 *    machine's interfaces (getifaddrs).  kurad's IPv6 listeners are
 *    IPV6_V6ONLY (listener.c), so "::" takes no IPv4 connection.
 *
 * An address with nothing of this server listening there (127.0.0.2 when
 * it listens on 127.0.0.1 alone) is not this server: a follow of it simply
 * finds no master.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "server.h"

#define SELF_LISTENERS 16               /* listener.c keeps at most 8 */

/* An address as a connection to it arrives (port kept): v4-mapped IPv6 as
 * IPv4; with dest, the unspecified address as the loopback. */
static void canon(const struct sockaddr *sa, bool dest, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof(*out));
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
            struct sockaddr_in *a4 = (struct sockaddr_in *)out;
            a4->sin_family = AF_INET;
            a4->sin_port = a6->sin6_port;
            memcpy(&a4->sin_addr, &a6->sin6_addr.s6_addr[12], 4);
        } else {
            memcpy(out, a6, sizeof(*a6));
            if (dest && IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr))
                ((struct sockaddr_in6 *)out)->sin6_addr = in6addr_loopback;
            return;
        }
    } else {
        memcpy(out, sa, sizeof(struct sockaddr_in));
    }
    struct sockaddr_in *a4 = (struct sockaddr_in *)out;
    if (dest && a4->sin_addr.s_addr == htonl(INADDR_ANY))
        a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

static int port_of(const struct sockaddr_storage *a)
{
    return a->ss_family == AF_INET ? ntohs(((const struct sockaddr_in *)a)->sin_port)
                                   : ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
}

/* Same family and address (ports and IPv6 scopes aside); both canonical. */
static bool same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return IN6_ARE_ADDR_EQUAL(&((const struct sockaddr_in6 *)a)->sin6_addr,
                              &((const struct sockaddr_in6 *)b)->sin6_addr);
}

static bool is_unspecified(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

/* An address of this machine: a loopback range, or an interface's.
 * canonical.  Cost: one getifaddrs() unless loopback. */
static bool is_local(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET &&
        (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127)
        return true;
    if (a->ss_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr))
        return true;
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) < 0)
        return false;
    bool local = false;
    for (const struct ifaddrs *i = ifs; i && !local; i = i->ifa_next) {
        struct sockaddr_storage c;
        if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET &&
                             i->ifa_addr->sa_family != AF_INET6))
            continue;
        canon(i->ifa_addr, false, &c);
        local = same_address(&c, a);
    }
    freeifaddrs(ifs);
    return local;
}

bool selfaddr_reaches_self(const struct addrinfo *targets)
{
    struct sockaddr_storage own[SELF_LISTENERS];
    int n = listener_sockaddrs(own, SELF_LISTENERS);
    for (const struct addrinfo *t = targets; t; t = t->ai_next) {
        if (t->ai_family != AF_INET && t->ai_family != AF_INET6)
            continue;
        struct sockaddr_storage to;
        canon(t->ai_addr, true, &to);
        for (int i = 0; i < n; i++) {
            struct sockaddr_storage l;
            canon((const struct sockaddr *)&own[i], false, &l);
            if (port_of(&l) != port_of(&to) || l.ss_family != to.ss_family)
                continue;
            if (is_unspecified(&l) ? is_local(&to) : same_address(&l, &to))
                return true;
        }
    }
    return false;
}

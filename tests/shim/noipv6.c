/*
 * noipv6.c - an LD_PRELOAD shim that makes the process's host look as if
 * it had no IPv6: socket(AF_INET6, ...) fails with EAFNOSUPPORT, as on a
 * kernel booted with ipv6.disable=1.  For tests/integration/test_loopback.py:
 * kurad's default address (127.0.0.1 and ::1) then serves on 127.0.0.1
 * alone and says in its log that it skipped ::1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>

int socket(int domain, int type, int protocol)
{
    static int (*real)(int, int, int);
    if (domain == AF_INET6) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    if (!real)
        real = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
    return real(domain, type, protocol);
}

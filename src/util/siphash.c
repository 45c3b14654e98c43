/*
 * siphash.c - generic SipHash-c-d and the process's random hash key
 * (include/kura/siphash.h says why the tables hash with a key).
 *
 * The key comes from getrandom(2), without blocking: at early boot, before
 * the kernel's pool is initialised, getrandom would block (a service started
 * then would hang), so on EAGAIN, or where the system call is missing
 * (ENOSYS: old kernels, some sandboxes), /dev/urandom is read instead, which
 * never blocks; its early-boot output is weak for cryptography but more
 * than enough to keep a remote client from predicting table positions
 * (Python's hash secret is made the same way).  When neither source gives
 * 16 bytes the stores refuse to open (KURA_EIO): a fixed key would quietly
 * bring the flooding back.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include "kura/siphash.h"
#include "kura/status.h"

uint64_t siphash_cd(const siphash_key *key, const void *in, size_t len, int c, int d)
{
    const unsigned char *p = in;
    uint64_t v0 = key->k0 ^ 0x736f6d6570736575ULL;
    uint64_t v1 = key->k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = key->k0 ^ 0x6c7967656e657261ULL;
    uint64_t v3 = key->k1 ^ 0x7465646279746573ULL;
    size_t n = len;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t m = siphash_le64(p);
        v3 ^= m;
        for (int i = 0; i < c; i++)
            SIPHASH_ROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    /* the tail byte by byte: this is the plain reading of the paper that
     * siphash13's shortcuts are tested against */
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = 0; i < n; i++)
        b |= (uint64_t)p[i] << (8 * i);
    v3 ^= b;
    for (int i = 0; i < c; i++)
        SIPHASH_ROUND(v0, v1, v2, v3);
    v0 ^= b;
    v2 ^= 0xff;
    for (int i = 0; i < d; i++)
        SIPHASH_ROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

/* n bytes from /dev/urandom; 0 or -1. */
static int siphash_urandom(unsigned char *buf, size_t n)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return got == n ? 0 : -1;
}

int siphash_random_key(siphash_key *key)
{
    unsigned char buf[16];
    size_t got = 0;
    while (got < sizeof(buf)) {
        ssize_t r = getrandom(buf + got, sizeof(buf) - got, GRND_NONBLOCK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got < sizeof(buf) && siphash_urandom(buf, sizeof(buf)) != 0)
        return KURA_EIO;
    key->k0 = siphash_le64(buf);
    key->k1 = siphash_le64(buf + 8);
    return KURA_OK;
}

static pthread_once_t siphash_once = PTHREAD_ONCE_INIT;
static siphash_key siphash_proc;
static int siphash_proc_rc;

static void siphash_make_process_key(void)
{
    siphash_proc_rc = siphash_random_key(&siphash_proc);
}

int siphash_process_key(siphash_key *key)
{
    pthread_once(&siphash_once, siphash_make_process_key);
    if (siphash_proc_rc != KURA_OK)
        return siphash_proc_rc;
    *key = siphash_proc;
    return KURA_OK;
}

/*
 * test_siphash.c - SipHash (src/util/siphash.c, include/kura/siphash.h):
 * the generic SipHash-c-d against the paper's SipHash-2-4 vector and the
 * reference implementation's 2-4 vectors; siphash13 (the tables' inline
 * function) against the reference implementation's 1-3 vectors and against
 * the generic code at every length up to 64 (every tail path, inputs both
 * shorter and longer than 8 bytes) under random keys; the process key is
 * random, the same on every call, and differs between processes.
 *
 * Vectors: key 00 01 .. 0f, input 00 01 .. (len-1), as in the reference
 * implementation (github.com/veorq/SipHash, vectors.h; built with
 * cROUNDS=1 dROUNDS=3 for the 1-3 ones, which are also the test vectors of
 * Swift's standard library, test/stdlib/SipHash.swift).
 */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"
#include "kura/siphash.h"
#include "kura/store.h"

static const siphash_key REF_KEY = { 0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL };

static unsigned char ref_in[64];

static void init_ref_in(void)
{
    for (int i = 0; i < 64; i++)
        ref_in[i] = (unsigned char)i;
}

static void test_paper_vector(void)
{
    /* Aumasson and Bernstein, "SipHash: a fast short-input PRF", appendix A:
     * 15 bytes 00..0e under key 00..0f give a129ca6149be45e5 */
    init_ref_in();
    CHECK(siphash_cd(&REF_KEY, ref_in, 15, 2, 4) == 0xa129ca6149be45e5ULL);
}

static void test_vectors_2_4(void)
{
    static const uint64_t v[16] = {
        0x726fdb47dd0e0e31ULL, 0x74f839c593dc67fdULL, 0x0d6c8009d9a94f5aULL,
        0x85676696d7fb7e2dULL, 0xcf2794e0277187b7ULL, 0x18765564cd99a68dULL,
        0xcbc9466e58fee3ceULL, 0xab0200f58b01d137ULL, 0x93f5f5799a932462ULL,
        0x9e0082df0ba9e4b0ULL, 0x7a5dbbc594ddb9f3ULL, 0xf4b32f46226bada7ULL,
        0x751e8fbc860ee5fbULL, 0x14ea5627c0843d90ULL, 0xf723ca908e7af2eeULL,
        0xa129ca6149be45e5ULL,
    };
    init_ref_in();
    for (size_t len = 0; len < 16; len++)
        if (siphash_cd(&REF_KEY, ref_in, len, 2, 4) != v[len]) {
            printf("# 2-4, length %zu\n", len);
            CHECK(0);
        }
    CHECK(siphash_cd(&REF_KEY, ref_in, 63, 2, 4) == 0x958a324ceb064572ULL);
}

static void test_vectors_1_3(void)
{
    static const uint64_t v[64] = {
        0xabac0158050fc4dcULL, 0xc9f49bf37d57ca93ULL, 0x82cb9b024dc7d44dULL,
        0x8bf80ab8e7ddf7fbULL, 0xcf75576088d38328ULL, 0xdef9d52f49533b67ULL,
        0xc50d2b50c59f22a7ULL, 0xd3927d989bb11140ULL, 0x369095118d299a8eULL,
        0x25a48eb36c063de4ULL, 0x79de85ee92ff097fULL, 0x70c118c1f94dc352ULL,
        0x78a384b157b4d9a2ULL, 0x306f760c1229ffa7ULL, 0x605aa111c0f95d34ULL,
        0xd320d86d2a519956ULL, 0xcc4fdd1a7d908b66ULL, 0x9cf2689063dbd80cULL,
        0x8ffc389cb473e63eULL, 0xf21f9de58d297d1cULL, 0xc0dc2f46a6cce040ULL,
        0xb992abfe2b45f844ULL, 0x7ffe7b9ba320872eULL, 0x525a0e7fdae6c123ULL,
        0xf464aeb267349c8cULL, 0x45cd5928705b0979ULL, 0x3a3e35e3ca9913a5ULL,
        0xa91dc74e4ade3b35ULL, 0xfb0bed02ef6cd00dULL, 0x88d93cb44ab1e1f4ULL,
        0x540f11d643c5e663ULL, 0x2370dd1f8c21d1bcULL, 0x81157b6c16a7b60dULL,
        0x4d54b9e57a8ff9bfULL, 0x759f12781f2a753eULL, 0xcea1a3bebf186b91ULL,
        0x2cf508d3ada26206ULL, 0xb6101c2da3c33057ULL, 0xb3f47496ae3a36a1ULL,
        0x626b57547b108392ULL, 0xc1d2363299e41531ULL, 0x667cc1923f1ad944ULL,
        0x65704ffec8138825ULL, 0x24f280d1c28949a6ULL, 0xc2ca1cedfaf8876bULL,
        0xc2164bfc9f042196ULL, 0xa16e9c9368b1d623ULL, 0x49fb169c8b5114fdULL,
        0x9f3143f8df074c46ULL, 0xc6fdaf2412cc86b3ULL, 0x7eaf49d10a52098fULL,
        0x1cf313559d292f9aULL, 0xc44a30dda2f41f12ULL, 0x36fae98943a71ed0ULL,
        0x318fb34c73f0bce6ULL, 0xa27abf3670a7e980ULL, 0xb4bcc0db243c6d75ULL,
        0x23f8d852fdb71513ULL, 0x8f035f4da67d8a08ULL, 0xd89cd0e5b7e8f148ULL,
        0xf6f4e6bcf7a644eeULL, 0xaec59ad80f1837f2ULL, 0xc3b2f6154b6694e0ULL,
        0x9d199062b7bbb3a8ULL,
    };
    init_ref_in();
    for (size_t len = 0; len < 64; len++) {
        if (siphash_cd(&REF_KEY, ref_in, len, 1, 3) != v[len]) {
            printf("# generic 1-3, length %zu\n", len);
            CHECK(0);
        }
        if (siphash13(&REF_KEY, ref_in, len) != v[len]) {
            printf("# siphash13, length %zu\n", len);
            CHECK(0);
        }
    }
}

/* siphash13's tail shortcuts read the input in other ways than the generic
 * loop: checked at every length and alignment, random keys and bytes, each
 * input ending at the very end of its allocation, so that a read past it
 * shows under AddressSanitizer (make test-asan). */
static void test_inline_matches_generic(void)
{
    siphash_key k;
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    int bad = 0;
    for (int round = 0; round < 100; round++) {
        REQUIRE(siphash_random_key(&k) == KURA_OK);
        for (size_t len = 0; len <= 64; len++) {
            for (size_t off = 0; off < 8; off++) {
                unsigned char *buf = malloc(len + off ? len + off : 1);
                REQUIRE(buf != NULL);
                unsigned char *in = buf + off;
                for (size_t i = 0; i < len; i++) {
                    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                    in[i] = (unsigned char)(x >> 56);
                }
                bad += siphash13(&k, in, len) != siphash_cd(&k, in, len, 1, 3);
                free(buf);
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
}

/* The key a child process draws (its first siphash_process_key call). */
static int child_key(siphash_key *out)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        siphash_key c;
        close(fd[0]);
        _exit(siphash_process_key(&c) == KURA_OK &&
              write(fd[1], &c, sizeof(c)) == (ssize_t)sizeof(c) ? 0 : 1);
    }
    close(fd[1]);
    ssize_t n = read(fd[0], out, sizeof(*out));
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    return n == (ssize_t)sizeof(*out) && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void test_process_key(void)
{
    siphash_key a, b, c1, c2, r1, r2;
    /* before this process makes its own key: each child draws one */
    REQUIRE(child_key(&c1) == 0);
    REQUIRE(child_key(&c2) == 0);
    CHECK(c1.k0 != c2.k0 || c1.k1 != c2.k1);        /* 2^-128 to fail */
    REQUIRE(siphash_process_key(&a) == KURA_OK);
    REQUIRE(siphash_process_key(&b) == KURA_OK);
    CHECK(a.k0 == b.k0 && a.k1 == b.k1);            /* once per process */
    CHECK(a.k0 != c1.k0 || a.k1 != c1.k1);
    CHECK(a.k0 != 0 || a.k1 != 0);
    REQUIRE(siphash_random_key(&r1) == KURA_OK);
    REQUIRE(siphash_random_key(&r2) == KURA_OK);
    CHECK(r1.k0 != r2.k0 || r1.k1 != r2.k1);
}

int main(void)
{
    RUN(test_process_key);     /* first: its children fork before this process makes its key */
    RUN(test_paper_vector);
    RUN(test_vectors_2_4);
    RUN(test_vectors_1_3);
    RUN(test_inline_matches_generic);
    UNIT_DONE();
}

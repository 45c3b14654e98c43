/*
 * test_buf.c - the reply buffer's references (buf.h): appends between
 * bytes, rewinds past a reference, iovecs from any offset (partial sends
 * ending inside and at the edges of a piece), and the hold counting:
 * every reference held once and released exactly once, whether sent,
 * rewound, cleared or freed with the buffer.
 */
#include <stdint.h>
#include <sys/uio.h>

#include "kura/buf.h"
#include "unit.h"

/* A fake owner: counts holds and releases per object. */
typedef struct fake {
    int holds[8], releases[8];
} fake;

static void f_hold(void *owner, void *obj)
{
    ((fake *)owner)->holds[(intptr_t)obj]++;
}

static void f_release(void *owner, void *obj)
{
    ((fake *)owner)->releases[(intptr_t)obj]++;
}

static const kura_vref_ops f_ops = { f_hold, f_release };

static kura_vref ref_of(fake *f, int i)
{
    return (kura_vref){ &f_ops, f, (void *)(intptr_t)i };
}

/* The bytes kura_buf_iov gives from pos, flattened, at most max iovecs. */
static size_t flatten(const kura_buf *b, size_t pos, int max, char *out)
{
    struct iovec iov[16];
    int k = kura_buf_iov(b, pos, iov, max);
    size_t n = 0;
    for (int i = 0; i < k; i++) {
        memcpy(out + n, iov[i].iov_base, iov[i].iov_len);
        n += iov[i].iov_len;
    }
    return n;
}

/* "<h1>" AAAA "<m>" BBBBBB "<t>" as the stream */
static void build(kura_buf *b, fake *f)
{
    kura_vref r1 = ref_of(f, 1), r2 = ref_of(f, 2);
    KURA_BUF_LIT(b, "<h1>");
    CHECK(kura_buf_append_ref(b, "AAAA", 4, &r1));
    KURA_BUF_LIT(b, "<m>");
    CHECK(kura_buf_append_ref(b, "BBBBBB", 6, &r2));
    KURA_BUF_LIT(b, "<t>");
}

static const char want[] = "<h1>AAAA<m>BBBBBB<t>";

static void test_append_and_iov(void)
{
    fake f = { { 0 }, { 0 } };
    kura_buf b = { 0 };
    build(&b, &f);
    CHECK_EQ_INT(kura_buf_size(&b), sizeof(want) - 1);
    CHECK_EQ_INT(b.len, 10);
    CHECK_EQ_INT(f.holds[1], 1);
    CHECK_EQ_INT(f.holds[2], 1);
    char got[64];
    /* from every offset, whole and a piece at a time */
    for (size_t pos = 0; pos <= sizeof(want) - 1; pos++) {
        size_t n = flatten(&b, pos, 16, got);
        CHECK_EQ_INT(n, sizeof(want) - 1 - pos);
        CHECK(memcmp(got, want + pos, n) == 0);
        struct iovec one;
        int k = kura_buf_iov(&b, pos, &one, 1);
        CHECK_EQ_INT(k, pos < sizeof(want) - 1);
        if (k)
            CHECK(one.iov_len > 0 && memcmp(one.iov_base, want + pos, one.iov_len) == 0);
    }
    kura_buf_free(&b);
    CHECK_EQ_INT(f.releases[1], 1);
    CHECK_EQ_INT(f.releases[2], 1);
}

/* Sent a few bytes at a time (as partial sends would): each reference is
 * released once its last byte is sent, not before, and only once. */
static void test_partial_sends(void)
{
    for (size_t step = 1; step <= 7; step++) {
        fake f = { { 0 }, { 0 } };
        kura_buf b = { 0 };
        build(&b, &f);
        size_t pos = 0, total = kura_buf_size(&b);
        char got[64];
        size_t have = 0;
        while (pos < total) {
            struct iovec iov[4];
            int k = kura_buf_iov(&b, pos, iov, 4);
            REQUIRE(k > 0);
            size_t n = 0;           /* "send" at most step bytes over the iovecs */
            for (int i = 0; i < k && n < step; i++) {
                size_t t = iov[i].iov_len < step - n ? iov[i].iov_len : step - n;
                memcpy(got + have + n, iov[i].iov_base, t);
                n += t;
            }
            have += n;
            pos += n;
            kura_buf_sent(&b, pos);
            CHECK_EQ_INT(f.releases[1], pos >= 8);      /* "<h1>AAAA" */
            CHECK_EQ_INT(f.releases[2], pos >= 17);     /* ...<m>BBBBBB */
        }
        CHECK(have == total && memcmp(got, want, total) == 0);
        kura_buf_clear(&b);
        CHECK_EQ_INT(b.len, 0);
        CHECK_EQ_INT(kura_buf_size(&b), 0);
        kura_buf_free(&b);
        CHECK_EQ_INT(f.holds[1], 1);
        CHECK_EQ_INT(f.releases[1], 1);
        CHECK_EQ_INT(f.releases[2], 1);
    }
}

/* A rewind to a mark taken before a reference releases it; one taken
 * after keeps it; bytes appended after a rewind go where the dropped ones
 * were. */
static void test_rewind(void)
{
    fake f = { { 0 }, { 0 } };
    kura_buf b = { 0 };
    kura_vref r1 = ref_of(&f, 1), r2 = ref_of(&f, 2), r3 = ref_of(&f, 3);
    KURA_BUF_LIT(&b, "H1");
    kura_buf_append_ref(&b, "one", 3, &r1);
    size_t mark = b.len;                /* just after the reference */
    KURA_BUF_LIT(&b, "H2");
    kura_buf_append_ref(&b, "two", 3, &r2);
    KURA_BUF_LIT(&b, "\r\n");
    kura_buf_append_ref(&b, "three", 5, &r3);   /* (no bytes after it) */
    kura_buf_rewind(&b, mark);
    CHECK_EQ_INT(f.releases[2], 1);
    CHECK_EQ_INT(f.releases[3], 1);
    CHECK_EQ_INT(f.releases[1], 0);
    CHECK_EQ_INT(kura_buf_size(&b), 5);
    KURA_BUF_LIT(&b, "ERR");
    char got[64];
    size_t n = flatten(&b, 0, 16, got);
    CHECK(n == 8 && memcmp(got, "H1oneERR", 8) == 0);
    kura_buf_rewind(&b, 0);             /* before everything */
    CHECK_EQ_INT(f.releases[1], 1);
    CHECK_EQ_INT(kura_buf_size(&b), 0);
    kura_buf_free(&b);
    for (int i = 1; i <= 3; i++) {
        CHECK_EQ_INT(f.holds[i], 1);
        CHECK_EQ_INT(f.releases[i], 1);
    }
}

/* Closed mid-send: what was sent is released already, the rest now. */
static void test_free_mid_send(void)
{
    fake f = { { 0 }, { 0 } };
    kura_buf b = { 0 };
    build(&b, &f);
    kura_buf_sent(&b, 9);               /* past the first reference */
    CHECK_EQ_INT(f.releases[1], 1);
    CHECK_EQ_INT(f.releases[2], 0);
    kura_buf_free(&b);
    CHECK_EQ_INT(f.releases[1], 1);
    CHECK_EQ_INT(f.releases[2], 1);
    CHECK(b.refs == NULL && b.data == NULL);
}

/* Many references (the array grows), then reused after a clear. */
static void test_many_and_reuse(void)
{
    fake f = { { 0 }, { 0 } };
    kura_buf b = { 0 };
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 40; i++) {
            kura_vref r = ref_of(&f, i % 8);
            KURA_BUF_LIT(&b, "h");
            CHECK(kura_buf_append_ref(&b, "vv", 2, &r));
        }
        CHECK_EQ_INT(kura_buf_size(&b), 120);
        struct iovec iov[16];
        CHECK_EQ_INT(kura_buf_iov(&b, 0, iov, 16), 16);     /* bounded by max */
        kura_buf_sent(&b, 61);          /* 20 whole (h vv) and a byte more */
        kura_buf_clear(&b);
    }
    kura_buf_free(&b);
    for (int i = 0; i < 8; i++) {
        CHECK_EQ_INT(f.holds[i], 10);
        CHECK_EQ_INT(f.releases[i], 10);
    }
}

/* A buffer without references is as before: one piece. */
static void test_plain(void)
{
    kura_buf b = { 0 };
    KURA_BUF_LIT(&b, "hello");
    struct iovec iov[4];
    CHECK_EQ_INT(kura_buf_iov(&b, 2, iov, 4), 1);
    CHECK(iov[0].iov_len == 3 && memcmp(iov[0].iov_base, "llo", 3) == 0);
    CHECK_EQ_INT(kura_buf_iov(&b, 5, iov, 4), 0);
    CHECK_EQ_INT(kura_buf_size(&b), 5);
    kura_buf_rewind(&b, 1);
    CHECK_EQ_INT(b.len, 1);
    kura_buf_free(&b);
}

int main(void)
{
    RUN(test_append_and_iov);
    RUN(test_partial_sends);
    RUN(test_rewind);
    RUN(test_free_mid_send);
    RUN(test_many_and_reuse);
    RUN(test_plain);
    UNIT_DONE();
}

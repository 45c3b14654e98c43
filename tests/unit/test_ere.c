/*
 * test_ere.c - kura's regular-expression matcher (src/util/ere.c,
 * include/kura/ere.h) against the libc it replaces: glibc's
 * regcomp(REG_EXTENDED | REG_NOSUB) and regexec, as ttserver calls them.
 *
 * - a corpus of patterns (anchors, classes, alternation, repetition,
 *   {m,n}, groups, bracket expressions with [[:alpha:]] and the other
 *   classes, ranges, escapes, glibc's \w \b \< extensions, case-folding)
 *   over a corpus of keys: both accept or both refuse every pattern, and
 *   agree on every key, with and without ICASE;
 * - random patterns over the metacharacters and random keys (a fixed
 *   seed): the same agreement, for the pattern shapes nobody thought of;
 * - what it refuses on purpose, where libc accepts: back-references, a
 *   count past 255, a program past ERE_PROG_MAX;
 * - the bound: the back-reference-free pattern that makes a backtracking
 *   matcher exponential runs in at most (n + 1) * 2 * size steps, and the
 *   step budget stops a match.
 */
#include <regex.h>
#include <stdint.h>

#include "unit.h"
#include "kura/ere.h"

static const char *patterns[] = {
    "", "a", "abc", "^abc", "abc$", "^abc$", "^", "$", "^$", "a^b", "a$b", "(^a)", "(a$)",
    ".", "a.c", "^.*$", "a*", "a+", "a?", "ab*c", "ab+c", "ab?c", "a**", "a+?", "a?*",
    "a{2}", "a{2,}", "a{2,3}", "a{,2}", "a{0}", "a{0,0}b", "a{,}", "(ab){2}", "(a|b){1,3}c",
    "x(a|bc|)y", "a|b|c", "abc|def", "|a", "a|", "()", "(|a)", "a||b", "((a))", "(a(b(c)))",
    "(a|ab)(c|bcd)(d*)", "[abc]", "[^abc]", "[a-z]", "[a-z0-9_]+", "[]a]", "[^]a]", "[a-]",
    "[-a]", "[--/]", "[%--]", "[\\]", "[.]", "[*+?{]", "[[:alpha:]]", "[[:digit:]]+",
    "[[:alnum:]_]", "[[:upper:]]", "[[:lower:]]", "[[:space:]]", "[[:punct:]]",
    "[[:xdigit:]]{2}", "[[:blank:]]", "[[:print:]]", "[[:graph:]]", "[[:cntrl:]]",
    "[^[:alpha:]]", "[[.a.]]", "[[.-.]]", "[[.].]]", "[[=a=]b]", "[[.a.]-c]", "[a-a]",
    "\\.", "a\\.b", "\\*", "\\(", "\\)", "\\{", "\\}", "\\[", "\\]", "\\|", "\\^", "\\$",
    "\\\\", "\\n", "\\x", "\\w", "\\W", "\\s", "\\S", "\\w+", "\\bab", "ab\\b", "\\Bb",
    "\\<ab", "ab\\>", "\\`a", "a\\'", "a)", ")", "a{1}{2}", "(a*)*", "(a*)+", "(a|b)*abb",
    "(a+|b+)*c", "((a|b)*)*x", "user:[0-9]+", "^user:[0-9]{3,5}$", "^(key|val)_[a-f0-9]+",
    "[A-Z][a-z]+", "(.*)(.*)(.*)x", ".*.*.*=.*", "^[^:]*:[^:]*$", "a.{3}b", "A", "aBc",
    /* refused by both */
    "*a", "^*", "a|*b", "(*a)", "{1}a", "a{", "a{x}", "a{1", "a{1,2", "a{2,1}", "(a", "$*",
    "a^*", "x{", "\\", "[", "[]", "[z-a]", "[[:foo:]]", "[[.ab.]]", "[a-[:digit:]]",
    "[[:digit:]-z]", "[[:alpha:]", "[[:alpha]", "[a", "{", "a|{", "(+)", "^+", "a$+",
    "[[.space.]]", "[[=ab=]]", "a{32768}",
};

static const char *keys[] = {
    "", "a", "b", "c", "ab", "abc", "aabc", "abcc", "xabcx", "ABC", "aBc", "AbC", "aa", "aaa",
    "aaaa", "abab", "ababab", "abbb", "ac", "abbc", "xy", "xay", "xbcy", "xaby", "ababb",
    "a.b", "a.c", "axc", "*", "(", ")", "{", "}", "[", "]", "|", "^", "$", "\\", "n", "x",
    "-", "/", ".", "%", "a b", " ", "\t", "\n", "a\nb", "_", "9", "09af", "0x1F", "Hello",
    "hello world", "user:123", "user:12345", "user:1", "key_abc", "val_0f", "KEY_abc",
    "a=b", "foo:bar", "foo:bar:baz", "aXYZb", "abcde", "abcdd", "ccc", "aaaaaaaaaaaaaaab",
    "\x7f", "\x80", "\xff", "Zed", "x y z", "ab-cd", "ab_cd", "cab",
};

#define NPAT (sizeof patterns / sizeof patterns[0])
#define NKEY (sizeof keys / sizeof keys[0])

/* Compares the two on one pattern: 0 agreed, 1 not (reported). */
static int compare(const char *pat, unsigned flags, const char **ks, size_t nk)
{
    regex_t lre;
    int lrc = regcomp(&lre, pat, REG_EXTENDED | REG_NOSUB | (flags & ERE_ICASE ? REG_ICASE : 0));
    ere *re;
    const char *why;
    int rc = ere_compile(&re, pat, strlen(pat), flags, &why);
    int bad = 0;
    if (rc == ERE_EBACKREF && lrc == 0) {
        /* refused on purpose (test_refused) */
    } else if ((lrc == 0) != (rc == ERE_OK)) {
        printf("# /%s/ flags %u: libc %s, ere %s (%s)\n", pat, flags,
               lrc ? "refuses" : "accepts", rc ? "refuses" : "accepts", why ? why : "");
        bad = 1;
    } else if (rc == ERE_OK) {
        for (size_t k = 0; k < nk && !bad; k++) {
            int lm = regexec(&lre, ks[k], 0, NULL, 0) == 0;
            int m = ere_match(re, ks[k], strlen(ks[k]), 0, NULL) == ERE_OK;
            if (lm != m) {
                printf("# /%s/ flags %u on \"%s\": libc %d, ere %d\n", pat, flags, ks[k], lm, m);
                bad = 1;
            }
        }
    }
    if (lrc == 0)
        regfree(&lre);
    ere_free(re);
    return bad;
}

static void test_corpus(void)
{
    for (size_t i = 0; i < NPAT; i++) {
        CHECK(compare(patterns[i], 0, keys, NKEY) == 0);
        CHECK(compare(patterns[i], ERE_ICASE, keys, NKEY) == 0);
    }
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static unsigned next_rand(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* Random patterns over the metacharacters (no backslash-digit: refused
 * on purpose) and random keys over a small alphabet, so that they meet. */
static void test_random(void)
{
    static const char *pieces[] = {
        "a", "b", "c", "A", ".", "*", "+", "?", "|", "(", ")", "^", "$", "[", "]", "-",
        "{1}", "{0,2}", "{2,}", "{,1}", "{", "}", ",", "\\", "\\w", "\\b", "\\<", "\\>",
        "\\.", "[:alpha:]", "[:digit:]", "^", "1", " ", "[ab]", "[^a]", "(a|b)", "x",
    };
    static const char alpha[] = "abcAB1 .x_-";
    char ksbuf[64][12];
    const char *ks[64];
    for (int k = 0; k < 64; k++) {
        int len = (int)next_rand(10);
        for (int j = 0; j < len; j++)
            ksbuf[k][j] = alpha[next_rand(sizeof alpha - 1)];
        ksbuf[k][len] = '\0';
        ks[k] = ksbuf[k];
    }
    int disagreed = 0, accepted = 0;
    for (int i = 0; i < 20000 && disagreed < 20; i++) {
        char pat[128] = "";
        int np = 1 + (int)next_rand(8);
        for (int j = 0; j < np; j++) {
            const char *pc = pieces[next_rand(sizeof pieces / sizeof pieces[0])];
            if (strlen(pat) + strlen(pc) < sizeof pat)
                strcat(pat, pc);
        }
        disagreed += compare(pat, i & 1 ? ERE_ICASE : 0, ks, 64);
        regex_t lre;
        if (regcomp(&lre, pat, REG_EXTENDED | REG_NOSUB) == 0) {
            accepted++;
            regfree(&lre);
        }
    }
    CHECK(disagreed == 0);
    CHECK(accepted > 2000);             /* the corpus did try patterns that compile */
}

static int refused(const char *pat)
{
    ere *re;
    const char *why = NULL;
    int rc = ere_compile(&re, pat, strlen(pat), 0, &why);
    CHECK(re == NULL);
    CHECK(why != NULL);
    return rc;
}

static void test_refused(void)
{
    regex_t lre;
    const char *backref = "(.*)(.*)(.*)(.*)(.*)\\5\\4\\3\\2\\1x";
    CHECK(regcomp(&lre, backref, REG_EXTENDED | REG_NOSUB) == 0);   /* libc takes it */
    regfree(&lre);
    CHECK(refused(backref) == ERE_EBACKREF);
    CHECK(refused("(a)\\1") == ERE_EBACKREF);
    CHECK(refused("a{256}") == ERE_ETOOBIG);
    CHECK(refused("(a{255}){255}") == ERE_ETOOBIG);
    CHECK(refused("((((a{100}){100}){100}){100}){100}") == ERE_ETOOBIG);
    char deep[1000];
    memset(deep, '(', 500);
    memset(deep + 500, ')', 499);
    deep[999] = '\0';
    CHECK(refused(deep) == ERE_ETOOBIG);
    CHECK(refused("a(") == ERE_ESYNTAX);
    CHECK(strcmp(ere_strerror(ERE_EBACKREF), "back-references are refused") == 0);
}

/* The worst shapes for a backtracking matcher stay within the bound. */
static void test_bound(void)
{
    const char *pats[] = { "(a*)*b", "(a|aa)*c", "(.*)(.*)(.*)(.*)(.*)x",
                           "((a|b)*(a|b)*)*(a|b){20}z", "(((a*)*)*)*$b" };
    char key[251];
    memset(key, 'a', 250);
    key[250] = '\0';
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
        ere *re;
        REQUIRE(ere_compile(&re, pats[i], strlen(pats[i]), 0, NULL) == ERE_OK);
        uint64_t steps = 0;
        CHECK(ere_match(re, key, 250, 0, &steps) == ERE_NOMATCH);
        CHECK(steps <= 251 * 2 * (uint64_t)ere_size(re));
        steps = 0;
        CHECK(ere_match(re, key, 250, 100, &steps) == ERE_EBUDGET);
        CHECK(steps > 100 && steps <= 100 + 2 * (uint64_t)ere_size(re));
        ere_free(re);
    }
    /* the largest program a pattern may make, over the longest key */
    ere *re;
    const char *big = "(.?.?.?.?.?.?.?){250}z";
    REQUIRE(ere_compile(&re, big, strlen(big), 0, NULL) == ERE_OK);
    CHECK(ere_size(re) > ERE_PROG_MAX / 2 && ere_size(re) <= ERE_PROG_MAX);
    uint64_t steps = 0;
    CHECK(ere_match(re, key, 250, 0, &steps) == ERE_NOMATCH);
    CHECK(steps <= 251 * 2 * (uint64_t)ERE_PROG_MAX);
    ere_free(re);
    /* bytes, NUL included, are matched as bytes */
    REQUIRE(ere_compile(&re, "b$", 2, 0, NULL) == ERE_OK);
    CHECK(ere_match(re, "a\0b", 3, 0, NULL) == ERE_OK);
    ere_free(re);
}

int main(void)
{
    RUN(test_corpus);
    RUN(test_random);
    RUN(test_refused);
    RUN(test_bound);
    UNIT_DONE();
}

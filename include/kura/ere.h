/*
 * ere.h - kura's own matcher of POSIX extended regular expressions, for
 * the listings that filter keys by a client's pattern (Tokyo Tyrant's
 * `misc regex`; Kyoto Tycoon's match_regex later).
 *
 * A client's pattern is hostile input: libc's regexec backtracks, and a
 * pattern with back-references holds it for seconds to hours on one key.
 * This matcher compiles a pattern into a small program and runs it as a
 * Thompson NFA (a set of states advanced one byte at a time, no
 * backtracking), so one match costs at most (len + 1) * 2 * program size
 * steps, and the program's size is bounded (ERE_PROG_MAX): the work a
 * pattern can ask for is linear in the key and bounded per key, whatever
 * the pattern.  The caller passes a step budget too, and counts the steps
 * a match took, so that a listing can yield after a budget of work rather
 * than a number of keys.
 *
 * What it accepts is what glibc's regcomp(REG_EXTENDED) accepts in the C
 * locale (bytes, not characters): literals, `.`, bracket expressions
 * ([abc], [^a-z], [[:alpha:]] and the other classes, [=c=], [.c.]), `^`
 * and `$` (anchors anywhere, as in ERE), groups, `|`, `*`, `+`, `?`,
 * `{m}`, `{m,}`, `{m,n}` and `{,n}` (m, n <= 255), escapes (`\X` is X;
 * glibc's `\w \W \s \S \b \B \< \> \` \'` too), and ERE_ICASE
 * (REG_ICASE).  It answers only whether the pattern matches somewhere in
 * the bytes (REG_NOSUB): there are no captures.  It refuses, with its
 * own code: back-references (`\1` .. `\9`: not ERE, and what makes
 * matching exponential), a program past ERE_PROG_MAX instructions (large
 * counts of large groups), and every syntax error glibc refuses.
 */
#ifndef KURA_ERE_H
#define KURA_ERE_H

#include <stddef.h>
#include <stdint.h>

#define ERE_ICASE 1u                    /* case-insensitive, as REG_ICASE */

/* The largest program (instructions) a pattern may compile to. */
#define ERE_PROG_MAX 4096
/* The largest count of a bound ({m,n}), as glibc's RE_DUP_MAX is for
 * ttserver's patterns in practice (a larger one would pass
 * ERE_PROG_MAX anyway unless it counts an empty group). */
#define ERE_DUP_MAX 255

enum ere_status {
    ERE_OK = 0,
    ERE_NOMATCH = 1,                    /* ere_match: no match */
    ERE_ESYNTAX = -1,                   /* not a pattern (what glibc refuses too) */
    ERE_EBACKREF = -2,                  /* a back-reference: refused */
    ERE_ETOOBIG = -3,                   /* the program would pass ERE_PROG_MAX */
    ERE_ENOMEM = -4,
    ERE_EBUDGET = -5,                   /* ere_match: the step budget ran out */
};

typedef struct ere ere;

/* Compiles pat[0..plen) (any bytes; a NUL is a literal NUL) into *out.
 * Returns ERE_OK or a negative ere_status; on failure *out is NULL and,
 * if why is not NULL, *why a static sentence saying what is wrong
 * (syntax errors name the position).  Cost: O(plen + program). */
int ere_compile(ere **out, const char *pat, size_t plen, unsigned flags, const char **why);

/* Whether re matches somewhere in s[0..n): ERE_OK (it does),
 * ERE_NOMATCH, or ERE_EBUDGET when more than max_steps steps would be
 * needed (0: no budget).  *steps (if not NULL) gets the steps taken
 * added to it.  Cost: at most (n + 1) * 2 * program size steps; no
 * allocation.  Not reentrant on one re (it keeps its scratch lists):
 * one thread matches with a compiled pattern at a time. */
int ere_match(ere *re, const char *s, size_t n, uint64_t max_steps, uint64_t *steps);

/* The instructions re compiled to (for tests and budgets). */
size_t ere_size(const ere *re);

void ere_free(ere *re);

/* A name for a status. */
const char *ere_strerror(int rc);

#endif

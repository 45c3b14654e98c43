/*
 * ere.c - kura's matcher of POSIX extended regular expressions (ere.h
 * says what it accepts and why it exists).
 *
 * Three stages.  The parser reads the pattern into a tree of nodes (a
 * byte set, an assertion, a concatenation or alternation of children, a
 * repetition {min,max}), refusing what glibc's regcomp(REG_EXTENDED)
 * refuses and back-references.  The code generator lays the tree out as a
 * Thompson program: SET (consume a byte of a 256-bit set), ASSERT (^, $,
 * word boundaries), SPLIT, JMP, MATCH; a count {m,n} is its body m times
 * then n - m optional copies, so the program's size is checked as it is
 * emitted (ERE_PROG_MAX) and a huge count fails early.  The matcher runs
 * the program over the bytes as a set of states (each instruction at most
 * once per position, marked by a generation number), starting a new
 * thread at every position (a match anywhere), so its cost is at most
 * (n + 1) * 2 * program size steps with no backtracking and no
 * allocation.  ICASE closes every set under case (a negated bracket is
 * closed before it is negated, as glibc translates both sides).
 *
 * Nesting (groups and repetitions of repetitions) is bounded
 * (ERE_DEPTH_MAX) so that the recursive parser and generator use bounded
 * stack.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kura/ere.h"

#define ERE_DEPTH_MAX 200               /* groups in groups; repetitions of one atom */
#define ERE_GEN_DEPTH_MAX 1000          /* the tree as a whole */

enum { N_SET, N_ASSERT, N_CAT, N_ALT, N_REP, N_EMPTY };
enum { A_BOL, A_EOL, A_WORDB, A_NWORDB, A_WBEG, A_WEND };
enum { I_SET, I_ASSERT, I_SPLIT, I_JMP, I_MATCH };

typedef struct node {
    uint8_t op;
    uint8_t as;                         /* N_ASSERT: A_* */
    int kid, next;                      /* CAT, ALT, REP: first child; siblings; -1 ends */
    int set;                            /* N_SET */
    int min, max;                       /* N_REP; max -1: unbounded */
} node;

typedef struct inst {
    uint8_t op, as;
    int x, y;                           /* SET: set; SPLIT: both; JMP: x */
} inst;

typedef uint8_t bset[32];

struct ere {
    inst *prog;
    size_t n;
    bset *sets;
    int *clist, *nlist, *stack;
    uint32_t *mark;
    uint32_t gen;
};

typedef struct parser {
    const unsigned char *p;
    size_t n, i;
    unsigned flags;
    node *nodes;
    size_t nn, nalloc;
    bset *sets;
    size_t ns, salloc;
    int err;
    const char *why;
} parser;

static int fail(parser *ps, int err, const char *why)
{
    if (!ps->err) {
        ps->err = err;
        ps->why = why;
    }
    return -1;
}

/* Room for one more element of *v (n used, *alloc held, each size
 * bytes): 0 or -1 (ps failed). */
static int grow(parser *ps, void **v, size_t n, size_t *alloc, size_t size)
{
    if (n < *alloc)
        return 0;
    size_t na = *alloc ? *alloc * 2 : 32;
    void *nv = realloc(*v, na * size);
    if (!nv)
        return fail(ps, ERE_ENOMEM, "out of memory");
    *v = nv;
    *alloc = na;
    return 0;
}

static int new_node(parser *ps, int op)
{
    if (grow(ps, (void **)&ps->nodes, ps->nn, &ps->nalloc, sizeof *ps->nodes) < 0)
        return -1;
    node *nd = &ps->nodes[ps->nn];
    memset(nd, 0, sizeof *nd);
    nd->op = (uint8_t)op;
    nd->kid = nd->next = -1;
    return (int)ps->nn++;
}

static int new_set(parser *ps)
{
    if (grow(ps, (void **)&ps->sets, ps->ns, &ps->salloc, sizeof *ps->sets) < 0)
        return -1;
    memset(ps->sets[ps->ns], 0, sizeof(bset));
    return (int)ps->ns++;
}

static void set_add(uint8_t *s, unsigned c) { s[c >> 3] |= (uint8_t)(1u << (c & 7)); }
static bool set_has(const uint8_t *s, unsigned c) { return s[c >> 3] >> (c & 7) & 1; }

/* Under ICASE glibc upper-cases the pattern (but an escaped byte and a
 * class name) and every byte of the input before it compares: a byte c
 * matches when toupper(c) is in the set the pattern built. */
static void set_fold(uint8_t *s)
{
    bset t;
    memcpy(t, s, sizeof t);
    memset(s, 0, sizeof t);
    for (unsigned c = 0; c < 256; c++)
        if (set_has(t, (unsigned)toupper((int)c)))
            set_add(s, c);
}

static unsigned fold_char(const parser *ps, unsigned c)
{
    return ps->flags & ERE_ICASE ? (unsigned)toupper((int)c) : c;
}

static bool is_word(unsigned c) { return isalnum((int)c) || c == '_'; }

/* A node matching one byte of the set built by fill (c, or a class). */
static int set_node(parser *ps, int (*fill)(unsigned c, unsigned arg), unsigned arg, bool neg)
{
    int s = new_set(ps);
    if (s < 0)
        return -1;
    for (unsigned c = 0; c < 256; c++)
        if (fill(c, arg))
            set_add(ps->sets[s], c);
    if (ps->flags & ERE_ICASE)
        set_fold(ps->sets[s]);
    if (neg)
        for (unsigned k = 0; k < 32; k++)
            ps->sets[s][k] = (uint8_t)~ps->sets[s][k];
    int nd = new_node(ps, N_SET);
    if (nd >= 0)
        ps->nodes[nd].set = s;
    return nd;
}

static int fill_char(unsigned c, unsigned arg) { return c == arg; }
static int fill_any(unsigned c, unsigned arg) { (void)arg; return c != 0; }
static int fill_word(unsigned c, unsigned arg) { (void)arg; return is_word(c); }
static int fill_space(unsigned c, unsigned arg) { (void)arg; return isspace((int)c); }

static int assert_node(parser *ps, int as)
{
    int nd = new_node(ps, N_ASSERT);
    if (nd >= 0)
        ps->nodes[nd].as = (uint8_t)as;
    return nd;
}

/* ---- bracket expressions ------------------------------------------------ */

static const struct { const char *name; int (*fn)(int); } classes[] = {
    { "alpha", isalpha }, { "upper", isupper }, { "lower", islower }, { "digit", isdigit },
    { "xdigit", isxdigit }, { "space", isspace }, { "print", isprint }, { "punct", ispunct },
    { "graph", isgraph }, { "cntrl", iscntrl }, { "blank", isblank }, { "alnum", isalnum },
};

/* Reads "[:name:]", "[=c=]" or "[.c.]" at ps->i (just past the '[' and
 * the delimiter); *c the byte (-1: a class, added to s).  0 or -1. */
static int bracket_symbol(parser *ps, unsigned char delim, uint8_t *s, int *c)
{
    size_t start = ps->i;
    for (;;) {
        if (ps->i - start >= 32 || ps->i + 1 >= ps->n)
            return fail(ps, ERE_ESYNTAX, "unmatched [");
        if (ps->p[ps->i] == delim && ps->p[ps->i + 1] == ']')
            break;
        ps->i++;
    }
    size_t len = ps->i - start;
    const char *name = (const char *)ps->p + start;
    ps->i += 2;
    if (delim != ':') {
        if (len != 1)
            return fail(ps, ERE_ESYNTAX, "invalid collating element");
        *c = (int)fold_char(ps, (unsigned char)name[0]);
        return 0;
    }
    for (size_t k = 0; k < sizeof classes / sizeof classes[0]; k++) {
        if (strlen(classes[k].name) != len || memcmp(classes[k].name, name, len) != 0)
            continue;
        int (*fn)(int) = classes[k].fn;
        if ((ps->flags & ERE_ICASE) && (fn == isupper || fn == islower))
            fn = isalpha;               /* glibc's rule under REG_ICASE */
        for (unsigned ch = 0; ch < 256; ch++)
            if (fn((int)ch))
                set_add(s, ch);
        *c = -1;
        return 0;
    }
    return fail(ps, ERE_ESYNTAX, "invalid character class name");
}

/* One end of a range or a lone element: *c the byte, or -1 for a class
 * (added to s). */
static int bracket_elem(parser *ps, uint8_t *s, int *c)
{
    if (ps->i >= ps->n)
        return fail(ps, ERE_ESYNTAX, "unmatched [");
    unsigned char ch = ps->p[ps->i];
    if (ch == '[' && ps->i + 1 < ps->n &&
        (ps->p[ps->i + 1] == ':' || ps->p[ps->i + 1] == '=' || ps->p[ps->i + 1] == '.')) {
        unsigned char delim = ps->p[ps->i + 1];
        ps->i += 2;
        return bracket_symbol(ps, delim, s, c);
    }
    ps->i++;
    *c = (int)fold_char(ps, ch);
    return 0;
}

/* At ps->i just past '['. */
static int parse_bracket(parser *ps)
{
    bset s;
    memset(s, 0, sizeof s);
    bool neg = false, first = true;
    if (ps->i < ps->n && ps->p[ps->i] == '^') {
        neg = true;
        ps->i++;
    }
    for (;;) {
        if (ps->i >= ps->n)
            return fail(ps, ERE_ESYNTAX, "unmatched [");
        if (ps->p[ps->i] == ']' && !first) {
            ps->i++;
            break;
        }
        first = false;
        int lo;
        if (bracket_elem(ps, s, &lo) < 0)
            return -1;
        /* a range: lo '-' hi, unless the '-' ends the bracket */
        if (ps->i + 1 < ps->n && ps->p[ps->i] == '-' && ps->p[ps->i + 1] != ']') {
            ps->i++;
            int hi;
            if (bracket_elem(ps, s, &hi) < 0)
                return -1;
            if (lo < 0 || hi < 0 || hi < lo)
                return fail(ps, ERE_ESYNTAX, "invalid range end");
            for (int ch = lo; ch <= hi; ch++)
                set_add(s, (unsigned)ch);
        } else if (lo >= 0) {
            set_add(s, (unsigned)lo);
        }
    }
    int id = new_set(ps);
    if (id < 0)
        return -1;
    memcpy(ps->sets[id], s, sizeof s);
    if (ps->flags & ERE_ICASE)
        set_fold(ps->sets[id]);
    if (neg) {
        for (unsigned k = 0; k < 32; k++)
            ps->sets[id][k] = (uint8_t)~ps->sets[id][k];
        ps->sets[id][0] &= (uint8_t)~1u;        /* never NUL (glibc's strings end there) */
    }
    int nd = new_node(ps, N_SET);
    if (nd >= 0)
        ps->nodes[nd].set = id;
    return nd;
}

/* ---- the grammar ------------------------------------------------------- */

static int parse_alt(parser *ps, int depth);

static bool at_quant(const parser *ps)
{
    if (ps->i >= ps->n)
        return false;
    unsigned char c = ps->p[ps->i];
    return c == '*' || c == '+' || c == '?' || c == '{';
}

/* A number of a bound: -1 when there is none. */
static int bound_num(parser *ps)
{
    int v = -1;
    while (ps->i < ps->n && isdigit(ps->p[ps->i])) {
        v = (v < 0 ? 0 : v) * 10 + (ps->p[ps->i] - '0');
        if (v > 0x7fff)
            v = 0x8000;                 /* too big, whatever follows */
        ps->i++;
    }
    return v;
}

/* At a quantifier: *min, *max (-1 unbounded).  0 or -1. */
static int parse_quant(parser *ps, int *min, int *max)
{
    unsigned char c = ps->p[ps->i++];
    if (c != '{') {
        *min = c == '+' ? 1 : 0;
        *max = c == '?' ? 1 : -1;
        return 0;
    }
    int lo = bound_num(ps), hi;
    if (ps->i >= ps->n)
        return fail(ps, ERE_ESYNTAX, "unmatched {");
    if (ps->p[ps->i] == ',') {
        ps->i++;
        hi = bound_num(ps);
        if (hi < 0)
            hi = -1;
    } else {
        if (lo < 0)
            return fail(ps, ERE_ESYNTAX, "invalid content of {}");
        hi = lo;
    }
    if (ps->i >= ps->n)
        return fail(ps, ERE_ESYNTAX, "unmatched {");
    if (ps->p[ps->i] != '}')
        return fail(ps, ERE_ESYNTAX, "invalid content of {}");
    ps->i++;
    if (lo < 0)
        lo = 0;
    if (hi >= 0 && hi < lo)
        return fail(ps, ERE_ESYNTAX, "invalid content of {}");
    if (lo > 0x7fff || hi > 0x7fff)
        return fail(ps, ERE_ESYNTAX, "a count past 32767");
    if (lo > ERE_DUP_MAX || hi > ERE_DUP_MAX)
        return fail(ps, ERE_ETOOBIG, "a count past 255");
    *min = lo;
    *max = hi;
    return 0;
}

/* One atom; *quantifiable false for the assertions. */
static int parse_atom(parser *ps, int depth, bool *quantifiable)
{
    unsigned char c = ps->p[ps->i++];
    *quantifiable = true;
    switch (c) {
    case '(': {
        int inner;
        if (ps->i < ps->n && ps->p[ps->i] == ')')
            inner = new_node(ps, N_EMPTY);
        else
            inner = parse_alt(ps, depth + 1);
        if (inner < 0)
            return -1;
        if (ps->i >= ps->n || ps->p[ps->i] != ')')
            return fail(ps, ERE_ESYNTAX, "unmatched (");
        ps->i++;
        return inner;
    }
    case '*': case '+': case '?': case '{':
        return fail(ps, ERE_ESYNTAX, "a repetition of nothing");
    case '.':
        return set_node(ps, fill_any, 0, false);
    case '[':
        return parse_bracket(ps);
    case '^':
        *quantifiable = false;
        return assert_node(ps, A_BOL);
    case '$':
        *quantifiable = false;
        return assert_node(ps, A_EOL);
    case '\\':
        break;
    default:
        return set_node(ps, fill_char, fold_char(ps, c), false);
    }
    if (ps->i >= ps->n)
        return fail(ps, ERE_ESYNTAX, "trailing backslash");
    c = ps->p[ps->i++];
    if (c >= '1' && c <= '9')
        return fail(ps, ERE_EBACKREF, "back-references (\\1 to \\9) are not ERE: refused");
    *quantifiable = false;
    switch (c) {
    case 'b': return assert_node(ps, A_WORDB);
    case 'B': return assert_node(ps, A_NWORDB);
    case '<': return assert_node(ps, A_WBEG);
    case '>': return assert_node(ps, A_WEND);
    case '`': return assert_node(ps, A_BOL);
    case '\'': return assert_node(ps, A_EOL);
    default: break;
    }
    *quantifiable = true;
    switch (c) {
    case 'w': return set_node(ps, fill_word, 0, false);
    case 'W': return set_node(ps, fill_word, 0, true);
    case 's': return set_node(ps, fill_space, 0, false);
    case 'S': return set_node(ps, fill_space, 0, true);
    default: return set_node(ps, fill_char, c, false);    /* as it is, even under ICASE */
    }
}

/* A concatenation, up to '|', a closing ')' of a group, or the end. */
static int parse_cat(parser *ps, int depth)
{
    int cat = new_node(ps, N_CAT), last = -1;
    if (cat < 0)
        return -1;
    while (ps->i < ps->n && ps->p[ps->i] != '|' && !(ps->p[ps->i] == ')' && depth > 0)) {
        bool quantifiable;
        int a = parse_atom(ps, depth, &quantifiable);
        if (a < 0)
            return -1;
        for (int reps = 0; at_quant(ps); reps++) {
            if (!quantifiable)
                return fail(ps, ERE_ESYNTAX, "a repetition of nothing");
            if (depth + reps >= ERE_DEPTH_MAX)
                return fail(ps, ERE_ETOOBIG, "nested too deep");
            int min, max;
            if (parse_quant(ps, &min, &max) < 0)
                return -1;
            int r = new_node(ps, N_REP);
            if (r < 0)
                return -1;
            ps->nodes[r].kid = a;
            ps->nodes[r].min = min;
            ps->nodes[r].max = max;
            a = r;
        }
        if (last < 0)
            ps->nodes[cat].kid = a;
        else
            ps->nodes[last].next = a;
        last = a;
    }
    return cat;
}

static int parse_alt(parser *ps, int depth)
{
    if (depth >= ERE_DEPTH_MAX)
        return fail(ps, ERE_ETOOBIG, "nested too deep");
    int first = parse_cat(ps, depth);
    if (first < 0 || ps->i >= ps->n || ps->p[ps->i] != '|')
        return first;
    int alt = new_node(ps, N_ALT), last = first;
    if (alt < 0)
        return -1;
    ps->nodes[alt].kid = first;
    while (ps->i < ps->n && ps->p[ps->i] == '|') {
        ps->i++;
        int b = parse_cat(ps, depth);
        if (b < 0)
            return -1;
        ps->nodes[last].next = b;
        last = b;
    }
    return alt;
}

/* ---- code generation --------------------------------------------------- */

typedef struct gen {
    parser *ps;
    inst *prog;
    size_t n;
} gen;

static int emit(gen *g, int op, int x, int y)
{
    if (g->n >= ERE_PROG_MAX)
        return fail(g->ps, ERE_ETOOBIG, "the pattern compiles past 4096 instructions");
    g->prog[g->n] = (inst){ .op = (uint8_t)op, .x = x, .y = y };
    return (int)g->n++;
}

static int gen_node(gen *g, int id, int depth)
{
    if (g->ps->err)
        return -1;
    if (depth > ERE_GEN_DEPTH_MAX)
        return fail(g->ps, ERE_ETOOBIG, "nested too deep");
    const node *nd = &g->ps->nodes[id];
    switch (nd->op) {
    case N_EMPTY:
        return 0;
    case N_SET:
        return emit(g, I_SET, nd->set, 0) < 0 ? -1 : 0;
    case N_ASSERT: {
        int pc = emit(g, I_ASSERT, 0, 0);
        if (pc < 0)
            return -1;
        g->prog[pc].as = nd->as;
        return 0;
    }
    case N_CAT:
        for (int k = nd->kid; k >= 0; k = g->ps->nodes[k].next)
            if (gen_node(g, k, depth + 1) < 0)
                return -1;
        return 0;
    case N_ALT: {
        int jumps = -1;                 /* a chain of JMPs to patch, through x */
        for (int k = nd->kid; k >= 0; k = g->ps->nodes[k].next) {
            if (g->ps->nodes[k].next < 0) {
                if (gen_node(g, k, depth + 1) < 0)
                    return -1;
                break;
            }
            int sp = emit(g, I_SPLIT, 0, 0);
            if (sp < 0)
                return -1;
            g->prog[sp].x = sp + 1;
            if (gen_node(g, k, depth + 1) < 0)
                return -1;
            int j = emit(g, I_JMP, jumps, 0);
            if (j < 0)
                return -1;
            jumps = j;
            g->prog[sp].y = (int)g->n;
        }
        while (jumps >= 0) {
            int nx = g->prog[jumps].x;
            g->prog[jumps].x = (int)g->n;
            jumps = nx;
        }
        return 0;
    }
    case N_REP:
        break;
    }
    int min = nd->min, max = nd->max, kid = nd->kid;
    int copies = max < 0 && min > 0 ? min - 1 : min;
    for (int k = 0; k < copies; k++)
        if (gen_node(g, kid, depth + 1) < 0)
            return -1;
    if (max < 0 && min > 0) {           /* the last copy loops: x+ */
        int top = (int)g->n;
        if (gen_node(g, kid, depth + 1) < 0)
            return -1;
        int sp = emit(g, I_SPLIT, top, 0);
        if (sp < 0)
            return -1;
        g->prog[sp].y = sp + 1;
        return 0;
    }
    if (max < 0) {                      /* x* */
        int sp = emit(g, I_SPLIT, 0, 0);
        if (sp < 0)
            return -1;
        g->prog[sp].x = sp + 1;
        if (gen_node(g, kid, depth + 1) < 0 || emit(g, I_JMP, sp, 0) < 0)
            return -1;
        g->prog[sp].y = (int)g->n;
        return 0;
    }
    int splits = -1;                    /* optional copies: a chain through y */
    for (int k = min; k < max; k++) {
        int sp = emit(g, I_SPLIT, 0, splits);
        if (sp < 0)
            return -1;
        g->prog[sp].x = sp + 1;
        splits = sp;
        if (gen_node(g, kid, depth + 1) < 0)
            return -1;
    }
    while (splits >= 0) {
        int nx = g->prog[splits].y;
        g->prog[splits].y = (int)g->n;
        splits = nx;
    }
    return 0;
}

/* ---- the interface ----------------------------------------------------- */

void ere_free(ere *re)
{
    if (!re)
        return;
    free(re->prog);
    free(re->sets);
    free(re->clist);
    free(re->nlist);
    free(re->stack);
    free(re->mark);
    free(re);
}

int ere_compile(ere **out, const char *pat, size_t plen, unsigned flags, const char **why)
{
    parser ps = { .p = (const unsigned char *)pat, .n = plen, .flags = flags };
    gen g = { .ps = &ps };
    ere *re = NULL;
    *out = NULL;
    int root = parse_alt(&ps, 0);
    if (root >= 0 && ps.i < ps.n)
        fail(&ps, ERE_ESYNTAX, "unmatched )");  /* not reached: ')' at depth 0 is literal */
    if (ps.err)
        goto done;
    g.prog = malloc(ERE_PROG_MAX * sizeof *g.prog);
    if (!g.prog) {
        fail(&ps, ERE_ENOMEM, "out of memory");
        goto done;
    }
    if (gen_node(&g, root, 0) < 0 || emit(&g, I_MATCH, 0, 0) < 0)
        goto done;
    re = calloc(1, sizeof *re);
    if (!re) {
        fail(&ps, ERE_ENOMEM, "out of memory");
        goto done;
    }
    re->n = g.n;
    re->prog = realloc(g.prog, g.n * sizeof *g.prog);
    if (re->prog)
        g.prog = NULL;
    re->sets = ps.sets;
    ps.sets = NULL;
    re->clist = malloc(g.n * sizeof *re->clist);
    re->nlist = malloc(g.n * sizeof *re->nlist);
    re->stack = malloc((2 * g.n + 2) * sizeof *re->stack);
    re->mark = calloc(g.n, sizeof *re->mark);
    if (!re->prog || !re->clist || !re->nlist || !re->stack || !re->mark) {
        fail(&ps, ERE_ENOMEM, "out of memory");
        ere_free(re);
        re = NULL;
    }
done:
    free(g.prog);
    free(ps.nodes);
    free(ps.sets);
    if (why)
        *why = ps.err ? ps.why : NULL;
    *out = re;
    return ps.err;
}

size_t ere_size(const ere *re)
{
    return re->n;
}

typedef struct run {
    ere *re;
    const unsigned char *s;
    size_t n;
    uint64_t steps;
    bool matched;
} run;

static bool assert_ok(const run *r, int as, size_t p)
{
    bool wprev = p > 0 && is_word(r->s[p - 1]);
    bool wnext = p < r->n && is_word(r->s[p]);
    switch (as) {
    case A_BOL: return p == 0;
    case A_EOL: return p == r->n;
    case A_WORDB: return wprev != wnext;
    case A_NWORDB: return wprev == wnext;
    case A_WBEG: return !wprev && wnext;
    default: return wprev && !wnext;
    }
}

/* Adds pc's closure at position p to list (*len), in generation re->gen. */
static void add_thread(run *r, int *list, size_t *len, int pc, size_t p)
{
    ere *re = r->re;
    size_t sp = 0;
    re->stack[sp++] = pc;
    while (sp > 0) {
        pc = re->stack[--sp];
        if (re->mark[pc] == re->gen)
            continue;
        re->mark[pc] = re->gen;
        r->steps++;
        const inst *in = &re->prog[pc];
        switch (in->op) {
        case I_SET:
            list[(*len)++] = pc;
            break;
        case I_MATCH:
            r->matched = true;
            break;
        case I_JMP:
            re->stack[sp++] = in->x;
            break;
        case I_SPLIT:
            re->stack[sp++] = in->y;
            re->stack[sp++] = in->x;
            break;
        default:
            if (assert_ok(r, in->as, p))
                re->stack[sp++] = pc + 1;
            break;
        }
    }
}

static void next_gen(ere *re)
{
    if (++re->gen == 0) {
        memset(re->mark, 0, re->n * sizeof *re->mark);
        re->gen = 1;
    }
}

int ere_match(ere *re, const char *s, size_t n, uint64_t max_steps, uint64_t *steps)
{
    run r = { .re = re, .s = (const unsigned char *)s, .n = n };
    int *clist = re->clist, *nlist = re->nlist;
    size_t clen = 0;
    int rc = ERE_NOMATCH;
    next_gen(re);
    add_thread(&r, clist, &clen, 0, 0);
    for (size_t p = 0; !r.matched; p++) {
        if (max_steps && r.steps > max_steps) {
            rc = ERE_EBUDGET;
            break;
        }
        if (p == n)
            break;
        unsigned c = r.s[p];
        size_t nlen = 0;
        next_gen(re);
        for (size_t k = 0; k < clen; k++) {
            int pc = clist[k];
            r.steps++;
            if (set_has(re->sets[re->prog[pc].x], c))
                add_thread(&r, nlist, &nlen, pc + 1, p + 1);
        }
        add_thread(&r, nlist, &nlen, 0, p + 1);
        int *t = clist;
        clist = nlist;
        nlist = t;
        clen = nlen;
    }
    if (r.matched)
        rc = ERE_OK;
    if (steps)
        *steps += r.steps;
    return rc;
}

const char *ere_strerror(int rc)
{
    switch (rc) {
    case ERE_OK: return "match";
    case ERE_NOMATCH: return "no match";
    case ERE_ESYNTAX: return "not a regular expression";
    case ERE_EBACKREF: return "back-references are refused";
    case ERE_ETOOBIG: return "pattern too large";
    case ERE_ENOMEM: return "out of memory";
    case ERE_EBUDGET: return "step budget exhausted";
    default: return "unknown";
    }
}

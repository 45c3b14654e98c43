/*
 * auth.c - memcached's ASCII authentication (-Y FILE): the password file
 * and the gate every connection passes before any command.
 *
 * The file holds lines "user:password" (the password ends at the line's
 * end; a CR before it is not part of it), as memcached's; a line without a
 * colon is malformed and so is a line longer than AUTH_LINE_MAX or more
 * than AUTH_MAX_ENTRIES lines (memcached silently keeps the first 8).
 *
 * With a file, a connection starts in the gate (kura_proto_auth), which
 * answers as memcached 1.6.18's try_read_command_asciiauth, byte for byte:
 *   - a line that is not "set <key> <flags> <exptime> <bytes> ..." (any
 *     other command, meta and kura's own included, or garbage) gets
 *     "CLIENT_ERROR unauthenticated"; the key is ignored, noreply too;
 *   - of the replies to the requests of one read, only the last goes out
 *     (memcached reuses one response object; so a meta set's data line,
 *     refused as one more request, adds no second line);
 *   - the value must end in CRLF ("CLIENT_ERROR bad command line
 *     termination") and hold "user password" separated by spaces ("CLIENT_
 *     ERROR bad authentication token format");
 *   - a matching entry answers "STORED" and the connection speaks the text
 *     protocol from then on (as memcached's, never the binary one); a
 *     wrong one "CLIENT_ERROR authentication failure", and the connection
 *     may try again.
 * Every attempt counts in auth_cmds, a failure in auth_errors too.  Nothing
 * is decided before the gate, so every command - repl, snapshot, the
 * listings, digest - is behind it, in this one place.
 *
 * Bounds: a line without a newline past AUTH_NO_NEWLINE_MAX bytes, or a
 * value announced past AUTH_VALUE_MAX bytes, closes the connection without
 * a reply (memcached closes when its read buffer fills; a limit of its
 * own here).  A failure costs what a success costs (no delay, no lock: a
 * client trying passwords in a loop takes its own worker's time only).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_int.h"

#define AUTH_MAX_ENTRIES 1024
#define AUTH_LINE_MAX 1024
#define AUTH_NO_NEWLINE_MAX 1024        /* memcached's */
#define AUTH_VALUE_MAX 16384            /* about memcached's read buffer */

typedef struct auth_entry {
    char *user, *pass;
    size_t ulen, plen;
} auth_entry;

struct kura_auth {
    auth_entry e[AUTH_MAX_ENTRIES];
    int n;
    char *path;
};

/* The gate's state between calls (s->state). */
typedef struct auth_state {
    uint64_t value_len;                 /* >0: the value (CRLF included) comes next */
} auth_state;

static int load_error(char *err, size_t len, const char *fmt, const char *path, const char *why)
{
    snprintf(err, len, fmt, path, why);
    return -1;
}

int kura_auth_load(const char *path, kura_auth **out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return load_error(err, errlen, "cannot read the authentication file %s: %s", path,
                          strerror(errno));
    kura_auth *a = calloc(1, sizeof(*a));
    char line[AUTH_LINE_MAX + 2];
    int rc = 0, lineno = 0;
    if (!a || !(a->path = strdup(path))) {
        rc = load_error(err, errlen, "cannot read the authentication file %s: %s", path,
                        "out of memory");
        goto done;
    }
    while (fgets(line, sizeof(line), f)) {
        size_t n = strlen(line);
        lineno++;
        if (n > AUTH_LINE_MAX || (n == sizeof(line) - 1 && line[n - 1] != '\n')) {
            snprintf(err, errlen, "authentication file %s: line %d is longer than %d bytes",
                     path, lineno, AUTH_LINE_MAX);
            rc = -1;
            goto done;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        char *colon = memchr(line, ':', n);
        if (!colon || memchr(line, '\0', n) || strchr(line, '\r')) {
            snprintf(err, errlen, "authentication file %s: line %d is not 'user:password'",
                     path, lineno);
            rc = -1;
            goto done;
        }
        if (a->n == AUTH_MAX_ENTRIES) {
            snprintf(err, errlen, "authentication file %s: more than %d entries", path,
                     AUTH_MAX_ENTRIES);
            rc = -1;
            goto done;
        }
        auth_entry *e = &a->e[a->n];
        e->ulen = (size_t)(colon - line);
        e->plen = n - e->ulen - 1;
        if (!(e->user = malloc(e->ulen + 1)) || !(e->pass = malloc(e->plen + 1))) {
            rc = load_error(err, errlen, "cannot read the authentication file %s: %s", path,
                            "out of memory");
            a->n++;
            goto done;
        }
        memcpy(e->user, line, e->ulen);
        memcpy(e->pass, colon + 1, e->plen);
        e->user[e->ulen] = '\0';
        e->pass[e->plen] = '\0';
        a->n++;
    }
    if (ferror(f))
        rc = load_error(err, errlen, "cannot read the authentication file %s: %s", path,
                        strerror(errno));
done:
    fclose(f);
    if (rc < 0) {
        kura_auth_free(a);
        return -1;
    }
    *out = a;
    return 0;
}

void kura_auth_free(kura_auth *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->n; i++) {
        free(a->e[i].user);
        free(a->e[i].pass);
    }
    free(a->path);
    free(a);
}

const char *kura_auth_path(const kura_auth *a)
{
    return a ? a->path : NULL;
}

int kura_auth_first(const kura_auth *a, const char **user, const char **pass)
{
    if (!a || a->n == 0)
        return -1;
    *user = a->e[0].user;
    *pass = a->e[0].pass;
    return 0;
}

/* Compares every byte whatever the first difference, so the time taken
 * does not say how much of a password was right. */
static bool same_secret(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char d = alen != blen;
    size_t n = alen < blen ? alen : blen;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

bool kura_auth_check(const kura_auth *a, const char *user, size_t ulen, const char *pass,
                     size_t plen)
{
    /* every entry compared, both fields each time (no early end): the
     * time taken says nothing of which part matched */
    int ok = 0;
    for (int i = 0; i < a->n; i++)
        ok |= (int)same_secret(user, ulen, a->e[i].user, a->e[i].ulen) &
              (int)same_secret(pass, plen, a->e[i].pass, a->e[i].plen);
    return ok != 0;
}

/* Splits [p, end) at spaces as memcached's tokenize_command does (runs of
 * spaces are one separator); at most max words; returns how many. */
static int words(const char *p, const char *end, text_token *w, int max)
{
    int n = 0;
    while (p < end && n < max) {
        while (p < end && *p == ' ')
            p++;
        if (p == end)
            break;
        const char *s = p;
        while (p < end && *p != ' ')
            p++;
        w[n++] = (text_token){ s, (size_t)(p - s) };
    }
    return n;
}

/* The gate's reply s, in place of any other the gate gave since mark (the
 * start of this call's replies): memcached 1.6.18 sends only the last of
 * the gate's replies to the requests of one read (its response object is
 * reused), so "ms foo 1\r\nb\r\n" gets one line, and a login after a
 * refusal in the same read gets only its STORED. */
static void out_line(kura_buf *out, size_t mark, const char *s)
{
    kura_buf_rewind(out, mark);
    kura_buf_append(out, s, strlen(s));
    KURA_BUF_LIT(out, "\r\n");
}

/* The value of an attempt: [v, v + len), CRLF included. */
static void attempt(kura_session *s, const char *v, size_t len, kura_buf *out, size_t mark)
{
    text_token w[2];
    if (v[len - 2] != '\r' || v[len - 1] != '\n') {
        out_line(out, mark, "CLIENT_ERROR bad command line termination");
        return;
    }
    if (words(v, v + len - 2, w, 2) < 2) {
        out_line(out, mark, "CLIENT_ERROR bad authentication token format");
        return;
    }
    KURA_STAT_INC(s->stats, auth_cmds);
    if (!kura_auth_check(s->server->auth, w[0].value, w[0].length, w[1].value, w[1].length)) {
        KURA_STAT_INC(s->stats, auth_errors);
        out_line(out, mark, "CLIENT_ERROR authentication failure");
        return;
    }
    out_line(out, mark, "STORED");
    /* the text protocol from here on (its state lives in the session) */
    free(s->state);
    s->state = NULL;
    s->proto = &kura_proto_text;
}

static size_t auth_process(kura_session *s, char *in, size_t len, kura_buf *out)
{
    auth_state *st = s->state;
    size_t pos = 0, mark = kura_buf_size(out);
    while (pos < len && s->proto == &kura_proto_auth && !s->close) {
        if (st->value_len) {
            if (len - pos < st->value_len) {
                s->need = st->value_len;
                return pos;
            }
            size_t vlen = st->value_len;
            st->value_len = 0;
            s->need = 0;
            attempt(s, in + pos, vlen, out, mark);
            pos += vlen;
            continue;
        }
        if (len - pos < 2)
            return pos;                 /* memcached waits for 2 bytes: a lone "\n" is no line */
        char *nl = memchr(in + pos, '\n', len - pos);
        if (!nl) {
            if (len - pos > AUTH_NO_NEWLINE_MAX)
                s->close = true;        /* junk: memcached closes too */
            return s->close ? len : pos;
        }
        text_token w[5];
        uint32_t size;
        int n = words(in + pos, nl, w, 5);
        pos = (size_t)(nl - in) + 1;
        if (n < 5 || w[0].length != 3 || memcmp(w[0].value, "set", 3) != 0 ||
            !text_safe_u32(&w[4], &size)) {
            out_line(out, mark, "CLIENT_ERROR unauthenticated");
            continue;
        }
        if ((uint64_t)size + 2 > AUTH_VALUE_MAX) {
            s->close = true;            /* more than an attempt can hold */
            return len;
        }
        st->value_len = (uint64_t)size + 2;
    }
    return s->close ? len : pos;
}

const kura_proto kura_proto_auth = { "auth", auth_process, sizeof(auth_state), NULL };

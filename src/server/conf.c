/*
 * conf.c - -conf FILE: the command-line options, one per line, from a file.
 *
 * A line holds an option name, with or without its leading dash, and its
 * value after white space: "port 11211", "-port 11211", "th 8", "dmn".  The
 * value is the rest of the line, so it may hold spaces; a switch may say
 * "yes" or "no".  "database NAME" (or "db NAME") names the database, as the
 * last word of a command line does.  A '#' at the start of a line or after
 * white space starts a comment; a '#' inside a word is part of it, so
 * "database /var/lib/kura/data.kh#bnum=1000000" keeps its parameters.
 *
 * The file is applied before the command line (options.c), so the command
 * line overrides it.  Every name goes through options_set(), the table in
 * options.c, so the file and the command line cannot drift apart.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define CONF_MAX_LINE 4096

/* Every string the settings point into lives for the life of the process;
 * they are kept here so that leak checkers see them as reachable. */
static char **conf_strings;
static size_t conf_nstrings;

static const char *keep(const char *s, size_t n)
{
    char **v = realloc(conf_strings, (conf_nstrings + 1) * sizeof(char *));
    if (!v)
        return NULL;
    conf_strings = v;
    char *copy = strndup(s, n);
    if (copy)
        conf_strings[conf_nstrings++] = copy;
    return copy;
}

/* Cuts a comment and the white space around what is left; returns the
 * start of the content (maybe ""). */
static char *strip(char *line)
{
    for (char *p = line; *p; p++) {
        if (*p == '#' && (p == line || isspace((unsigned char)p[-1]))) {
            *p = '\0';
            break;
        }
    }
    while (isspace((unsigned char)*line))
        line++;
    size_t n = strlen(line);
    while (n > 0 && isspace((unsigned char)line[n - 1]))
        line[--n] = '\0';
    return line;
}

static bool is_control(char ch)
{
    unsigned char c = (unsigned char)ch;
    return (c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f;
}

/* A conf file is text: a NUL would cut its line short (the rest silently
 * dropped) and other control bytes are a binary or damaged file.  Tab,
 * carriage return and newline are white space; bytes from 0x80 up are
 * taken as they are (UTF-8 paths).  Returns 0, or 2 with the line shown,
 * each control byte escaped as \xNN. */
static int refuse_control_bytes(const char *line, size_t n, const char *where)
{
    size_t i = 0;
    while (i < n && !is_control(line[i]))
        i++;
    if (i == n)
        return 0;
    fprintf(stderr, "kurad: %s: a control byte in the line: '", where);
    for (size_t j = 0; j < n && j < 200; j++) {
        unsigned char c = (unsigned char)line[j];
        if (c == '\n' || c == '\r')
            continue;
        if (is_control(line[j]))
            fprintf(stderr, "\\x%02x", c);
        else
            fputc(c, stderr);
    }
    fprintf(stderr, "'%s\n", n > 200 ? "..." : "");
    return 2;
}

/* Applies one non-empty line.  Returns 0 or 2. */
static int apply_line(kura_settings *s, char *line, const char *where)
{
    char *name = line, *val = line;
    while (*val && !isspace((unsigned char)*val))
        val++;
    size_t nlen = (size_t)(val - name);
    while (isspace((unsigned char)*val))
        val++;
    while (nlen > 0 && *name == '-') {         /* "-port" and "--port" and "port" */
        name++;
        nlen--;
    }
    char opt[64];
    if (nlen == 0 || nlen + 2 > sizeof(opt)) {
        fprintf(stderr, "kurad: %s: '%s' is not an option\n", where, line);
        return 2;
    }
    opt[0] = '-';
    memcpy(opt + 1, name, nlen);
    opt[nlen + 1] = '\0';

    const char *value = NULL;
    if (*val) {
        value = keep(val, strlen(val));
        if (!value) {
            fprintf(stderr, "kurad: %s: out of memory\n", where);
            return 2;
        }
    }
    if (strcmp(opt, "-database") == 0 || strcmp(opt, "-db") == 0) {
        if (!value) {
            fprintf(stderr, "kurad: %s: '%s' needs a database name\n", where, opt + 1);
            return 2;
        }
        if (s->dbname) {
            fprintf(stderr, "kurad: %s: more than one database named ('%s' and '%s')\n",
                    where, s->dbname, value);
            return 2;
        }
        s->dbname = value;
        return 0;
    }
    return options_set(s, opt, value, where);
}

int conf_load(kura_settings *s, const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        fprintf(stderr, "kurad: cannot read the conf file %s: %s\n", path, strerror(errno));
        return 2;
    }
    char *line = NULL, where[PATH_MAX + 32];
    size_t cap = 0;
    ssize_t got;
    int lineno = 0, rc = 0;
    while (rc == 0 && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        snprintf(where, sizeof(where), "%s:%d", path, lineno);
        size_t n = (size_t)got;
        if (n > CONF_MAX_LINE - 2) {
            fprintf(stderr, "kurad: %s: line longer than %d bytes\n", where, CONF_MAX_LINE - 2);
            rc = 2;
            break;
        }
        if ((rc = refuse_control_bytes(line, n, where)) != 0)
            break;
        char *content = strip(line);
        if (*content)
            rc = apply_line(s, content, where);
    }
    free(line);
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "kurad: cannot read the conf file %s: %s\n", path, strerror(errno));
        rc = 2;
    }
    fclose(f);
    return rc;
}

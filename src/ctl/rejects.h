/*
 * rejects.h - the records an import could not store, kept whole in a file
 * beside the target database (rejects.c; kuractl import, ctl_migrate.c).
 *
 * An import never throws a record away: one the database cannot take is
 * written here, byte for byte as the source file holds it (the value with
 * any Kyoto Tycoon header and flags still in it), with the reason, so
 * that nothing is lost and a later import (another layout, a database
 * that takes longer keys) can take it.  The format, in docs/migration.md
 * ("Rejected records"):
 *
 *     kura-rejects 1\n
 *     R <klen> <vlen> <reason> <text>\n<key>\n<value>\n     (one per record)
 *     end <count>\n
 *
 * lengths in decimal, <reason> one word from the table below, <text> a
 * sentence for a person (no newline); key and value are raw bytes, each
 * followed by a newline that is not part of it.  A file without its "end"
 * line was cut short (the import did not finish).
 */
#ifndef KURA_CTL_REJECTS_H
#define KURA_CTL_REJECTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Why a record was set aside; the words are the file's <reason>. */
typedef enum rej_reason {
    REJ_KEY_EMPTY,          /* "key-empty": kura's stores had no empty key; the
                               empty key is stored now, the word kept for files
                               written before */
    REJ_KEY_LONG,           /* "key-too-long": longer than the database's key limit */
    REJ_VALUE_LARGE,        /* "value-too-large": past the item size limit */
    REJ_SHORT_XT,           /* "short-for-kt": shorter than Kyoto Tycoon's expiry header */
    REJ_SHORT_FLAGS,        /* "short-for-flags": shorter than the plug-in's 4-byte flags */
    REJ_STORE_REFUSED,      /* "store-refused": the database refused it as invalid */
    REJ_COUNT
} rej_reason;

typedef struct rejects {
    const char *path;
    FILE *f;                        /* opened at the first record */
    uint64_t count;
    uint64_t by_reason[REJ_COUNT];
    int err;                        /* errno of the first failed write, sticky */
} rejects;

const char *rej_word(rej_reason r);
/* The file a database's rejects go to: "<path without #params>.rejects",
 * into buf; NULL if it does not fit. */
const char *rej_default_path(const char *db, char *buf, size_t len);
/* Prepares r for path; nothing is created until the first record. */
void rej_init(rejects *r, const char *path);
/* Writes one record (text: the reason for a person): 0, or -1 with r->err. */
int rej_add(rejects *r, rej_reason why, const char *text, const char *k, size_t kl,
            const char *v, size_t vl);
/* Writes the end line, syncs and closes: 0 or -1 with r->err.  No file
 * when there was no record. */
int rej_finish(rejects *r);
/* "100 key-too-long, 2 short-for-kt" into buf. */
const char *rej_summary(const rejects *r, char *buf, size_t len);
/* Reads a rejects file back whole and checks its form and end line: the
 * number of records in *count, 0; -1 with a message in err. */
int rej_check_file(const char *path, uint64_t *count, char *err, size_t errlen);

#endif

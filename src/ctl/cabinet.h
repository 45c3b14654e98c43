/*
 * cabinet.h - Tokyo Cabinet and Kyoto Cabinet files, read and written with
 * the real libraries (Debian's libtokyocabinet-dev, libkyotocabinet-dev),
 * for kuractl import and export (ctl_migrate.c).
 *
 * Each library is optional at build time: cab_tc.c and cab_kc.c are
 * compiled with KURA_HAVE_TC / KURA_HAVE_KC when the Makefile finds them
 * (config.mk's HAVE_TOKYOCABINET and HAVE_KYOTOCABINET, else the Debian
 * headers), and say "not built" otherwise.  Kyoto Cabinet is C++; its C
 * API (kclangc.h) is what is used.
 */
#ifndef KURA_CABINET_H
#define KURA_CABINET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { CAB_TCH, CAB_TCB, CAB_KCH, CAB_KCT } cab_kind;

/* Why an open failed, as far as the library tells. */
typedef enum {
    CAB_DAMAGED,                /* the file's header or size does not hold together */
    CAB_LOCKED,                 /* another process holds its lock (a running server) */
    CAB_UNOPENED,               /* missing, not permitted, or the system refused */
} cab_failure;

typedef struct cabinet cabinet;

/* Called for each record; a non-zero return stops the walk and is returned. */
typedef int (*cab_record_fn)(void *arg, const char *k, size_t kl, const char *v, size_t vl);

typedef struct cab_ops {
    const char *library;        /* "Tokyo Cabinet 1.4.48" */
    int (*open)(cabinet *c, const char *path, bool write, uint64_t rnum_hint);
    uint64_t (*count)(cabinet *c);
    int (*each)(cabinet *c, cab_record_fn fn, void *arg);  /* 0, fn's stop, or -1 */
    /* A malloc'd copy of key's value: 0, 1 (no such record) or -1. */
    int (*get)(cabinet *c, const char *k, size_t kl, char **v, size_t *vl);
    int (*put)(cabinet *c, const char *k, size_t kl, const char *v, size_t vl);  /* 0 or -1 */
    int (*close)(cabinet *c);  /* 0 or -1; frees the library's handle */
    const char *(*error)(cabinet *c);
    cab_failure (*failure)(cabinet *c);    /* after a failed open: why */
} cab_ops;

struct cabinet {
    cab_kind kind;
    const cab_ops *ops;
    void *db;
    char err[256];
};

/* NULL when the library was not found at build time. */
extern const cab_ops *const cab_tc_ops;
extern const cab_ops *const cab_kc_ops;

/* The kind of an existing file, by its header (-1: neither library's). */
int cab_kind_of_file(const char *path);
/* The kind a new file's suffix asks for (-1: none of .tch .tcb .kch .kct). */
int cab_kind_of_name(const char *path);
const char *cab_kind_name(cab_kind k);     /* "Tokyo Cabinet hash (.tch)" */
/* The ops of a kind's library, or NULL with a message saying how to get it. */
const cab_ops *cab_ops_of(cab_kind k, char *err, size_t errlen);
/* Kyoto Tycoon's TimedDB mark in a Kyoto file's opaque area (ktserver
 * wrote it): 1 with *persist when the file has one, 0 if not, -1 unreadable. */
int cab_kt_mark(const char *path, bool *persist);
/* Writes that mark into a closed Kyoto file whose values carry the expiry
 * header, as ktserver does in a new file: 0 or -1 (errno). */
int cab_kt_set_mark(const char *path);

#endif

/*
 * ty.h - status codes and the error record every trainyard module returns.
 *
 * Functions report failure by returning a ty_status and, where they take one,
 * filling a ty_err with a sentence a person can act on and, for validation
 * errors, the offending field (a JSON-pointer-like path such as
 * "model.layers[2].units"). Only main() decides to exit.
 */
#ifndef TY_H
#define TY_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    TY_OK = 0,
    TY_EINVAL,       /* the caller's input is invalid (HTTP 422/400) */
    TY_EFORMAT,      /* a file or payload is malformed (HTTP 422) */
    TY_ENOTFOUND,    /* no such thing (HTTP 404) */
    TY_ECONFLICT,    /* the thing is in a state that forbids this (HTTP 409) */
    TY_ETOOBIG,      /* over a size limit (HTTP 413) */
    TY_ENOMEM,       /* an allocation failed */
    TY_EIO,          /* a read, write, fsync or database call failed */
    TY_EFETCH,       /* a remote fetch failed (HTTP 422 naming the URL) */
    TY_EDEVICE,      /* a device (GPU) call failed */
    TY_ECANCELLED,   /* stopped on request */
    TY_EINTERNAL,    /* a broken invariant; a bug */
    TY_EPREEMPTED,   /* stopped to give the device up, resumable (a training
                       run preempted at a step boundary, its checkpoint
                       written: see train_job.preempt) */
    TY_ENOSPC,       /* a write failed because the disk (or the quota) is
                       full: ENOSPC, EDQUOT, SQLITE_FULL (HTTP 507) */
    TY_ELIMIT,       /* over a rate or concurrency limit (HTTP 429) */
    TY_EUNAVAILABLE, /* what the request needs is not there now, and may be
                        soon: no serving replica ready in time (HTTP 503) */
    TY_STATUS_COUNT
} ty_status;

typedef struct {
    char msg[512];        /* what went wrong, as a sentence; empty when none */
    char field[128];      /* the offending input field, or empty */
    double retry_after_s; /* after TY_ELIMIT or TY_EUNAVAILABLE: when to
                             try again, in seconds, if known; else 0 */
} ty_err;

/* The enum value's name, e.g. "TY_EINVAL". */
const char *ty_status_name(ty_status s);

/* The status for a failed file-system call's errno: TY_ENOSPC for ENOSPC
 * and EDQUOT (the disk or the quota is full), else TY_EIO. */
ty_status ty_errno_status(int errnum);

/* Clears e (e may be NULL). */
void ty_err_clear(ty_err *e);

/* Formats msg and copies field (may be NULL) into e (e may be NULL),
 * clearing retry_after_s.
 * Returns status, so callers can write `return ty_fail(err, TY_EINVAL, ...)`. */
ty_status ty_fail(ty_err *e, ty_status status, const char *field,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Prepends "prefix: " to e->msg, keeping the field. */
void ty_err_prefix(ty_err *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The time now, UTC, as "2026-01-31T12:34:56.789Z" (what the store writes
 * in created_at columns and the logs in "ts"). */
void ty_now_iso(char out[32]);

#define TY_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* FNV-1a over n bytes, continuing from h (start with TY_HASH_INIT): for
 * the in-memory tables (keys, models, client addresses). Not for anything
 * an attacker must not be able to collide. */
#define TY_HASH_INIT 2166136261u
uint32_t ty_hash(const void *data, size_t n, uint32_t h);

#endif

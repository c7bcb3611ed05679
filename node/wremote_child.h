/*
 * wremote_child.h - the remote worker shim's child (node/wremote.c is its
 * only user): `trainyard worker --job-dir <folder>` started from this
 * binary, its stdout read as lines, its end waited for, and the shim's
 * signals forwarded to it.
 *
 * The signal handler is the only global state: SIGTERM, SIGINT and
 * SIGUSR1 go to the child once it runs; before, they are remembered (a
 * SIGTERM in the flag wrchild_term_flag points at, a SIGUSR1 sent to the
 * child as soon as it exists). One child per process.
 */
#ifndef TY_WREMOTE_CHILD_H
#define TY_WREMOTE_CHILD_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/ty.h"

/* The child, as the shim holds it. */
typedef struct {
    pid_t pid;       /* 0: not started; -1: reaped */
    int out_fd;      /* its stdout (non-blocking) for poll; -1 */
    char buf[65536]; /* its output, up to its next newline */
    size_t len;      /* bytes in buf */
    size_t start;    /* where the next line in buf begins */
    int last;        /* its output ended with a line without a newline */
    int preempt_sent, cancel_sent; /* SIGUSR1, SIGTERM sent to it */
} wrchild;

/* Installs the handler for SIGTERM, SIGINT and SIGUSR1, and ignores
 * SIGPIPE (a dead server connection is an error, not the end). Once, at
 * the start. */
void wrchild_signals_install(void);

/* The flag the handler sets when SIGTERM or SIGINT came (never cleared). */
const volatile sig_atomic_t *wrchild_term_flag(void);

/* A child not started yet. */
void wrchild_init(wrchild *c);

/* Starts `trainyard worker --job-dir dir` (this binary again): stdin
 * /dev/null, stdout a pipe to the shim, stderr appended to log_path, the
 * shim's environment. A SIGTERM or SIGUSR1 that came before is sent to it
 * at once. TY_EIO (err says why) when it cannot be started; no child then. */
ty_status wrchild_start(wrchild *c, const char *dir, const char *log_path,
                        ty_err *err);

/* Reads what the child printed: 1 at the end of its output (it exited, or
 * the pipe cannot be read), else 0 (also when nothing was there). Take the
 * whole lines read with wrchild_line after each call. */
int wrchild_read(wrchild *c);

/* The next whole line read (without its newline; empty lines skipped),
 * valid until the next call; after the end of the output, a last line
 * without its newline too. NULL when there is none: what is left is kept
 * for the next read, except a line over 64 KiB, dropped (said on stderr). */
const char *wrchild_line(wrchild *c);

/* Sends the running child SIGUSR1 (preempt) or SIGTERM (cancel), each at
 * most once; nothing when no child runs. */
void wrchild_preempt(wrchild *c);
void wrchild_cancel(wrchild *c);

/* Waits for the exited (or stopping) child and returns its wait status;
 * the handler stops forwarding to it first, so no signal reaches a
 * recycled pid. Only for a started child. */
int wrchild_reap(wrchild *c);

/* Stops the running child (SIGTERM; SIGKILL after 60 s) and reaps it,
 * reading and dropping what it still prints so it never blocks on a full
 * pipe. Nothing when no child runs. */
void wrchild_stop(wrchild *c);

#endif

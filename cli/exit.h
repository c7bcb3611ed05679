/*
 * exit.h - the client's exit codes: a stable interface for scripts (README,
 * `trainyard help`). Every command returns one of them; only main() exits.
 */
#ifndef TY_CLI_EXIT_H
#define TY_CLI_EXIT_H

typedef enum {
    CLI_EXIT_OK = 0,            /* success (watch: the job succeeded) */
    CLI_EXIT_JOB_FAILED = 1,    /* the watched job failed */
    CLI_EXIT_JOB_CANCELLED = 2, /* the watched job was cancelled */
    CLI_EXIT_NOT_FOUND = 3,     /* HTTP 404 */
    CLI_EXIT_REJECTED = 4,      /* any other 4xx: 400, 409, 413, 422 ... */
    CLI_EXIT_AUTH = 5,          /* HTTP 401 or 403 */
    CLI_EXIT_SERVER = 6,        /* HTTP 5xx */
    CLI_EXIT_UNREACHABLE = 7,   /* connect, DNS or TLS verification failed */
    CLI_EXIT_USAGE = 64         /* a bad command line */
} cli_exit;

#endif

/*
 * cli.h - the command-line client: `trainyard login|logout|datasets|jobs|
 * models|devices|tenants ...` talk to a trainyard server over HTTP(S).
 *
 * The exit codes are a stable interface for scripts (README, `trainyard
 * help`); every command returns one of them and only main() exits.
 */
#ifndef TY_CLI_H
#define TY_CLI_H

#include <stdio.h>

typedef enum {
    CLI_EXIT_OK = 0,          /* success (watch: the job succeeded) */
    CLI_EXIT_JOB_FAILED = 1,  /* the watched job failed */
    CLI_EXIT_JOB_CANCELLED = 2, /* the watched job was cancelled */
    CLI_EXIT_NOT_FOUND = 3,   /* HTTP 404 */
    CLI_EXIT_REJECTED = 4,    /* any other 4xx: 400, 409, 413, 422 ... */
    CLI_EXIT_AUTH = 5,        /* HTTP 401 or 403 */
    CLI_EXIT_SERVER = 6,      /* HTTP 5xx */
    CLI_EXIT_UNREACHABLE = 7, /* connect, DNS or TLS verification failed */
    CLI_EXIT_USAGE = 64       /* a bad command line */
} cli_exit;

/* The index in argv (the whole command line) of a client command's name
 * (login, jobs, ...), after any global options before it; 0 when the line
 * holds no client command. */
int cli_command_index(int argc, char **argv);

/* Runs the client command on the whole command line (argv[0] is the
 * program). Returns the exit code (a cli_exit value); messages for a person
 * go to stderr. */
int cli_main(int argc, char **argv);

/* The client's part of `trainyard help`: commands and exit codes. */
void cli_usage(FILE *f);

#endif

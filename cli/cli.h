/*
 * cli.h - the command-line client: `trainyard login|logout|datasets|jobs|
 * models|devices|deployments|tenants ...` talk to a trainyard server over
 * HTTP(S).
 *
 * Every command returns one of the exit codes of cli/exit.h and only main()
 * exits.
 */
#ifndef TY_CLI_H
#define TY_CLI_H

#include <stdio.h>

#include "cli/exit.h"

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

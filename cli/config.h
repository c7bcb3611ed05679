/*
 * config.h - where the client finds its server and key: the config file that
 * `trainyard login` writes ($XDG_CONFIG_HOME/trainyard/config.json, else
 * ~/.config/trainyard/config.json; folder 0700, file 0600, never wider even
 * for a moment), overridden by TRAINYARD_URL / TRAINYARD_KEY, overridden by
 * --url / --key-file / --cacert.
 */
#ifndef TY_CLI_CONFIG_H
#define TY_CLI_CONFIG_H

#include <limits.h>

#include "common/ty.h"

typedef struct {
    char url[1024];
    char key[256];
    char cacert[PATH_MAX];
} cli_config;

/* The config file's path into out. TY_EINVAL when neither XDG_CONFIG_HOME
 * nor HOME is set. */
ty_status cli_config_path(char out[PATH_MAX], ty_err *err);

/* Fills cfg from the config file; a missing file leaves cfg empty and is
 * TY_OK. A malformed file is TY_EFORMAT. */
ty_status cli_config_load(cli_config *cfg, ty_err *err);

/* Writes cfg (url, key, cacert when set) to the config file: temp file
 * created 0600, fsynced, renamed. The folder is created 0700. */
ty_status cli_config_save(const cli_config *cfg, char path_out[PATH_MAX],
                          ty_err *err);

/* Removes the config file; *removed says whether there was one. */
ty_status cli_config_remove(int *removed, char path_out[PATH_MAX], ty_err *err);

/* Reads a key from a file (first line, surrounding whitespace trimmed) into
 * key. TY_EINVAL for an empty or unreadable file. */
ty_status cli_read_key_file(const char *path, char *key, size_t size,
                            ty_err *err);

/* Reads a key from stdin: with a prompt on stderr and no echo when stdin is
 * a terminal, else its first line. */
ty_status cli_read_key_stdin(char *key, size_t size, ty_err *err);

#endif

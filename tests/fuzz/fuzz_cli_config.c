/*
 * fuzz_cli_config - cli/config.c: the client's config file
 * ($XDG_CONFIG_HOME/trainyard/config.json) and a key file, both the input.
 * What loads must be NUL-terminated within its field.
 */
#include <stdint.h>
#include <sys/stat.h>

#include "cli/config.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    static int ready;
    char path[256];
    if (!ready) {
        setenv("XDG_CONFIG_HOME", fz_dir(), 1);
        snprintf(path, sizeof path, "%s/trainyard", fz_dir());
        if (mkdir(path, 0700) != 0)
            abort();
        ready = 1;
    }
    fz_write("trainyard/config.json", d, size, path);
    chmod(path, 0600);
    cli_config cfg;
    ty_err err = {0};
    if (cli_config_load(&cfg, &err) == TY_OK) {
        if (!memchr(cfg.url, 0, sizeof cfg.url) ||
            !memchr(cfg.key, 0, sizeof cfg.key) ||
            !memchr(cfg.cacert, 0, sizeof cfg.cacert))
            abort();
    } else if (!err.msg[0]) {
        abort();
    }
    char key[256];
    ty_err e2 = {0};
    if (cli_read_key_file(path, key, sizeof key, &e2) == TY_OK) {
        if (!memchr(key, 0, sizeof key))
            abort();
    } else if (!e2.msg[0]) {
        abort();
    }
    return 0;
}

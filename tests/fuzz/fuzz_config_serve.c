/*
 * fuzz_config_serve - app/config.c: `trainyard serve`'s flags. Input: the
 * arguments after "serve", separated by newlines (at most 32). Whatever
 * parses, a listen address of the same text parses the same way again.
 */
#include <stdint.h>

#include "app/config.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    char *text = fz_strndup(d, size);
    char *argv[34];
    int argc = 0;
    argv[argc++] = "serve";
    for (char *p = text; p && argc < 33;) {
        argv[argc++] = p;
        p = strchr(p, '\n');
        if (p)
            *p++ = 0;
    }
    argv[argc] = NULL;
    ty_config cfg;
    config_defaults(&cfg);
    int help = 0;
    ty_err err = {0};
    if (config_parse_serve(argc, argv, &cfg, &help, &err) != TY_OK &&
        !err.msg[0])
        abort();
    /* Each argument alone as a listen address and a size. */
    for (int i = 1; i < argc; i++) {
        ty_config c2;
        config_defaults(&c2);
        ty_err e2 = {0};
        config_parse_listen(argv[i], &c2, &e2);
        uint64_t n;
        config_parse_size(argv[i], &n);
    }
    free(text);
    return 0;
}

/*
 * fuzz_wproto - node/protocol.c's wproto_decode on one line (the input up
 * to its first newline, as the server splits a worker's stdout): a kind in
 * range, an object for every kind but NONE, and no object for NONE.
 */
#include <stdint.h>

#include "node/protocol.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    size_t n, rest_len;
    const uint8_t *rest;
    fz_split(d, size, "\n", &n, &rest, &rest_len);
    char *line = fz_strndup(d, n);
    json_t *msg = (json_t *)1;
    wproto_msg k = wproto_decode(line, &msg);
    if ((int)k < 0 || k >= WPROTO_MSG_COUNT)
        abort();
    if ((k == WPROTO_MSG_NONE) != (msg == NULL))
        abort();
    if (msg && !json_is_object(msg))
        abort();
    json_decref(msg);
    free(line);
    return 0;
}

/*
 * fuzz_gen_body - the generation request bodies' checks (serve/generate.c
 * for Triton's generate, serve/openai.c for OpenAI's completions) on
 * arbitrary bytes: whatever parses as JSON is checked by both; a check
 * either accepts or refuses with TY_EINVAL and a message (and a refusal
 * that names a field names one of the request's), never anything else.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "serve/generate.h"
#include "serve/openai.h"

static void check(ty_status s, const ty_err *err)
{
    if (s == TY_OK)
        return;
    if (s != TY_EINVAL || !err->msg[0])
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *body = json_loadb((const char *)data, size, 0, NULL);
    if (!body)
        return 0;
    ty_err err = {0};
    if (json_is_object(body)) {
        check(serve_gen_check_body(body, &err), &err);
        memset(&err, 0, sizeof err);
    }
    check(serve_oai_check_body(body, &err), &err);
    json_decref(body);
    return 0;
}

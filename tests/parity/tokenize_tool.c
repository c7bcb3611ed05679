/*
 * tokenize_tool - the C tokenizer as a filter, for tests/parity/tokenizer_hf.py:
 *
 *   tokenize_tool encode TOKENIZER_FILE   one JSON string a line in, its ids
 *                                         (a JSON array) a line out; the
 *                                         file is read as an upload's
 *                                         tokenizer part is
 *   tokenize_tool chunked TOKENIZER_FILE  the same, each text encoded in
 *                                         pieces cut by ty_tokenizer_cut
 *   tokenize_tool pretok                  one JSON string in, its GPT-2
 *                                         pre-tokens' [start, end) byte
 *                                         offsets out
 *   tokenize_tool learn N                 the text on stdin; prints the
 *                                         learned tokenizer's description
 *
 * A line that fails prints {"error": message, "field": field}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/data/tokenizer.h"
#include "models/data/tokenizer_int.h"

static char *slurp(FILE *f, size_t *n)
{
    size_t cap = 1 << 16, len = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b;
        }
    }
    *n = len;
    return buf;
}

static ty_status on_piece(void *ctx, const unsigned char *p, size_t n,
                          ty_err *err)
{
    (void)err;
    const unsigned char **base = ctx;
    printf("%s[%zu, %zu]", p == *base ? "" : ", ", (size_t)(p - *base),
           (size_t)(p - *base) + n);
    return TY_OK;
}

static void print_error(const ty_err *err)
{
    json_t *e = json_pack("{s:s, s:s}", "error", err->msg, "field", err->field);
    char *s = json_dumps(e, JSON_COMPACT);
    printf("%s\n", s);
    free(s);
    json_decref(e);
}

int main(int argc, char **argv)
{
    ty_err err = {0};
    if (argc == 3 && !strcmp(argv[1], "learn")) {
        size_t n;
        char *text = slurp(stdin, &n);
        ty_tokenizer *t;
        if (ty_tokenizer_learn((uint32_t)atoi(argv[2]), text, n, &t, &err)) {
            print_error(&err);
            return 1;
        }
        char *s = json_dumps(ty_tokenizer_description(t), JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        free(text);
        ty_tokenizer_free(t);
        return 0;
    }
    int pretok = argc == 2 && !strcmp(argv[1], "pretok");
    int chunked = argc == 3 && !strcmp(argv[1], "chunked");
    if (!pretok && !(argc == 3 && (chunked || !strcmp(argv[1], "encode")))) {
        fprintf(stderr, "usage: tokenize_tool encode|chunked FILE | pretok | "
                        "learn N\n");
        return 2;
    }
    ty_tokenizer_request req = {0};
    if (!pretok) {
        FILE *f = fopen(argv[2], "rb");
        size_t n;
        char *text = f ? slurp(f, &n) : NULL;
        if (f)
            fclose(f);
        if (!text) {
            fprintf(stderr, "cannot read %s\n", argv[2]);
            return 2;
        }
        ty_status st =
            ty_tokenizer_request_parse_text(text, n, "tokenizer", &req, &err);
        free(text);
        if (st != TY_OK || !req.tok) {
            print_error(&err);
            return 1;
        }
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, stdin)) > 0) {
        json_error_t je;
        json_t *v = json_loadb(line, (size_t)got,
                               JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!json_is_string(v)) {
            fprintf(stderr, "not a JSON string: %s\n", je.text);
            return 2;
        }
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (pretok) {
            const unsigned char *base = (const unsigned char *)s;
            printf("[");
            tok_pretokenize(base, n, on_piece, &base, &err);
            printf("]\n");
            json_decref(v);
            continue;
        }
        uint32_t *ids = NULL;
        size_t nid = 0, done = 0;
        ty_status st = TY_OK;
        while (chunked && st == TY_OK && done < n) {
            size_t cut = ty_tokenizer_cut(req.tok, s + done, n - done);
            size_t len = cut ? cut : n - done;
            st = done ? ty_tokenizer_encode_more(req.tok, s + done, len, &ids,
                                                 &nid, &err)
                      : ty_tokenizer_encode(req.tok, s, len, &ids, &nid, &err);
            done += len;
        }
        if (!chunked)
            st = ty_tokenizer_encode(req.tok, s, n, &ids, &nid, &err);
        if (st != TY_OK) {
            print_error(&err);
        } else {
            printf("[");
            for (size_t i = 0; i < nid; i++)
                printf(i ? ", %u" : "%u", ids[i]);
            printf("]\n");
        }
        free(ids);
        json_decref(v);
    }
    free(line);
    ty_tokenizer_request_free(&req);
    return 0;
}

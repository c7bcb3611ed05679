/*
 * tokenizer_core.c - the tokenizer struct's life (tokenizer_int.h): made
 * empty, its decode pieces sized, freed; and the id buffers encoding
 * grows. Every other tokenizer file calls down into it, and it calls none
 * of them back.
 */
#include <stdlib.h>
#include <string.h>

#include "models/data/tokenizer.h"
#include "models/data/tokenizer_int.h"

ty_tokenizer *tok_alloc(int type)
{
    ty_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->type = type;
    t->unk_id = -1;
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = t->fallback[b][0] = t->fallback[b][1] = -1;
    return t;
}

ty_status tok_pieces_begin(ty_tokenizer *t, uint32_t vocab_size,
                           size_t total_bytes)
{
    t->vocab_size = vocab_size;
    t->piece_off = calloc((size_t)vocab_size + 1, sizeof *t->piece_off);
    t->has_piece = calloc(vocab_size ? vocab_size : 1, 1);
    t->piece_bytes = malloc(total_bytes ? total_bytes : 1);
    return t->piece_off && t->has_piece && t->piece_bytes ? TY_OK : TY_ENOMEM;
}

void ty_tokenizer_free(ty_tokenizer *t)
{
    if (!t)
        return;
    free(t->piece_off);
    free(t->piece_bytes);
    free(t->has_piece);
    tok_map_free(&t->merges);
    tok_map_free(&t->vocab_by_hash);
    tok_map_free(&t->cache);
    free(t->cache_ids);
    for (size_t i = 0; i < t->num_added; i++)
        free(t->added[i].content);
    free(t->added);
    json_decref(t->desc);
    free(t);
}

ty_status tok_ids_push(tok_ids *v, uint32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        uint32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p)
            return TY_ENOMEM;
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return TY_OK;
}

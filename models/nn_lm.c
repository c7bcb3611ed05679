/*
 * nn_lm.c - a loaded token model's tokenizer (a language model's or a text
 * classifier's: the "trainyard.tokenizer" of its file,
 * models/data/tokenizer.h), for
 * nn_net.c (loading, the document) and the services above (text in and
 * out). Calls nothing of nn_net.c.
 */
#include <pthread.h>
#include <string.h>

#include "models/data/tokenizer.h"
#include "models/nn_internal.h"

/* The vocabulary of the model's ids: its embedding's (a language model's
 * is its output's too). */
static uint32_t token_vocab(const nn_net *net)
{
    return net->arch.layers[0].vocab;
}

ty_status nn_lm_tokenizer_load(nn_net *net, const json_t *tz, ty_err *err)
{
    if (json_is_null(tz))
        return TY_OK;
    ty_err inner = {0};
    if (ty_tokenizer_load(tz, &net->tok, &inner) != TY_OK)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "trainyard.tokenizer is not a tokenizer: %s (%s)",
                       inner.msg, inner.field);
    if (ty_tokenizer_vocab_size(net->tok) > token_vocab(net)) {
        ty_tokenizer_free(net->tok);
        net->tok = NULL;
        return ty_fail(err, TY_EFORMAT, NULL,
                       "trainyard.tokenizer makes ids past the model's "
                       "vocabulary of %u",
                       token_vocab(net));
    }
    pthread_mutex_init(&net->tok_mu, NULL);
    return TY_OK;
}

void nn_lm_tokenizer_free(nn_net *net)
{
    if (!net->tok)
        return;
    ty_tokenizer_free(net->tok);
    pthread_mutex_destroy(&net->tok_mu);
    net->tok = NULL;
}

void nn_lm_describe(const nn_net *net, json_t *doc)
{
    json_object_set_new(doc, "tokenizer",
                        net->tok ? json_string(ty_tokenizer_type_name(
                                       ty_tokenizer_type_of(net->tok)))
                                 : json_null());
    json_t *info = net->tok ? ty_tokenizer_describe(net->tok) : NULL;
    json_object_set_new(doc, "tokenizer_info", info ? info : json_null());
    json_object_set_new(doc,
                        net->arch.task == TY_TASK_LANGUAGE_MODELING
                            ? "context_length"
                            : "max_length",
                        json_integer(net->arch.input.d[0]));
    json_object_set_new(doc, "vocab_size", json_integer(token_vocab(net)));
}

void nn_lm_eos_load(nn_net *net, const json_t *hf_config)
{
    const json_t *e = json_object_get(hf_config, "eos_token_id");
    if (json_is_array(e))
        e = json_array_get(e, 0);
    if (json_is_integer(e) && json_integer_value(e) >= 0 &&
        json_integer_value(e) < token_vocab(net))
        net->eos_plus1 = (uint32_t)json_integer_value(e) + 1;
}

int nn_net_eos_token(const nn_net *net, uint32_t *id)
{
    *id = net->eos_plus1 ? net->eos_plus1 - 1 : 0;
    return net->eos_plus1 != 0;
}

int nn_net_has_tokenizer(const nn_net *net) { return net->tok != NULL; }

uint32_t nn_net_token_vocab(const nn_net *net)
{
    return nn_arch_takes_tokens(&net->arch) ? token_vocab(net) : 0;
}

ty_status nn_net_encode(const nn_net *net, const char *text, size_t len,
                        uint32_t **ids, size_t *n, ty_err *err)
{
    *ids = NULL;
    *n = 0;
    if (!net->tok)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the model has no tokenizer (it was trained on token "
                       "ids made elsewhere)");
    nn_net *w = (nn_net *)net; /* the lock and the encoder's word cache */
    pthread_mutex_lock(&w->tok_mu);
    ty_status st = ty_tokenizer_encode(w->tok, text, len, ids, n, err);
    pthread_mutex_unlock(&w->tok_mu);
    return st;
}

ty_status nn_net_decode(const nn_net *net, const uint32_t *ids, size_t n,
                        char **out, size_t *len, ty_err *err)
{
    *out = NULL;
    *len = 0;
    if (!net->tok)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the model has no tokenizer (it was trained on token "
                       "ids made elsewhere)");
    return ty_tokenizer_decode(net->tok, ids, n, out, len, err);
}

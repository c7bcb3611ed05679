/*
 * lm.c - language models in the predict service (see lm.h).
 */
#include "serve/lm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"
#include "models/data/tokens.h"
#include "models/data/windows.h"
#include "models/nn.h"
#include "serve/model.h"

ty_status serve_lm_encode(const nn_net *net, const char *text, size_t len,
                          const char *field, uint32_t **ids, size_t *n,
                          ty_err *err)
{
    if (!nn_net_has_tokenizer(net))
        return ty_fail(err, TY_EINVAL, field,
                       "this model was trained on token ids made elsewhere "
                       "and has no tokenizer: give token ids, not text");
    ty_status s = nn_net_encode(net, text, len, ids, n, err);
    if (s == TY_EINVAL)
        snprintf(err->field, sizeof err->field, "%s", field);
    return s;
}

ty_status serve_lm_decode(const nn_net *net, uint32_t vocab,
                          const uint32_t *ids, size_t n, const char *field,
                          char **out, size_t *len, ty_err *err)
{
    *out = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= vocab)
            return ty_fail(err, TY_EINVAL, field,
                           "%s[%zu] is %u; this model's ids run from 0 to %u",
                           field, i, ids[i], vocab - 1);
    if (!nn_net_has_tokenizer(net))
        return ty_fail(err, TY_EINVAL, field,
                       "this model was trained on token ids made elsewhere "
                       "and has no tokenizer to turn them into text");
    ty_status s = nn_net_decode(net, ids, n, out, len, err);
    if (s == TY_EINVAL) {
        /* "ids[i]": a gap in the vocabulary; name the request's field */
        char inner[sizeof err->field];
        snprintf(inner, sizeof inner, "%s", err->field);
        snprintf(err->field, sizeof err->field, "%s", field);
        ty_err_prefix(err, "%s (%s)", field, inner);
    }
    return s;
}

/* Whether s (n bytes) is whole, valid UTF-8. */
static int utf8_whole(const char *s, size_t n)
{
    ds_utf8_check c;
    uint64_t bad;
    ds_utf8_check_init(&c);
    return ds_utf8_check_feed(&c, (const unsigned char *)s, n, &bad) &&
           ds_utf8_check_end(&c, &bad);
}

static ty_status read_top_k(const serve_predict_body *b, uint32_t vocab,
                            uint32_t *k, ty_err *err)
{
    *k = SERVE_LM_TOP_K < vocab ? SERVE_LM_TOP_K : vocab;
    if (!b->top_k.p)
        return TY_OK;
    json_t *v = json_loadb(b->top_k.p, b->top_k.len, JSON_DECODE_ANY, NULL);
    int ok = json_is_integer(v) && json_integer_value(v) >= 1 &&
             json_integer_value(v) <= SERVE_LM_MAX_TOP_K;
    if (ok)
        *k = (uint32_t)json_integer_value(v);
    json_decref(v);
    if (!ok)
        return ty_fail(err, TY_EINVAL, "top_k",
                       "top_k must be an integer from 1 to %u",
                       SERVE_LM_MAX_TOP_K);
    if (*k > vocab)
        *k = vocab;
    return TY_OK;
}

/* Prompt i (a string or an array of ids) into row (t floats: its last t
 * ids, or its first t for a classifier (first), then -1); *used its ids,
 * *cut whether it was longer than t. A classifier's text may be empty
 * (all padding); a prompt may not. */
static ty_status read_prompt(const json_t *p, size_t i, const nn_net *tz,
                             uint32_t t, uint32_t vocab, int first_t,
                             float *row, uint32_t **used, size_t *nused,
                             int *cut, ty_err *err)
{
    char field[32];
    snprintf(field, sizeof field, "inputs[%zu]", i);
    uint32_t *ids = NULL;
    size_t n = 0;
    ty_status s = TY_OK;
    if (json_is_string(p)) {
        s = serve_lm_encode(tz, json_string_value(p), json_string_length(p),
                            field, &ids, &n, err);
    } else if (json_is_array(p)) {
        n = json_array_size(p);
        ids = malloc(n * sizeof *ids + 1);
        if (!ids)
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        for (size_t j = 0; j < n && s == TY_OK; j++) {
            const json_t *v = json_array_get(p, j);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= vocab)
                s = ty_fail(err, TY_EINVAL, field,
                            "%s[%zu] must be a token id from 0 to %u", field, j,
                            vocab - 1);
            else
                ids[j] = (uint32_t)json_integer_value(v);
        }
    } else {
        s = ty_fail(err, TY_EINVAL, field,
                    "%s must be a text (a string) or a list of token ids",
                    field);
    }
    if (s == TY_OK && n == 0 && !first_t)
        s = ty_fail(err, TY_EINVAL, field,
                    "%s is empty: a prompt needs at "
                    "least one token",
                    field);
    if (s != TY_OK) {
        free(ids);
        return s;
    }
    *cut = n > t;
    size_t first = n > t && !first_t ? n - t : 0;
    if (first_t && n > t)
        n = t;
    for (uint32_t j = 0; j < t; j++)
        row[j] = first + j < n ? (float)ids[first + j] : -1.0f;
    if (first) /* ids may be NULL: an empty classifier text has none */
        memmove(ids, ids + first, (n - first) * sizeof *ids);
    *used = ids;
    *nused = n - first;
    return TY_OK;
}

ty_status serve_lm_texts(const nn_net *net, const serve_predict_body *b,
                         uint32_t t, float *x, ty_err *err)
{
    ty_status s = TY_OK;
    json_t *inputs = json_loadb(b->inputs.p, b->inputs.len, 0, NULL);
    if (!inputs) {
        if ((s = serve_predict_check(b, err)) == TY_OK)
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        return s;
    }
    const uint32_t vocab = nn_net_token_vocab(net);
    for (size_t i = 0; s == TY_OK && i < json_array_size(inputs); i++) {
        uint32_t *used = NULL;
        size_t n;
        int cut;
        s = read_prompt(json_array_get(inputs, i), i, net, t, vocab, 1,
                        x + i * t, &used, &n, &cut, err);
        free(used);
    }
    json_decref(inputs);
    return s;
}

/* The k most likely ids of probs (v values), best first (ties: lower id). */
static void top_ids(const float *probs, uint32_t v, uint32_t k, uint32_t *best)
{
    for (uint32_t j = 0; j < k; j++)
        best[j] = UINT32_MAX;
    for (uint32_t id = 0; id < v; id++) {
        uint32_t pos = k;
        while (pos > 0 && (best[pos - 1] == UINT32_MAX ||
                           probs[id] > probs[best[pos - 1]]))
            pos--;
        if (pos >= k)
            continue;
        memmove(best + pos + 1, best + pos, (k - pos - 1) * sizeof *best);
        best[pos] = id;
    }
}

static void reply_prompt(serve_buf *o, const nn_net *tz, uint32_t vocab,
                         const uint32_t *ids, size_t n, int cut,
                         const float *probs, uint32_t k, uint32_t *best)
{
    serve_buf_str(o, "{\"tokens\":[");
    for (size_t j = 0; j < n; j++) {
        if (j)
            serve_buf_str(o, ",");
        serve_buf_int(o, ids[j]);
    }
    serve_buf_str(o, cut ? "],\"truncated\":true" : "],\"truncated\":false");
    serve_buf_str(o, ",\"next_tokens\":[");
    top_ids(probs, vocab, k, best);
    for (uint32_t j = 0; j < k; j++) {
        char *text = NULL;
        size_t len = 0;
        ty_err ignore = {0};
        serve_buf_str(o, j ? ",{\"id\":" : "{\"id\":");
        serve_buf_int(o, best[j]);
        serve_buf_str(o, ",\"text\":");
        if (tz &&
            serve_lm_decode(tz, vocab, &best[j], 1, "id", &text, &len,
                            &ignore) == TY_OK &&
            utf8_whole(text, len))
            serve_buf_json_string(o, text);
        else
            serve_buf_str(o, "null");
        free(text);
        serve_buf_str(o, ",\"probability\":");
        serve_buf_float(o, probs[best[j]]);
        serve_buf_str(o, "}");
    }
    serve_buf_str(o, "]}");
}

ty_status serve_lm_predict(serve_model *m, const nn_net *net,
                           const serve_predict_body *b, serve_buf *reply,
                           ty_err *err)
{
    const uint32_t t = (uint32_t)m->features, vocab = m->outputs;
    const nn_net *tz = net;
    uint32_t k;
    ty_status s = read_top_k(b, vocab, &k, err);
    if (s != TY_OK)
        return s;
    json_t *inputs = json_loadb(b->inputs.p, b->inputs.len, 0, NULL);
    if (!inputs) {
        if ((s = serve_predict_check(b, err)) == TY_OK)
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        return s;
    }
    const size_t n = json_array_size(inputs);
    float *x = malloc(n * t * sizeof *x + 1);
    float *out = malloc(n * vocab * sizeof *out + 1);
    uint32_t **used = calloc(n + 1, sizeof *used);
    size_t *nused = calloc(n + 1, sizeof *nused);
    int *cut = calloc(n + 1, sizeof *cut);
    uint32_t *best = malloc(k * sizeof *best + 1);
    if (!x || !out || !used || !nused || !cut || !best)
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (size_t i = 0; s == TY_OK && i < n; i++)
        s = read_prompt(json_array_get(inputs, i), i, tz, t, vocab, 0,
                        x + i * t, &used[i], &nused[i], &cut[i], err);
    if (s == TY_OK)
        s = serve_model_run(m, x, n, out, err);
    if (s == TY_OK) {
        serve_buf_str(reply, "{\"model\":");
        serve_buf_json_string(reply, m->id);
        serve_buf_str(reply, ",\"predictions\":[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                serve_buf_str(reply, ",");
            reply_prompt(reply, tz, vocab, used[i], nused[i], cut[i],
                         out + i * vocab, k, best);
        }
        serve_buf_str(reply, "],\"device\":");
        serve_buf_json_string(reply, m->device);
        serve_buf_str(reply, ",\"deployment\":");
        if (m->deployment[0])
            serve_buf_json_string(reply, m->deployment);
        else
            serve_buf_str(reply, "null");
        serve_buf_str(reply, "}");
        if (!serve_buf_ok(reply))
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    for (size_t i = 0; used && i < n; i++)
        free(used[i]);
    free(used);
    free(nused);
    free(cut);
    free(best);
    free(x);
    free(out);
    json_decref(inputs);
    return s;
}

/* ---- tokenize / detokenize ---- */

/* Opens tenant's model_id, which must take token ids (a language model or
 * a text classifier); *vocab gets its vocabulary. */
static ty_status open_lm(const serve_env *env, const char *tenant_id,
                         const char *model_id, serve_model *m,
                         const nn_net **net, uint32_t *vocab, ty_err *err)
{
    ty_status s = serve_model_open(env, tenant_id, model_id, 0, m, err);
    if (s != TY_OK)
        return s;
    *net = model_entry_net(m->e);
    *vocab = nn_net_token_vocab(*net);
    if (!*vocab) {
        serve_model_close(m);
        return ty_fail(err, TY_EINVAL, NULL,
                       "model %s is a %s model on numbers; tokenize and "
                       "detokenize are for models trained on text",
                       model_id, ty_task_name(m->task));
    }
    return TY_OK;
}

/* Copies s (n bytes) with each invalid or cut UTF-8 sequence replaced by
 * U+FFFD; *whole says whether none was. */
static json_t *utf8_lossy(const char *s, size_t n, int *whole)
{
    char *out = malloc(3 * n + 1);
    size_t o = 0, i = 0;
    *whole = 1;
    if (!out)
        return NULL;
    while (i < n) {
        size_t len = 1;
        unsigned char c = (unsigned char)s[i];
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF)
            len = 3;
        else if (c >= 0xF0 && c <= 0xF4)
            len = 4;
        if (c < 0x80 || (len > 1 && i + len <= n && utf8_whole(s + i, len))) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += 1;
            *whole = 0;
        }
    }
    json_t *j = json_stringn(out, o);
    free(out);
    return j;
}

ty_status serve_lm_tokenize(const serve_env *env, const char *tenant_id,
                            const char *model_id, const json_t *body,
                            json_t **reply, ty_err *err)
{
    static const char *const keys[] = {"content", NULL};
    ty_status s = tyjson_check_keys(body, keys, "", err);
    if (s != TY_OK)
        return s;
    const json_t *content = json_object_get(body, "content");
    if (!json_is_string(content))
        return ty_fail(err, TY_EINVAL, "content",
                       "content is required: the text to tokenize");
    serve_model m;
    const nn_net *net;
    uint32_t vocab;
    if ((s = open_lm(env, tenant_id, model_id, &m, &net, &vocab, err)) != TY_OK)
        return s;
    uint32_t *ids = NULL;
    size_t n = 0;
    s = serve_lm_encode(net, json_string_value(content),
                        json_string_length(content), "content", &ids, &n, err);
    json_t *tokens = s == TY_OK ? json_array() : NULL;
    for (size_t i = 0; tokens && i < n; i++)
        json_array_append_new(tokens, json_integer(ids[i]));
    if (s == TY_OK) {
        *reply = json_pack("{s:s, s:o}", "model", m.id, "tokens", tokens);
        if (!*reply)
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    free(ids);
    serve_model_close(&m);
    return s;
}

ty_status serve_lm_detokenize(const serve_env *env, const char *tenant_id,
                              const char *model_id, const json_t *body,
                              json_t **reply, ty_err *err)
{
    static const char *const keys[] = {"tokens", NULL};
    ty_status s = tyjson_check_keys(body, keys, "", err);
    if (s != TY_OK)
        return s;
    const json_t *tokens = json_object_get(body, "tokens");
    if (!json_is_array(tokens) ||
        json_array_size(tokens) > (size_t)SERVE_MAX_EXAMPLES * 16)
        return ty_fail(err, TY_EINVAL, "tokens",
                       "tokens is required: a list of token ids");
    serve_model m;
    const nn_net *net;
    uint32_t vocab;
    if ((s = open_lm(env, tenant_id, model_id, &m, &net, &vocab, err)) != TY_OK)
        return s;
    const size_t n = json_array_size(tokens);
    uint32_t *ids = malloc(n * sizeof *ids + 1);
    if (!ids)
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (size_t i = 0; s == TY_OK && i < n; i++) {
        const json_t *v = json_array_get(tokens, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= vocab)
            s = ty_fail(err, TY_EINVAL, "tokens",
                        "tokens[%zu] must be a token id from 0 to %u", i,
                        vocab - 1);
        else
            ids[i] = (uint32_t)json_integer_value(v);
    }
    char *text = NULL;
    size_t len = 0;
    if (s == TY_OK)
        s = serve_lm_decode(net, vocab, ids, n, "tokens", &text, &len, err);
    if (s == TY_OK) {
        int whole;
        json_t *content = utf8_lossy(text, len, &whole);
        *reply = content ? json_pack("{s:s, s:o, s:b}", "model", m.id,
                                     "content", content, "complete", whole)
                         : NULL;
        if (!*reply)
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    free(text);
    free(ids);
    serve_model_close(&m);
    return s;
}

/* ---- evaluate ---- */

ty_status serve_lm_evaluate(serve_model *m, const nn_net *net, const char *path,
                            const char *ds_id, json_t **reply, ty_err *err)
{
    const uint32_t t = (uint32_t)m->features;
    ty_tokens tok = {0};
    ty_dataset win = {0};
    ty_err inner = {0};
    ty_status s = ty_tokens_open(path, &tok, &inner);
    if (s != TY_OK) /* its message names the server's file */
        return ty_fail(err, TY_EIO, NULL, "dataset %s cannot be read", ds_id);
    if (tok.vocab_size != m->outputs) {
        s = ty_fail(err, TY_EINVAL, "dataset",
                    "dataset %s has a vocabulary of %u tokens; model %s "
                    "predicts over %u",
                    ds_id, tok.vocab_size, m->id, m->outputs);
    } else if ((s = ds_windows_make(&tok, 0, tok.num_tokens, t, &win, err)) !=
               TY_OK) {
        snprintf(err->field, sizeof err->field, "dataset");
        if (s == TY_EINVAL)
            snprintf(err->msg, sizeof err->msg,
                     "dataset %s has %llu tokens, no window of the model's "
                     "context length %u and its next token",
                     ds_id, (unsigned long long)tok.num_tokens, t);
    }
    double loss = 0, accuracy = -1;
    if (s == TY_OK) {
        model_entry_device_lock(m->e);
        s = nn_net_evaluate(net, &win, NULL, &loss, &accuracy, err);
        model_entry_device_unlock(m->e);
    }
    if (s == TY_OK) {
        *reply = json_pack(
            "{s:s, s:s, s:I, s:I, s:f, s:f, s:n, s:s}", "model", m->id,
            "dataset", ds_id, "num_examples", (json_int_t)win.num_examples,
            "num_tokens", (json_int_t)win.num_examples * t, "loss", loss,
            "perplexity", exp(loss), "accuracy", "device", m->device);
        if (!*reply)
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    ds_windows_free(&win);
    ty_tokens_close(&tok);
    return s;
}

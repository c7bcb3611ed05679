/*
 * generate.c - text generation from a language model (see generate.h).
 */
#include "serve/generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"
#include "models/nn.h"
#include "models/nn_decode.h"
#include "models/sample.h"
#include "serve/lm.h"
#include "serve/model.h"
#include "serve/stop.h"

#define GEN_BLOCK_TOKENS 16u
#define GEN_PREFILL_ROWS 64u /* prompt rows a step: bounds the logits */
#define P "parameters"

/* A request as parsed. */
typedef struct {
    const char *text;
    size_t text_len;
    int64_t max_tokens; /* 0: not given */
    sample_params sp;
    const char *stops[STOP_MAX_STRINGS];
    size_t stop_lens[STOP_MAX_STRINGS];
    uint32_t n_stops;
} gen_req;

static ty_status parse_stop(const json_t *stop, gen_req *q, ty_err *err)
{
    if (!stop || json_is_null(stop))
        return TY_OK;
    if (json_is_string(stop)) {
        q->stops[0] = json_string_value(stop);
        q->stop_lens[0] = json_string_length(stop);
        q->n_stops = 1;
        return TY_OK;
    }
    if (!json_is_array(stop) || json_array_size(stop) > STOP_MAX_STRINGS)
        return ty_fail(err, TY_EINVAL, P ".stop",
                       P ".stop must be a string or a list of at most %d "
                         "strings",
                       STOP_MAX_STRINGS);
    for (size_t i = 0; i < json_array_size(stop); i++) {
        const json_t *s = json_array_get(stop, i);
        if (!json_is_string(s))
            return ty_fail(err, TY_EINVAL, P ".stop",
                           P ".stop[%zu] must be a string", i);
        q->stops[i] = json_string_value(s);
        q->stop_lens[i] = json_string_length(s);
    }
    q->n_stops = (uint32_t)json_array_size(stop);
    return TY_OK;
}

static ty_status parse(const json_t *body, gen_req *q, ty_err *err)
{
    static const char *const keys[] = {"text_input", "parameters", NULL};
    static const char *const pkeys[] = {
        "max_tokens", "temperature", "top_k", "top_p", "seed", "stop", NULL};
    memset(q, 0, sizeof *q);
    q->sp = SAMPLE_PARAMS_DEFAULT;
    ty_status s = tyjson_check_keys(body, keys, "", err);
    if (s != TY_OK)
        return s;
    const json_t *text = json_object_get(body, "text_input");
    if (!json_is_string(text))
        return ty_fail(err, TY_EINVAL, "text_input",
                       "text_input is required: the prompt, a string");
    q->text = json_string_value(text);
    q->text_len = json_string_length(text);
    const json_t *p = json_object_get(body, "parameters");
    if (!p)
        return TY_OK;
    if (!json_is_object(p))
        return ty_fail(err, TY_EINVAL, P, P " must be an object");
    double temp, top_p;
    int64_t top_k, seed;
    if ((s = tyjson_check_keys(p, pkeys, P, err)) != TY_OK ||
        (s = tyjson_get_int(p, "max_tokens", P, 0, 1, 1 << 24, 0,
                            &q->max_tokens, err)) != TY_OK ||
        (s = tyjson_get_number(p, "temperature", P, 0, 0.0, 1e6, 1.0, &temp,
                               err)) != TY_OK ||
        (s = tyjson_get_number(p, "top_p", P, 0, 0.0, 1.0, 1.0, &top_p, err)) !=
            TY_OK ||
        (s = tyjson_get_int(p, "top_k", P, 0, 0, INT32_MAX, 0, &top_k, err)) !=
            TY_OK ||
        (s = tyjson_get_int(p, "seed", P, 0, 0, INT64_MAX, 0, &seed, err)) !=
            TY_OK ||
        (s = parse_stop(json_object_get(p, "stop"), q, err)) != TY_OK)
        return s;
    q->sp = (sample_params){(float)temp, (int32_t)top_k, (float)top_p,
                            (uint64_t)seed};
    if ((s = sample_params_check(&q->sp, err)) != TY_OK) {
        char field[sizeof err->field];
        snprintf(field, sizeof field, P ".%s", err->field);
        snprintf(err->field, sizeof err->field, "%s", field);
    }
    return s;
}

/* A growing output text. */
typedef struct {
    char *p;
    size_t len, cap;
} text_buf;

static int text_add(text_buf *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p)
            return -1;
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
    return 0;
}

/* The run itself: prompt ids in, text out, on a decoder of its own. */
typedef struct {
    const nn_net *net;
    uint32_t vocab, context;
    nn_decoder *d;
    nn_kv_seq seq;
    float *logits;     /* GEN_PREFILL_ROWS rows */
    uint32_t *scratch; /* the sampler's */
    nn_decode_row *rows;
    stop_matcher stop;
    text_buf out;
    uint32_t generated;
    const char *finish;
} gen_run;

/* Runs the prompt through the decoder in chunks; the last row's logits
 * end up in run->logits[0..vocab). */
static ty_status prefill(gen_run *g, const uint32_t *ids, uint32_t n,
                         ty_err *err)
{
    for (uint32_t at = 0; at < n; at += GEN_PREFILL_ROWS) {
        uint32_t k = n - at < GEN_PREFILL_ROWS ? n - at : GEN_PREFILL_ROWS;
        for (uint32_t i = 0; i < k; i++)
            g->rows[i] = (nn_decode_row){&g->seq, ids[at + i], at + i};
        ty_status s = nn_decoder_step(g->d, g->rows, k, g->logits, err);
        if (s != TY_OK)
            return s;
        if (at + k == n && k > 1)
            memmove(g->logits, g->logits + (size_t)(k - 1) * g->vocab,
                    g->vocab * sizeof *g->logits);
    }
    return TY_OK;
}

/* One token's text into the stop matcher and the output; 1 when a stop
 * string completed. */
static ty_status emit(gen_run *g, uint32_t token, int *stopped, ty_err *err)
{
    char *bytes = NULL;
    size_t n = 0;
    ty_status s = nn_net_decode(g->net, &token, 1, &bytes, &n, err);
    if (s != TY_OK)
        return s;
    char *safe = malloc(STOP_FEED_CAP(n));
    int bad = !safe;
    if (safe) {
        size_t k = stop_feed(&g->stop, bytes, n, safe);
        bad = text_add(&g->out, safe, k) != 0;
    }
    free(safe);
    free(bytes);
    if (bad)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    *stopped = stop_matched(&g->stop) >= 0;
    return TY_OK;
}

static ty_status generate(gen_run *g, const gen_req *q, const uint32_t *ids,
                          uint32_t n, uint32_t max_tokens, ty_err *err)
{
    sample_state st;
    sample_state_init(&st, q->sp.seed, 0);
    ty_status s = prefill(g, ids, n, err);
    g->finish = "length";
    while (s == TY_OK && g->generated < max_tokens) {
        sample_logprob next;
        if ((s = sample_next(&q->sp, &st, g->logits, g->vocab, g->scratch,
                             &next, NULL, err)) != TY_OK)
            break;
        g->generated++;
        int stopped = 0;
        if ((s = emit(g, next.token, &stopped, err)) != TY_OK)
            break;
        if (stopped) {
            g->finish = "stop";
            break;
        }
        if (g->generated == max_tokens)
            break;
        g->rows[0] = (nn_decode_row){&g->seq, next.token, g->seq.len};
        s = nn_decoder_step(g->d, g->rows, 1, g->logits, err);
    }
    if (s == TY_OK) {
        char tail[STOP_FINISH_CAP];
        size_t k = stop_finish(&g->stop, tail);
        if (text_add(&g->out, tail, k) != 0)
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        if (stop_matched(&g->stop) >= 0)
            g->finish = "stop";
    }
    return s;
}

/* The model's checks, the prompt's ids and the run's buffers. */
static ty_status run_request(serve_model *m, const gen_req *q, json_t **reply,
                             ty_err *err)
{
    const nn_net *net = model_entry_net(m->e);
    if (m->task != TY_TASK_LANGUAGE_MODELING || !nn_net_has_tokenizer(net))
        return ty_fail(err, TY_EINVAL, NULL,
                       "model %s %s; generate needs a language model trained "
                       "on text (or imported with its tokenizer)",
                       m->id,
                       m->task != TY_TASK_LANGUAGE_MODELING
                           ? "is not a language model"
                           : "has no tokenizer");
    gen_run g = {.net = net,
                 .vocab = nn_net_token_vocab(net),
                 .context = (uint32_t)m->features};
    uint32_t *ids = NULL;
    size_t n = 0;
    ty_status s =
        serve_lm_encode(net, q->text, q->text_len, "text_input", &ids, &n, err);
    if (s == TY_OK && n == 0)
        s = ty_fail(err, TY_EINVAL, "text_input",
                    "text_input encodes to no token: give a prompt");
    if (s == TY_OK && n >= g.context)
        s = ty_fail(err, TY_EINVAL, "text_input",
                    "text_input is %zu tokens; the model's context is %u, "
                    "so a prompt may have at most %u",
                    n, g.context, g.context - 1);
    const uint32_t room = s == TY_OK ? g.context - (uint32_t)n : 0;
    const uint32_t max_tokens =
        q->max_tokens
            ? (uint32_t)q->max_tokens
            : (room < SERVE_GEN_MAX_TOKENS ? room : SERVE_GEN_MAX_TOKENS);
    if (s == TY_OK && max_tokens > room)
        s = ty_fail(err, TY_EINVAL, P ".max_tokens",
                    P ".max_tokens is %u but the prompt's %zu tokens leave "
                      "%u of the model's context of %u",
                    max_tokens, n, room, g.context);
    if (s == TY_OK)
        s = stop_init(&g.stop, q->stops, q->stop_lens, q->n_stops, err);
    if (s == TY_EINVAL && !strcmp(err->field, "stop"))
        snprintf(err->field, sizeof err->field, P ".stop");
    const uint32_t total = (uint32_t)n + max_tokens;
    if (s == TY_OK)
        s = nn_decoder_create(net, GEN_PREFILL_ROWS,
                              (total + GEN_BLOCK_TOKENS - 1) / GEN_BLOCK_TOKENS,
                              GEN_BLOCK_TOKENS, &g.d, err);
    if (s == TY_OK) {
        g.logits =
            malloc((size_t)GEN_PREFILL_ROWS * g.vocab * sizeof *g.logits);
        g.scratch = malloc((size_t)g.vocab * sizeof *g.scratch);
        g.rows = malloc(GEN_PREFILL_ROWS * sizeof *g.rows);
        if (!g.logits || !g.scratch || !g.rows)
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    if (s == TY_OK)
        s = nn_kv_seq_reserve(g.d, &g.seq, total, err);
    if (s == TY_OK)
        s = generate(&g, q, ids, (uint32_t)n, max_tokens, err);
    if (s == TY_OK) {
        *reply =
            json_pack("{s:s, s:s, s:s%, s:s, s:I, s:I}", "model_name",
                      m->name[0] ? m->name : m->id, "model_version", "1",
                      "text_output", g.out.p ? g.out.p : "", g.out.len,
                      "finish_reason", g.finish, "prompt_tokens", (json_int_t)n,
                      "completion_tokens", (json_int_t)g.generated);
        if (!*reply)
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    if (g.d) {
        nn_kv_seq_release(g.d, &g.seq);
        nn_decoder_free(g.d);
    }
    free(g.logits);
    free(g.scratch);
    free(g.rows);
    free(g.out.p);
    free(ids);
    return s;
}

ty_status serve_generate(const serve_env *env, const char *tenant_id,
                         const char *model_ref, const json_t *body,
                         json_t **reply, ty_err *err)
{
    *reply = NULL;
    gen_req q;
    ty_status s = parse(body, &q, err);
    if (s != TY_OK)
        return s;
    serve_model m;
    if ((s = serve_model_open(env, tenant_id, model_ref, 1, &m, err)) != TY_OK)
        return s;
    s = run_request(&m, &q, reply, err);
    serve_model_close(&m);
    return s;
}

/*
 * openai.c - OpenAI's completions API over serve/generate.h (see
 * openai.h).
 */
#include "serve/openai.h"

#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/ids.h"
#include "common/jsonutil.h"
#include "serve/generate.h"
#include "serve/model.h"
#include "store/store.h"

typedef struct {
    serve_gen *g;
    uint32_t prompt; /* its prompt's index */
} oai_choice;

struct serve_oai {
    char id[TY_ID_MAX];
    char model[256];
    int64_t created;
    int stream, include_usage, echo;
    int64_t logprobs; /* -1: none */
    json_t *prompts;  /* array of strings */
    uint32_t n_choices, n;
    oai_choice choices[SERVE_OAI_MAX_CHOICES];
};

/* The request's keys; the ones past "user" are refused unless no-ops. */
static const char *const keys[] = {"model",
                                   "prompt",
                                   "max_tokens",
                                   "temperature",
                                   "top_p",
                                   "top_k",
                                   "seed",
                                   "stop",
                                   "n",
                                   "stream",
                                   "stream_options",
                                   "logprobs",
                                   "echo",
                                   "user",
                                   "presence_penalty",
                                   "frequency_penalty",
                                   "best_of",
                                   "logit_bias",
                                   "suffix",
                                   NULL};

/* A key OpenAI has that this server does not do: only its no-op value. */
static ty_status no_op(const json_t *body, const char *key, int ok, ty_err *err)
{
    if (!json_object_get(body, key) || ok)
        return TY_OK;
    return ty_fail(err, TY_EINVAL, key,
                   "%s is not supported by this server; leave it out", key);
}

static ty_status check_unsupported(const json_t *body, const json_t *n,
                                   ty_err *err)
{
    const json_t *pp = json_object_get(body, "presence_penalty");
    const json_t *fp = json_object_get(body, "frequency_penalty");
    const json_t *bo = json_object_get(body, "best_of");
    const json_t *lb = json_object_get(body, "logit_bias");
    const json_t *sf = json_object_get(body, "suffix");
    ty_status s;
    if ((s = no_op(body, "presence_penalty",
                   json_is_null(pp) ||
                       (json_is_number(pp) && json_number_value(pp) == 0.0),
                   err)) != TY_OK ||
        (s = no_op(body, "frequency_penalty",
                   json_is_null(fp) ||
                       (json_is_number(fp) && json_number_value(fp) == 0.0),
                   err)) != TY_OK ||
        (s = no_op(body, "best_of",
                   json_is_null(bo) || (json_is_integer(bo) &&
                                        json_integer_value(bo) ==
                                            (n ? json_integer_value(n) : 1)),
                   err)) != TY_OK ||
        (s = no_op(body, "logit_bias",
                   json_is_null(lb) ||
                       (json_is_object(lb) && json_object_size(lb) == 0),
                   err)) != TY_OK ||
        (s = no_op(body, "suffix", json_is_null(sf), err)) != TY_OK)
        return s;
    return TY_OK;
}

/* The Triton-form body serve_gen_open takes, for one prompt. */
static json_t *gen_body(const json_t *body, const json_t *prompt, uint64_t seed,
                        ty_err *err)
{
    json_t *p = json_object();
    static const char *const pass[] = {"max_tokens", "temperature", "top_p",
                                       "stop"};
    for (size_t i = 0; i < TY_ARRAY_LEN(pass); i++) {
        const json_t *v = json_object_get(body, pass[i]);
        if (v && !json_is_null(v))
            json_object_set(p, pass[i], (json_t *)v);
    }
    const json_t *k = json_object_get(body, "top_k");
    if (k && !json_is_null(k))
        json_object_set_new(p, "top_k",
                            json_is_integer(k) && json_integer_value(k) == -1
                                ? json_integer(0)
                                : json_incref((json_t *)k));
    json_object_set_new(p, "seed", json_integer((json_int_t)seed));
    json_t *b = json_pack("{s:O, s:o}", "text_input", prompt, "parameters", p);
    if (!b)
        ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    return b;
}

/* A prompt as token ids: a list of 1 to SERVE_OAI_MAX_IDS integers from
 * 0 (below 2^32; the model's vocabulary is checked when it is opened). */
static int is_ids(const json_t *p)
{
    if (!json_is_array(p) || !json_array_size(p) ||
        json_array_size(p) > SERVE_OAI_MAX_IDS)
        return 0;
    for (size_t i = 0; i < json_array_size(p); i++) {
        const json_t *v = json_array_get(p, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > (json_int_t)UINT32_MAX)
            return 0;
    }
    return 1;
}

/* serve_gen's field names to OpenAI's: text_input is the prompt,
 * parameters.x is x. */
static void rename_field(ty_err *err, int list, uint32_t i)
{
    char f[sizeof err->field];
    if (!strcmp(err->field, "text_input")) {
        if (list)
            snprintf(f, sizeof f, "prompt[%u]", i);
        else
            snprintf(f, sizeof f, "prompt");
    } else if (!strncmp(err->field, "parameters.", 11)) {
        snprintf(f, sizeof f, "%s", err->field + 11);
    } else {
        return;
    }
    snprintf(err->field, sizeof err->field, "%s", f);
}

static ty_status parse(serve_oai *o, const json_t *body, uint64_t *seed,
                       ty_err *err)
{
    ty_status s = tyjson_check_keys(body, keys, "", err);
    if (s != TY_OK)
        return s;
    const char *model;
    int64_t n, lp = -1;
    if ((s = tyjson_get_string(body, "model", "", 1, 200, NULL, &model, err)) !=
            TY_OK ||
        (s = tyjson_get_int(body, "n", "", 0, 1, SERVE_OAI_MAX_CHOICES, 1, &n,
                            err)) != TY_OK ||
        (s = tyjson_get_bool(body, "stream", "", 0, 0, &o->stream, err)) !=
            TY_OK ||
        (s = tyjson_get_bool(body, "echo", "", 0, 0, &o->echo, err)) != TY_OK ||
        (s = check_unsupported(body, json_object_get(body, "n"), err)) != TY_OK)
        return s;
    snprintf(o->model, sizeof o->model, "%s", model);
    o->n = (uint32_t)n;
    const json_t *lpj = json_object_get(body, "logprobs");
    if (lpj && !json_is_null(lpj) &&
        (s = tyjson_get_int(body, "logprobs", "", 1, 0, 5, 0, &lp, err)) !=
            TY_OK)
        return s;
    o->logprobs = lp;
    const json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        static const char *const so_keys[] = {"include_usage", NULL};
        if (!o->stream)
            return ty_fail(err, TY_EINVAL, "stream_options",
                           "stream_options applies only with stream true");
        if (!json_is_object(so))
            return ty_fail(err, TY_EINVAL, "stream_options",
                           "stream_options must be an object");
        if ((s = tyjson_check_keys(so, so_keys, "stream_options", err)) !=
                TY_OK ||
            (s = tyjson_get_bool(so, "include_usage", "stream_options", 0, 0,
                                 &o->include_usage, err)) != TY_OK)
            return s;
    }
    const json_t *seedj = json_object_get(body, "seed");
    if (seedj && !json_is_null(seedj)) {
        int64_t v;
        if ((s = tyjson_get_int(body, "seed", "", 1, 0, INT64_MAX, 0, &v,
                                err)) != TY_OK)
            return s;
        *seed = (uint64_t)v;
    } else if (getrandom(seed, sizeof *seed, 0) != sizeof *seed) {
        *seed = (uint64_t)time(NULL);
    }
    *seed &= (uint64_t)INT64_MAX;
    const json_t *prompt = json_object_get(body, "prompt");
    if (json_is_string(prompt) || is_ids(prompt)) {
        o->prompts = json_pack("[O]", prompt);
    } else if (json_is_array(prompt) && json_array_size(prompt) >= 1 &&
               json_array_size(prompt) <= SERVE_OAI_MAX_PROMPTS) {
        /* strings, or lists of token ids, not both */
        const int ids = !json_is_string(json_array_get(prompt, 0));
        for (size_t i = 0; i < json_array_size(prompt); i++) {
            const json_t *p = json_array_get(prompt, i);
            if (ids ? !is_ids(p) : !json_is_string(p))
                return ty_fail(err, TY_EINVAL, "prompt",
                               "prompt[%zu] must be %s, as prompt[0] is: a "
                               "prompt is a string or a list of token ids "
                               "(integers from 0), and a list of prompts "
                               "holds one kind",
                               i, ids ? "a list of token ids" : "a string");
        }
        o->prompts = json_copy((json_t *)prompt); /* its own: ids become text */
        if (json_array_size(prompt) * o->n > SERVE_OAI_MAX_CHOICES)
            return ty_fail(err, TY_EINVAL, "n",
                           "%zu prompts times n %u are %zu choices; at most "
                           "%d in one request",
                           json_array_size(prompt), o->n,
                           json_array_size(prompt) * o->n,
                           SERVE_OAI_MAX_CHOICES);
    } else {
        return ty_fail(err, TY_EINVAL, "prompt",
                       "prompt is required: a string, a list of token ids, "
                       "or a list of 1 to %d of either",
                       SERVE_OAI_MAX_PROMPTS);
    }
    return o->prompts ? TY_OK : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
}

/* A new request parsed from body (*o NULL: out of memory), its seed in
 * *seed; the body's checks' outcome. */
static ty_status parse_new(const json_t *body, serve_oai **o, uint64_t *seed,
                           ty_err *err)
{
    *o = NULL;
    if (!json_is_object(body))
        return ty_fail(err, TY_EINVAL, NULL, "the body must be an object");
    if (!(*o = calloc(1, sizeof **o)))
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    return parse(*o, body, seed, err);
}

ty_status serve_oai_check_body(const json_t *body, ty_err *err)
{
    serve_oai *o;
    uint64_t seed = 0;
    ty_status s = parse_new(body, &o, &seed, err);
    serve_oai_close(o);
    return s;
}

ty_status serve_oai_open(const serve_env *env, const char *tenant_id,
                         const json_t *body, serve_oai **out, ty_err *err)
{
    *out = NULL;
    serve_oai *o;
    uint64_t seed = 0;
    ty_status s = parse_new(body, &o, &seed, err);
    if (!o)
        return s;
    if (s == TY_OK)
        s = ty_id_new("cmpl-", o->id, err);
    o->created = (int64_t)time(NULL);
    const json_t *given = json_object_get(body, "prompt");
    const int list = json_is_array(given) && !is_ids(given);
    for (uint32_t i = 0; s == TY_OK && i < json_array_size(o->prompts); i++) {
        json_t *pj = json_array_get(o->prompts, i);
        uint32_t *ids = NULL;
        size_t n_ids = json_is_array(pj) ? json_array_size(pj) : 0;
        if (n_ids && !(ids = malloc(n_ids * sizeof *ids))) {
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
            break;
        }
        for (size_t k = 0; k < n_ids; k++)
            ids[k] = (uint32_t)json_integer_value(json_array_get(pj, k));
        json_t *empty = json_string("");
        json_t *gb = gen_body(body, ids ? empty : pj, seed, err);
        json_decref(empty);
        for (uint32_t j = 0; gb && s == TY_OK && j < o->n; j++) {
            oai_choice *c = &o->choices[o->n_choices];
            s = ids ? serve_gen_open_ids(env, tenant_id, o->model, gb, ids,
                                         n_ids, &c->g, err)
                    : serve_gen_open(env, tenant_id, o->model, gb, &c->g, err);
            if (s != TY_OK) {
                rename_field(err, list, i);
                break;
            }
            if (ids && j == 0) {
                /* the prompt as text from now on (echo shows it) */
                char *t = serve_gen_prompt_text(c->g);
                json_t *tj = t ? json_string(t) : NULL;
                free(t);
                if (!tj || json_array_set_new(o->prompts, i, tj)) {
                    s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
                    serve_gen_close(c->g);
                    c->g = NULL;
                    break;
                }
            }
            c->prompt = i;
            serve_gen_set_choice(c->g, o->n_choices);
            o->n_choices++;
            if (o->logprobs >= 0)
                s = serve_gen_want_logprobs(c->g, (uint32_t)o->logprobs, err);
        }
        if (!gb)
            s = TY_ENOMEM;
        json_decref(gb);
        free(ids);
    }
    if (s != TY_OK) {
        serve_oai_close(o);
        return s;
    }
    *out = o;
    return TY_OK;
}

int serve_oai_streams(const serve_oai *o) { return o->stream; }

/* A streamed chunk with one choice's piece. */
static json_t *chunk_of(const serve_oai *o, json_t *choices)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", o->id, "object",
                     "text_completion", "created", (json_int_t)o->created,
                     "model", o->model, "choices", choices);
}

/* One choice's piece of a chunk; lp (taken; NULL: null) its logprobs. */
static json_t *choice_piece(uint32_t index, const char *text, size_t len,
                            const char *finish, json_t *lp)
{
    return json_pack("{s:s%, s:I, s:o, s:s?}", "text", text, len, "index",
                     (json_int_t)index, "logprobs", lp ? lp : json_null(),
                     "finish_reason", finish);
}

typedef struct {
    serve_oai *o;
    uint32_t index;
    serve_oai_emit emit;
    void *ctx;
    _Atomic int *gone; /* the request's: once its client left, every choice
                        * stops at its next piece */
    int in_run;        /* the engine's pieces (not the echo) */
    uint32_t lp_sent;  /* tokens whose logprobs went out */
    size_t text_sent;  /* bytes of the choice's text that went out */
} stream_ctx;

static int on_piece(void *arg, const char *text, size_t len)
{
    stream_ctx *c = arg;
    json_t *lp = NULL;
    if (c->in_run && c->o->logprobs >= 0) {
        /* the tokens written since the last piece: those this text
         * carries (or, where a stop string held text back, a few ahead) */
        uint32_t prompt, done;
        serve_gen_counts(c->o->choices[c->index].g, &prompt, &done);
        lp = serve_gen_logprobs_range(c->o->choices[c->index].g, c->lp_sent,
                                      done, c->text_sent);
        c->lp_sent = done;
    }
    c->text_sent += len;
    if (atomic_load(c->gone)) {
        json_decref(lp);
        return 1;
    }
    if (c->emit(c->ctx,
                chunk_of(c->o, json_pack("[o]", choice_piece(c->index, text,
                                                             len, NULL, lp)))))
        atomic_store(c->gone, 1);
    return atomic_load(c->gone);
}

static json_t *usage_of(const serve_oai *o)
{
    uint32_t prompt = 0, done = 0;
    for (uint32_t i = 0; i < o->n_choices; i++) {
        uint32_t p, c;
        serve_gen_counts(o->choices[i].g, &p, &c);
        if (i % o->n == 0)
            prompt += p; /* a prompt counts once, whatever n */
        done += c;
    }
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)prompt,
                     "completion_tokens", (json_int_t)done, "total_tokens",
                     (json_int_t)(prompt + done));
}

ty_status serve_oai_run(serve_oai *o, serve_oai_emit emit, void *ctx,
                        ty_err *err)
{
    stream_ctx c[SERVE_OAI_MAX_CHOICES];
    _Atomic int left = 0;
    for (uint32_t i = 0; i < o->n_choices; i++) {
        c[i] = (stream_ctx){
            .o = o, .index = i, .emit = emit, .ctx = ctx, .gone = &left};
        const char *prompt =
            json_string_value(json_array_get(o->prompts, o->choices[i].prompt));
        if (o->stream && o->echo)
            on_piece(&c[i], prompt, strlen(prompt));
    }
    if (atomic_load(&left))
        return TY_OK;
    for (uint32_t i = 0; i < o->n_choices; i++)
        c[i].in_run = 1;
    /* Every choice into the engine at once: they share its steps. Those
     * started are waited for whatever happens (the engine holds them);
     * the first error is the outcome. */
    ty_status s = TY_OK;
    uint32_t started = 0;
    for (; started < o->n_choices; started++)
        if ((s = serve_gen_start(o->choices[started].g,
                                 o->stream ? on_piece : NULL, &c[started],
                                 err)) != TY_OK)
            break;
    _Static_assert(SERVE_OAI_MAX_CHOICES <= SERVE_GEN_WAIT_MAX,
                   "a request's choices are waited for together");
    serve_gen *gs[SERVE_OAI_MAX_CHOICES];
    ty_status outs[SERVE_OAI_MAX_CHOICES];
    ty_err errs[SERVE_OAI_MAX_CHOICES] = {0};
    for (uint32_t i = 0; i < started; i++)
        gs[i] = o->choices[i].g;
    serve_gen_wait_all(gs, started, outs, errs);
    for (uint32_t i = 0; i < started; i++) {
        if (outs[i] != TY_OK && s == TY_OK) {
            s = outs[i];
            *err = errs[i];
        }
        /* each choice's last chunk once it is over (the others' pieces
         * may come before it: a client puts them together by index) */
        if (s == TY_OK && o->stream && !atomic_load(&left) &&
            emit(ctx,
                 chunk_of(o, json_pack("[o]", choice_piece(i, "", 0,
                                                           serve_gen_finish(
                                                               o->choices[i].g),
                                                           NULL)))))
            atomic_store(&left, 1);
    }
    if (s == TY_OK && !atomic_load(&left) && o->stream && o->include_usage) {
        json_t *last = chunk_of(o, json_array());
        json_object_set_new(last, "usage", usage_of(o));
        emit(ctx, last);
    }
    return atomic_load(&left) ? TY_OK : s;
}

json_t *serve_oai_result(const serve_oai *o)
{
    json_t *choices = json_array();
    for (uint32_t i = 0; choices && i < o->n_choices; i++) {
        const serve_gen *g = o->choices[i].g;
        size_t len;
        const char *text = serve_gen_text(g, &len);
        const char *prompt =
            json_string_value(json_array_get(o->prompts, o->choices[i].prompt));
        const size_t plen = o->echo ? strlen(prompt) : 0;
        char *all = malloc(plen + len + 1);
        if (!all) {
            json_decref(choices);
            return NULL;
        }
        memcpy(all, prompt, plen);
        memcpy(all + plen, text, len);
        json_array_append_new(
            choices, json_pack("{s:s%, s:I, s:o, s:s}", "text", all, plen + len,
                               "index", (json_int_t)i, "logprobs",
                               serve_gen_logprobs_json(g, plen),
                               "finish_reason", serve_gen_finish(g)));
        free(all);
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", o->id, "object",
                     "text_completion", "created", (json_int_t)o->created,
                     "model", o->model, "choices", choices, "usage",
                     usage_of(o));
}

void serve_oai_close(serve_oai *o)
{
    if (!o)
        return;
    for (uint32_t i = 0; i < o->n_choices; i++)
        serve_gen_close(o->choices[i].g);
    json_decref(o->prompts);
    free(o);
}

/* "2026-12-05T11:32:32.831Z" to seconds since 1970 (0 when unreadable). */
static int64_t epoch_of(const char *iso)
{
    struct tm tm = {0};
    if (!iso || sscanf(iso, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon,
                       &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
        return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

ty_status serve_oai_models(const serve_env *env, const char *tenant_id,
                           json_t **reply, ty_err *err)
{
    json_t *data = json_array();
    store_page page = {.cursor = 0, .limit = 1000};
    ty_status s = TY_OK;
    do {
        json_t *items = NULL;
        int64_t next = 0;
        if ((s = store_model_list(env->store, tenant_id, page, &items, &next,
                                  err)) != TY_OK)
            break;
        size_t i;
        json_t *m;
        json_array_foreach (items, i, m) {
            const char *task = json_string_value(json_object_get(m, "task"));
            if (!task || strcmp(task, "language_modeling"))
                continue;
            const char *name = json_string_value(json_object_get(m, "name"));
            const char *id = json_string_value(json_object_get(m, "id"));
            json_array_append_new(
                data, json_pack("{s:s, s:s, s:I, s:s}", "id",
                                name && name[0] ? name : id, "object", "model",
                                "created",
                                (json_int_t)epoch_of(json_string_value(
                                    json_object_get(m, "created_at"))),
                                "owned_by", "trainyard"));
        }
        json_decref(items);
        page.cursor = next;
    } while (page.cursor);
    if (s != TY_OK) {
        json_decref(data);
        return s;
    }
    *reply = json_pack("{s:s, s:o}", "object", "list", "data", data);
    return *reply ? TY_OK : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
}

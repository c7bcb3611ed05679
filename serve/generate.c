/*
 * generate.c - text generation from a language model (see generate.h).
 */
#include "serve/generate.h"
#include "node/gen_engine.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"
#include "common/opmetrics.h"
#include "models/nn.h"
#include "models/nn_decode.h"
#include "models/sample.h"
#include "serve/lm.h"
#include "serve/model.h"
#include "serve/remote.h"
#include "serve/stop.h"

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

/* A growing output text. */
typedef struct {
    char *p;
    size_t len, cap;
} text_buf;

/* A request being served: its model and prompt (serve_gen_open), then its
 * sequence in an engine (serve_gen_run) and its text. */
struct serve_gen {
    /* its own copies: a streamed generation outlives the request's
     * handler (whose serve_env it was given) and its thread's hold on the
     * model (serve/table.h: the thread lets go of it at its next request
     * after the model was deleted) */
    serve_env env;
    model_entry *held;
    serve_model m;
    int model_open;
    gen_req q;
    json_t *body; /* q's strings point into it */
    const nn_net *net;
    uint32_t vocab, context, max_tokens;
    int has_eos; /* the model's end-of-text token ends the text */
    uint32_t eos;
    uint32_t *ids; /* the prompt's */
    size_t n;
    const uint32_t *given; /* the prompt as ids (serve_gen_open_ids) */
    size_t given_n;
    stop_matcher stop;
    text_buf out;
    uint32_t generated;
    const char *finish;
    serve_gen_chunk chunk; /* streaming: each piece of text as it comes */
    void *chunk_ctx;
    uint32_t choice; /* the seed's stream (OpenAI's choice index) */
    char tenant[TY_ID_MAX];
    double t_open, t_last; /* the request's arrival, the last token's time */
    /* logprobs (serve_gen_want_logprobs): per generated token, its id,
     * logprob and the lp_top most likely ones with theirs */
    int want_lp;
    uint32_t lp_top;
    sample_logprob *lp_tok;  /* max_tokens */
    sample_logprob *lp_alts; /* max_tokens * lp_top */
    uint32_t *lp_n_alts;     /* max_tokens */
    sample_state st;
    gen_seq seq; /* in its model's engine (gen_engine.h) */
    /* on a replica of the model's deployment instead: the connection the
     * tokens come on (serve/remote.h) */
    int remote;
    int fd;
    int retried; /* on a second replica after the first failed */
};

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

ty_status serve_gen_check_body(const json_t *body, ty_err *err)
{
    gen_req q;
    return parse(body, &q, err);
}

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

/* Text now safe to send: into the output, and to the stream's callback
 * (which may ask to stop: the client left). */
static ty_status add_text(serve_gen *g, const char *s, size_t n, int *cancel,
                          ty_err *err)
{
    if (!n)
        return TY_OK;
    if (text_add(&g->out, s, n) != 0)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (g->chunk && g->chunk(g->chunk_ctx, s, n) != 0)
        *cancel = 1;
    return TY_OK;
}

/* One token's text into the stop matcher and the output; *stopped when a
 * stop string completed, *cancel when the stream's reader left. */
static ty_status emit(serve_gen *g, uint32_t token, int *stopped, int *cancel,
                      ty_err *err)
{
    char *bytes = NULL;
    size_t n = 0;
    ty_status s = nn_net_decode(g->net, &token, 1, &bytes, &n, err);
    if (s != TY_OK)
        return s;
    char *safe = malloc(STOP_FEED_CAP(n));
    if (!safe) {
        free(bytes);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    size_t k = stop_feed(&g->stop, bytes, n, safe);
    s = add_text(g, safe, k, cancel, err);
    free(safe);
    free(bytes);
    *stopped = stop_matched(&g->stop) >= 0;
    return s;
}

/* The engine's callbacks (gen_seq.next, .end): s is g->seq. */
static serve_gen *gen_of(gen_seq *s)
{
    return (serve_gen *)((char *)s - offsetof(serve_gen, seq));
}

/* Where the next token's alternatives go (NULL: not asked for). */
static sample_logprob *next_alts(serve_gen *g)
{
    return g->want_lp ? g->lp_alts + (size_t)g->generated * g->lp_top : NULL;
}

/* The next token, chosen here or on a replica (its n_alts alternatives in
 * next_alts(g)): kept, its text emitted; *finished when it was the last. */
static ty_status take_token(serve_gen *g, const sample_logprob *next,
                            uint32_t n_alts, int *finished, ty_err *err)
{
    if (g->want_lp) {
        g->lp_tok[g->generated] = *next;
        g->lp_n_alts[g->generated] = n_alts;
    }
    const double now = opm_now();
    const int first = g->generated == 0;
    const double since = now - (first ? g->t_open : g->t_last);
    opm_gen_token(g->tenant, first, since);
    if (g->remote) {
        /* the replica's engine fed the prompt: this server counts it */
        if (first)
            opm_gen_prompt(g->tenant, (unsigned)g->n);
        deploy_gen_token(g->m.env->deploy, &g->m.call, first, (uint32_t)g->n,
                         since);
    }
    g->t_last = now;
    g->generated++;
    if (g->has_eos && next->token == g->eos) {
        /* the end of the text: it has no text of its own to show */
        g->finish = "stop";
        *finished = 1;
        return TY_OK;
    }
    int stopped = 0, cancel = 0;
    ty_status s = emit(g, next->token, &stopped, &cancel, err);
    if (s != TY_OK)
        return s;
    if (stopped)
        g->finish = "stop";
    else if (cancel)
        g->finish = "cancelled";
    *finished = stopped || cancel || g->generated == g->max_tokens;
    return TY_OK;
}

/* The engine's: samples the next token from a step's logits. */
static ty_status gen_token(gen_seq *s_, const float *logits, uint32_t *scratch,
                           uint32_t *token, int *finished, ty_err *err)
{
    serve_gen *g = gen_of(s_);
    sample_logprob next;
    sample_logprobs lp = {next_alts(g), g->lp_top, 0};
    ty_status s = sample_next(&g->q.sp, &g->st, logits, g->vocab, scratch,
                              &next, g->want_lp ? &lp : NULL, err);
    if (s != TY_OK)
        return s;
    *token = next.token;
    return take_token(g, &next, lp.n_top_out, finished, err);
}

/* After the last token: the text the stop matcher held back. */
static ty_status finish_text(serve_gen *g, ty_err *err)
{
    opm_gen_done(opm_now() - g->t_open);
    if (!g->finish)
        g->finish = "length";
    if (!strcmp(g->finish, "cancelled"))
        return TY_OK;
    char tail[STOP_FINISH_CAP];
    int cancel = 0;
    size_t k = stop_finish(&g->stop, tail);
    ty_status s = add_text(g, tail, k, &cancel, err);
    if (stop_matched(&g->stop) >= 0)
        g->finish = "stop";
    return s;
}

static ty_status gen_end(gen_seq *s, ty_err *err)
{
    return finish_text(gen_of(s), err);
}

/* ---- on a replica of the model's deployment ---- */

static ty_status remote_open(serve_gen *g, uint64_t avoid, ty_err *err)
{
    const rframe_gen_req r = {
        .seq = 1,
        .n_ids = (uint32_t)g->n,
        .max_tokens = g->max_tokens,
        .choice = g->choice,
        .lp_top = g->want_lp ? g->lp_top : RFRAME_GEN_NO_LOGPROBS,
        .sp = g->q.sp};
    return serve_remote_gen_open(g->m.env->deploy, &g->m.call, &r, g->ids,
                                 avoid, &g->fd, err);
}

static ty_status local_start(serve_gen *g, ty_err *err);

/* Reads the replica's next frame and takes its token (TY_OK); *over when
 * it was the last (or a stop string ended the text, or the client left).
 * A replica that fails before the first token is replaced once, as a
 * predict's is; when no replica serves the request's model any more, the
 * generation moves to this process (g->remote 0, the engine's). */
static ty_status remote_step(serve_gen *g, int *over, ty_err *err)
{
    sample_logprob next;
    uint32_t n_alts = 0;
    ty_status s = rframe_gen_read(g->fd, 1, &next, next_alts(g),
                                  g->want_lp ? g->lp_top : 0, &n_alts, err);
    if ((s == TY_EIO || s == TY_ECONFLICT || s == TY_EFORMAT) &&
        !g->generated && !g->retried) {
        g->retried = 1;
        const uint64_t avoid = g->m.call.serial;
        serve_remote_gen_close(g->m.env->deploy, &g->m.call, g->fd, 0);
        g->fd = -1;
        s = remote_open(g, avoid, err);
        if (s != TY_ENOTFOUND)
            return s;
        /* The deployment was rolled to another model while the replica
         * failed, and no replica serves the model this request opened.
         * It runs here on that model, as serve_gen_start runs a request
         * that opened it just before the traffic moved (and
         * serve_model_run a predict): nothing was written yet, its prompt
         * was encoded and its limits checked against that model, and a
         * fresh request naming that model's id would run here too (no
         * deployment serves it). Moving it to the deployment's new model
         * would change its tokenizer, context and reply's model under it;
         * a 404 for a request the server accepted was the defect. */
        memset(err, 0, sizeof *err);
        g->remote = 0;
        return local_start(g, err);
    }
    return s != TY_OK ? s : take_token(g, &next, n_alts, over, err);
}

/* The generation is over, with s: the connection closed (which stops the
 * replica's sequence at its next step when it was not done), the held-back
 * text out; the outcome. */
static ty_status remote_end(serve_gen *g, ty_status s, ty_err *err)
{
    if (g->fd >= 0)
        serve_remote_gen_close(g->m.env->deploy, &g->m.call, g->fd,
                               s == TY_OK);
    g->fd = -1;
    if (s == TY_OK)
        return finish_text(g, err);
    g->m.failed = s != TY_EINVAL;
    if (s == TY_EIO || s == TY_EFORMAT) {
        /* the details are the server's (the log has them) */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return ty_fail(err, TY_EDEVICE, NULL,
                       "the replica of deployment %s failed during the "
                       "generation (%.300s)",
                       g->m.call.deployment_name, why);
    }
    return s;
}

static ty_status remote_wait(serve_gen *g, ty_err *err)
{
    int over = 0;
    ty_status s = TY_OK;
    while (s == TY_OK && !over && g->remote)
        s = remote_step(g, &over, err);
    if (!g->remote) /* moved to this process (remote_step) */
        return s == TY_OK ? gen_engine_wait(&g->seq, err) : s;
    return remote_end(g, s, err);
}

ty_status serve_gen_run(serve_gen *g, serve_gen_chunk chunk, void *ctx,
                        ty_err *err)
{
    ty_status s = serve_gen_start(g, chunk, ctx, err);
    return s != TY_OK ? s : serve_gen_wait(g, err);
}

ty_status serve_gen_wait(serve_gen *g, ty_err *err)
{
    return g->remote ? remote_wait(g, err) : gen_engine_wait(&g->seq, err);
}

void serve_gen_wait_all(serve_gen *const *gs, uint32_t n, ty_status *outs,
                        ty_err *errs)
{
    struct pollfd p[SERVE_GEN_WAIT_MAX];
    uint32_t at[SERVE_GEN_WAIT_MAX];
    for (uint32_t i = 0; i < n; i++)
        outs[i] = TY_OK;
    /* on replicas: each frame as it comes, whichever generation's */
    for (;;) {
        nfds_t k = 0;
        for (uint32_t i = 0; i < n && k < SERVE_GEN_WAIT_MAX; i++)
            if (gs[i]->remote && gs[i]->fd >= 0) {
                p[k] = (struct pollfd){.fd = gs[i]->fd, .events = POLLIN};
                at[k++] = i;
            }
        if (!k)
            break;
        if (poll(p, k, -1) < 0) {
            if (errno == EINTR)
                continue;
            /* cannot wait on them together: one after another */
            for (nfds_t j = 0; j < k; j++)
                outs[at[j]] = remote_wait(gs[at[j]], &errs[at[j]]);
            break;
        }
        for (nfds_t j = 0; j < k; j++) {
            if (!p[j].revents)
                continue;
            serve_gen *g = gs[at[j]];
            int over = 0;
            ty_status s = remote_step(g, &over, &errs[at[j]]);
            if (!g->remote) /* moved to this process: waited for below */
                outs[at[j]] = s;
            else if (s != TY_OK || over)
                outs[at[j]] = remote_end(g, s, &errs[at[j]]);
        }
    }
    /* (one moved here that did not start has its outcome already) */
    for (uint32_t i = 0; i < n; i++)
        if (!gs[i]->remote && outs[i] == TY_OK)
            outs[i] = gen_engine_wait(&gs[i]->seq, &errs[i]);
}

ty_status serve_gen_start(serve_gen *g, serve_gen_chunk chunk, void *ctx,
                          ty_err *err)
{
    g->chunk = chunk;
    g->chunk_ctx = ctx;
    if (g->m.admitted) {
        /* the deployment's replica runs it, unless the deployment moved
         * to another model since this request opened its own */
        ty_status s = remote_open(g, 0, err);
        if (s != TY_ENOTFOUND) {
            g->remote = s == TY_OK;
            g->m.failed = s != TY_OK;
            return s;
        }
        memset(err, 0, sizeof *err);
    }
    return local_start(g, err);
}

/* The generation in this process's engine, on the model g opened. */
static ty_status local_start(serve_gen *g, ty_err *err)
{
    sample_state_init(&g->st, g->q.sp.seed, g->choice);
    g->seq = (gen_seq){.net = g->net,
                       .vocab = g->vocab,
                       .context = g->context,
                       .ids = g->ids,
                       .n = (uint32_t)g->n,
                       .max_tokens = g->max_tokens,
                       .tenant = g->tenant,
                       .next = gen_token,
                       .end = gen_end};
    return gen_engine_submit(&g->seq, err);
}

/* The model's checks, the prompt's ids and the run's buffers. */
static ty_status prepare(serve_gen *g, ty_err *err)
{
    serve_model *m = &g->m;
    const gen_req *q = &g->q;
    const nn_net *net = g->net = model_entry_net(m->e);
    if (m->task != TY_TASK_LANGUAGE_MODELING || !nn_net_has_tokenizer(net))
        return ty_fail(err, TY_EINVAL, NULL,
                       "model %s %s; generate needs a language model trained "
                       "on text (or imported with its tokenizer)",
                       m->id,
                       m->task != TY_TASK_LANGUAGE_MODELING
                           ? "is not a language model"
                           : "has no tokenizer");
    g->vocab = nn_net_token_vocab(net);
    g->context = (uint32_t)m->features;
    g->has_eos = nn_net_eos_token(net, &g->eos);
    ty_status s = TY_OK;
    if (g->given) {
        /* token ids: each in the vocabulary */
        for (size_t i = 0; s == TY_OK && i < g->given_n; i++)
            if (g->given[i] >= g->vocab)
                s = ty_fail(err, TY_EINVAL, "text_input",
                            "token id %u (at %zu) is not in the model's "
                            "vocabulary of %u",
                            g->given[i], i, g->vocab);
        if (s == TY_OK && g->given_n &&
            !(g->ids = malloc(g->given_n * sizeof *g->ids)))
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        if (s == TY_OK && g->given_n) {
            memcpy(g->ids, g->given, g->given_n * sizeof *g->ids);
            g->n = g->given_n;
        }
    } else {
        s = serve_lm_encode(net, q->text, q->text_len, "text_input", &g->ids,
                            &g->n, err);
    }
    const size_t n = g->n;
    if (s == TY_OK && n == 0)
        s = ty_fail(err, TY_EINVAL, "text_input",
                    "text_input encodes to no token: give a prompt");
    if (s == TY_OK && n >= g->context)
        s = ty_fail(err, TY_EINVAL, "text_input",
                    "text_input is %zu tokens; the model's context is %u, "
                    "so a prompt may have at most %u",
                    n, g->context, g->context - 1);
    if (s != TY_OK)
        return s;
    const uint32_t room = g->context - (uint32_t)n;
    g->max_tokens = q->max_tokens                 ? (uint32_t)q->max_tokens
                    : room < SERVE_GEN_MAX_TOKENS ? room
                                                  : SERVE_GEN_MAX_TOKENS;
    if (g->max_tokens > room)
        return ty_fail(err, TY_EINVAL, P ".max_tokens",
                       P ".max_tokens is %u but the prompt's %zu tokens "
                         "leave %u of the model's context of %u",
                       g->max_tokens, n, room, g->context);
    if ((s = stop_init(&g->stop, q->stops, q->stop_lens, q->n_stops, err)) !=
        TY_OK) {
        if (s == TY_EINVAL && !strcmp(err->field, "stop"))
            snprintf(err->field, sizeof err->field, P ".stop");
        return s;
    }
    return TY_OK;
}

static ty_status open_gen(const serve_env *env, const char *tenant_id,
                          const char *model_ref, const json_t *body,
                          const uint32_t *ids, size_t n_ids, serve_gen **out,
                          ty_err *err);

ty_status serve_gen_open(const serve_env *env, const char *tenant_id,
                         const char *model_ref, const json_t *body,
                         serve_gen **out, ty_err *err)
{
    return open_gen(env, tenant_id, model_ref, body, NULL, 0, out, err);
}

ty_status serve_gen_open_ids(const serve_env *env, const char *tenant_id,
                             const char *model_ref, const json_t *body,
                             const uint32_t *ids, size_t n_ids, serve_gen **out,
                             ty_err *err)
{
    static const uint32_t none[1] = {0};
    return open_gen(env, tenant_id, model_ref, body, ids ? ids : none, n_ids,
                    out, err);
}

char *serve_gen_prompt_text(const serve_gen *g)
{
    char *bytes = NULL;
    size_t n = 0;
    ty_err ignore = {0};
    if (nn_net_decode(g->net, g->ids, g->n, &bytes, &n, &ignore) != TY_OK)
        return NULL;
    if (stop_utf8_valid(bytes, n))
        return bytes;
    /* bytes that are not whole UTF-8: each becomes U+FFFD */
    char *t = malloc(3 * n + 1);
    size_t k = 0;
    for (size_t i = 0; t && i < n;) {
        size_t len = 1;
        while (len < 4 && i + len <= n && !stop_utf8_valid(bytes + i, len))
            len++;
        if (i + len <= n && stop_utf8_valid(bytes + i, len)) {
            memcpy(t + k, bytes + i, len);
            k += len;
            i += len;
        } else {
            memcpy(t + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
        }
    }
    if (t)
        t[k] = 0;
    free(bytes);
    return t;
}

static ty_status open_gen(const serve_env *env, const char *tenant_id,
                          const char *model_ref, const json_t *body,
                          const uint32_t *ids, size_t n_ids, serve_gen **out,
                          ty_err *err)
{
    *out = NULL;
    serve_gen *g = calloc(1, sizeof *g);
    if (!g)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    g->body = json_incref((json_t *)body);
    g->fd = -1;
    g->given = ids;
    g->given_n = n_ids;
    g->t_open = opm_now();
    snprintf(g->tenant, sizeof g->tenant, "%s", tenant_id);
    g->env = *env;
    ty_status s = parse(g->body, &g->q, err);
    if (s == TY_OK && (s = serve_model_open(&g->env, tenant_id, model_ref, 1,
                                            &g->m, err)) == TY_OK) {
        g->model_open = 1;
        g->held = g->m.e;
        model_cache_hold(g->env.models, g->held);
    }
    if (s == TY_OK)
        s = prepare(g, err);
    /* a deployed model's limits, before any text (429) */
    if (s == TY_OK)
        s = serve_model_admit_tokens(&g->m, g->n + g->max_tokens, err);
    g->given = NULL; /* the caller's, read by prepare alone */
    if (s != TY_OK) {
        serve_gen_close(g);
        return s;
    }
    *out = g;
    return TY_OK;
}

json_t *serve_gen_result(const serve_gen *g, int with_text)
{
    const serve_model *m = &g->m;
    return json_pack(
        "{s:s, s:s, s:s%, s:s, s:I, s:I}", "model_name",
        m->name[0] ? m->name : m->id, "model_version", "1", "text_output",
        with_text && g->out.p ? g->out.p : "", with_text ? g->out.len : 0,
        "finish_reason", g->finish ? g->finish : "length", "prompt_tokens",
        (json_int_t)g->n, "completion_tokens", (json_int_t)g->generated);
}

const char *serve_gen_model_name(const serve_gen *g)
{
    return g->m.name[0] ? g->m.name : g->m.id;
}

void serve_gen_set_choice(serve_gen *g, uint32_t choice) { g->choice = choice; }

ty_status serve_gen_want_logprobs(serve_gen *g, uint32_t top, ty_err *err)
{
    g->want_lp = 1;
    g->lp_top = top;
    const size_t n = g->max_tokens ? g->max_tokens : 1;
    g->lp_tok = calloc(n, sizeof *g->lp_tok);
    g->lp_alts = calloc(n * (top ? top : 1), sizeof *g->lp_alts);
    g->lp_n_alts = calloc(n, sizeof *g->lp_n_alts);
    if (!g->lp_tok || !g->lp_alts || !g->lp_n_alts)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    return TY_OK;
}

/* A token's text, as JSON (bytes that are not whole UTF-8 on their own
 * become U+FFFD, as OpenAI's servers show them). */
static json_t *token_text(const serve_gen *g, uint32_t id)
{
    char *bytes = NULL;
    size_t n = 0;
    ty_err ignore = {0};
    json_t *t = NULL;
    if (nn_net_decode(g->net, &id, 1, &bytes, &n, &ignore) == TY_OK)
        t = stop_utf8_valid(bytes, n) ? json_stringn(bytes, n)
                                      : json_string("\xef\xbf\xbd");
    free(bytes);
    return t ? t : json_string("");
}

json_t *serve_gen_logprobs_json(const serve_gen *g, size_t offset)
{
    return serve_gen_logprobs_range(g, 0, g->generated, offset);
}

json_t *serve_gen_logprobs_range(const serve_gen *g, uint32_t from, uint32_t to,
                                 size_t offset)
{
    if (!g->want_lp)
        return json_null();
    if (to > g->generated)
        to = g->generated;
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    size_t at = offset;
    for (uint32_t i = from; i < to; i++) {
        json_t *t = token_text(g, g->lp_tok[i].token);
        json_array_append_new(offs, json_integer((json_int_t)at));
        at += json_string_length(t);
        json_array_append_new(toks, t);
        json_array_append_new(lps, json_real(g->lp_tok[i].logprob));
        json_t *top = json_object();
        for (uint32_t k = 0; k < g->lp_n_alts[i]; k++) {
            const sample_logprob *a = &g->lp_alts[(size_t)i * g->lp_top + k];
            json_t *at_text = token_text(g, a->token);
            json_object_set_new(top, json_string_value(at_text),
                                json_real(a->logprob));
            json_decref(at_text);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs",
                     lps, "top_logprobs", tops, "text_offset", offs);
}

const char *serve_gen_text(const serve_gen *g, size_t *len)
{
    *len = g->out.len;
    return g->out.p ? g->out.p : "";
}

const char *serve_gen_finish(const serve_gen *g)
{
    return g->finish ? g->finish : "length";
}

void serve_gen_counts(const serve_gen *g, uint32_t *prompt,
                      uint32_t *completion)
{
    *prompt = (uint32_t)g->n;
    *completion = g->generated;
}

void serve_gen_close(serve_gen *g)
{
    if (!g)
        return;
    free(g->lp_tok);
    free(g->lp_alts);
    free(g->lp_n_alts);
    if (g->fd >= 0) /* started on a replica, never waited for */
        serve_remote_gen_close(g->m.env->deploy, &g->m.call, g->fd, 0);
    if (g->model_open) {
        g->m.call.tokens_used = g->n + g->generated; /* the rest goes back */
        serve_model_close(&g->m);
    }
    if (g->held)
        model_cache_release(g->env.models, g->held);
    free(g->out.p);
    free(g->ids);
    json_decref(g->body);
    free(g);
}

ty_status serve_generate(const serve_env *env, const char *tenant_id,
                         const char *model_ref, const json_t *body,
                         json_t **reply, ty_err *err)
{
    *reply = NULL;
    serve_gen *g;
    ty_status s = serve_gen_open(env, tenant_id, model_ref, body, &g, err);
    if (s != TY_OK)
        return s;
    if ((s = serve_gen_run(g, NULL, NULL, err)) == TY_OK &&
        !(*reply = serve_gen_result(g, 1)))
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    serve_gen_close(g);
    return s;
}

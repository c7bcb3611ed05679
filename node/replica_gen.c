/*
 * replica_gen.c - generation in the serving replica (see replica_gen.h).
 *
 * The engine's thread samples each token (models/sample.h: the request's
 * parameters, the seed's stream of its choice, so a replica writes the
 * tokens the server's own engine would) and writes its frame without
 * blocking; what the socket cannot take yet waits in the generation's
 * buffer, so a slow reader never holds up the engine's step. A write that
 * fails (the server closed the connection: a stop string, a client that
 * left) ends the sequence at that step. The generation's own thread waits
 * for the end, writes what is left (waiting at most GEN_FLUSH_MS for the
 * reader) and closes the connection.
 */
#include "node/replica_gen.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "node/gen_engine.h"

#define GEN_FLUSH_MS 30000

static _Atomic int running;

typedef struct {
    gen_seq seq; /* first: the engine's callbacks get &seq */
    int fd;
    rframe_gen_req req;
    uint32_t *ids;
    sample_state st;
    sample_logprob alts[RFRAME_GEN_MAX_ALTS];
    uint32_t generated;
    int has_eos; /* the model's end-of-text token ends it */
    uint32_t eos;
    int gone;           /* a write failed: the reader closed */
    unsigned char *out; /* frames not written yet: [off, len) */
    size_t off, len, cap;
} rgen;

/* Writes what the socket takes now. */
static void flush_some(rgen *g)
{
    while (!g->gone && g->off < g->len) {
        ssize_t n = send(g->fd, g->out + g->off, g->len - g->off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0)
            g->off += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        else
            g->gone = 1;
    }
    if (g->off == g->len || g->gone)
        g->off = g->len = 0;
}

/* Room for n more bytes in g->out: 0, or -1 when out of memory. */
static int out_room(rgen *g, size_t n)
{
    if (g->len + n <= g->cap)
        return 0;
    if (g->off) { /* the written part goes first */
        memmove(g->out, g->out + g->off, g->len - g->off);
        g->len -= g->off;
        g->off = 0;
        if (g->len + n <= g->cap)
            return 0;
    }
    size_t cap = g->cap ? g->cap : 1024;
    while (cap < g->len + n)
        cap *= 2;
    unsigned char *p = realloc(g->out, cap);
    if (!p)
        return -1;
    g->out = p;
    g->cap = cap;
    return 0;
}

static ty_status next_token(gen_seq *s, const float *logits, uint32_t *scratch,
                            uint32_t *token, int *finished, ty_err *err)
{
    rgen *g = (rgen *)s;
    const int want_lp = g->req.lp_top != RFRAME_GEN_NO_LOGPROBS;
    sample_logprob next;
    sample_logprobs lp = {g->alts, want_lp ? g->req.lp_top : 0, 0};
    ty_status st = sample_next(&g->req.sp, &g->st, logits, s->vocab, scratch,
                               &next, want_lp ? &lp : NULL, err);
    if (st != TY_OK)
        return st;
    *token = next.token;
    g->generated++;
    if (out_room(g, RFRAME_TOK_HDR_BYTES + 8 * (size_t)lp.n_top_out) != 0)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    g->len += rframe_tok_encode(g->req.seq, &next, g->alts, lp.n_top_out,
                                g->out + g->len);
    flush_some(g);
    *finished = g->gone || g->generated == g->req.max_tokens ||
                (g->has_eos && next.token == g->eos);
    return TY_OK;
}

static ty_status end_seq(gen_seq *s, ty_err *err)
{
    (void)s;
    (void)err;
    return TY_OK;
}

/* The frame status for an engine's error. */
static uint32_t frame_status(ty_status s)
{
    switch (s) {
        case TY_EUNAVAILABLE: return RFRAME_EBUSY;
        case TY_ENOMEM: return RFRAME_ENOMEM;
        case TY_EINVAL: return RFRAME_ESHAPE;
        default: return RFRAME_EDEVICE;
    }
}

/* Appends an error frame. */
static void add_error(rgen *g, uint32_t status, const char *msg)
{
    size_t n = strlen(msg);
    if (out_room(g, RFRAME_TOK_HDR_BYTES + n) != 0)
        return;
    rframe_tok_error_encode(g->req.seq, status, n, g->out + g->len);
    memcpy(g->out + g->len + RFRAME_TOK_HDR_BYTES, msg, n);
    g->len += RFRAME_TOK_HDR_BYTES + n;
}

/* Writes the rest, waiting for the reader at most GEN_FLUSH_MS. */
static void flush_all(rgen *g)
{
    for (;;) {
        flush_some(g);
        if (g->gone || g->len == 0)
            return;
        struct pollfd p = {.fd = g->fd, .events = POLLOUT};
        int rc = poll(&p, 1, GEN_FLUSH_MS);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return;
    }
}

static void rgen_free(rgen *g)
{
    close(g->fd);
    free(g->ids);
    free(g->out);
    free(g);
    atomic_fetch_sub(&running, 1);
}

static void *gen_main(void *arg)
{
    rgen *g = arg;
    ty_err err = {0};
    ty_status s = gen_engine_run(&g->seq, &err);
    if (s != TY_OK)
        add_error(g, frame_status(s),
                  err.msg[0] ? err.msg : "generation failed");
    flush_all(g);
    rgen_free(g);
    return NULL;
}

void replica_gen_refuse(int fd, uint32_t seq, uint32_t status, const char *msg)
{
    unsigned char b[RFRAME_TOK_HDR_BYTES + 256];
    size_t n = strlen(msg);
    if (n > 256)
        n = 256;
    rframe_tok_error_encode(seq, status, n, b);
    memcpy(b + RFRAME_TOK_HDR_BYTES, msg, n);
    /* a fresh connection's buffer takes a frame this small */
    ssize_t w =
        send(fd, b, RFRAME_TOK_HDR_BYTES + n, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
    close(fd);
}

/* Why the model cannot run r's request (a message into why), or 0. */
static int cannot_run(const nn_net *net, const rframe_gen_req *r,
                      const uint32_t *ids, char *why, size_t cap)
{
    const uint64_t context = nn_net_input_features(net);
    const uint32_t vocab = nn_net_token_vocab(net);
    if (nn_net_task(net) != TY_TASK_LANGUAGE_MODELING || !vocab) {
        snprintf(why, cap, "the deployed model is not a language model");
        return 1;
    }
    ty_err err = {0};
    if (sample_params_check(&r->sp, &err) != TY_OK) {
        snprintf(why, cap, "%s", err.msg);
        return 1;
    }
    if ((uint64_t)r->n_ids + r->max_tokens > context) {
        snprintf(why, cap,
                 "%u prompt tokens and %u to write are past the model's "
                 "context of %llu",
                 r->n_ids, r->max_tokens, (unsigned long long)context);
        return 1;
    }
    for (uint32_t i = 0; i < r->n_ids; i++)
        if (ids[i] >= vocab) {
            snprintf(why, cap, "token id %u is not in the vocabulary of %u",
                     ids[i], vocab);
            return 1;
        }
    return 0;
}

void replica_gen_start(const nn_net *net, int fd, const rframe_gen_req *r,
                       uint32_t *ids)
{
    char why[200];
    if (cannot_run(net, r, ids, why, sizeof why)) {
        free(ids);
        replica_gen_refuse(fd, r->seq, RFRAME_ESHAPE, why);
        return;
    }
    rgen *g = calloc(1, sizeof *g);
    if (!g) {
        free(ids);
        replica_gen_refuse(fd, r->seq, RFRAME_ENOMEM, "out of memory");
        return;
    }
    g->fd = fd;
    g->req = *r;
    g->ids = ids;
    g->has_eos = nn_net_eos_token(net, &g->eos);
    sample_state_init(&g->st, r->sp.seed, r->choice);
    g->seq = (gen_seq){.net = net,
                       .vocab = nn_net_token_vocab(net),
                       .context = (uint32_t)nn_net_input_features(net),
                       .ids = ids,
                       .n = r->n_ids,
                       .max_tokens = r->max_tokens,
                       .tenant = "",
                       .next = next_token,
                       .end = end_seq};
    atomic_fetch_add(&running, 1);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    /* the default stack: glibc carves the libraries' static TLS out of a
     * thread's stack, and a CUDA build's (cuDNN, cuBLAS) overflowed a
     * 256 KiB one at the thread's first call (the pages are only touched
     * as used) */
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, gen_main, g) != 0) {
        g->fd = -1;
        rgen_free(g);
        replica_gen_refuse(fd, r->seq, RFRAME_ENOMEM, "no thread to generate");
    }
    pthread_attr_destroy(&attr);
}

int replica_gen_running(void) { return atomic_load(&running); }

static _Atomic int lm_loaded;

void replica_gen_loaded(const nn_net *net)
{
    atomic_store(&lm_loaded, nn_net_task(net) == TY_TASK_LANGUAGE_MODELING);
}

json_t *replica_gen_heartbeat(void)
{
    if (!atomic_load(&lm_loaded))
        return NULL;
    gen_engine_totals t;
    gen_engine_totals_get(&t);
    return json_pack(
        "{s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}}", RPROTO_F_GENERATION,
        RPROTO_F_GEN_SEQUENCES, (json_int_t)t.running, RPROTO_F_GEN_WAITING,
        (json_int_t)t.waiting, RPROTO_F_GEN_KV_USED, (json_int_t)t.kv_used,
        RPROTO_F_GEN_KV_TOTAL, (json_int_t)t.kv_total, RPROTO_F_GEN_KV_CACHED,
        (json_int_t)t.kv_cached, RPROTO_F_GEN_PROMPT,
        (json_int_t)t.prompt_tokens, RPROTO_F_GEN_GENERATED,
        (json_int_t)t.generated_tokens, RPROTO_F_GEN_PREFIX_HIT,
        (json_int_t)t.prefix_hit_tokens);
}

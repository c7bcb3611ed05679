/* fake_graph.h - fake_device.h's backend with the semantics of a CUDA
 * stream and CUDA graphs, on the CPU, so the trainer's graph path (and
 * its pinned, fenced uploads) can be proven without a GPU.
 *
 * Stream: every kernel, upload, zero and copy is queued with its
 * arguments copied by value (the nn_exec, *nn_optim_args, *nn_conv_desc
 * included) and runs later, at a sync point: download, a loss or sum
 * whose result the host reads, dropout's forward (its rng is the host's),
 * release, host_release, or fence_wait (which runs the queue only up to
 * its fence's mark). An upload from fake_graph_host_alloc memory reads its
 * source when it runs, as a pinned cudaMemcpyAsync does; from other host
 * memory it copies the source at the call, as CUDA stages pageable memory.
 *
 * Graphs: graph_begin starts recording the calls instead of queuing them
 * (nothing runs), graph_end stops, graph_launch queues a copy of the
 * recording: kernel arguments are those of the capture, memory is read at
 * replay - exactly what cudaGraphLaunch does. A call that CUDA forbids in
 * a capture (alloc, release, download, status, a host-read result, a
 * pageable upload, dropout's host rng, fence record) counts in
 * fake_graph_violations. fake_graph_fail_begin / _fail_end make the next
 * capture fail at its start or end.
 *
 * Single-threaded by contract: only the trainer's thread calls a backend.
 * Include in one test file and call fake_graph_init(). */
#ifndef TY_TEST_FAKE_GRAPH_H
#define TY_TEST_FAKE_GRAPH_H

#include <assert.h>
#include <stdalign.h>
#include <stddef.h>

#include "fake_device.h"

/* Every member is wrapped below: a new one must be too. */
static_assert(sizeof(nn_backend) ==
                  sizeof(const char *) + 63 * sizeof(void (*)(void)),
              "a member was added to nn_backend: wrap it in fake_graph.h");

#define FG_ARGS_MAX 256

typedef struct {
    void (*run)(const void *args);
    void *heap; /* staged upload source, owned, or NULL */
    alignas(max_align_t) unsigned char args[FG_ARGS_MAX];
} fg_call;

typedef struct {
    fg_call *calls;
    size_t n, cap;
} fg_list;

typedef struct {
    size_t mark; /* stream position recorded; 0: none */
} fg_fence;

static fg_list fg_stream; /* [fg_done, n) pending */
static size_t fg_done;
static uint64_t fg_pos; /* calls ever queued (fence marks) */
static uint64_t fg_ran; /* calls ever run */
static fg_list *fg_rec; /* recording, or NULL */
static nn_backend fake_graph;
static uint64_t fake_graph_launches, fake_graph_captures, fake_graph_violations,
    fake_graph_deferred_reads;
static int fake_graph_fail_begin, fake_graph_fail_end;

#define FG_PINNED_MAX 64
static struct {
    const unsigned char *p;
    size_t bytes;
} fg_pinned[FG_PINNED_MAX];

static void fg_list_push(fg_list *l, const fg_call *c)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->calls = realloc(l->calls, l->cap * sizeof *l->calls);
        assert(l->calls);
    }
    l->calls[l->n++] = *c;
}

/* Queues (or records) run(args); heap is owned by the call. */
static void fg_push(void (*run)(const void *), const void *args, size_t size,
                    void *heap)
{
    fg_call c = {.run = run, .heap = heap};
    assert(size <= FG_ARGS_MAX);
    memcpy(c.args, args, size);
    if (fg_rec) {
        fg_list_push(fg_rec, &c);
        return;
    }
    fg_list_push(&fg_stream, &c);
    fg_pos++;
}

/* Runs the stream's calls until fg_ran reaches upto. */
static void fg_run_to(uint64_t upto)
{
    while (fg_ran < upto && fg_done < fg_stream.n) {
        fg_call *c = &fg_stream.calls[fg_done++];
        c->run(c->args);
        free(c->heap);
        c->heap = NULL;
        fg_ran++;
    }
    if (fg_done == fg_stream.n)
        fg_done = fg_stream.n = 0;
}

static void fg_sync(void) { fg_run_to(fg_pos); }

/* A sync point: in a capture, a violation. */
static void fg_sync_point(void)
{
    if (fg_rec)
        fake_graph_violations++;
    fg_sync();
}

static nn_exec fg_ex(const nn_exec *ex)
{
    nn_exec e = {0};
    if (ex)
        e = *ex;
    return e;
}

static int fg_is_pinned(const void *p)
{
    const unsigned char *q = p;
    for (int i = 0; i < FG_PINNED_MAX; i++)
        if (fg_pinned[i].p && q >= fg_pinned[i].p &&
            q < fg_pinned[i].p + fg_pinned[i].bytes)
            return 1;
    return 0;
}

#define FG_PUSH(run, a) fg_push((run), &(a), sizeof(a), NULL)

/* ---- memory ---- */

static void *fg_alloc(const nn_exec *ex, size_t bytes)
{
    if (fg_rec)
        fake_graph_violations++;
    return fake_device_alloc(ex, bytes);
}

static void fg_release(const nn_exec *ex, void *p)
{
    fg_sync_point();
    fake_device_release(ex, p);
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} fg_copy_a;

static void fg_copy_run(const void *p)
{
    const fg_copy_a *a = p;
    if (a->bytes && a->dst != a->src)
        memmove(a->dst, a->src, a->bytes);
}

static void fg_upload_run(const void *p)
{
    fake_graph_deferred_reads++;
    fg_copy_run(p);
}

static void fg_upload(const nn_exec *ex, void *dst, const void *src,
                      size_t bytes)
{
    (void)ex;
    if (fg_is_pinned(src)) {
        fg_copy_a a = {dst, src, bytes};
        FG_PUSH(fg_upload_run, a);
        return;
    }
    if (fg_rec)
        fake_graph_violations++;
    void *stage = malloc(bytes ? bytes : 1);
    assert(stage);
    memcpy(stage, src, bytes);
    fg_copy_a a = {dst, stage, bytes};
    fg_push(fg_copy_run, &a, sizeof a, stage);
}

static void fg_download(const nn_exec *ex, void *dst, const void *src,
                        size_t bytes)
{
    (void)ex;
    fg_sync_point();
    memcpy(dst, src, bytes);
}

static void fg_copy(const nn_exec *ex, void *dst, const void *src, size_t bytes)
{
    (void)ex;
    fg_copy_a a = {dst, src, bytes};
    FG_PUSH(fg_copy_run, a);
}

typedef struct {
    void *dst;
    size_t bytes;
} fg_zero_a;

static void fg_zero_run(const void *p)
{
    const fg_zero_a *a = p;
    memset(a->dst, 0, a->bytes);
}

static void fg_zero(const nn_exec *ex, void *dst, size_t bytes)
{
    (void)ex;
    fg_zero_a a = {dst, bytes};
    FG_PUSH(fg_zero_run, a);
}

static ty_status fg_status(const nn_exec *ex, ty_err *err)
{
    if (fg_rec)
        fake_graph_violations++;
    return fake_device_status(ex, err);
}

/* ---- kernels: one args struct, runner and wrapper each ---- */

#define CPU nn_backend_cpu

typedef struct {
    nn_exec ex;
    float *c;
    const float *a, *b;
    int ta, tb, m, n, k;
    float alpha, beta;
} fg_gemm_a;
static void fg_gemm_run(const void *p)
{
    const fg_gemm_a *a = p;
    CPU.gemm(&a->ex, a->c, a->a, a->b, a->ta, a->tb, a->m, a->n, a->k, a->alpha,
             a->beta);
}
static void fg_gemm(const nn_exec *ex, float *c, const float *a, const float *b,
                    int ta, int tb, int m, int n, int k, float alpha,
                    float beta)
{
    fg_gemm_a x = {fg_ex(ex), c, a, b, ta, tb, m, n, k, alpha, beta};
    FG_PUSH(fg_gemm_run, x);
}

typedef struct {
    nn_exec ex;
    float *c;
    const void *a, *b;
    nn_dtype dt;
    int ta, tb, m, n, k;
    float alpha, beta;
} fg_gemm_lp_a;
static void fg_gemm_lp_run(const void *p)
{
    const fg_gemm_lp_a *a = p;
    CPU.gemm_lp(&a->ex, a->c, a->a, a->b, a->dt, a->ta, a->tb, a->m, a->n, a->k,
                a->alpha, a->beta);
}
static void fg_gemm_lp(const nn_exec *ex, float *c, const void *a,
                       const void *b, nn_dtype dt, int ta, int tb, int m, int n,
                       int k, float alpha, float beta)
{
    fg_gemm_lp_a x = {fg_ex(ex), c, a, b, dt, ta, tb, m, n, k, alpha, beta};
    FG_PUSH(fg_gemm_lp_run, x);
}

typedef struct {
    nn_exec ex;
    void *dst;
    nn_dtype dt;
    const float *src;
    size_t len;
} fg_cast_a;
static void fg_cast_run(const void *p)
{
    const fg_cast_a *a = p;
    CPU.cast(&a->ex, a->dst, a->dt, a->src, a->len);
}
static void fg_cast(const nn_exec *ex, void *dst, nn_dtype dt, const float *src,
                    size_t len)
{
    fg_cast_a x = {fg_ex(ex), dst, dt, src, len};
    FG_PUSH(fg_cast_run, x);
}

/* (ex, float *, const float *, uint32_t, uint32_t): bias_rows, bias_grad,
 * softmax_forward. */
typedef struct {
    nn_exec ex;
    float *o;
    const float *i;
    uint32_t n, c;
    int which;
} fg_rows_a;
static void fg_rows_run(const void *p)
{
    const fg_rows_a *a = p;
    if (a->which == 0)
        CPU.bias_rows(&a->ex, a->o, a->i, a->n, a->c);
    else if (a->which == 1)
        CPU.bias_grad(&a->ex, a->o, a->i, a->n, a->c);
    else
        CPU.softmax_forward(&a->ex, a->o, a->i, a->n, a->c);
}
static void fg_bias_rows(const nn_exec *ex, float *o, const float *i,
                         uint32_t n, uint32_t c)
{
    fg_rows_a a = {fg_ex(ex), o, i, n, c, 0};
    FG_PUSH(fg_rows_run, a);
}
static void fg_bias_grad(const nn_exec *ex, float *o, const float *i,
                         uint32_t n, uint32_t c)
{
    fg_rows_a a = {fg_ex(ex), o, i, n, c, 1};
    FG_PUSH(fg_rows_run, a);
}
static void fg_softmax_forward(const nn_exec *ex, float *o, const float *i,
                               uint32_t n, uint32_t c)
{
    fg_rows_a a = {fg_ex(ex), o, i, n, c, 2};
    FG_PUSH(fg_rows_run, a);
}

/* Elementwise: act forward/backward, dropout backward, leaky relu, softmax
 * backward, add, scale. */
typedef struct {
    nn_exec ex;
    int which;
    nn_op op;
    float *o;
    const float *i0, *i1, *i2;
    size_t len;
    uint32_t n, c;
    float f;
} fg_ew_a;
enum {
    FG_ACT_F,
    FG_ACT_B,
    FG_DROP_B,
    FG_LRELU_F,
    FG_LRELU_B,
    FG_SMAX_B,
    FG_ADD,
    FG_SCALE
};
static void fg_ew_run(const void *p)
{
    const fg_ew_a *a = p;
    const nn_exec *ex = &a->ex;
    switch (a->which) {
        case FG_ACT_F: CPU.act_forward(ex, a->op, a->o, a->i0, a->len); break;
        case FG_ACT_B:
            CPU.act_backward(ex, a->op, a->o, a->i0, a->i1, a->i2, a->len);
            break;
        case FG_DROP_B:
            CPU.dropout_backward(ex, a->o, a->i0, a->i1, a->len);
            break;
        case FG_LRELU_F:
            CPU.leaky_relu_forward(ex, a->o, a->i0, a->len, a->f);
            break;
        case FG_LRELU_B:
            CPU.leaky_relu_backward(ex, a->o, a->i0, a->i1, a->len, a->f);
            break;
        case FG_SMAX_B:
            CPU.softmax_backward(ex, a->o, a->i0, a->i1, a->n, a->c);
            break;
        case FG_ADD: CPU.add(ex, a->o, a->i0, a->i1, a->len); break;
        default: CPU.scale(ex, a->o, a->len, a->f);
    }
}
#define FG_EW(...)                  \
    do {                            \
        fg_ew_a a_ = {__VA_ARGS__}; \
        FG_PUSH(fg_ew_run, a_);     \
    } while (0)
static void fg_act_forward(const nn_exec *ex, nn_op op, float *out,
                           const float *in, size_t len)
{
    FG_EW(.ex = fg_ex(ex), .which = FG_ACT_F, .op = op, .o = out, .i0 = in,
          .len = len);
}
static void fg_act_backward(const nn_exec *ex, nn_op op, float *din,
                            const float *dout, const float *in,
                            const float *out, size_t len)
{
    FG_EW(.ex = fg_ex(ex), .which = FG_ACT_B, .op = op, .o = din, .i0 = dout,
          .i1 = in, .i2 = out, .len = len);
}
static void fg_dropout_backward(const nn_exec *ex, float *din,
                                const float *dout, const float *mask,
                                size_t len)
{
    FG_EW(.ex = fg_ex(ex), .which = FG_DROP_B, .o = din, .i0 = dout, .i1 = mask,
          .len = len);
}
static void fg_leaky_relu_forward(const nn_exec *ex, float *out,
                                  const float *in, size_t len, float slope)
{
    FG_EW(.ex = fg_ex(ex), .which = FG_LRELU_F, .o = out, .i0 = in, .len = len,
          .f = slope);
}
static void fg_leaky_relu_backward(const nn_exec *ex, float *din,
                                   const float *dout, const float *in,
                                   size_t len, float slope)
{
    FG_EW(.ex = fg_ex(ex), .which = FG_LRELU_B, .o = din, .i0 = dout, .i1 = in,
          .len = len, .f = slope);
}
static void fg_softmax_backward(const nn_exec *ex, float *din,
                                const float *dout, const float *out, uint32_t n,
                                uint32_t c)
{
    FG_EW(.ex = fg_ex(ex), .which = FG_SMAX_B, .o = din, .i0 = dout, .i1 = out,
          .n = n, .c = c);
}
static void fg_add(const nn_exec *ex, float *out, const float *a,
                   const float *b, size_t len)
{
    FG_EW(.ex = fg_ex(ex), .which = FG_ADD, .o = out, .i0 = a, .i1 = b,
          .len = len);
}
static void fg_scale(const nn_exec *ex, float *x, size_t len, float alpha)
{
    FG_EW(.ex = fg_ex(ex), .which = FG_SCALE, .o = x, .len = len, .f = alpha);
}

/* The host's rng advances at the call: run it now, in stream order. */
static void fg_dropout_forward(const nn_exec *ex, float *out, float *mask,
                               const float *in, size_t len, float rate,
                               ty_rng *rng)
{
    fg_sync_point();
    CPU.dropout_forward(ex, out, mask, in, len, rate, rng);
}

/* ---- losses: into ex->acc when queued, else the host waits ---- */

typedef struct {
    nn_exec ex;
    int which; /* 0 xent, 1 smooth, 2 bce, 3 mse, 4 huber */
    float *d, *probs;
    const float *x, *t;
    const int32_t *labels;
    size_t len;
    uint32_t n, c;
    float f, gs;
} fg_loss_a;
static double fg_loss_call(const fg_loss_a *a, uint32_t *correct)
{
    const nn_exec *ex = &a->ex;
    switch (a->which) {
        case 0:
            return CPU.softmax_xent(ex, a->d, a->probs, correct, a->x,
                                    a->labels, a->n, a->c, a->gs);
        case 1:
            return CPU.softmax_xent_smooth(ex, a->d, correct, a->x, a->labels,
                                           a->n, a->c, a->f, a->gs);
        case 2:
            return CPU.bce_logits(ex, a->d, a->probs, correct, a->x, a->labels,
                                  a->n, a->gs);
        case 3: return CPU.mse(ex, a->d, a->x, a->t, a->len, a->gs);
        default: return CPU.huber(ex, a->d, a->x, a->t, a->len, a->f, a->gs);
    }
}
static void fg_loss_run(const void *p) { (void)fg_loss_call(p, NULL); }
static double fg_loss(const fg_loss_a *a, uint32_t *correct)
{
    if (correct)
        *correct = 0;
    if (a->ex.acc || (!a->labels && a->which != 3 && a->which != 4)) {
        /* Nothing comes back to the host: queue it. */
        fg_push(fg_loss_run, a, sizeof *a, NULL);
        return 0.0;
    }
    fg_sync_point();
    return fg_loss_call(a, correct);
}
static double fg_softmax_xent(const nn_exec *ex, float *dlogits, float *probs,
                              uint32_t *correct, const float *logits,
                              const int32_t *labels, uint32_t n, uint32_t c,
                              float gs)
{
    fg_loss_a a = {.ex = fg_ex(ex),
                   .which = 0,
                   .d = dlogits,
                   .probs = probs,
                   .x = logits,
                   .labels = labels,
                   .n = n,
                   .c = c,
                   .gs = gs};
    return fg_loss(&a, correct);
}
static double fg_softmax_xent_smooth(const nn_exec *ex, float *dlogits,
                                     uint32_t *correct, const float *logits,
                                     const int32_t *labels, uint32_t n,
                                     uint32_t c, float smoothing, float gs)
{
    fg_loss_a a = {.ex = fg_ex(ex),
                   .which = 1,
                   .d = dlogits,
                   .x = logits,
                   .labels = labels,
                   .n = n,
                   .c = c,
                   .f = smoothing,
                   .gs = gs};
    return fg_loss(&a, correct);
}
static double fg_bce_logits(const nn_exec *ex, float *dlogits, float *probs,
                            uint32_t *correct, const float *logits,
                            const int32_t *labels, uint32_t n, float gs)
{
    fg_loss_a a = {.ex = fg_ex(ex),
                   .which = 2,
                   .d = dlogits,
                   .probs = probs,
                   .x = logits,
                   .labels = labels,
                   .n = n,
                   .gs = gs};
    return fg_loss(&a, correct);
}
static double fg_mse(const nn_exec *ex, float *dpred, const float *pred,
                     const float *target, size_t len, float gs)
{
    fg_loss_a a = {.ex = fg_ex(ex),
                   .which = 3,
                   .d = dpred,
                   .x = pred,
                   .t = target,
                   .len = len,
                   .gs = gs};
    return fg_loss(&a, NULL);
}
static double fg_huber(const nn_exec *ex, float *dpred, const float *pred,
                       const float *target, size_t len, float delta, float gs)
{
    fg_loss_a a = {.ex = fg_ex(ex),
                   .which = 4,
                   .d = dpred,
                   .x = pred,
                   .t = target,
                   .len = len,
                   .f = delta,
                   .gs = gs};
    return fg_loss(&a, NULL);
}
static double fg_sum_squares(const nn_exec *ex, const float *x, size_t len)
{
    fg_sync_point();
    return CPU.sum_squares(ex, x, len);
}

/* ---- optimizers: *s copied, as a kernel's by-value arguments ---- */

typedef struct {
    nn_exec ex;
    float *p, *g, *m, *v;
    size_t len;
    nn_optim_args s;
    int adam;
} fg_opt_a;
static void fg_opt_run(const void *p)
{
    const fg_opt_a *a = p;
    if (a->adam)
        CPU.adam(&a->ex, a->p, a->g, a->m, a->v, a->len, &a->s);
    else
        CPU.sgd(&a->ex, a->p, a->g, a->m, a->len, &a->s);
}
static void fg_sgd(const nn_exec *ex, float *param, float *grad, float *buf,
                   size_t len, const nn_optim_args *s)
{
    fg_opt_a a = {fg_ex(ex), param, grad, buf, NULL, len, *s, 0};
    FG_PUSH(fg_opt_run, a);
}
static void fg_adam(const nn_exec *ex, float *param, float *grad, float *m,
                    float *v, size_t len, const nn_optim_args *s)
{
    fg_opt_a a = {fg_ex(ex), param, grad, m, v, len, *s, 1};
    FG_PUSH(fg_opt_run, a);
}

/* ---- normalization ---- */

typedef struct {
    nn_exec ex;
    int which; /* 0 bn fwd, 1 bn bwd, 2 ln fwd, 3 ln bwd */
    float *o0, *o1, *o2, *o3, *o4;
    const float *i0, *i1, *i2, *i3, *i4;
    uint32_t n, c, s;
    int flag;
    float f0, f1;
} fg_norm_a;
static void fg_norm_run(const void *p)
{
    const fg_norm_a *a = p;
    const nn_exec *ex = &a->ex;
    switch (a->which) {
        case 0:
            CPU.batchnorm_forward(ex, a->o0, a->o1, a->o2, a->o3, a->o4, a->i0,
                                  a->i1, a->i2, a->n, a->c, a->s, a->flag,
                                  a->f0, a->f1);
            break;
        case 1:
            CPU.batchnorm_backward(ex, a->o0, a->o1, a->o2, a->i0, a->i1, a->i2,
                                   a->i3, a->i4, a->n, a->c, a->s, a->flag);
            break;
        case 2:
            CPU.layernorm_forward(ex, a->o0, a->o1, a->o2, a->i0, a->i1, a->i2,
                                  a->n, a->c, a->f0);
            break;
        default:
            CPU.layernorm_backward(ex, a->o0, a->o1, a->o2, a->i0, a->i1, a->i2,
                                   a->i3, a->i4, a->n, a->c);
    }
}
static void fg_batchnorm_forward(const nn_exec *ex, float *out, float *mean,
                                 float *invstd, float *rmean, float *rvar,
                                 const float *x, const float *gamma,
                                 const float *beta, uint32_t n, uint32_t c,
                                 uint32_t s, int training, float momentum,
                                 float eps)
{
    fg_norm_a a = {.ex = fg_ex(ex),
                   .which = 0,
                   .o0 = out,
                   .o1 = mean,
                   .o2 = invstd,
                   .o3 = rmean,
                   .o4 = rvar,
                   .i0 = x,
                   .i1 = gamma,
                   .i2 = beta,
                   .n = n,
                   .c = c,
                   .s = s,
                   .flag = training,
                   .f0 = momentum,
                   .f1 = eps};
    FG_PUSH(fg_norm_run, a);
}
static void fg_batchnorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                                  float *dbeta, const float *dout,
                                  const float *x, const float *gamma,
                                  const float *mean, const float *invstd,
                                  uint32_t n, uint32_t c, uint32_t s,
                                  int batch_stats)
{
    fg_norm_a a = {.ex = fg_ex(ex),
                   .which = 1,
                   .o0 = dx,
                   .o1 = dgamma,
                   .o2 = dbeta,
                   .i0 = dout,
                   .i1 = x,
                   .i2 = gamma,
                   .i3 = mean,
                   .i4 = invstd,
                   .n = n,
                   .c = c,
                   .s = s,
                   .flag = batch_stats};
    FG_PUSH(fg_norm_run, a);
}
static void fg_layernorm_forward(const nn_exec *ex, float *out, float *mean,
                                 float *rstd, const float *x,
                                 const float *gamma, const float *beta,
                                 uint32_t n, uint32_t d, float eps)
{
    fg_norm_a a = {.ex = fg_ex(ex),
                   .which = 2,
                   .o0 = out,
                   .o1 = mean,
                   .o2 = rstd,
                   .i0 = x,
                   .i1 = gamma,
                   .i2 = beta,
                   .n = n,
                   .c = d,
                   .f0 = eps};
    FG_PUSH(fg_norm_run, a);
}
static void fg_layernorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                                  float *dbeta, const float *dout,
                                  const float *x, const float *gamma,
                                  const float *mean, const float *rstd,
                                  uint32_t n, uint32_t d)
{
    fg_norm_a a = {.ex = fg_ex(ex),
                   .which = 3,
                   .o0 = dx,
                   .o1 = dgamma,
                   .o2 = dbeta,
                   .i0 = dout,
                   .i1 = x,
                   .i2 = gamma,
                   .i3 = mean,
                   .i4 = rstd,
                   .n = n,
                   .c = d};
    FG_PUSH(fg_norm_run, a);
}

/* ---- convolution and pooling: *d copied ---- */

typedef struct {
    nn_exec ex;
    int which; /* 0 conv fwd, 1 conv bwd, 2 pool fwd, 3 bwd */
    nn_op op;
    float *o0, *o1, *o2;
    int32_t *arg;
    const int32_t *carg;
    const float *i0, *i1, *i2;
    uint32_t n;
    nn_conv_desc d;
} fg_conv_a;
static void fg_conv_run(const void *p)
{
    const fg_conv_a *a = p;
    const nn_exec *ex = &a->ex;
    switch (a->which) {
        case 0:
            CPU.conv2d_forward(ex, a->o0, a->i0, a->i1, a->i2, a->n, &a->d);
            break;
        case 1:
            CPU.conv2d_backward(ex, a->o0, a->o1, a->o2, a->i0, a->i1, a->i2,
                                a->n, &a->d);
            break;
        case 2:
            CPU.pool2d_forward(ex, a->op, a->o0, a->arg, a->i0, a->n, &a->d);
            break;
        default:
            CPU.pool2d_backward(ex, a->op, a->o0, a->i0, a->carg, a->n, &a->d);
    }
}
static void fg_conv2d_forward(const nn_exec *ex, float *out, const float *in,
                              const float *weight, const float *bias,
                              uint32_t n, const nn_conv_desc *d)
{
    fg_conv_a a = {.ex = fg_ex(ex),
                   .which = 0,
                   .o0 = out,
                   .i0 = in,
                   .i1 = weight,
                   .i2 = bias,
                   .n = n,
                   .d = *d};
    FG_PUSH(fg_conv_run, a);
}
static void fg_conv2d_backward(const nn_exec *ex, float *din, float *dweight,
                               float *dbias, const float *dout, const float *in,
                               const float *weight, uint32_t n,
                               const nn_conv_desc *d)
{
    fg_conv_a a = {.ex = fg_ex(ex),
                   .which = 1,
                   .o0 = din,
                   .o1 = dweight,
                   .o2 = dbias,
                   .i0 = dout,
                   .i1 = in,
                   .i2 = weight,
                   .n = n,
                   .d = *d};
    FG_PUSH(fg_conv_run, a);
}
static void fg_pool2d_forward(const nn_exec *ex, nn_op op, float *out,
                              int32_t *argmax, const float *in, uint32_t n,
                              const nn_conv_desc *d)
{
    fg_conv_a a = {.ex = fg_ex(ex),
                   .which = 2,
                   .op = op,
                   .o0 = out,
                   .arg = argmax,
                   .i0 = in,
                   .n = n,
                   .d = *d};
    FG_PUSH(fg_conv_run, a);
}
static void fg_pool2d_backward(const nn_exec *ex, nn_op op, float *din,
                               const float *dout, const int32_t *argmax,
                               uint32_t n, const nn_conv_desc *d)
{
    fg_conv_a a = {.ex = fg_ex(ex),
                   .which = 3,
                   .op = op,
                   .o0 = din,
                   .i0 = dout,
                   .carg = argmax,
                   .n = n,
                   .d = *d};
    FG_PUSH(fg_conv_run, a);
}

#undef CPU

/* ---- host staging and fences ---- */

static void *fg_host_alloc(const nn_exec *ex, size_t bytes)
{
    (void)ex;
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    for (int i = 0; p && i < FG_PINNED_MAX; i++)
        if (!fg_pinned[i].p) {
            fg_pinned[i].p = p;
            fg_pinned[i].bytes = bytes;
            return p;
        }
    free(p);
    return NULL;
}

/* cudaFreeHost waits for the device. */
static void fg_host_release(const nn_exec *ex, void *p)
{
    (void)ex;
    fg_sync_point();
    for (int i = 0; p && i < FG_PINNED_MAX; i++)
        if (fg_pinned[i].p == p)
            fg_pinned[i].p = NULL;
    free(p);
}

static void *fg_fence_create(const nn_exec *ex)
{
    (void)ex;
    return calloc(1, sizeof(fg_fence));
}

static void fg_fence_record(const nn_exec *ex, void *f)
{
    (void)ex;
    if (fg_rec)
        fake_graph_violations++;
    ((fg_fence *)f)->mark = fg_pos;
}

static void fg_fence_wait(const nn_exec *ex, void *f)
{
    (void)ex;
    fg_run_to(((fg_fence *)f)->mark);
}

static void fg_fence_release(const nn_exec *ex, void *f)
{
    (void)ex;
    free(f);
}

/* ---- graphs ---- */

static int fg_graph_begin(const nn_exec *ex)
{
    (void)ex;
    if (fake_graph_fail_begin) {
        fake_graph_fail_begin = 0;
        return -1;
    }
    fg_rec = calloc(1, sizeof *fg_rec);
    return fg_rec ? 0 : -1;
}

static void fg_list_free(fg_list *l)
{
    for (size_t i = 0; l && i < l->n; i++)
        free(l->calls[i].heap);
    if (l)
        free(l->calls);
    free(l);
}

static int fg_graph_end(const nn_exec *ex, void **graph, ty_err *err)
{
    (void)ex;
    fg_list *l = fg_rec;
    fg_rec = NULL;
    *graph = NULL;
    if (fake_graph_fail_end) {
        fake_graph_fail_end = 0;
        fg_list_free(l);
        ty_fail(err, TY_EDEVICE, NULL, "fake graph: instantiation refused");
        return -1;
    }
    fake_graph_captures++;
    *graph = l;
    return 0;
}

static void fg_graph_launch(const nn_exec *ex, void *graph)
{
    (void)ex;
    const fg_list *l = graph;
    fake_graph_launches++;
    for (size_t i = 0; i < l->n; i++) {
        fg_call c = l->calls[i];
        c.heap = NULL; /* the graph's own */
        fg_list_push(&fg_stream, &c);
        fg_pos++;
    }
}

static void fg_graph_release(const nn_exec *ex, void *graph)
{
    (void)ex;
    fg_sync(); /* its staged sources may still be queued */
    fg_list_free(graph);
}

#include "fake_graph_tx.h"

static void fake_graph_init(void)
{
    fake_device_init();
    fake_graph = fake_device;
    fake_graph.name = "fake-graph";
    fake_graph.alloc = fg_alloc;
    fake_graph.release = fg_release;
    fake_graph.upload = fg_upload;
    fake_graph.download = fg_download;
    fake_graph.zero = fg_zero;
    fake_graph.copy = fg_copy;
    fake_graph.status = fg_status;
    fake_graph.gemm = fg_gemm;
    fake_graph.bias_rows = fg_bias_rows;
    fake_graph.bias_grad = fg_bias_grad;
    fake_graph.act_forward = fg_act_forward;
    fake_graph.act_backward = fg_act_backward;
    fake_graph.dropout_forward = fg_dropout_forward;
    fake_graph.dropout_backward = fg_dropout_backward;
    fake_graph.softmax_xent = fg_softmax_xent;
    fake_graph.mse = fg_mse;
    fake_graph.sgd = fg_sgd;
    fake_graph.adam = fg_adam;
    fake_graph.batchnorm_forward = fg_batchnorm_forward;
    fake_graph.batchnorm_backward = fg_batchnorm_backward;
    fake_graph.layernorm_forward = fg_layernorm_forward;
    fake_graph.layernorm_backward = fg_layernorm_backward;
    fake_graph.leaky_relu_forward = fg_leaky_relu_forward;
    fake_graph.leaky_relu_backward = fg_leaky_relu_backward;
    fake_graph.softmax_forward = fg_softmax_forward;
    fake_graph.softmax_backward = fg_softmax_backward;
    fake_graph.add = fg_add;
    fake_graph.softmax_xent_smooth = fg_softmax_xent_smooth;
    fake_graph.bce_logits = fg_bce_logits;
    fake_graph.huber = fg_huber;
    fake_graph.sum_squares = fg_sum_squares;
    fake_graph.scale = fg_scale;
    /* supports and conv2d_work are pure: the CPU's. */
    fake_graph.conv2d_forward = fg_conv2d_forward;
    fake_graph.conv2d_backward = fg_conv2d_backward;
    fake_graph.pool2d_forward = fg_pool2d_forward;
    fake_graph.pool2d_backward = fg_pool2d_backward;
    fake_graph.host_alloc = fg_host_alloc;
    fake_graph.host_release = fg_host_release;
    fake_graph.fence_create = fg_fence_create;
    fake_graph.fence_record = fg_fence_record;
    fake_graph.fence_wait = fg_fence_wait;
    fake_graph.fence_release = fg_fence_release;
    fake_graph.graph_begin = fg_graph_begin;
    fake_graph.graph_end = fg_graph_end;
    fake_graph.graph_launch = fg_graph_launch;
    fake_graph.graph_release = fg_graph_release;
    fake_graph.cast = fg_cast;
    fake_graph.gemm_lp = fg_gemm_lp;
    /* lp_ok is pure: fake_device's (every precision is fast). */
    fake_graph_tx_init(&fake_graph);
    fake_graph_launches = fake_graph_captures = fake_graph_violations = 0;
    fake_graph_deferred_reads = 0;
    fake_graph_fail_begin = fake_graph_fail_end = 0;
}

#endif

/* fake_graph_tx.h - fake_graph.h's wrappers of the transformer ops
 * (issue 31; models/backend.h "Transformer ops"): the kernels are queued
 * with their arguments like every other; the loss is queued into
 * nn_exec.acc like the other losses, or without acc (its mean comes back
 * to the host) is a sync point. Included by fake_graph.h only. */
#ifndef TY_TEST_FAKE_GRAPH_TX_H
#define TY_TEST_FAKE_GRAPH_TX_H

typedef struct {
    nn_exec ex;
    int32_t *lens;
    const float *x;
    uint32_t b, t;
} fg_lens_a;
static void fg_lens_run(const void *p)
{
    const fg_lens_a *a = p;
    nn_backend_cpu.seq_lens(&a->ex, a->lens, a->x, a->b, a->t);
}
static void fg_seq_lens(const nn_exec *ex, int32_t *lens, const float *x,
                        uint32_t b, uint32_t t)
{
    fg_lens_a a = {.ex = fg_ex(ex), .lens = lens, .x = x, .b = b, .t = t};
    FG_PUSH(fg_lens_run, a);
}

typedef struct {
    nn_exec ex;
    int attend;
    float *out, *kc, *vc;
    const float *q, *k, *v, *ckc, *cvc;
    const int32_t *tables, *pos;
    uint32_t ld, tstride, n, c, h, d, bt;
} fg_kv_a;
static void fg_kv_run(const void *p)
{
    const fg_kv_a *a = p;
    if (a->attend)
        nn_backend_cpu.kv_attention(&a->ex, a->out, a->q, a->ld, a->ckc,
                                    a->cvc, a->tables, a->tstride, a->pos,
                                    a->n, a->h, a->d, a->bt);
    else
        nn_backend_cpu.kv_store(&a->ex, a->kc, a->vc, a->k, a->v, a->ld,
                                a->tables, a->tstride, a->pos, a->n, a->c,
                                a->bt);
}
static void fg_kv_store(const nn_exec *ex, float *kc, float *vc,
                        const float *k, const float *v, uint32_t ld,
                        const int32_t *tables, uint32_t tstride,
                        const int32_t *pos, uint32_t n, uint32_t c,
                        uint32_t bt)
{
    fg_kv_a a = {.ex = fg_ex(ex),
                 .kc = kc,
                 .vc = vc,
                 .k = k,
                 .v = v,
                 .ld = ld,
                 .tables = tables,
                 .tstride = tstride,
                 .pos = pos,
                 .n = n,
                 .c = c,
                 .bt = bt};
    FG_PUSH(fg_kv_run, a);
}
static void fg_kv_attention(const nn_exec *ex, float *out, const float *q,
                            uint32_t ldq, const float *kc, const float *vc,
                            const int32_t *tables, uint32_t tstride,
                            const int32_t *pos, uint32_t n, uint32_t h,
                            uint32_t d, uint32_t bt)
{
    fg_kv_a a = {.ex = fg_ex(ex),
                 .attend = 1,
                 .out = out,
                 .q = q,
                 .ckc = kc,
                 .cvc = vc,
                 .ld = ldq,
                 .tables = tables,
                 .tstride = tstride,
                 .pos = pos,
                 .n = n,
                 .h = h,
                 .d = d,
                 .bt = bt};
    FG_PUSH(fg_kv_run, a);
}

typedef struct {
    nn_exec ex;
    int backward;
    float *o;
    const float *x;
    const int32_t *lens;
    uint32_t b, t, c;
    nn_seq_pool_mode mode;
} fg_pool_a;
static void fg_pool_run(const void *p)
{
    const fg_pool_a *a = p;
    if (a->backward)
        nn_backend_cpu.seq_pool_backward(&a->ex, a->o, a->x, a->lens, a->b,
                                         a->t, a->c, a->mode);
    else
        nn_backend_cpu.seq_pool_forward(&a->ex, a->o, a->x, a->lens, a->b, a->t,
                                        a->c, a->mode);
}
static void fg_seq_pool_forward(const nn_exec *ex, float *out, const float *in,
                                const int32_t *lens, uint32_t b, uint32_t t,
                                uint32_t c, nn_seq_pool_mode mode)
{
    fg_pool_a a = {fg_ex(ex), 0, out, in, lens, b, t, c, mode};
    FG_PUSH(fg_pool_run, a);
}
static void fg_seq_pool_backward(const nn_exec *ex, float *din,
                                 const float *dout, const int32_t *lens,
                                 uint32_t b, uint32_t t, uint32_t c,
                                 nn_seq_pool_mode mode)
{
    fg_pool_a a = {fg_ex(ex), 1, din, dout, lens, b, t, c, mode};
    FG_PUSH(fg_pool_run, a);
}

typedef struct {
    nn_exec ex;
    int backward;
    float *o;
    const float *x;
    const int32_t *ids;
    uint32_t n, v, c;
} fg_emb_a;
static void fg_emb_run(const void *p)
{
    const fg_emb_a *a = p;
    if (a->backward)
        nn_backend_cpu.embedding_backward(&a->ex, a->o, a->x, a->ids, a->n,
                                          a->v, a->c);
    else
        nn_backend_cpu.embedding_forward(&a->ex, a->o, a->ids, a->x, a->n,
                                         a->c);
}
static void fg_embedding_forward(const nn_exec *ex, float *out,
                                 const int32_t *ids, const float *table,
                                 uint32_t n, uint32_t c)
{
    fg_emb_a x = {fg_ex(ex), 0, out, table, ids, n, 0, c};
    FG_PUSH(fg_emb_run, x);
}
static void fg_embedding_backward(const nn_exec *ex, float *dtable,
                                  const float *dout, const int32_t *ids,
                                  uint32_t n, uint32_t v, uint32_t c)
{
    fg_emb_a x = {fg_ex(ex), 1, dtable, dout, ids, n, v, c};
    FG_PUSH(fg_emb_run, x);
}

typedef struct {
    nn_exec ex;
    int32_t *ids;
    const float *x;
    size_t len;
    uint32_t bound;
    int32_t fallback;
} fg_ids_a;
static void fg_ids_run(const void *p)
{
    const fg_ids_a *a = p;
    nn_backend_cpu.to_ids(&a->ex, a->ids, a->x, a->len, a->bound, a->fallback);
}
static void fg_to_ids(const nn_exec *ex, int32_t *ids, const float *x,
                      size_t len, uint32_t bound, int32_t fallback)
{
    fg_ids_a a = {fg_ex(ex), ids, x, len, bound, fallback};
    FG_PUSH(fg_ids_run, a);
}

typedef struct {
    nn_exec ex;
    int backward;
    float *out, *att, *dq, *dk, *dv;
    const float *q, *k, *v, *dout, *patt;
    uint32_t b, t, h, d, ld;
    int has_mask;
    nn_attn_mask m; /* a copy: the caller's may not outlive the capture */
} fg_attn_a;
static void fg_attn_run(const void *p)
{
    const fg_attn_a *a = p;
    if (a->backward)
        nn_backend_cpu.attention_backward(
            &a->ex, a->dq, a->dk, a->dv, a->att, a->dout, a->q, a->k, a->v,
            a->patt, a->b, a->t, a->h, a->d, a->ld, a->has_mask ? &a->m : NULL);
    else
        nn_backend_cpu.attention_forward(&a->ex, a->out, a->att, a->q, a->k,
                                         a->v, a->b, a->t, a->h, a->d, a->ld,
                                         a->has_mask ? &a->m : NULL);
}
static void fg_attention_forward(const nn_exec *ex, float *out, float *att,
                                 const float *q, const float *k, const float *v,
                                 uint32_t b, uint32_t t, uint32_t h, uint32_t d,
                                 uint32_t ld, const nn_attn_mask *m)
{
    fg_attn_a x = {.ex = fg_ex(ex),
                   .out = out,
                   .att = att,
                   .q = q,
                   .k = k,
                   .v = v,
                   .b = b,
                   .t = t,
                   .h = h,
                   .d = d,
                   .ld = ld,
                   .has_mask = m != NULL,
                   .m = m ? *m : (nn_attn_mask){0}};
    FG_PUSH(fg_attn_run, x);
}
static void fg_attention_backward(const nn_exec *ex, float *dq, float *dk,
                                  float *dv, float *datt, const float *dout,
                                  const float *q, const float *k,
                                  const float *v, const float *att, uint32_t b,
                                  uint32_t t, uint32_t h, uint32_t d,
                                  uint32_t ld, const nn_attn_mask *m)
{
    fg_attn_a x = {.ex = fg_ex(ex),
                   .backward = 1,
                   .att = datt,
                   .dq = dq,
                   .dk = dk,
                   .dv = dv,
                   .q = q,
                   .k = k,
                   .v = v,
                   .dout = dout,
                   .patt = att,
                   .b = b,
                   .t = t,
                   .h = h,
                   .d = d,
                   .ld = ld,
                   .has_mask = m != NULL,
                   .m = m ? *m : (nn_attn_mask){0}};
    FG_PUSH(fg_attn_run, x);
}

/* Into ex->acc: queued like the other losses (fake_graph.h's fg_loss);
 * without acc the mean comes back to the host: a sync point. */
typedef struct {
    nn_exec ex;
    float *d;
    const float *x;
    const int32_t *targets;
    uint32_t n, v;
    int32_t ignore;
    float gs;
    double weight;
} fg_xent_a;
static double fg_xent_call(const fg_xent_a *a, uint32_t *counted)
{
    return nn_backend_cpu.xent_ignore(&a->ex, a->d, counted, a->x, a->targets,
                                      a->n, a->v, a->ignore, a->gs, a->weight);
}
static void fg_xent_run(const void *p) { (void)fg_xent_call(p, NULL); }
static double fg_xent_ignore(const nn_exec *ex, float *dlogits,
                             uint32_t *counted, const float *logits,
                             const int32_t *targets, uint32_t n, uint32_t v,
                             int32_t ignore_index, float grad_scale,
                             double weight)
{
    fg_xent_a a = {.ex = fg_ex(ex),
                   .d = dlogits,
                   .x = logits,
                   .targets = targets,
                   .n = n,
                   .v = v,
                   .ignore = ignore_index,
                   .gs = grad_scale,
                   .weight = weight};
    if (counted)
        *counted = 0;
    if (a.ex.acc) {
        FG_PUSH(fg_xent_run, a);
        return 0.0;
    }
    fg_sync_point();
    return fg_xent_call(&a, counted);
}

typedef struct {
    nn_exec ex;
    float *out;
    const float *x, *w;
    uint32_t n, u, k;
    float beta;
} fg_rowsg_a;
static void fg_rowsg_run(const void *p)
{
    const fg_rowsg_a *a = p;
    nn_backend_cpu.rows_gemm(&a->ex, a->out, a->x, a->w, a->n, a->u, a->k,
                             a->beta);
}
static void fg_rows_gemm(const nn_exec *ex, float *out, const float *x,
                         const float *w, uint32_t n, uint32_t u, uint32_t k,
                         float beta)
{
    fg_rowsg_a a = {.ex = fg_ex(ex),
                   .out = out,
                   .x = x,
                   .w = w,
                   .n = n,
                   .u = u,
                   .k = k,
                   .beta = beta};
    FG_PUSH(fg_rowsg_run, a);
}

static void fake_graph_tx_init(nn_backend *b)
{
    b->embedding_forward = fg_embedding_forward;
    b->embedding_backward = fg_embedding_backward;
    b->to_ids = fg_to_ids;
    b->seq_lens = fg_seq_lens;
    b->seq_pool_forward = fg_seq_pool_forward;
    b->seq_pool_backward = fg_seq_pool_backward;
    b->kv_store = fg_kv_store;
    b->kv_attention = fg_kv_attention;
    b->rows_gemm = fg_rows_gemm;
    b->attention_forward = fg_attention_forward;
    b->attention_backward = fg_attention_backward;
    b->xent_ignore = fg_xent_ignore;
}

#endif

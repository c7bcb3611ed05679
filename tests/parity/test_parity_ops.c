/*
 * test_parity_ops.c - the CPU backend's transformer ops (issue 31) against
 * PyTorch: make_ops_reference.py writes each op's inputs, forward output,
 * upstream gradient and autograd's gradients; this runs the kernels on the
 * same inputs and compares.
 *
 *   test_parity_ops REF_FILE
 *
 * Forward outputs (and the loss) pass within 1e-5 absolute; gradients
 * within 1e-4 relative (max |ours - torch| over the tensor, divided by max
 * |torch|). Every comparison is printed; the exit status is 1 when any
 * fails or the reference is unreadable.
 *
 * The masked attention (models/backend.h's nn_attn_mask) runs on sequences
 * of a partial, a zero and a full length, not causal and causal, then with
 * dropout multipliers (keep); the sequence of length 0 must give exactly
 * zero probabilities, outputs and gradients. sequence_pool's op (each mode)
 * runs on the same lengths.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty.h"
#include "models/backend.h"
#include "models/safetensors.h"

#define FWD_ABS 1e-5
#define GRAD_REL 1e-4

static st_file ref;
static int failed;

/* The reference tensor name as n values of dtype dt (copied out: the file's
 * data may be unaligned), or exits. */
static void *get(const char *name, st_dtype dt, uint64_t n)
{
    const st_tensor *t = st_find(&ref, name);
    if (!t || t->dtype != dt || t->numel != n) {
        printf("FAIL reference tensor '%s' missing or not %s x %llu\n", name,
               st_dtype_name(dt), (unsigned long long)n);
        exit(1);
    }
    void *p = malloc(t->nbytes ? t->nbytes : 1);
    if (!p)
        exit(1);
    memcpy(p, t->data, t->nbytes);
    return p;
}

static float *getf(const char *name, uint64_t n)
{
    return get(name, ST_F32, n);
}

static void cmp(const char *what, const float *ours, const char *name,
                uint64_t n, int grad)
{
    float *want = getf(name, n);
    double diff = 0, scale = 0;
    for (uint64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)ours[i] - want[i]));
        scale = fmax(scale, fabs(want[i]));
        if (!isfinite(ours[i]))
            diff = INFINITY;
    }
    double err = grad ? diff / fmax(scale, 1e-30) : diff;
    int ok = err <= (grad ? GRAD_REL : FWD_ABS);
    printf("  %-4s %-22s %s %.3e  (max|diff| %.3e, max|torch| %.3e)\n",
           ok ? "ok" : "FAIL", what, grad ? "rel" : "abs", err, diff, scale);
    failed |= !ok;
    free(want);
}

/* Every value of x (n) is exactly 0; prints the result. */
static void all_zero(const char *what, const float *x, uint64_t n)
{
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++)
        bad += x[i] != 0.0f;
    printf("  %-4s %-22s %llu of %llu values not 0\n", bad ? "FAIL" : "ok",
           what, (unsigned long long)bad, (unsigned long long)n);
    failed |= bad != 0;
}

/* The masked attention op on the reference's <prefix>.* tensors, mask
 * {causal, lens, keep} (keep: <prefix>.keep's multipliers, or none): out,
 * att (P), keep after the forward (P * keep), dqkv; the sequences of length
 * 0 exactly zero. */
static void masked_attention(const nn_backend *be, const char *prefix,
                             uint32_t b, uint32_t t, uint32_t h, uint32_t d,
                             const int32_t *lens, int causal, int with_keep)
{
    const uint32_t c = h * d;
    const uint64_t nq = (uint64_t)b * t * 3 * c, no = (uint64_t)b * t * c;
    const uint64_t na = (uint64_t)b * h * t * t;
    char name[64], what[64];
#define REF(s) (snprintf(name, sizeof name, "%s." s, prefix), name)
    float *qkv = getf(REF("qkv"), nq), *dy = getf(REF("dout"), no);
    float *keep = with_keep ? getf(REF("keep"), na) : NULL;
    float *y = malloc(no * 4), *att = malloc(na * 4);
    float *datt = malloc(na * 4), *dqkv = malloc(nq * 4);
    if (!y || !att || !datt || !dqkv)
        exit(1);
    nn_attn_mask m = {.causal = causal, .lens = lens, .keep = keep};
    be->attention_forward(NULL, y, att, qkv, qkv + c, qkv + 2 * c, b, t, h, d,
                          3 * c, &m);
    be->attention_backward(NULL, dqkv, dqkv + c, dqkv + 2 * c, datt, dy, qkv,
                           qkv + c, qkv + 2 * c, att, b, t, h, d, 3 * c, &m);
    cmp("out", y, REF("out"), no, 0);
    cmp("att (probabilities)", att, REF("att"), na, 0);
    if (keep)
        cmp("keep after (P * keep)", keep, REF("pk"), na, 0);
    cmp("dqkv", dqkv, REF("dqkv"), nq, 1);
#undef REF
    for (uint32_t bi = 0; bi < b; bi++) {
        if (lens[bi] != 0)
            continue;
        snprintf(what, sizeof what, "seq %u (len 0) out", bi);
        all_zero(what, y + (uint64_t)bi * t * c, (uint64_t)t * c);
        snprintf(what, sizeof what, "seq %u (len 0) att", bi);
        all_zero(what, att + (uint64_t)bi * h * t * t, (uint64_t)h * t * t);
        snprintf(what, sizeof what, "seq %u (len 0) dqkv", bi);
        all_zero(what, dqkv + (uint64_t)bi * t * 3 * c, (uint64_t)t * 3 * c);
    }
    free(qkv), free(dy), free(keep), free(y), free(att), free(datt);
    free(dqkv);
}

static uint32_t size_of(const char *key)
{
    json_t *s = json_loads(st_meta(&ref, "sizes"), 0, NULL);
    json_t *v = s ? json_object_get(s, key) : NULL;
    if (!json_is_number(v)) {
        printf("FAIL the reference's sizes have no '%s'\n", key);
        exit(1);
    }
    double x = json_number_value(v);
    json_decref(s);
    return (uint32_t)(int32_t)x;
}

static double size_double(const char *key)
{
    json_t *s = json_loads(st_meta(&ref, "sizes"), 0, NULL);
    double x = json_number_value(json_object_get(s, key));
    json_decref(s);
    return x;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_parity_ops REF_FILE\n");
        return 2;
    }
    ty_err err;
    if (st_open(argv[1], &ref, &err) != TY_OK || !st_meta(&ref, "sizes")) {
        printf("FAIL cannot read the reference %s (run make_ops_reference.py; "
               "ctest's parity_ops_reference does)\n",
               argv[1]);
        return 1;
    }
    const nn_backend *be = &nn_backend_cpu;
    const uint32_t b = size_of("b"), t = size_of("t"), h = size_of("h"),
                   d = size_of("d"), v = size_of("v"), gn = size_of("gelu_n");
    const uint32_t c = h * d, n = b * t;
    const int32_t ignore = (int32_t)size_of("ignore");
    const float eps = (float)size_double("eps");

    printf("gelu (tanh)\n");
    {
        float *x = getf("gelu.x", gn), *dy = getf("gelu.dout", gn);
        float *y = malloc(gn * 4), *dx = malloc(gn * 4);
        be->act_forward(NULL, NN_OP_GELU_TANH, y, x, gn);
        be->act_backward(NULL, NN_OP_GELU_TANH, dx, dy, x, y, gn);
        cmp("out", y, "gelu.out", gn, 0);
        cmp("dx", dx, "gelu.dx", gn, 1);
        free(x), free(dy), free(y), free(dx);
    }

    printf("embedding\n");
    {
        float *tab = getf("emb.table", (uint64_t)v * c);
        int32_t *ids = get("emb.ids", ST_I32, n);
        float *dy = getf("emb.dout", (uint64_t)n * c);
        float *y = malloc((size_t)n * c * 4);
        float *dt = calloc((size_t)v * c, 4);
        be->embedding_forward(NULL, y, ids, tab, n, c);
        be->embedding_backward(NULL, dt, dy, ids, n, v, c);
        cmp("out", y, "emb.out", (uint64_t)n * c, 0);
        cmp("dtable", dt, "emb.dtable", (uint64_t)v * c, 1);
        free(tab), free(ids), free(dy), free(y), free(dt);
    }

    printf("layernorm (last axis)\n");
    {
        const uint64_t nx = (uint64_t)n * c;
        float *x = getf("ln.x", nx), *g = getf("ln.gamma", c);
        float *bb = getf("ln.beta", c), *dy = getf("ln.dout", nx);
        float *y = malloc(nx * 4), *dx = malloc(nx * 4);
        float *mean = malloc(n * 4), *rstd = malloc(n * 4);
        float *dg = calloc(c, 4), *db = calloc(c, 4);
        be->layernorm_forward(NULL, y, mean, rstd, x, g, bb, n, c, eps);
        be->layernorm_backward(NULL, dx, dg, db, dy, x, g, mean, rstd, n, c);
        cmp("out", y, "ln.out", nx, 0);
        cmp("dx", dx, "ln.dx", nx, 1);
        cmp("dgamma", dg, "ln.dgamma", c, 1);
        cmp("dbeta", db, "ln.dbeta", c, 1);
        free(x), free(g), free(bb), free(dy), free(y), free(dx);
        free(mean), free(rstd), free(dg), free(db);
    }

    printf("attention (causal, fused QKV)\n");
    {
        const uint64_t nq = (uint64_t)n * 3 * c, no = (uint64_t)n * c;
        const uint64_t na = (uint64_t)b * h * t * t;
        float *qkv = getf("attn.qkv", nq), *dy = getf("attn.dout", no);
        float *y = malloc(no * 4), *att = malloc(na * 4);
        float *datt = malloc(na * 4), *dqkv = malloc(nq * 4);
        be->attention_forward(NULL, y, att, qkv, qkv + c, qkv + 2 * c, b, t, h,
                              d, 3 * c, NULL);
        be->attention_backward(NULL, dqkv, dqkv + c, dqkv + 2 * c, datt, dy,
                               qkv, qkv + c, qkv + 2 * c, att, b, t, h, d,
                               3 * c, NULL);
        cmp("out", y, "attn.out", no, 0);
        cmp("att (probabilities)", att, "attn.att", na, 0);
        cmp("dqkv", dqkv, "attn.dqkv", nq, 1);
        free(qkv), free(dy), free(y), free(att), free(datt), free(dqkv);
    }

    const uint32_t mb = size_of("mb");
    int32_t *lens = get("lens.lens", ST_I32, mb);
    printf("seq_lens (ids, -1 padding after the text)\n");
    {
        float *ids = getf("lens.ids", (uint64_t)mb * t);
        int32_t got[16];
        if (mb > 16)
            exit(1);
        be->seq_lens(NULL, got, ids, mb, t);
        int ok = memcmp(got, lens, mb * sizeof *got) == 0;
        printf("  %-4s lens", ok ? "ok" : "FAIL");
        for (uint32_t i = 0; i < mb; i++)
            printf(" %d (torch %d)", got[i], lens[i]);
        printf("\n");
        failed |= !ok;
        free(ids);
    }
    printf("attention (padding lens, not causal)\n");
    masked_attention(be, "mattn", mb, t, h, d, lens, 0, 0);
    printf("attention (padding lens, causal)\n");
    masked_attention(be, "mattn_causal", mb, t, h, d, lens, 1, 0);
    printf("attention (padding lens, not causal, dropout keep)\n");
    masked_attention(be, "mattn_keep", mb, t, h, d, lens, 0, 1);
    static const char *const modes[] = {"mean", "first", "last"};
    for (int k = 0; k < 3; k++) {
        const uint64_t nx = (uint64_t)mb * t * c;
        char name[32];
        printf("sequence_pool (%s, padding lens)\n", modes[k]);
#define PREF(s) (snprintf(name, sizeof name, "pool_%s." s, modes[k]), name)
        float *x = getf(PREF("x"), nx), *dy = getf(PREF("dout"), mb * c);
        float *y = malloc(mb * c * 4), *dx = malloc(nx * 4);
        if (!y || !dx)
            exit(1);
        memset(dx, 0xff, nx * 4); /* assigned: every value, NaN before */
        be->seq_pool_forward(NULL, y, x, lens, mb, t, c, (nn_seq_pool_mode)k);
        be->seq_pool_backward(NULL, dx, dy, lens, mb, t, c,
                              (nn_seq_pool_mode)k);
        cmp("out", y, PREF("out"), mb * c, 0);
        cmp("dx", dx, PREF("dx"), nx, 1);
#undef PREF
        free(x), free(dy), free(y), free(dx);
    }
    free(lens);

    printf("cross-entropy (ignore index %d)\n", ignore);
    {
        const uint64_t nl = (uint64_t)n * v;
        float *x = getf("xent.logits", nl);
        int32_t *y = get("xent.targets", ST_I32, n);
        float *dx = malloc(nl * 4);
        uint32_t counted = 0;
        float loss = (float)be->xent_ignore(NULL, dx, &counted, x, y, n, v,
                                            ignore, 1.0f, 1.0);
        cmp("loss", &loss, "xent.loss", 1, 0);
        cmp("dlogits", dx, "xent.dlogits", nl, 1);
        uint32_t want = 0;
        for (uint32_t i = 0; i < n; i++)
            want += y[i] != ignore;
        printf("  %-4s counted %u of %u rows\n",
               counted == want ? "ok" : "FAIL", counted, n);
        failed |= counted != want || want == n;
        free(x), free(y), free(dx);
    }
    st_close(&ref);
    printf(failed ? "FAILED\n" : "all ops within tolerance\n");
    return failed;
}

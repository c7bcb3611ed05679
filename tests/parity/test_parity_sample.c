/*
 * test_parity_sample.c - the sampler (models/sample.h) against Hugging
 * Face's warpers written in PyTorch: make_sample_reference.py writes rows
 * of logits with their parameters, the kept tokens and the final
 * probabilities; this runs sample_dist on the same rows.
 *
 *   test_parity_sample REF_FILE
 *
 * A row passes when the kept set is the same, token for token (but for
 * tokens tied at the boundary's logit, which HF's unstable sort keeps in
 * any order: then the count), and every kept token's probability found
 * in both is within 2e-6 absolute of torch's (float32 softmax against
 * the engine's double); greedy rows when the token is torch.argmax's and
 * its logprob within 1e-5. Each row's verdict is printed; the exit status
 * is 1 when any fails or the reference is unreadable.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty.h"
#include "models/sample.h"

#define PROB_ABS 2e-6
#define LOGPROB_ABS 1e-5

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* One row; returns 0 when it passes. */
static int check_row(size_t r, json_t *row, float *logits, float *probs,
                     float *by_id, uint32_t *scratch, uint32_t *sorted)
{
    json_t *jl = json_object_get(row, "logits");
    uint32_t v = (uint32_t)json_array_size(jl);
    for (uint32_t i = 0; i < v; i++) {
        json_t *x = json_array_get(jl, i);
        /* JSON has no -inf: the reference writes a masked token's as null. */
        logits[i] = json_is_null(x) ? -INFINITY : (float)json_number_value(x);
    }
    sample_params p = {
        .temperature =
            (float)json_number_value(json_object_get(row, "temperature")),
        .top_k = (int32_t)json_integer_value(json_object_get(row, "top_k")),
        .top_p = (float)json_number_value(json_object_get(row, "top_p")),
    };
    ty_err err = {0};
    if (sample_params_check(&p, &err) != TY_OK) {
        printf("FAIL row %zu: parameters refused: %s\n", r, err.msg);
        return 1;
    }
    if (p.temperature == 0) {
        sample_state st;
        sample_state_init(&st, 0, 0);
        sample_logprob out;
        sample_logprobs lp = {0};
        if (sample_next(&p, &st, logits, v, scratch, &out, &lp, &err) !=
            TY_OK) {
            printf("FAIL row %zu: %s\n", r, err.msg);
            return 1;
        }
        uint32_t want =
            (uint32_t)json_integer_value(json_object_get(row, "argmax"));
        double want_lp = json_number_value(json_object_get(row, "logprob"));
        int ok =
            out.token == want && fabs(out.logprob - want_lp) <= LOGPROB_ABS;
        printf("%s row %zu: greedy v=%u token %u (torch %u) logprob %.7g "
               "(torch %.7g)\n",
               ok ? "ok" : "FAIL", r, v, out.token, want, out.logprob, want_lp);
        return !ok;
    }
    uint32_t n = 0;
    if (sample_dist(&p, logits, v, scratch, probs, &n, &err) != TY_OK) {
        printf("FAIL row %zu: %s\n", r, err.msg);
        return 1;
    }
    json_t *kept = json_object_get(row, "kept"),
           *tp = json_object_get(row, "probs");
    uint32_t nk = (uint32_t)json_array_size(kept);
    for (uint32_t i = 0; i < v; i++)
        by_id[i] = -1;
    for (uint32_t j = 0; j < n; j++)
        by_id[scratch[j]] = probs[j];
    memcpy(sorted, scratch, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_u32);
    /* The smallest kept logit: tokens tied there may differ (HF's sort is
     * unstable; the engine keeps the lowest ids). */
    float edge = logits[scratch[n - 1]];
    int ok = n == nk;
    double worst = 0;
    uint32_t a = 0, ties = 0;
    for (uint32_t j = 0; ok && j < nk; j++) {
        uint32_t id = (uint32_t)json_integer_value(json_array_get(kept, j));
        while (a < n && sorted[a] < id) /* ours, not torch's */
            if (logits[sorted[a++]] != edge)
                ok = 0;
            else
                ties++;
        if (a < n && sorted[a] == id) {
            a++;
            double d =
                fabs(by_id[id] - json_number_value(json_array_get(tp, j)));
            if (d > worst)
                worst = d;
        } else if (logits[id] != edge) { /* torch's, not ours */
            ok = 0;
        }
        if (!ok)
            printf("  row %zu: the kept sets differ beyond ties (torch's "
                   "%u-th kept is %u)\n",
                   r, j, id);
    }
    while (ok && a < n)
        if (logits[sorted[a++]] != edge)
            ok = 0;
        else
            ties++;
    if (ties)
        printf("  row %zu: %u kept tokens are not torch's, all tied at the "
               "boundary's logit (kept by id)\n",
               r, ties);
    /* The walk's order is by probability, most likely first. */
    for (uint32_t j = 1; ok && j < n; j++)
        if (probs[j] > probs[j - 1]) {
            printf("  row %zu: probabilities out of order at %u\n", r, j);
            ok = 0;
        }
    /* A draw: a kept token, its logprob and the top five alternatives'
     * those of the torch distribution. */
    sample_state st;
    sample_state_init(&st, r, 0);
    sample_logprob out, top[5];
    sample_logprobs lp = {.top = top, .n_top = 5};
    if (ok &&
        sample_next(&p, &st, logits, v, scratch, &out, &lp, &err) != TY_OK) {
        printf("FAIL row %zu: %s\n", r, err.msg);
        return 1;
    }
    for (uint32_t j = 0; ok && j <= lp.n_top_out; j++) {
        sample_logprob x = j < lp.n_top_out ? top[j] : out;
        double pt = -1;
        for (uint32_t i = 0; i < nk; i++)
            if ((uint32_t)json_integer_value(json_array_get(kept, i)) ==
                x.token)
                pt = json_number_value(json_array_get(tp, i));
        if (pt < 0 || fabs(exp(x.logprob) - pt) > PROB_ABS + 1e-5 * pt) {
            printf("  row %zu: token %u's logprob %.7g, torch's prob %.7g\n", r,
                   x.token, x.logprob, pt);
            ok = 0;
        }
    }
    if (ok && lp.n_top_out != (n < 5 ? n : 5)) {
        printf("  row %zu: %u alternatives\n", r, lp.n_top_out);
        ok = 0;
    }
    ok = ok && worst <= PROB_ABS;
    printf("%s row %zu: v=%u T=%g top_k=%d top_p=%g: kept %u (torch %u), "
           "max |dp| %.3g\n",
           ok ? "ok" : "FAIL", r, v, (double)p.temperature, (int)p.top_k,
           (double)p.top_p, n, nk, worst);
    return !ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s REF_FILE\n", argv[0]);
        return 2;
    }
    json_error_t je;
    json_t *ref = json_load_file(argv[1], 0, &je);
    json_t *rows = ref ? json_object_get(ref, "rows") : NULL;
    if (!json_is_array(rows) || !json_array_size(rows)) {
        printf(
            "FAIL cannot read the reference %s: %s (make_sample_reference.py "
            "writes it)\n",
            argv[1], ref ? "no rows" : je.text);
        return 1;
    }
    size_t vmax = 0;
    for (size_t r = 0; r < json_array_size(rows); r++) {
        size_t v =
            json_array_size(json_object_get(json_array_get(rows, r), "logits"));
        if (v > vmax)
            vmax = v;
    }
    float *logits = malloc(vmax * sizeof *logits);
    float *probs = malloc(vmax * sizeof *probs);
    float *by_id = malloc(vmax * sizeof *by_id);
    uint32_t *scratch = malloc(vmax * sizeof *scratch);
    uint32_t *sorted = malloc(vmax * sizeof *sorted);
    if (!logits || !probs || !by_id || !scratch || !sorted) {
        printf("FAIL out of memory\n");
        return 1;
    }
    int failed = 0;
    for (size_t r = 0; r < json_array_size(rows); r++)
        failed += check_row(r, json_array_get(rows, r), logits, probs, by_id,
                            scratch, sorted);
    printf("%d of %zu rows failed\n", failed, json_array_size(rows));
    free(logits);
    free(probs);
    free(by_id);
    free(scratch);
    free(sorted);
    json_decref(ref);
    return failed ? 1 : 0;
}

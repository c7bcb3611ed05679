/*
 * preprocess_tab.c - the "tabular" input preprocessing: a CSV dataset's
 * typed columns (models/data/tabular.h) as the network sees them.
 *
 * Numeric and boolean features: a missing value (NaN) is imputed with the
 * mean of the training examples' values, then the feature is standardized
 * with the mean and population standard deviation of the imputed training
 * values. One-hot features (categorical columns) are left 0/1, as
 * scikit-learn's OneHotEncoder leaves them.
 *
 * Everything is computed as scikit-learn computes it, so that a
 * ColumnTransformer of SimpleImputer(strategy="mean") + StandardScaler on
 * the numeric and boolean columns gives the same float32 inputs bit for
 * bit (tests/parity/tabular_sklearn.py): statistics in double (the mean of
 * the present values; then the mean T of the imputed column, and its
 * variance as the corrected two-pass sum ((sum (x-T)^2) - (sum (x-T))^2/n)
 * / n); a near-constant feature (var <= n eps var + (n T eps)^2) has scale
 * 1; (x - mean) / std is applied in double and rounded to float32 once.
 * The statistics are stored as doubles (JSON numbers of 17 digits, which
 * read back exactly). Sums are numpy's pairwise sums (pairwise_sum): an
 * in-order sum differs in the last bits, and where an imputed value
 * cancels against the mean (inputs near 1e-15) that showed in the float32
 * input.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/data/tabular.h"
#include "models/nn_internal.h"

static ty_status alloc_stats(nn_preproc *pp, uint64_t f, ty_err *err)
{
    pp->tab_impute = calloc(f ? f : 1, sizeof *pp->tab_impute);
    pp->tab_mean = calloc(f ? f : 1, sizeof *pp->tab_mean);
    pp->tab_std = calloc(f ? f : 1, sizeof *pp->tab_std);
    if (!pp->tab_impute || !pp->tab_mean || !pp->tab_std)
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory for the feature statistics");
    return TY_OK;
}

/* numpy's pairwise sum (np.add.reduce over a run of doubles: 8
 * accumulators up to 128 values, halves above), so the statistics are
 * scikit-learn's to the last bit. */
static double pairwise_sum(const double *a, size_t n)
{
    if (n < 8) {
        double r = -0.0;
        for (size_t i = 0; i < n; i++)
            r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        size_t i;
        for (i = 0; i < 8; i++)
            r[i] = a[i];
        for (i = 8; i < n - (n % 8); i += 8)
            for (size_t k = 0; k < 8; k++)
                r[k] += a[i + k];
        double res =
            ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

/* Feature j's statistics over the examples idx (NULL: 0..n-1) of ds; col
 * is scratch for n doubles. */
static ty_status fit_feature(nn_preproc *pp, const ty_dataset *ds,
                             const uint32_t *idx, uint32_t n, uint64_t j,
                             const char *name, double *col, ty_err *err)
{
    const float *x = ds->x;
    const uint64_t f = ds->features;
    uint64_t count = 0;
    for (uint32_t i = 0; i < n; i++) {
        float v = x[(uint64_t)(idx ? idx[i] : i) * f + j];
        col[i] = isnan(v) ? 0.0 : (double)v; /* the masked sum's fill */
        count += !isnan(v);
    }
    if (count == 0)
        return ty_fail(err, TY_EINVAL, NULL,
                       "column \"%.64s\" has no value in the training "
                       "examples: nothing to impute its missing values with",
                       name);
    const double impute = pairwise_sum(col, n) / (double)count;
    for (uint32_t i = 0; i < n; i++)
        if (isnan(x[(uint64_t)(idx ? idx[i] : i) * f + j]))
            col[i] = impute;
    const double mean = pairwise_sum(col, n) / n;
    for (uint32_t i = 0; i < n; i++)
        col[i] -= mean;
    const double corr = pairwise_sum(col, n);
    for (uint32_t i = 0; i < n; i++)
        col[i] *= col[i];
    const double sq = pairwise_sum(col, n);
    double var = (sq - corr * corr / n) / n;
    const double eps = DBL_EPSILON, nn = (double)n;
    const double bound = nn * eps * var + (nn * mean * eps) * (nn * mean * eps);
    pp->tab_impute[j] = impute;
    pp->tab_mean[j] = mean;
    pp->tab_std[j] = var <= bound ? 1.0 : sqrt(var);
    return TY_OK;
}

/* The model's columns: the dataset's, without counts, with statistics. */
static ty_status build_columns(nn_preproc *pp, const ds_tab_schema *s,
                               ty_err *err)
{
    pp->tab_columns = json_array();
    for (size_t i = 0; pp->tab_columns && i < s->ncols; i++) {
        const ds_tab_col *c = &s->cols[i];
        json_t *o = json_pack("{s:s, s:s}", "name", c->name, "type",
                              ds_col_type_name(c->type));
        if (o && c->type == DS_COL_CATEGORICAL)
            json_object_set(o, "categories", (json_t *)c->cats.list);
        else if (o && (json_object_set_new(
                           o, "impute", json_real(pp->tab_impute[c->offset])) ||
                       json_object_set_new(
                           o, "mean", json_real(pp->tab_mean[c->offset])) ||
                       json_object_set_new(
                           o, "std", json_real(pp->tab_std[c->offset])))) {
            json_decref(o);
            o = NULL;
        }
        if (!o || json_array_append_new(pp->tab_columns, o))
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    return pp->tab_columns ? TY_OK
                           : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
}

ty_status nn_preproc_tab_fit(nn_preproc *pp, const ty_dataset *ds,
                             const uint32_t *idx, uint32_t n, ty_err *err)
{
    ds_tab_schema s;
    ty_status st =
        ds_tab_schema_init(&s, json_object_get(ds->meta, "columns"), err);
    if (st != TY_OK)
        return st;
    if (s.width != ds->features || ds->x_dtype != TY_DTYPE_F32 || n == 0) {
        ds_tab_schema_free(&s);
        return ty_fail(err, TY_EINVAL, NULL,
                       "the dataset's columns do not describe its features");
    }
    pp->kind = NN_PRE_TABULAR;
    double *col = malloc((size_t)n * sizeof *col);
    st = col ? alloc_stats(pp, ds->features, err)
             : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (size_t i = 0; st == TY_OK && i < s.ncols; i++)
        if (s.cols[i].type != DS_COL_CATEGORICAL)
            st = fit_feature(pp, ds, idx, n, s.cols[i].offset, s.cols[i].name,
                             col, err);
    free(col);
    if (st == TY_OK)
        st = build_columns(pp, &s, err);
    ds_tab_schema_free(&s);
    return st;
}

json_t *nn_preproc_tab_to_json(const nn_preproc *pp)
{
    return json_pack("{s:s, s:O}", "kind", "tabular", "columns",
                     pp->tab_columns);
}

static int stat_of(const json_t *c, const char *key, int positive, double *out)
{
    const json_t *v = json_object_get(c, key);
    double d = json_number_value(v);
    if (!json_is_number(v) || !isfinite(d) || (positive && !(d > 0.0)))
        return -1;
    *out = d;
    return 0;
}

ty_status nn_preproc_tab_from_json(nn_preproc *pp, const json_t *j, ty_err *err)
{
    ds_tab_schema s;
    const json_t *cols = json_object_get(j, "columns");
    ty_status st = ds_tab_schema_init(&s, cols, err);
    if (st != TY_OK) {
        ty_err_prefix(err, "preprocess");
        return st;
    }
    if (s.width != pp->features || json_object_size(j) != 2) {
        ds_tab_schema_free(&s);
        return ty_fail(err, TY_EFORMAT, NULL,
                       "preprocess columns make %llu features; the model "
                       "takes %llu",
                       (unsigned long long)s.width,
                       (unsigned long long)pp->features);
    }
    pp->kind = NN_PRE_TABULAR;
    st = alloc_stats(pp, pp->features, err);
    for (size_t i = 0; st == TY_OK && i < s.ncols; i++) {
        const ds_tab_col *c = &s.cols[i];
        const json_t *o = json_array_get(cols, i);
        if (c->type == DS_COL_CATEGORICAL)
            continue;
        if (stat_of(o, "impute", 0, &pp->tab_impute[c->offset]) ||
            stat_of(o, "mean", 0, &pp->tab_mean[c->offset]) ||
            stat_of(o, "std", 1, &pp->tab_std[c->offset]))
            st = ty_fail(err, TY_EFORMAT, NULL,
                         "preprocess columns[%zu] needs finite \"impute\", "
                         "\"mean\" and a positive \"std\"",
                         i);
    }
    if (st == TY_OK)
        pp->tab_columns = json_incref((json_t *)cols);
    ds_tab_schema_free(&s);
    return st;
}

void nn_preproc_tab_row(const nn_preproc *pp, float *dst, const float *src)
{
    const uint64_t f = pp->features;
    const double *impute = pp->tab_impute, *mean = pp->tab_mean,
                 *std = pp->tab_std;
    for (uint64_t j = 0; j < f; j++) {
        if (std[j] == 0.0) { /* one-hot */
            dst[j] = src[j];
            continue;
        }
        double x = isnan(src[j]) ? impute[j] : (double)src[j];
        dst[j] = (float)((x - mean[j]) / std[j]);
    }
}

/* ds's features in the model's layout (see nn_preproc_bind). */
static ty_status remap_dataset(const nn_preproc *pp, const ty_dataset *ds,
                               ty_dataset *view, float **x, ty_err *err)
{
    ds_tab_schema m, d;
    int64_t *src = NULL;
    int identity = 0;
    ty_status st = ds_tab_schema_init(&m, pp->tab_columns, err);
    if (st != TY_OK)
        return st;
    if ((st = ds_tab_schema_init(&d, json_object_get(ds->meta, "columns"),
                                 err)) != TY_OK) {
        ds_tab_schema_free(&m);
        return ty_fail(err, TY_EINVAL, NULL,
                       "the dataset has no typed columns (it was uploaded "
                       "before CSV columns were typed, or is not a CSV); "
                       "upload the CSV again");
    }
    const uint64_t w = m.width;
    if (!(src = malloc(w * sizeof *src)))
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (st == TY_OK && d.width != ds->features)
        st = ty_fail(err, TY_EINVAL, NULL,
                     "the dataset's columns do not describe its features");
    if (st == TY_OK &&
        (st = ds_tab_remap(&m, &d, src, &identity, err)) == TY_OK &&
        !identity) {
        uint64_t cells = (uint64_t)ds->num_examples * w;
        *x = cells <= SIZE_MAX / sizeof **x ? malloc(cells * sizeof **x) : NULL;
        if (!*x)
            st = ty_fail(err, TY_ENOMEM, NULL,
                         "out of memory re-encoding the dataset's columns "
                         "(%llu values)",
                         (unsigned long long)cells);
        const float *in = ds->x;
        for (uint64_t r = 0; *x && r < ds->num_examples; r++)
            for (uint64_t j = 0; j < w; j++)
                (*x)[r * w + j] =
                    src[j] < 0 ? 0.0f : in[r * ds->features + (uint64_t)src[j]];
        if (*x) {
            *view = *ds;
            view->x = *x;
            view->features = w;
            view->ndim = 1;
            view->shape[0] = (uint32_t)w;
            view->map = NULL;
            view->map_len = 0;
        }
    }
    free(src);
    ds_tab_schema_free(&m);
    ds_tab_schema_free(&d);
    return st;
}

ty_status nn_preproc_bind(const nn_preproc *pp, const ty_dataset *ds,
                          ty_dataset *view, float **x, ty_err *err)
{
    *x = NULL;
    const char *pre =
        json_string_value(json_object_get(ds->meta, "preprocess"));
    if (pp->kind == NN_PRE_TABULAR)
        return remap_dataset(pp, ds, view, x, err);
    if (pre && !strcmp(pre, "tabular"))
        return ty_fail(err, TY_EINVAL, NULL,
                       "the dataset has missing values or text columns, "
                       "but the model was trained on numbers only: its "
                       "preprocessing cannot impute or encode them");
    return TY_OK;
}

/*
 * metrics.c - the metrics registry and its text rendering (see metrics.h).
 *
 * Each family keeps its series in an array searched linearly with a hash
 * of the label values checked first: families here hold tens of series,
 * where a scan beats a hash table's bookkeeping. Invariant: a series'
 * bucket counts are per bucket (not cumulative); count is their sum plus
 * the observations above the last bound.
 *
 * The public rendering sums a family's series over its private labels
 * (the registry's list, kept per family as a bit mask). So that a public
 * counter or histogram never goes down when a series is removed (a deleted
 * deployment's), the removed series of such a family are folded into its
 * "gone" list, keyed by the labels that are not private ("" in the
 * private ones), which only the public rendering adds in.
 */
#include "common/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t hash;
    char *values[METRICS_MAX_LABELS];
    double value; /* counter, gauge */
    double sum;   /* histogram */
    uint64_t count;
    uint64_t buckets[METRICS_MAX_BUCKETS];
} series;

typedef struct {
    series *s;
    size_t n, cap;
} series_list;

struct metrics_family {
    metrics_type type;
    char *name, *help;
    int nlabels;
    char *labels[METRICS_MAX_LABELS];
    unsigned private_mask; /* bit i: labels[i] is private */
    size_t nbuckets;
    double bounds[METRICS_MAX_BUCKETS];
    pthread_mutex_t mu; /* guards private_mask and both lists */
    series_list live;   /* what metrics_render shows */
    series_list gone;   /* removed counters and histograms, summed over
                           the private labels (public rendering only) */
    struct metrics_family *next;
};

struct metrics_registry {
    pthread_mutex_t mu; /* guards the family list and the private names */
    metrics_family *first, *last;
    char *private_labels[METRICS_MAX_PRIVATE + 1]; /* NULL-terminated */
};

metrics_registry *metrics_registry_create(void)
{
    metrics_registry *reg = calloc(1, sizeof *reg);
    if (reg)
        pthread_mutex_init(&reg->mu, NULL);
    return reg;
}

static void series_free(series *s, int nlabels)
{
    for (int i = 0; i < nlabels; i++)
        free(s->values[i]);
}

static void list_free(series_list *l, int nlabels)
{
    for (size_t i = 0; i < l->n; i++)
        series_free(&l->s[i], nlabels);
    free(l->s);
    *l = (series_list){0};
}

static void family_free(metrics_family *f)
{
    list_free(&f->live, f->nlabels);
    list_free(&f->gone, f->nlabels);
    for (int i = 0; i < f->nlabels; i++)
        free(f->labels[i]);
    free(f->name);
    free(f->help);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

void metrics_registry_destroy(metrics_registry *reg)
{
    if (!reg)
        return;
    metrics_family *f = reg->first;
    while (f) {
        metrics_family *next = f->next;
        family_free(f);
        f = next;
    }
    for (int i = 0; reg->private_labels[i]; i++)
        free(reg->private_labels[i]);
    pthread_mutex_destroy(&reg->mu);
    free(reg);
}

/* [a-zA-Z_][a-zA-Z0-9_]* (no colons: those are for recording rules). */
static int name_ok(const char *s)
{
    if (!s || !*s || (*s >= '0' && *s <= '9'))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_'))
            return 0;
    return 1;
}

/* The bits of f's labels that reg names private. Caller holds reg->mu. */
static unsigned private_mask_of(const metrics_registry *reg,
                                const metrics_family *f)
{
    unsigned mask = 0;
    for (int i = 0; i < f->nlabels; i++)
        for (int k = 0; reg->private_labels[k]; k++)
            if (!strcmp(f->labels[i], reg->private_labels[k]))
                mask |= 1u << i;
    return mask;
}

int metrics_registry_private(metrics_registry *reg, const char *const *labels)
{
    char *copy[METRICS_MAX_PRIVATE + 1] = {0};
    int n = 0;
    for (; labels && labels[n]; n++) {
        if (n >= METRICS_MAX_PRIVATE || !name_ok(labels[n]) ||
            !(copy[n] = strdup(labels[n]))) {
            for (int i = 0; i < n; i++)
                free(copy[i]);
            return -1;
        }
    }
    pthread_mutex_lock(&reg->mu);
    for (int i = 0; reg->private_labels[i]; i++)
        free(reg->private_labels[i]);
    memcpy(reg->private_labels, copy, sizeof copy);
    for (metrics_family *f = reg->first; f; f = f->next) {
        pthread_mutex_lock(&f->mu);
        f->private_mask = private_mask_of(reg, f);
        pthread_mutex_unlock(&f->mu);
    }
    pthread_mutex_unlock(&reg->mu);
    return 0;
}

metrics_family *metrics_family_add(metrics_registry *reg, metrics_type type,
                                   const char *name, const char *help,
                                   const char *const *labels,
                                   const double *buckets, size_t nbuckets)
{
    if (!reg || !name_ok(name) || type > METRICS_HISTOGRAM)
        return NULL;
    if (type == METRICS_HISTOGRAM) {
        if (nbuckets == 0 || nbuckets > METRICS_MAX_BUCKETS || !buckets)
            return NULL;
        for (size_t i = 0; i < nbuckets; i++)
            if (!isfinite(buckets[i]) ||
                (i > 0 && buckets[i] <= buckets[i - 1]))
                return NULL;
    } else {
        nbuckets = 0;
    }
    int nl = 0;
    for (; labels && labels[nl]; nl++)
        if (nl >= METRICS_MAX_LABELS || !name_ok(labels[nl]) ||
            (type == METRICS_HISTOGRAM && !strcmp(labels[nl], "le")))
            return NULL;
    metrics_family *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    pthread_mutex_init(&f->mu, NULL);
    f->type = type;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    f->nlabels = nl;
    int ok = f->name && f->help;
    for (int i = 0; i < nl; i++)
        ok &= (f->labels[i] = strdup(labels[i])) != NULL;
    if (!ok) {
        family_free(f);
        return NULL;
    }
    f->nbuckets = nbuckets;
    if (nbuckets)
        memcpy(f->bounds, buckets, nbuckets * sizeof *buckets);
    pthread_mutex_lock(&reg->mu);
    f->private_mask = private_mask_of(reg, f);
    if (reg->last)
        reg->last->next = f;
    else
        reg->first = f;
    reg->last = f;
    pthread_mutex_unlock(&reg->mu);
    return f;
}

static uint64_t values_hash(const char *const *values, int n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int i = 0; i < n; i++) {
        for (const char *c = values[i] ? values[i] : ""; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull; /* separator */
    }
    return h;
}

/* The series of l for values (nlabels of them), created at 0 if absent.
 * NULL only when out of memory (l is then unchanged). */
static series *list_get(series_list *l, int nlabels, const char *const *values)
{
    uint64_t h = values_hash(values, nlabels);
    for (size_t i = 0; i < l->n; i++) {
        series *s = &l->s[i];
        if (s->hash != h)
            continue;
        int same = 1;
        for (int j = 0; j < nlabels && same; j++)
            same = !strcmp(s->values[j], values[j] ? values[j] : "");
        if (same)
            return s;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        series *p = realloc(l->s, cap * sizeof *p);
        if (!p)
            return NULL;
        l->s = p;
        l->cap = cap;
    }
    series *s = &l->s[l->n];
    memset(s, 0, sizeof *s);
    s->hash = h;
    for (int j = 0; j < nlabels; j++) {
        s->values[j] = strdup(values[j] ? values[j] : "");
        if (!s->values[j]) {
            series_free(s, j);
            return NULL;
        }
    }
    l->n++;
    return s;
}

/* The series for values, created if absent. Caller holds f->mu. NULL only
 * when out of memory. */
static series *series_get(metrics_family *f, const char *const *values)
{
    return list_get(&f->live, f->nlabels, values);
}

/* Adds what src counted or holds into dst (same family). */
static void series_accumulate(series *dst, const series *src, size_t nbuckets)
{
    dst->value += src->value;
    dst->sum += src->sum;
    dst->count += src->count;
    for (size_t b = 0; b < nbuckets; b++)
        dst->buckets[b] += src->buckets[b];
}

/* s's label values with the private ones blanked, into out. */
static void public_values(const metrics_family *f, const series *s,
                          const char *out[METRICS_MAX_LABELS])
{
    for (int j = 0; j < f->nlabels; j++)
        out[j] = f->private_mask & (1u << j) ? "" : s->values[j];
}

/* A series about to be removed: a counter's or histogram's counts stay in
 * the public sums (kept in f->gone). Caller holds f->mu. Out of memory,
 * they are dropped. */
static void series_retire(metrics_family *f, const series *s)
{
    if (!f->private_mask || f->type == METRICS_GAUGE)
        return;
    const char *v[METRICS_MAX_LABELS];
    public_values(f, s, v);
    series *g = list_get(&f->gone, f->nlabels, v);
    if (g)
        series_accumulate(g, s, f->nbuckets);
}

void metrics_add(metrics_family *f, const char *const *values, double v)
{
    if (!f || f->type == METRICS_HISTOGRAM ||
        (f->type == METRICS_COUNTER && !(v >= 0)))
        return;
    pthread_mutex_lock(&f->mu);
    series *s = series_get(f, values);
    if (s)
        s->value += v;
    pthread_mutex_unlock(&f->mu);
}

void metrics_set(metrics_family *f, const char *const *values, double v)
{
    if (!f || f->type != METRICS_GAUGE)
        return;
    pthread_mutex_lock(&f->mu);
    series *s = series_get(f, values);
    if (s)
        s->value = v;
    pthread_mutex_unlock(&f->mu);
}

void metrics_observe(metrics_family *f, const char *const *values, double v)
{
    if (!f || f->type != METRICS_HISTOGRAM || isnan(v))
        return;
    pthread_mutex_lock(&f->mu);
    series *s = series_get(f, values);
    if (s) {
        for (size_t i = 0; i < f->nbuckets; i++)
            if (v <= f->bounds[i]) {
                s->buckets[i]++;
                break;
            }
        s->count++;
        s->sum += v;
    }
    pthread_mutex_unlock(&f->mu);
}

void metrics_remove(metrics_family *f, int label, const char *value)
{
    if (!f || label < 0 || label >= f->nlabels || !value)
        return;
    pthread_mutex_lock(&f->mu);
    series_list *l = &f->live;
    for (size_t i = 0; i < l->n;) {
        if (!strcmp(l->s[i].values[label], value)) {
            series_retire(f, &l->s[i]);
            series_free(&l->s[i], f->nlabels);
            l->s[i] = l->s[--l->n];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&f->mu);
}

void metrics_clear(metrics_family *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->live.n; i++) {
        series_retire(f, &f->live.s[i]);
        series_free(&f->live.s[i], f->nlabels);
    }
    f->live.n = 0;
    pthread_mutex_unlock(&f->mu);
}

/* ---- rendering ---- */

size_t metrics_escape_label(char *out, size_t n, const char *v)
{
    size_t need = 0, w = 0;
    for (const char *c = v ? v : ""; *c; c++) {
        char esc[3] = {*c, 0, 0};
        size_t k = 1;
        if (*c == '\\' || *c == '"' || *c == '\n') {
            esc[0] = '\\';
            esc[1] = *c == '\n' ? 'n' : *c;
            k = 2;
        }
        need += k;
        if (n > 0 && w + k < n && w == need - k) {
            memcpy(out + w, esc, k);
            w += k;
        }
    }
    if (n > 0)
        out[w] = '\0';
    return need;
}

static void put_label_value(FILE *o, const char *v)
{
    for (const char *c = v; *c; c++) {
        if (*c == '\\')
            fputs("\\\\", o);
        else if (*c == '"')
            fputs("\\\"", o);
        else if (*c == '\n')
            fputs("\\n", o);
        else
            fputc(*c, o);
    }
}

/* HELP text escapes backslash and newline only. */
static void put_help(FILE *o, const char *v)
{
    for (const char *c = v; *c; c++) {
        if (*c == '\\')
            fputs("\\\\", o);
        else if (*c == '\n')
            fputs("\\n", o);
        else
            fputc(*c, o);
    }
}

static void put_number(FILE *o, double v)
{
    if (isnan(v))
        fputs("NaN", o);
    else if (isinf(v))
        fputs(v > 0 ? "+Inf" : "-Inf", o);
    else if (v == floor(v) && fabs(v) < 1e15)
        fprintf(o, "%.0f", v);
    else {
        /* The shortest of 15 or 17 digits that reads back as v. */
        char b[32];
        snprintf(b, sizeof b, "%.15g", v);
        if (strtod(b, NULL) != v)
            snprintf(b, sizeof b, "%.17g", v);
        fputs(b, o);
    }
}

/* {a="x",b="y"[,le="..."]} or nothing when there are no labels; the labels
 * of the mask hide left out. */
static void put_labels(FILE *o, const metrics_family *f, const series *s,
                       const char *le, unsigned hide)
{
    int n = 0;
    for (int i = 0; i < f->nlabels; i++) {
        if (hide & (1u << i))
            continue;
        fprintf(o, "%s%s=\"", n++ ? "," : "{", f->labels[i]);
        put_label_value(o, s->values[i]);
        fputc('"', o);
    }
    if (le)
        fprintf(o, "%sle=\"%s\"", n++ ? "," : "{", le);
    if (n)
        fputc('}', o);
}

static void put_series(FILE *o, const metrics_family *f, const series *s,
                       unsigned hide)
{
    if (f->type != METRICS_HISTOGRAM) {
        fputs(f->name, o);
        put_labels(o, f, s, NULL, hide);
        fputc(' ', o);
        put_number(o, s->value);
        fputc('\n', o);
        return;
    }
    uint64_t cum = 0;
    for (size_t b = 0; b < f->nbuckets; b++) {
        char le[32];
        snprintf(le, sizeof le, "%g", f->bounds[b]);
        cum += s->buckets[b];
        fprintf(o, "%s_bucket", f->name);
        put_labels(o, f, s, le, hide);
        fprintf(o, " %llu\n", (unsigned long long)cum);
    }
    fprintf(o, "%s_bucket", f->name);
    put_labels(o, f, s, "+Inf", hide);
    fprintf(o, " %llu\n%s_sum", (unsigned long long)s->count, f->name);
    put_labels(o, f, s, NULL, hide);
    fputc(' ', o);
    put_number(o, s->sum);
    fprintf(o, "\n%s_count", f->name);
    put_labels(o, f, s, NULL, hide);
    fprintf(o, " %llu\n", (unsigned long long)s->count);
}

/* HELP and TYPE; hide: the private labels summed over, named after the
 * help text. */
static void put_head(FILE *o, const metrics_family *f, unsigned hide)
{
    static const char *const type_names[] = {"counter", "gauge", "histogram"};
    fprintf(o, "# HELP %s ", f->name);
    put_help(o, f->help);
    if (hide) {
        fputs(" (This view sums over ", o);
        for (int i = 0, n = 0; i < f->nlabels; i++)
            if (hide & (1u << i))
                fprintf(o, "%s%s", n++ ? ", " : "", f->labels[i]);
        fputs(".)", o);
    }
    fprintf(o, "\n# TYPE %s %s\n", f->name, type_names[f->type]);
}

/* Renders f; with pub, summed over its private labels (its removed
 * counters and histograms added in). -1 when out of memory. */
static int render_family(FILE *o, metrics_family *f, bool pub)
{
    pthread_mutex_lock(&f->mu);
    unsigned hide = pub ? f->private_mask : 0;
    put_head(o, f, hide);
    if (!hide) {
        for (size_t i = 0; i < f->live.n; i++)
            put_series(o, f, &f->live.s[i], 0);
        pthread_mutex_unlock(&f->mu);
        return 0;
    }
    /* One sum per tuple of the other labels, in the order first seen. */
    series_list sums = {0};
    int rc = 0;
    const char *v[METRICS_MAX_LABELS];
    for (size_t i = 0; i < f->live.n && rc == 0; i++) {
        public_values(f, &f->live.s[i], v);
        series *t = list_get(&sums, f->nlabels, v);
        if (t)
            series_accumulate(t, &f->live.s[i], f->nbuckets);
        else
            rc = -1;
    }
    for (size_t i = 0; i < f->gone.n && rc == 0; i++) {
        series *t = list_get(&sums, f->nlabels,
                             (const char *const *)f->gone.s[i].values);
        if (t)
            series_accumulate(t, &f->gone.s[i], f->nbuckets);
        else
            rc = -1;
    }
    pthread_mutex_unlock(&f->mu);
    for (size_t i = 0; i < sums.n && rc == 0; i++)
        put_series(o, f, &sums.s[i], hide);
    list_free(&sums, f->nlabels);
    return rc;
}

static char *render(metrics_registry *reg, bool pub, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *o = open_memstream(&buf, &n);
    if (!o)
        return NULL;
    int bad = 0;
    pthread_mutex_lock(&reg->mu);
    for (metrics_family *f = reg->first; f && !bad; f = f->next)
        bad = render_family(o, f, pub) != 0;
    pthread_mutex_unlock(&reg->mu);
    bad |= ferror(o);
    if (fclose(o) != 0 || bad) {
        free(buf);
        return NULL;
    }
    if (len)
        *len = n;
    return buf;
}

char *metrics_render(metrics_registry *reg, size_t *len)
{
    return render(reg, false, len);
}

char *metrics_render_public(metrics_registry *reg, size_t *len)
{
    return render(reg, true, len);
}

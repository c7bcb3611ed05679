/*
 * metrics.c - the metrics registry and its text rendering (see metrics.h).
 *
 * Each family keeps its series in an array searched linearly with a hash
 * of the label values checked first: families here hold tens of series,
 * where a scan beats a hash table's bookkeeping. Invariant: a series'
 * bucket counts are per bucket (not cumulative); count is their sum plus
 * the observations above the last bound.
 */
#include "common/metrics.h"

#include <math.h>
#include <pthread.h>
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

struct metrics_family {
    metrics_type type;
    char *name, *help;
    int nlabels;
    char *labels[METRICS_MAX_LABELS];
    size_t nbuckets;
    double bounds[METRICS_MAX_BUCKETS];
    pthread_mutex_t mu;
    series *s;
    size_t n, cap;
    struct metrics_family *next;
};

struct metrics_registry {
    pthread_mutex_t mu; /* guards the family list */
    metrics_family *first, *last;
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

static void family_free(metrics_family *f)
{
    for (size_t i = 0; i < f->n; i++)
        series_free(&f->s[i], f->nlabels);
    free(f->s);
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

/* The series for values, created if absent. Caller holds f->mu. NULL only
 * when out of memory. */
static series *series_get(metrics_family *f, const char *const *values)
{
    uint64_t h = values_hash(values, f->nlabels);
    for (size_t i = 0; i < f->n; i++) {
        series *s = &f->s[i];
        if (s->hash != h)
            continue;
        int same = 1;
        for (int j = 0; j < f->nlabels && same; j++)
            same = !strcmp(s->values[j], values[j] ? values[j] : "");
        if (same)
            return s;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        series *p = realloc(f->s, cap * sizeof *p);
        if (!p)
            return NULL;
        f->s = p;
        f->cap = cap;
    }
    series *s = &f->s[f->n];
    memset(s, 0, sizeof *s);
    s->hash = h;
    for (int j = 0; j < f->nlabels; j++) {
        s->values[j] = strdup(values[j] ? values[j] : "");
        if (!s->values[j]) {
            series_free(s, j);
            return NULL;
        }
    }
    f->n++;
    return s;
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
    for (size_t i = 0; i < f->n;) {
        if (!strcmp(f->s[i].values[label], value)) {
            series_free(&f->s[i], f->nlabels);
            f->s[i] = f->s[--f->n];
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
    for (size_t i = 0; i < f->n; i++)
        series_free(&f->s[i], f->nlabels);
    f->n = 0;
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

/* {a="x",b="y"[,le="..."]} or nothing when there are no labels. */
static void put_labels(FILE *o, const metrics_family *f, const series *s,
                       const char *le)
{
    if (f->nlabels == 0 && !le)
        return;
    fputc('{', o);
    for (int i = 0; i < f->nlabels; i++) {
        fprintf(o, "%s%s=\"", i ? "," : "", f->labels[i]);
        put_label_value(o, s->values[i]);
        fputc('"', o);
    }
    if (le)
        fprintf(o, "%sle=\"%s\"", f->nlabels ? "," : "", le);
    fputc('}', o);
}

static void render_family(FILE *o, metrics_family *f)
{
    static const char *const type_names[] = {"counter", "gauge", "histogram"};
    pthread_mutex_lock(&f->mu);
    fprintf(o, "# HELP %s ", f->name);
    put_help(o, f->help);
    fprintf(o, "\n# TYPE %s %s\n", f->name, type_names[f->type]);
    for (size_t i = 0; i < f->n; i++) {
        const series *s = &f->s[i];
        if (f->type != METRICS_HISTOGRAM) {
            fputs(f->name, o);
            put_labels(o, f, s, NULL);
            fputc(' ', o);
            put_number(o, s->value);
            fputc('\n', o);
            continue;
        }
        uint64_t cum = 0;
        for (size_t b = 0; b < f->nbuckets; b++) {
            char le[32];
            snprintf(le, sizeof le, "%g", f->bounds[b]);
            cum += s->buckets[b];
            fprintf(o, "%s_bucket", f->name);
            put_labels(o, f, s, le);
            fprintf(o, " %llu\n", (unsigned long long)cum);
        }
        fprintf(o, "%s_bucket", f->name);
        put_labels(o, f, s, "+Inf");
        fprintf(o, " %llu\n%s_sum", (unsigned long long)s->count, f->name);
        put_labels(o, f, s, NULL);
        fputc(' ', o);
        put_number(o, s->sum);
        fprintf(o, "\n%s_count", f->name);
        put_labels(o, f, s, NULL);
        fprintf(o, " %llu\n", (unsigned long long)s->count);
    }
    pthread_mutex_unlock(&f->mu);
}

char *metrics_render(metrics_registry *reg, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *o = open_memstream(&buf, &n);
    if (!o)
        return NULL;
    pthread_mutex_lock(&reg->mu);
    for (metrics_family *f = reg->first; f; f = f->next)
        render_family(o, f);
    pthread_mutex_unlock(&reg->mu);
    int bad = ferror(o);
    if (fclose(o) != 0 || bad) {
        free(buf);
        return NULL;
    }
    if (len)
        *len = n;
    return buf;
}

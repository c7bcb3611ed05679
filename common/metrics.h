/*
 * metrics.h - a small metrics registry rendered in the Prometheus text
 * exposition format (version 0.0.4), for GET /metrics.
 *
 * A registry holds families (a counter, gauge or histogram with a fixed
 * list of label names); a family holds one series per distinct tuple of
 * label values, made on first use. Updating a series that exists takes the
 * family's mutex and allocates nothing, so the request path stays cheap;
 * only a new label tuple allocates. Families are made at startup and live
 * as long as the registry.
 *
 * Names of metrics and labels are fixed by the caller and checked when the
 * family is made; label values are anything and escaped on output
 * (backslash, double quote, newline). Histogram buckets are stored per
 * bucket and rendered cumulative with the "+Inf" bucket equal to _count.
 *
 * Two renderings: the whole registry (metrics_render), and a public one
 * (metrics_render_public) in which the labels the registry names private
 * (metrics_registry_private: ids of who owns what) are summed away, so it
 * holds no value of theirs. A public counter or histogram never goes down
 * when metrics_remove or metrics_clear takes series away: their counts stay
 * in its sums.
 */
#ifndef TY_METRICS_H
#define TY_METRICS_H

#include <stddef.h>

#define METRICS_MAX_LABELS 6
#define METRICS_MAX_BUCKETS 24
#define METRICS_MAX_PRIVATE 8

typedef enum {
    METRICS_COUNTER = 0,
    METRICS_GAUGE,
    METRICS_HISTOGRAM,
} metrics_type;

typedef struct metrics_registry metrics_registry;
typedef struct metrics_family metrics_family;

/* A new, empty registry; NULL when out of memory. */
metrics_registry *metrics_registry_create(void);

/* Frees the registry and all its families (reg may be NULL). */
void metrics_registry_destroy(metrics_registry *reg);

/* Names the private labels (NULL-terminated, at most METRICS_MAX_PRIVATE,
 * copied; NULL: none), replacing any named before, for the families there
 * are and those added later. Meant for start-up: the counts of series
 * removed before a change stay summed as the earlier list had them.
 * Returns 0; -1 for an invalid or too long list or when out of memory,
 * with nothing changed. */
int metrics_registry_private(metrics_registry *reg, const char *const *labels);

/* Adds a family. labels: NULL-terminated names (NULL: none), at most
 * METRICS_MAX_LABELS. buckets: a histogram's upper bounds, strictly
 * increasing, at most METRICS_MAX_BUCKETS, without +Inf (ignored for
 * other types). The strings are copied. Returns NULL for an invalid name,
 * label or bucket list, or when out of memory; the registry is unchanged. */
metrics_family *metrics_family_add(metrics_registry *reg, metrics_type type,
                                   const char *name, const char *help,
                                   const char *const *labels,
                                   const double *buckets, size_t nbuckets);

/* Updates the series with these label values (as many as the family has
 * labels; NULL when it has none), creating it at 0 first. Out of memory:
 * the update is dropped. metrics_add: a counter only goes up (a negative v
 * is ignored); a gauge moves by v. metrics_set: gauges only.
 * metrics_observe: histograms only. A wrong type is ignored. */
void metrics_add(metrics_family *f, const char *const *values, double v);
void metrics_set(metrics_family *f, const char *const *values, double v);
void metrics_observe(metrics_family *f, const char *const *values, double v);

/* Removes every series whose label `label` (an index) equals value (a
 * counter's or histogram's counts stay in the public sums). */
void metrics_remove(metrics_family *f, int label, const char *value);

/* Removes every series of the family (before a gauge is refilled). */
void metrics_clear(metrics_family *f);

/* The whole registry as exposition text, NUL-terminated, length in *len
 * (may be NULL); the caller frees it. NULL when out of memory. */
char *metrics_render(metrics_registry *reg, size_t *len);

/* The same, public: a family with private labels has one series per tuple
 * of its other labels, the sum of the series that share it (values of
 * counters and gauges; buckets, sums and counts of histograms; the removed
 * counts of counters and histograms added in), and its HELP names the
 * labels summed over. NULL when out of memory. */
char *metrics_render_public(metrics_registry *reg, size_t *len);

/* Writes v escaped for a label value into out (size n, always
 * NUL-terminated, truncated at a whole escape). Returns the length the
 * full escape needs (without the NUL), like snprintf. */
size_t metrics_escape_label(char *out, size_t n, const char *v);

#endif

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
 */
#ifndef TY_METRICS_H
#define TY_METRICS_H

#include <stddef.h>

#define METRICS_MAX_LABELS 6
#define METRICS_MAX_BUCKETS 24

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

/* Removes every series whose label `label` (an index) equals value. */
void metrics_remove(metrics_family *f, int label, const char *value);

/* Removes every series of the family (before a gauge is refilled). */
void metrics_clear(metrics_family *f);

/* The whole registry as exposition text, NUL-terminated, length in *len
 * (may be NULL); the caller frees it. NULL when out of memory. */
char *metrics_render(metrics_registry *reg, size_t *len);

/* Writes v escaped for a label value into out (size n, always
 * NUL-terminated, truncated at a whole escape). Returns the length the
 * full escape needs (without the NUL), like snprintf. */
size_t metrics_escape_label(char *out, size_t n, const char *v);

#endif

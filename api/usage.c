/*
 * usage.c - GET /v1/usage: the slice-hours, GPU-equivalent hours and
 * CPU-hours that jobs and serving replicas held in a window, grouped by up
 * to two of tenant, kind, profile and day (store_usage_window), as JSON or
 * CSV (?format=csv or Accept: text/csv).
 *
 * A tenant key sees its own tenant's usage only (?tenant= naming another
 * is refused, 403); the admin sees every tenant's, may filter one with
 * ?tenant=, and (unfiltered) gets the inventory's GPU-hours in the window
 * and the idle part of them (GPUs x window hours minus the GPU-hours
 * used), so that usage plus idle adds up to the inventory.
 */
#include "api/api.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/inventory.h"

#define USAGE_DEFAULT_WINDOW_S (7 * 86400.0)
#define USAGE_MAX_WINDOW_DAYS 400

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
 * days_from_civil). */
static long long days_from_civil(long long y, unsigned m, unsigned d)
{
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long long)doe - 719468;
}

static int digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

/* A time as RFC 3339 ("2026-12-01T00:00:00Z", fractions and offsets
 * allowed; a date alone is its midnight UTC) or unix seconds, into *t.
 * 1, or 0 when it is neither. */
static int parse_time(const char *s, double *t)
{
    size_t len = strlen(s);
    if (len == 0 || len > 64)
        return 0;
    if (isdigit((unsigned char)s[0]) && strspn(s, "0123456789.") == len) {
        char *end = NULL;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || *end || !isfinite(v) || v > 253402300799.0)
            return 0;
        *t = v;
        return 1;
    }
    int y, mo, d, h = 0, mi = 0, sec = 0;
    if (len < 10 || !digits(s, 4, &y) || s[4] != '-' ||
        !digits(s + 5, 2, &mo) || s[7] != '-' || !digits(s + 8, 2, &d) ||
        mo < 1 || mo > 12 || d < 1 || d > 31)
        return 0;
    const char *p = s + 10;
    double frac = 0, offset = 0;
    if (*p) {
        if ((*p != 'T' && *p != 't' && *p != ' ') || strlen(p) < 9 ||
            !digits(p + 1, 2, &h) || p[3] != ':' || !digits(p + 4, 2, &mi) ||
            p[6] != ':' || !digits(p + 7, 2, &sec) || h > 23 || mi > 59 ||
            sec > 60)
            return 0;
        p += 9;
        if (*p == '.') {
            double scale = 0.1;
            p++;
            if (!isdigit((unsigned char)*p))
                return 0;
            for (; isdigit((unsigned char)*p); p++, scale /= 10)
                frac += (*p - '0') * scale;
        }
        if (*p == 'Z' || *p == 'z') {
            p++;
        } else if (*p == '+' || *p == '-') {
            int oh, om;
            if (strlen(p) != 6 || !digits(p + 1, 2, &oh) || p[3] != ':' ||
                !digits(p + 4, 2, &om) || oh > 23 || om > 59)
                return 0;
            offset = (*p == '-' ? -1 : 1) * (oh * 3600.0 + om * 60.0);
            p += 6;
        } else {
            return 0;
        }
        if (*p)
            return 0;
    }
    double v = (double)days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 +
               h * 3600.0 + mi * 60.0 + sec + frac - offset;
    if (v < 0)
        return 0;
    *t = v;
    return 1;
}

static void iso(double t, char out[32])
{
    time_t s = (time_t)floor(t);
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ?group_by= into q's keys: one or two distinct known keys, comma
 * separated (default tenant). 0 after replying 400. */
static int parse_group_by(http_req *r, store_usage_query *q)
{
    const char *g = http_req_query(r, "group_by");
    q->nkeys = 1;
    q->keys[0] = STORE_USAGE_TENANT;
    if (!g)
        return 1;
    q->nkeys = 0;
    const char *p = g;
    for (;;) {
        size_t n = strcspn(p, ",");
        char name[32];
        store_usage_key k;
        if (n == 0 || n >= sizeof name) {
            http_reply_problem(r, 400, "group_by",
                               "group_by is one or two of tenant, kind, "
                               "profile and day, separated by a comma");
            return 0;
        }
        memcpy(name, p, n);
        name[n] = '\0';
        if (!store_usage_key_parse(name, &k)) {
            http_reply_problem(r, 400, "group_by",
                               "group_by: unknown key (known: tenant, kind, "
                               "profile, day)");
            return 0;
        }
        if (q->nkeys == 2) {
            http_reply_problem(r, 400, "group_by",
                               "group_by takes at most two keys");
            return 0;
        }
        if (q->nkeys == 1 && q->keys[0] == k) {
            http_reply_problem(r, 400, "group_by",
                               "group_by names a key twice");
            return 0;
        }
        q->keys[q->nkeys++] = k;
        if (!p[n])
            return 1;
        p += n + 1;
    }
}

/* The window from ?from= and ?to= (default: the 7 days before now). 0
 * after replying 400. */
static int parse_window(http_req *r, store_usage_query *q)
{
    const char *from = http_req_query(r, "from"), *to = http_req_query(r, "to");
    q->now = wall_now();
    q->to = q->now;
    if (to && !parse_time(to, &q->to)) {
        http_reply_problem(r, 400, "to",
                           "to is an RFC 3339 time (2026-12-01T00:00:00Z) "
                           "or unix seconds");
        return 0;
    }
    q->from = q->to - USAGE_DEFAULT_WINDOW_S;
    if (from && !parse_time(from, &q->from)) {
        http_reply_problem(r, 400, "from",
                           "from is an RFC 3339 time (2026-12-01T00:00:00Z) "
                           "or unix seconds");
        return 0;
    }
    if (!(q->from < q->to)) {
        http_reply_problem(r, 400, "from", "from must be before to");
        return 0;
    }
    if (q->to - q->from > USAGE_MAX_WINDOW_DAYS * 86400.0) {
        http_reply_problem(r, 400, "to", "the window is over %d days",
                           USAGE_MAX_WINDOW_DAYS);
        return 0;
    }
    return 1;
}

/* 1 for CSV (?format=csv, or Accept: text/csv without a format), 0 for
 * JSON, -1 after replying 400. */
static int wants_csv(http_req *r)
{
    const char *f = http_req_query(r, "format");
    if (f) {
        if (!strcmp(f, "csv"))
            return 1;
        if (!strcmp(f, "json"))
            return 0;
        http_reply_problem(r, 400, "format", "format is json or csv");
        return -1;
    }
    const char *accept = http_req_header(r, "Accept");
    return accept && strstr(accept, "text/csv") ? 1 : 0;
}

static const char *const figures[] = {"slice_hours", "gpu_hours", "cpu_hours"};

/* Appends text to the growing buffer *buf (*len used, *cap allocated); 0
 * when out of memory (the buffer is then freed). */
static int put(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int put(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (n < 0)
            break;
        if ((size_t)n < *cap - *len) {
            *len += (size_t)n;
            return 1;
        }
        size_t ncap = (*cap + (size_t)n + 1) * 2;
        char *p = realloc(*buf, ncap);
        if (!p)
            break;
        *buf = p;
        *cap = ncap;
    }
    free(*buf);
    *buf = NULL;
    return 0;
}

/* A CSV field: quoted when it holds a comma, a quote or a line break. */
static int put_field(char **buf, size_t *len, size_t *cap, const char *v)
{
    if (!strpbrk(v, ",\"\r\n"))
        return put(buf, len, cap, "%s,", v);
    if (!put(buf, len, cap, "\""))
        return 0;
    for (const char *c = v; *c; c++)
        if (!put(buf, len, cap, *c == '"' ? "\"\"" : "%c", *c))
            return 0;
    return put(buf, len, cap, "\",");
}

static void reply_csv(http_req *r, const store_usage_query *q,
                      const json_t *rows)
{
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    int ok = buf != NULL;
    for (int i = 0; ok && i < q->nkeys; i++)
        ok = put(&buf, &len, &cap, "%s,", store_usage_key_name(q->keys[i]));
    if (ok)
        ok = put(&buf, &len, &cap,
                 "slice_hours,gpu_hours,cpu_hours,intervals\r\n");
    size_t i;
    json_t *row;
    json_array_foreach (rows, i, row) {
        for (int k = 0; ok && k < q->nkeys; k++) {
            const char *v = json_string_value(
                json_object_get(row, store_usage_key_name(q->keys[k])));
            ok = put_field(&buf, &len, &cap, v ? v : "");
        }
        for (size_t f = 0; ok && f < TY_ARRAY_LEN(figures); f++)
            ok = put(&buf, &len, &cap, "%.6f,",
                     json_number_value(json_object_get(row, figures[f])));
        if (ok)
            ok = put(&buf, &len, &cap, "%lld\r\n",
                     (long long)json_integer_value(
                         json_object_get(row, "intervals")));
        if (!ok)
            break;
    }
    if (!ok) {
        http_reply_problem(r, 503, NULL, "out of memory");
        return;
    }
    http_reply_header(r, "Content-Disposition",
                      "attachment; filename=\"usage.csv\"");
    http_reply_buffer(r, 200, "text/csv; charset=utf-8", buf, len);
}

/* The totals over rows: the figures' sums (the caller sets the intervals:
 * grouped by day, one across midnight is in two rows). New object. */
static json_t *sum_rows(const json_t *rows)
{
    double sums[3] = {0, 0, 0};
    size_t i;
    json_t *row;
    json_array_foreach (rows, i, row) {
        for (size_t f = 0; f < TY_ARRAY_LEN(figures); f++)
            sums[f] += json_number_value(json_object_get(row, figures[f]));
    }
    return json_pack("{s:f, s:f, s:f, s:i}", "slice_hours", sums[0],
                     "gpu_hours", sums[1], "cpu_hours", sums[2], "intervals",
                     0);
}

void api_usage_get(api_ctx *app, http_req *r)
{
    const store_key *key = http_req_key(r);
    store_usage_query q = {0};
    int csv = wants_csv(r);
    if (csv < 0 || !parse_window(r, &q) || !parse_group_by(r, &q))
        return;
    const char *tenant = http_req_query(r, "tenant");
    if (!key->is_admin) {
        if (tenant && strcmp(tenant, key->tenant_id)) {
            http_reply_problem(r, 403, "tenant",
                               "a tenant key sees its own tenant's usage "
                               "only");
            return;
        }
        tenant = key->tenant_id;
    } else if (tenant && !*tenant) {
        tenant = NULL;
    }
    q.tenant_id = tenant;
    json_t *rows = NULL;
    ty_err err = {0};
    int64_t nintervals = 0;
    ty_status s = store_usage_window(app->store, &q, &rows, &nintervals, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    if (csv) {
        reply_csv(r, &q, rows);
        json_decref(rows);
        return;
    }
    json_t *total = sum_rows(rows);
    if (total)
        json_object_set_new(total, "intervals", json_integer(nintervals));
    char from[32], to[32];
    iso(q.from, from);
    iso(q.to, to);
    json_t *keys = json_array();
    for (int i = 0; i < q.nkeys; i++)
        json_array_append_new(keys,
                              json_string(store_usage_key_name(q.keys[i])));
    json_t *doc = json_pack("{s:s, s:s, s:o, s:o, s:o*}", "from", from, "to",
                            to, "group_by", keys, "rows", rows, "total", total);
    /* The inventory for the admin's view of every tenant (a filtered view's
     * idle hours would count the other tenants' as idle). */
    if (doc && key->is_admin && !q.tenant_id) {
        int gpus = app->inventory ? app->inventory->ngpus : 0;
        double inv_hours = gpus * (q.to - q.from) / 3600.0;
        double used = json_number_value(
            json_object_get(json_object_get(doc, "total"), "gpu_hours"));
        json_object_set_new(doc, "inventory",
                            json_pack("{s:i, s:f, s:f}", "gpus", gpus,
                                      "gpu_hours", inv_hours, "idle_gpu_hours",
                                      inv_hours - used));
    }
    if (!doc) {
        http_reply_problem(r, 503, NULL, "out of memory");
        return;
    }
    http_reply_json(r, 200, doc);
}

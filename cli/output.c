/*
 * output.c - tables, sizes, times and progress bars for the client (see
 * output.h). Everything for a person; --json bypasses this file.
 */
#include "cli/output.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <unistd.h>

void cli_table_init(cli_table *t, const char *const *head)
{
    memset(t, 0, sizeof *t);
    while (head[t->ncols] && t->ncols < CLI_TABLE_COLS) {
        t->head[t->ncols] = head[t->ncols];
        t->ncols++;
    }
}

int cli_table_add(cli_table *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        char **nc = realloc(t->cells, cap * t->ncols * sizeof *nc);
        if (!nc)
            return -1;
        t->cells = nc;
        t->cap = cap;
    }
    for (size_t i = 0; i < t->ncols; i++) {
        const char *c = cells[i] && *cells[i] ? cells[i] : "-";
        t->cells[t->nrows * t->ncols + i] = strdup(c);
    }
    t->nrows++;
    return 0;
}

void cli_table_print(const cli_table *t, FILE *f)
{
    if (t->nrows == 0) {
        fprintf(f, "(none)\n");
        return;
    }
    size_t w[CLI_TABLE_COLS];
    for (size_t i = 0; i < t->ncols; i++) {
        w[i] = strlen(t->head[i]);
        for (size_t r = 0; r < t->nrows; r++) {
            const char *c = t->cells[r * t->ncols + i];
            if (c && strlen(c) > w[i])
                w[i] = strlen(c);
        }
    }
    for (size_t r = 0; r <= t->nrows; r++) {
        for (size_t i = 0; i < t->ncols; i++) {
            const char *c =
                r == 0 ? t->head[i] : t->cells[(r - 1) * t->ncols + i];
            if (!c)
                c = "?";
            if (i + 1 == t->ncols)
                fprintf(f, "%s\n", c);
            else
                fprintf(f, "%-*s  ", (int)w[i], c);
        }
    }
}

void cli_table_free(cli_table *t)
{
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof *t);
}

void cli_fmt_bytes(int64_t bytes, char *out, size_t size)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (bytes < 1024) {
        snprintf(out, size, "%lld B", (long long)bytes);
        return;
    }
    double v = (double)bytes / 1024;
    int u = 0;
    while (v >= 1024 && u < 3) {
        v /= 1024;
        u++;
    }
    snprintf(out, size, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
}

void cli_fmt_time(const char *s, char *out, size_t size)
{
    if (!s) {
        snprintf(out, size, "-");
        return;
    }
    struct tm tm = {0};
    const char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!rest) {
        snprintf(out, size, "%s", s);
        return;
    }
    time_t t = timegm(&tm);
    time_t now = time(NULL);
    long ago = (long)(now - t);
    if (ago >= 0 && ago < 60)
        snprintf(out, size, "%lds ago", ago);
    else if (ago >= 60 && ago < 3600)
        snprintf(out, size, "%ldm ago", ago / 60);
    else if (ago >= 3600 && ago < 86400)
        snprintf(out, size, "%ldh ago", ago / 3600);
    else {
        struct tm lt;
        localtime_r(&t, &lt);
        strftime(out, size, "%Y-%m-%d %H:%M", &lt);
    }
}

void cli_fmt_value(const json_t *v, char *out, size_t size)
{
    if (!v || json_is_null(v)) {
        snprintf(out, size, "-");
    } else if (json_is_string(v)) {
        snprintf(out, size, "%s", json_string_value(v));
    } else if (json_is_integer(v)) {
        snprintf(out, size, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != 0 && (fabs(d) < 1e-3 || fabs(d) >= 1e7))
            snprintf(out, size, "%.4g", d);
        else
            snprintf(out, size, "%.4f", d);
    } else if (json_is_boolean(v)) {
        snprintf(out, size, "%s", json_is_true(v) ? "yes" : "no");
    } else {
        /* Nested values for people: 6 significant digits, not the 17 that
         * round-trip a double (0.9, not 0.90000000000000002). */
        char *t = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(6));
        snprintf(out, size, "%s", t ? t : "?");
        free(t);
    }
}

void cli_fmt_metrics(const json_t *metrics, const char *prefix, char *out,
                     size_t size)
{
    static const struct {
        const char *key, *label;
    } parts[] = {{"accuracy", "acc"}, {"rmse", "rmse"}, {"r2", "r2"}};
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char key[64], v[64];
        snprintf(key, sizeof key, "%s%s", prefix, parts[i].key);
        const json_t *x = json_object_get(metrics, key);
        if (!json_is_number(x))
            continue;
        /* An error in the target's units may be in the thousands: one
         * decimal there, as many as cli_fmt_value shows below. */
        if (fabs(json_number_value(x)) >= 1000)
            snprintf(v, sizeof v, "%.1f", json_number_value(x));
        else
            cli_fmt_value(x, v, sizeof v);
        o += (size_t)snprintf(out + o, o < size ? size - o : 0, "%s%s %s",
                              o ? " " : "", parts[i].label, v);
    }
    if (!out[0])
        snprintf(out, size, "-");
}

/* Categories shown before "... (N in all)". */
#define COLUMN_CATEGORIES_SHOWN 4

void cli_print_columns(const json_t *columns, int with_missing, FILE *f)
{
    static const char *const head[] = {"NAME", "TYPE", "CATEGORIES", "MISSING",
                                       NULL};
    static const char *const head_nm[] = {"NAME", "TYPE", "CATEGORIES", NULL};
    cli_table t;
    cli_table_init(&t, with_missing ? head : head_nm);
    size_t i;
    const json_t *col;
    json_array_foreach (columns, i, col) {
        const json_t *cats = json_object_get(col, "categories");
        size_t n = json_array_size(cats), k, o = 0;
        char cat[512] = "", missing[32];
        for (k = 0; k < n && k < COLUMN_CATEGORIES_SHOWN; k++)
            o += (size_t)snprintf(cat + o, o < sizeof cat ? sizeof cat - o : 0,
                                  "%s%s", k ? ", " : "",
                                  json_string_value(json_array_get(cats, k)));
        if (n > COLUMN_CATEGORIES_SHOWN)
            o += (size_t)snprintf(cat + o, o < sizeof cat ? sizeof cat - o : 0,
                                  ", ... (%zu in all)", n);
        else if (n)
            o += (size_t)snprintf(cat + o, o < sizeof cat ? sizeof cat - o : 0,
                                  " (%zu)", n);
        cli_fmt_value(json_object_get(col, "missing"), missing, sizeof missing);
        const char *row[] = {json_string_value(json_object_get(col, "name")),
                             json_string_value(json_object_get(col, "type")),
                             cat, missing};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, f);
    cli_table_free(&t);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

void cli_print_object(const json_t *obj, FILE *f)
{
    const char *k;
    const json_t *v;
    size_t w = 0;
    json_object_foreach ((json_t *)obj, k, v) {
        if (strlen(k) > w)
            w = strlen(k);
    }
    json_object_foreach ((json_t *)obj, k, v) {
        char buf[2048];
        if (json_is_integer(v) &&
            (!strcmp(k, "bytes") || ends_with(k, "_bytes"))) {
            cli_fmt_bytes(json_integer_value(v), buf, sizeof buf);
        } else if (json_is_string(v) && ends_with(k, "_at")) {
            char rel[64];
            cli_fmt_time(json_string_value(v), rel, sizeof rel);
            snprintf(buf, sizeof buf, "%s (%s)", json_string_value(v), rel);
        } else {
            cli_fmt_value(v, buf, sizeof buf);
        }
        fprintf(f, "%-*s  %s\n", (int)w + 1, k, buf);
    }
}

void cli_print_raw(const char *body, size_t len, FILE *f)
{
    if (len == 0)
        return; /* 204: nothing to print */
    fwrite(body, 1, len, f);
    if (len == 0 || body[len - 1] != '\n')
        fputc('\n', f);
}

int cli_stderr_tty(void) { return isatty(2); }

static int drawn;

void cli_progress_draw(const char *label, double fraction, const char *extra)
{
    if (!cli_stderr_tty())
        return;
    if (fraction < 0)
        fraction = 0;
    if (fraction > 1)
        fraction = 1;
    char bar[31];
    int fill = (int)(fraction * 30 + 0.5);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : ' ';
    bar[30] = '\0';
    /* One line, clipped to the terminal's width: a wrapped line would not
     * be erased by the next redraw. */
    char line[512];
    snprintf(line, sizeof line, "%s [%s] %3.0f%% %s", label, bar,
             fraction * 100, extra ? extra : "");
    struct winsize ws;
    if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 &&
        ws.ws_col - 1 < (int)sizeof line)
        line[ws.ws_col - 1] = '\0';
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    drawn = 1;
}

void cli_progress_end(void)
{
    if (drawn) {
        fputc('\n', stderr);
        drawn = 0;
    }
}

void cli_progress_bytes(void *ctx, double done, double total)
{
    if (total <= 0)
        return;
    char a[32], b[32], extra[80];
    cli_fmt_bytes((int64_t)done, a, sizeof a);
    cli_fmt_bytes((int64_t)total, b, sizeof b);
    snprintf(extra, sizeof extra, "%s / %s", a, b);
    cli_progress_draw((const char *)ctx, done / total, extra);
}

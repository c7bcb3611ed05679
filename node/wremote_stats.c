/*
 * wremote_stats.c - the remote worker shim's relay figures (see
 * wremote_stats.h): counted as the relay goes, said once at the end. The
 * line's wording is read by bench/slurm/overhead.py: change both together.
 */
#include "node/wremote_stats.h"

#include <stdio.h>
#include <stdlib.h>

void wrstats_post(wrstats *st, size_t lines, double ms)
{
    if (st->nposts < WRSTATS_RTT_MAX)
        st->rtt_ms[st->nposts] = ms;
    st->nposts++;
    st->nlines += lines;
}

void wrstats_upload(wrstats *st, int model, double ms, double bytes)
{
    if (model) {
        st->model_ms = ms;
        st->model_bytes = bytes;
        return;
    }
    st->nckpt++;
    st->ckpt_ms += ms;
    st->ckpt_bytes += bytes;
    if (ms > st->ckpt_max_ms)
        st->ckpt_max_ms = ms;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void wrstats_print(wrstats *st)
{
    if (!st->nposts)
        return;
    size_t n = st->nposts < WRSTATS_RTT_MAX ? st->nposts : WRSTATS_RTT_MAX;
    qsort(st->rtt_ms, n, sizeof st->rtt_ms[0], cmp_double);
    double p50 = n ? st->rtt_ms[n / 2] : 0;
    double p99 =
        n ? st->rtt_ms[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] : 0;
    fprintf(stderr,
            "trainyard worker: relay: %zu lines in %zu posts, round trip "
            "p50 %.2f ms p99 %.2f ms; %zu checkpoint uploads, %.0f bytes, "
            "mean %.1f ms, max %.1f ms; model %.0f bytes in %.1f ms\n",
            st->nlines, st->nposts, p50, p99, st->nckpt, st->ckpt_bytes,
            st->nckpt ? st->ckpt_ms / (double)st->nckpt : 0.0, st->ckpt_max_ms,
            st->model_bytes, st->model_ms);
}

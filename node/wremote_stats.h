/*
 * wremote_stats.h - what the remote worker shim's relay cost, said in one
 * line on stderr when the shim ends (it lands in the Slurm job's output
 * file, where bench/slurm/overhead.py reads it): how long a batch of lines
 * took to reach the server (the round trip of its POST: the line's latency
 * once read, since lines are posted as soon as they are read), and the
 * checkpoint and model uploads. node/wremote.c is its only user.
 *
 * Counting allocates nothing and cannot fail; the round trips of the
 * first WRSTATS_RTT_MAX posts are kept for the percentiles.
 */
#ifndef TY_WREMOTE_STATS_H
#define TY_WREMOTE_STATS_H

#include <stddef.h>

#define WRSTATS_RTT_MAX 4096

/* Zeroed: nothing counted yet. */
typedef struct {
    double rtt_ms[WRSTATS_RTT_MAX]; /* the first WRSTATS_RTT_MAX posts' */
    size_t nposts, nlines;
    size_t nckpt;
    double ckpt_ms, ckpt_max_ms, ckpt_bytes;
    double model_ms, model_bytes;
} wrstats;

/* Counts a batch of lines posted (the server answered) in ms. */
void wrstats_post(wrstats *st, size_t lines, double ms);

/* Counts an upload of bytes in ms: the model (model 1; the last one
 * counts) or a checkpoint. */
void wrstats_upload(wrstats *st, int model, double ms, double bytes);

/* Says the figures in one line on stderr; nothing when no post went
 * through. Sorts st->rtt_ms. */
void wrstats_print(wrstats *st);

#endif

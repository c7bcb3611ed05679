/*
 * retry.h - how long the runner waits before starting a job again after
 * its worker failed for a reason that may pass (it died, lost its device,
 * stopped sending heartbeats): exponential back-off, capped. Pure: no
 * clock, no state, no randomness; the caller keeps the attempt count and
 * the time.
 */
#ifndef TY_RETRY_H
#define TY_RETRY_H

#define RETRY_BACKOFF_BASE_S 5.0  /* the wait before the first retry */
#define RETRY_BACKOFF_CAP_S 300.0 /* the longest wait */

/* Seconds to wait before retry number `attempt` (1 = the first retry):
 * base * 2^(attempt - 1), at most cap. attempt below 1 counts as 1. A base
 * of 0 waits 0; a negative or NaN base means RETRY_BACKOFF_BASE_S, a
 * negative or NaN cap RETRY_BACKOFF_CAP_S. Never overflows: any attempt
 * past the cap gives cap. With the defaults: 5, 10, 20, 40, 80, 160, 300,
 * 300, ... */
double retry_backoff_seconds(int attempt, double base, double cap);

#endif

/*
 * log.h - structured logs: one JSON object per line on stderr, with "ts",
 * "level" and "event" first. Callers never pass secrets (API keys) in.
 *
 * A line that something outside the server can repeat at its own pace (a
 * client, a worker, a pass of the scheduler that keeps finding the same
 * thing) is written through log_msg_limited or log_event_limited: at most
 * one line a second per cause, a cause being the call site and, where the
 * site logs for several objects, a key (a job or deployment id). The lines
 * dropped are counted and the next line of that cause says how many:
 * "repeated": 299, "repeated_s": 1.02 (the seconds since the cause's last
 * line). The first line of a cause is the line log_msg or log_event would
 * write.
 */
#ifndef TY_LOG_H
#define TY_LOG_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

/* Writes {"ts", "level", "event", ...fields} as one line. fields (an object,
 * may be NULL) is stolen. */
void log_event(const char *level, const char *event, json_t *fields);

/* Shorthand: {"ts", "level", "event": "message", "msg": <formatted>}. */
void log_msg(const char *level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- at most once a second per cause ---- */

/* Keys are spread over this many slots per site; two keys that share a
 * slot share its limit (fewer lines, never more). */
#define LOG_LIMIT_SLOTS 16

/* One slot: when its next line may be written, and how many were dropped
 * since its last. Zero is ready to use. */
typedef struct {
    _Atomic int64_t next_ns;
    _Atomic uint64_t dropped;
} log_limit_slot;

/* A call site's limit (a static one per site: see log_msg_limited). */
typedef struct {
    log_limit_slot slot[LOG_LIMIT_SLOTS];
} log_limit;

/* What the line let through says about those dropped before it. */
typedef struct {
    uint64_t repeated; /* lines dropped since the cause's last line */
    double repeated_s; /* seconds since that line (0 when none dropped) */
} log_repeat;

/* Whether a line of cause (l, key) may be written now: yes for the first,
 * then for the first call one second or more after the last line let
 * through, with *rep saying what was dropped since; otherwise no, and the
 * call is counted. key NULL: the site alone. Lock-free and thread-safe. A
 * site that sums its own counts into its line (the access log's dropped
 * records) calls it directly and ignores *rep. */
int log_limit_take(log_limit *l, const char *key, log_repeat *rep);

/* log_event and log_msg with "repeated" and "repeated_s" after the other
 * fields when rep->repeated is not 0. */
void log_event_rep(const log_repeat *rep, const char *level, const char *event,
                   json_t *fields);
void log_msg_rep(const log_repeat *rep, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* log_event(level, event, fields) and log_msg(level, fmt, ...) at most
 * once a second for this call site and key (a string, or NULL). A dropped
 * line is not formatted: its fields and arguments are not even evaluated,
 * so a dropped call costs a clock read and an atomic add. So fields must
 * be the expression that builds them (json_pack(...)), never a variable
 * holding a reference, which a dropped line would leak; a site that builds
 * its fields in steps calls log_limit_take and log_event_rep itself. */
#define log_event_limited(key, level, event, fields)              \
    do {                                                          \
        static log_limit log_limit_site_;                         \
        log_repeat log_rep_;                                      \
        if (log_limit_take(&log_limit_site_, (key), &log_rep_))   \
            log_event_rep(&log_rep_, (level), (event), (fields)); \
    } while (0)

#define log_msg_limited(key, level, ...)                        \
    do {                                                        \
        static log_limit log_limit_site_;                       \
        log_repeat log_rep_;                                    \
        if (log_limit_take(&log_limit_site_, (key), &log_rep_)) \
            log_msg_rep(&log_rep_, (level), __VA_ARGS__);       \
    } while (0)

/* For tests: the clock the limits read, in nanoseconds (NULL: the
 * monotonic clock). Set it before the threads that log start. */
void log_limit_clock(int64_t (*now_ns)(void));

#endif

/*
 * log.c - JSON-lines logging to stderr (see log.h).
 *
 * The limits: a slot holds the monotonic time before which its lines are
 * dropped and the count of those dropped. The caller that finds the time
 * passed and moves it a second on (one compare-and-swap) writes the line
 * and takes the count; every other caller adds one to the count. No lock,
 * and a dropped line formats nothing. Every call is either a line or
 * counted on a later line of its slot (or still pending, when no later
 * line came).
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/jsonutil.h"
#include "common/ty.h"

#define SECOND_NS 1000000000LL

static void log_line(const char *level, const char *event, json_t *fields,
                     const log_repeat *rep)
{
    char now[32];
    ty_now_iso(now);
    json_t *line = json_object();
    json_object_set_new(line, "ts", json_string(now));
    json_object_set_new(line, "level", json_string(level));
    json_object_set_new(line, "event", json_string(event));
    if (fields)
        json_object_update(line, fields);
    json_decref(fields);
    if (rep && rep->repeated) {
        json_object_set_new(line, "repeated",
                            json_integer((json_int_t)rep->repeated));
        json_object_set_new(line, "repeated_s", json_real(rep->repeated_s));
    }
    char *text = tyjson_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(line);
    if (!text)
        return;
    flockfile(stderr);
    fputs(text, stderr);
    fputc('\n', stderr);
    funlockfile(stderr);
    free(text);
}

void log_event(const char *level, const char *event, json_t *fields)
{
    log_line(level, event, fields, NULL);
}

void log_event_rep(const log_repeat *rep, const char *level, const char *event,
                   json_t *fields)
{
    log_line(level, event, fields, rep);
}

static void msg_line(const log_repeat *rep, const char *level, const char *fmt,
                     va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    log_line(level, "message", json_pack("{s:s}", "msg", buf), rep);
}

void log_msg(const char *level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    msg_line(NULL, level, fmt, ap);
    va_end(ap);
}

void log_msg_rep(const log_repeat *rep, const char *level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    msg_line(rep, level, fmt, ap);
    va_end(ap);
}

/* ---- limits ---- */

static int64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SECOND_NS + ts.tv_nsec;
}

static int64_t (*limit_clock)(void) = monotonic_ns;

void log_limit_clock(int64_t (*now_ns)(void))
{
    limit_clock = now_ns ? now_ns : monotonic_ns;
}

int log_limit_take(log_limit *l, const char *key, log_repeat *rep)
{
    log_limit_slot *s = &l->slot[0];
    if (key)
        s = &l->slot[ty_hash(key, strlen(key), 2166136261u) % LOG_LIMIT_SLOTS];
    int64_t now = limit_clock();
    int64_t next = atomic_load_explicit(&s->next_ns, memory_order_relaxed);
    if (now >= next && atomic_compare_exchange_strong_explicit(
                           &s->next_ns, &next, now + SECOND_NS,
                           memory_order_relaxed, memory_order_relaxed)) {
        rep->repeated =
            atomic_exchange_explicit(&s->dropped, 0, memory_order_relaxed);
        /* The last line was written when next was set, a second before
         * it. */
        rep->repeated_s =
            rep->repeated ? (double)(now - (next - SECOND_NS)) / 1e9 : 0;
        return 1;
    }
    /* Not yet, or another caller took this second's line. */
    atomic_fetch_add_explicit(&s->dropped, 1, memory_order_relaxed);
    return 0;
}

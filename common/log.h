/*
 * log.h - structured logs: one JSON object per line on stderr, with "ts",
 * "level" and "event" first. Callers never pass secrets (API keys) in.
 */
#ifndef TY_LOG_H
#define TY_LOG_H

#include <jansson.h>

/* Writes {"ts", "level", "event", ...fields} as one line. fields (an object,
 * may be NULL) is stolen. */
void log_event(const char *level, const char *event, json_t *fields);

/* Shorthand: {"ts", "level", "event": "message", "msg": <formatted>}. */
void log_msg(const char *level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif

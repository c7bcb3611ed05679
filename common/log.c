/* log.c - JSON-lines logging to stderr (see log.h). */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/ty.h"

void log_event(const char *level, const char *event, json_t *fields)
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
    char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(line);
    if (!text)
        return;
    flockfile(stderr);
    fputs(text, stderr);
    fputc('\n', stderr);
    funlockfile(stderr);
    free(text);
}

void log_msg(const char *level, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    log_event(level, "message", json_pack("{s:s}", "msg", buf));
}

/*
 * sse.c - Server-Sent Events: an event hub subscriber (events/hub.h) sent
 * as a text/event-stream reply (see sse.h).
 */
#include "server/sse.h"

static void sse_wake(void *arg) { http_stream_wake(arg); }

static long sse_fill(void *cls, char *buf, size_t max)
{
    return ev_sub_read(cls, buf, max);
}

static void sse_free(void *cls) { ev_unsubscribe(cls); }

void sse_reply(http_req *r, ev_hub *h, const char *tenant_id,
               const char *job_id, uint64_t after, char *preamble, ev_end end)
{
    ev_sub *s = ev_subscribe(h, tenant_id, job_id, after, preamble, end);
    if (!s) {
        http_reply_problem(r, 503, NULL, "live events are not available");
        return;
    }
    http_stream *hs =
        http_reply_stream(r, "text/event-stream", sse_fill, sse_free, s);
    if (!hs)
        return;
    /* The reader runs only after this handler returns; attaching now is
     * in time for every event after `after`. */
    ev_sub_attach(s, sse_wake, hs);
}

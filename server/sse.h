/*
 * sse.h - live events over HTTP: GET /v1/events and GET /v1/jobs/{id}/events
 * reply with a text/event-stream fed by an event hub subscriber.
 */
#ifndef TY_SSE_H
#define TY_SSE_H

#include <stdint.h>

#include "events/hub.h"
#include "server/http.h"

/* Replies to r with a text/event-stream that first sends preamble (SSE
 * text, may be NULL; stolen), then every event of tenant_id (only job_id's
 * when job_id is not NULL) with an id greater than after, as they come,
 * until `end` says (ev_subscribe). On failure a problem reply is made and
 * preamble freed. */
void sse_reply(http_req *r, ev_hub *h, const char *tenant_id,
               const char *job_id, uint64_t after, char *preamble, ev_end end);

#endif

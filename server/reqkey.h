/*
 * reqkey.h - an API key read on a public route that answers more to an
 * admin (GET /metrics: the per-tenant series), checked as every
 * authenticated route checks one (server/auth.h) and counted in the same
 * throttle of failed authentications (server/guard.h).
 */
#ifndef TY_REQKEY_H
#define TY_REQKEY_H

#include "common/ty.h"
#include "server/http.h"

/* The caller's key, when r sends one: TY_OK with *who filled, or zeroed
 * when r has no Authorization header. Otherwise r has been answered and
 * the status is returned: a key that fails (malformed, unknown, revoked) is
 * a 401 and counts against the client's address; an address that has used
 * up its failed authentications gets 429 with Retry-After, its key
 * unchecked; a store failure is its error reply. */
ty_status reqkey_optional(http_req *r, store_key *who);

#endif

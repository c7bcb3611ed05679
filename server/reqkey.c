/*
 * reqkey.c - an optional API key on a public route (see reqkey.h). It does
 * what http.c does for an authenticated route, from inside the handler,
 * so the public route itself stays open to a request with no key.
 */
#include "server/reqkey.h"

#include <stdio.h>
#include <string.h>

#include "server/auth.h"
#include "server/guard.h"
#include "server/http_internal.h"

ty_status reqkey_optional(http_req *r, store_key *who)
{
    memset(who, 0, sizeof *who);
    const char *authorization = http_req_header(r, "Authorization");
    if (!authorization || !*authorization)
        return TY_OK;
    unsigned retry = 0;
    if (guard_auth_blocked(r->conn, &retry)) {
        char ra[16];
        snprintf(ra, sizeof ra, "%u", retry);
        http_reply_header(r, "Retry-After", ra);
        http_reply_problem(r, 429, NULL,
                           "too many failed authentications from this "
                           "address; try again in %u s",
                           retry);
        return TY_ELIMIT;
    }
    ty_err err = {0};
    ty_status s = auth_check(http_server.opts.store, authorization, who, &err);
    if (s == TY_EINVAL || s == TY_ENOTFOUND) {
        memset(who, 0, sizeof *who);
        guard_auth_failed(r->conn);
        http_reply_header(r, "WWW-Authenticate", "Bearer realm=\"trainyard\"");
        http_reply_problem(r, 401, NULL, "%s", err.msg);
        return s;
    }
    if (s != TY_OK) {
        memset(who, 0, sizeof *who);
        http_reply_error(r, s, &err);
    }
    return s;
}

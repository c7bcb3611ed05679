/*
 * worker.c - /v1/worker/jobs/{id}/...: the remote worker protocol
 * (node/wremote.h), spoken by `trainyard worker --server` when Slurm runs
 * a job's worker on another node. Not for tenants: each request carries
 * the attempt's token (WREMOTE_HDR_TOKEN), which the job service checks
 * (401 unknown, 409 the attempt is over), and no API key. The routes are
 * ROUTE_TOKEN: api_worker_auth checks the token from the headers, before
 * the server reads any of an upload's body, so a request without a good
 * token stores nothing and takes no large-body slot; its failure counts
 * toward the address's failed authentications as a wrong API key does.
 * The handlers pass the token on to the job service, which checks it
 * again for what they do.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "jobs/service.h"
#include "node/wremote.h"

ty_status api_worker_auth(api_ctx *app, http_req *r, char *holder,
                          size_t holder_len, ty_err *err)
{
    const char *job = http_req_param(r, 0);
    const char *token = http_req_header(r, WREMOTE_HDR_TOKEN);
    ty_status s;
    if (!token || !token[0]) {
        s = ty_fail(err, TY_EINVAL, NULL,
                    "a worker request needs its attempt's token in the "
                    "" WREMOTE_HDR_TOKEN " header");
    } else {
        s = jobs_worker_auth(app->jobs, job, token, err);
    }
    if (s == TY_OK)
        snprintf(holder, holder_len, "job:%s", job);
    else if (s == TY_EINVAL)
        http_reply_header(r, "WWW-Authenticate",
                          WREMOTE_HDR_TOKEN " realm=\"trainyard-worker\"");
    return s;
}

/* The token of the request; replies 401 and returns NULL without one
 * (api_worker_auth has let none through without one: this is the
 * handlers' own guard). */
static const char *worker_token(http_req *r)
{
    const char *t = http_req_header(r, WREMOTE_HDR_TOKEN);
    if (!t || !t[0]) {
        http_reply_problem(r, 401, NULL,
                           "a worker request needs its attempt's token in "
                           "the " WREMOTE_HDR_TOKEN " header");
        return NULL;
    }
    return t;
}

/* Replies to a failed worker call: an unknown token is 401. */
static void worker_error(http_req *r, ty_status s, const ty_err *err)
{
    if (s == TY_EINVAL && !err->field[0]) {
        http_reply_problem(r, 401, NULL, "%s", err->msg);
        return;
    }
    http_reply_error(r, s, err);
}

void api_worker_job(api_ctx *app, http_req *r)
{
    const char *token = worker_token(r);
    if (!token)
        return;
    ty_err err = {0};
    json_t *doc = NULL;
    ty_status s =
        jobs_worker_job(app->jobs, http_req_param(r, 0), token, &doc, &err);
    if (s != TY_OK) {
        worker_error(r, s, &err);
        return;
    }
    http_reply_json(r, 200, doc);
}

void api_worker_blob(api_ctx *app, http_req *r)
{
    const char *token = worker_token(r);
    if (!token)
        return;
    ty_err err = {0};
    char path[PATH_MAX];
    ty_status s = jobs_worker_blob(app->jobs, http_req_param(r, 0), token,
                                   http_req_param(r, 1), path, &err);
    if (s != TY_OK) {
        worker_error(r, s, &err);
        return;
    }
    http_reply_file(r, 200, "application/octet-stream", path, NULL);
}

void api_worker_checkpoint_get(api_ctx *app, http_req *r)
{
    const char *token = worker_token(r);
    if (!token)
        return;
    ty_err err = {0};
    char path[PATH_MAX], sha[65];
    ty_status s = jobs_worker_checkpoint(app->jobs, http_req_param(r, 0), token,
                                         path, sha, &err);
    if (s != TY_OK) {
        worker_error(r, s, &err);
        return;
    }
    http_reply_header(r, "X-Sha256", sha);
    http_reply_file(r, 200, "application/octet-stream", path, NULL);
}

/* A multipart upload of `what` (checkpoint, model, log). */
static void upload(api_ctx *app, http_req *r, const char *what)
{
    const char *token = worker_token(r);
    if (!token)
        return;
    ty_err err = {0};
    const char *path = NULL;
    ty_status s = http_req_form_path(r, WREMOTE_PART_FILE, &path, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    json_t *reply = NULL;
    s = jobs_worker_upload(app->jobs, http_req_param(r, 0), token, what, path,
                           http_req_form_value(r, WREMOTE_F_SHA256), &reply,
                           &err);
    if (s != TY_OK) {
        worker_error(r, s, &err);
        return;
    }
    http_reply_json(r, 200, reply);
}

void api_worker_checkpoint_put(api_ctx *app, http_req *r)
{
    upload(app, r, "checkpoint");
}

void api_worker_model(api_ctx *app, http_req *r) { upload(app, r, "model"); }

void api_worker_log(api_ctx *app, http_req *r) { upload(app, r, "log"); }

void api_worker_events(api_ctx *app, http_req *r)
{
    const char *token = worker_token(r);
    if (!token)
        return;
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    const json_t *lines = json_object_get(body, WREMOTE_F_LINES);
    if (!json_is_array(lines) || json_array_size(lines) > WREMOTE_MAX_LINES) {
        http_reply_problem(r, 422, WREMOTE_F_LINES,
                           "lines must be an array of at most %d protocol "
                           "lines",
                           WREMOTE_MAX_LINES);
        return;
    }
    ty_err err = {0};
    const char *action = NULL;
    ty_status s = jobs_worker_events(app->jobs, http_req_param(r, 0), token,
                                     lines, &action, &err);
    if (s != TY_OK) {
        worker_error(r, s, &err);
        return;
    }
    http_reply_json(r, 200, json_pack("{s:s}", WREMOTE_F_ACTION, action));
}

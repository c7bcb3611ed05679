/*
 * http.h - the client's HTTP over libcurl: one request at a time against
 * the configured server, with the key as a Bearer header (never in a URL),
 * certificates always verified (a private CA through --cacert), and the
 * failure mapped to the client's exit codes.
 *
 * Transport failures (DNS, connect, TLS) are reported here with what
 * failed; HTTP errors come back as a response for cli_http_check to judge.
 */
#ifndef TY_CLI_HTTP_H
#define TY_CLI_HTTP_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

typedef struct {
    const char *url;    /* base URL, e.g. http://127.0.0.1:8080 */
    const char *key;    /* API key, or NULL/"" for none */
    const char *cacert; /* CA bundle file, or NULL/"" for the system's */
} cli_http;

typedef struct {
    long status;
    char *body; /* NUL-terminated, malloc'd */
    size_t len;
    json_t *json; /* parsed body when it is JSON, else NULL */
} cli_resp;

/* A progress callback: done and total bytes (total 0 when unknown). */
typedef void (*cli_progress_fn)(void *ctx, double done, double total);

/* One request; body may be NULL. On a transport failure prints
 * "trainyard: cannot reach URL: why" and returns CLI_EXIT_UNREACHABLE with
 * *out zeroed; else 0 with *out filled (any HTTP status). */
int cli_http_request(const cli_http *h, const char *method, const char *path,
                     const char *content_type, const char *body, size_t len,
                     cli_resp *out);

/* A multipart POST: parts are "name=value" or "name=@path". A missing file
 * is a usage error (CLI_EXIT_USAGE). progress may be NULL. */
int cli_http_upload(const cli_http *h, const char *path,
                    const char *const *parts, size_t nparts,
                    cli_progress_fn progress, void *ctx, cli_resp *out);

/* A GET whose 2xx body goes to f (other statuses fill out->body as usual). */
int cli_http_download(const cli_http *h, const char *path, FILE *f,
                      cli_progress_fn progress, void *ctx, cli_resp *out);

/* One Server-Sent Event. Returns nonzero to stop reading the stream. */
typedef int (*cli_sse_fn)(void *ctx, const char *id, const char *event,
                          const char *data);

/* GET a text/event-stream, calling on_event per event until the server
 * closes, on_event asks to stop, or the connection drops. last_event_id
 * (may be NULL/"") goes out as Last-Event-ID. *stopped says whether on_event
 * stopped it. Returns like cli_http_request; a non-2xx reply fills out. */
int cli_http_sse(const cli_http *h, const char *path, const char *last_event_id,
                 cli_sse_fn on_event, void *ctx, int *stopped, cli_resp *out);

/* 0 for a 2xx. Else prints the problem document as
 * "trainyard: <title> (HTTP n): <detail> (field: f)" on stderr and returns
 * the exit code for the status. */
int cli_http_check(const cli_resp *r);

void cli_resp_free(cli_resp *r);

/* Escapes s for a URL path segment or query value into out. */
void cli_http_escape(const char *s, char *out, size_t size);

#endif

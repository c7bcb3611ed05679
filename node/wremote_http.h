/*
 * wremote_http.h - the remote worker shim's HTTP transfers (node/wremote.c
 * is their only user): one kept-alive libcurl connection to the server
 * that GETs the job document and blobs, POSTs the worker's lines and
 * uploads files as multipart forms, every request with the attempt's
 * token header.
 *
 * A transfer is one try: it says how it went (wrhttp_outcome) and never
 * retries or sleeps; when to try again is the shim's (the retry schedule,
 * node/wremote_internal.h). It touches no process and no signal: a signal
 * reaches it only through the flag wrhttp_conn.stop points at.
 */
#ifndef TY_WREMOTE_HTTP_H
#define TY_WREMOTE_HTTP_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#include <curl/curl.h>
#include <jansson.h>

/* How a request went, as the shim acts on it. */
typedef enum {
    WRHTTP_OK,           /* 2xx */
    WRHTTP_NOT_FOUND,    /* 404 */
    WRHTTP_RETRY,        /* 5xx, 429 or no answer: try again later */
    WRHTTP_UNAUTHORIZED, /* 401: give up */
    WRHTTP_GONE,         /* 409: the attempt is over */
    WRHTTP_FAILED,       /* anything else: give up */
} wrhttp_outcome;

/* The shim's connection to its server (one handle: kept alive). The
 * caller fills it: curl from curl_easy_init (the caller's to clean up). */
typedef struct {
    const char *ca_file; /* NULL: the system's CAs */
    char token_header[192];
    /* While not NULL, a transfer in progress stops (WRHTTP_FAILED, "stopped
     * by a signal") as soon as *stop is set: the shim's SIGTERM before its
     * child runs. */
    const volatile sig_atomic_t *stop;
    CURL *curl;
} wrhttp_conn;

/* GET url, its JSON reply into *doc (new; NULL unless WRHTTP_OK). A reply
 * that is not JSON (or over 16 MiB) is WRHTTP_FAILED. msg (n bytes) says
 * what happened whenever the outcome is not WRHTTP_OK. */
wrhttp_outcome wrhttp_get_json(wrhttp_conn *h, const char *url, json_t **doc,
                               char *msg, size_t n);

/* GET url into the file path (created 0600, replaced); sha gets the hex
 * sha256 of what came, x_sha256 the reply's X-Sha256 header ("" without).
 * A file that cannot be made or written is WRHTTP_FAILED (sha and x_sha256
 * then mean nothing); msg as wrhttp_get_json's. */
wrhttp_outcome wrhttp_get_file(wrhttp_conn *h, const char *url,
                               const char *path, char sha[65],
                               char x_sha256[65], char *msg, size_t n);

/* POST the JSON text json to url; the reply's JSON into *reply (new; NULL
 * when it is not JSON or the outcome is not WRHTTP_OK). msg as
 * wrhttp_get_json's. */
wrhttp_outcome wrhttp_post_json(wrhttp_conn *h, const char *url,
                                const char *json, json_t **reply, char *msg,
                                size_t n);

/* A file to upload as a multipart form: len bytes of fd from base, read
 * with pread (so the part can be sent again on a rewind, and fd's offset
 * is left alone), and an optional text field beside it. */
typedef struct {
    int fd;
    off_t base, len;
    const char *part;     /* the file part's name */
    const char *filename; /* its file name */
    const char *field;    /* a text field's name; NULL: none */
    const char *value;    /* its value */
} wrhttp_file;

/* POST f to url as multipart/form-data: the file part, then the text
 * field. A file that shrank meanwhile fails the transfer (WRHTTP_FAILED).
 * The reply's body is not read. msg as wrhttp_get_json's. */
wrhttp_outcome wrhttp_post_file(wrhttp_conn *h, const char *url,
                                const wrhttp_file *f, char *msg, size_t n);

#endif

/*
 * web.h - the browser dashboard: the files of web/, embedded into the binary
 * at build time (scripts/embed_web.cmake), served at / and /web/{file}, and
 * Chart.js from Debian's libjs-chart.js at /web/vendor/chart.min.js.
 */
#ifndef TY_WEB_H
#define TY_WEB_H

#include "api/api.h"
#include "server/http.h"

typedef struct {
    const char *name;          /* the file's name in web/, e.g. "app.js" */
    const unsigned char *data; /* its bytes (NUL-terminated, not counted) */
    unsigned long len;
} ty_web_file;

/* Generated: every file of web/, then {NULL, NULL, 0}. */
extern const ty_web_file ty_web_files[];
extern const unsigned long ty_web_files_count;

/* Where Debian's libjs-chart.js puts Chart.js (UMD build, global Chart). */
#define TY_CHARTJS_PATH "/usr/share/javascript/chart.js/chart.min.js"

/* The embedded file called name, or NULL. */
const ty_web_file *web_file_find(const char *name);

/* The Content-Type for a file name, by its extension. */
const char *web_content_type(const char *name);

/* GET / (index.html), GET /web/{file}, GET /web/vendor/chart.min.js. */
void api_web_index(api_ctx *app, http_req *r);
void api_web_file(api_ctx *app, http_req *r);
void api_web_chartjs(api_ctx *app, http_req *r);

#endif

/*
 * slurmrest.c - a client of slurmrestd (see slurmrest.h): the token and the
 * HTTP call. What the JSON of an API version is lives behind its table
 * (slurmrest_api.h; v0.0.38 in slurmrest_v0038.c), so this file never
 * reads a document's members itself; the HS256 signing is
 * slurmrest_jwt.c's.
 *
 * The token is a file re-read when its mtime changes, or signed here with
 * the jwt_key and renewed with a third of its life left; either is marked
 * stale when slurmrestd refuses it, and the call is tried once more with a
 * fresh one. The token is kept under c->mu and copied out, so no lock is
 * held while a call waits; each call has its own curl easy handle.
 */
#include "cluster/slurmrest.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cluster/slurmrest_api.h"
#include "cluster/slurmrest_jwt.h"
#include "cluster/slurmrest_v0038.h"

#define SR_DEFAULT_VERSION "v0.0.38"
#define SR_DEFAULT_LIFESPAN_S 1800
#define SR_DEFAULT_TIMEOUT_S 10
#define SR_TOKEN_MAX 4096
#define SR_KEY_MAX (64 * 1024)
#define SR_BODY_MAX (64u << 20) /* a /nodes answer of a big cluster */

/* The API versions this client knows, by slurmrest_config.api_version. */
static const slurmrest_api *const apis[] = {&slurmrest_v0038_api};

struct slurmrest {
    char url[512];
    char user[65];
    char token_file[4096];
    const slurmrest_api *api;
    int lifespan_s;
    int timeout_s;
    uint8_t *key; /* the jwt_key's bytes; NULL in token-file mode */
    size_t key_len;
    pthread_mutex_t mu; /* guards what follows */
    char token[SR_TOKEN_MAX];
    struct timespec token_mtime; /* token file: the mtime read */
    time_t token_iat;            /* signed: when; 0: none yet */
    int token_stale;             /* a 401 or refused token: renew */
};

static ty_status read_small_file(const char *path, const char *what, char **out,
                                 size_t *len, ty_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ty_fail(err, TY_EINVAL, what, "cannot read %s %s: %s", what,
                       path, strerror(errno));
    char *buf = malloc(SR_KEY_MAX + 1);
    if (!buf) {
        fclose(f);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    size_t n = fread(buf, 1, SR_KEY_MAX + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > SR_KEY_MAX || n == 0) {
        free(buf);
        return ty_fail(err, TY_EINVAL, what, "%s %s is %s", what, path,
                       bad ? "unreadable"
                       : n ? "over 64 KiB"
                           : "empty");
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return TY_OK;
}

ty_status slurmrest_create(const slurmrest_config *cfg, slurmrest **out,
                           ty_err *err)
{
    *out = NULL;
    if (!cfg->url ||
        (strncmp(cfg->url, "http://", 7) && strncmp(cfg->url, "https://", 8)))
        return ty_fail(err, TY_EINVAL, "url",
                       "the slurmrestd URL must start with http:// or "
                       "https://");
    if (strlen(cfg->url) >= 500)
        return ty_fail(err, TY_EINVAL, "url", "the slurmrestd URL is too long");
    const char *ver = cfg->api_version && *cfg->api_version
                          ? cfg->api_version
                          : SR_DEFAULT_VERSION;
    const slurmrest_api *api = NULL;
    for (size_t i = 0; i < TY_ARRAY_LEN(apis); i++)
        if (!strcmp(apis[i]->version, ver))
            api = apis[i];
    if (!api)
        return ty_fail(err, TY_EINVAL, "api_version",
                       "slurmrestd API version '%s' is not one this client "
                       "knows (v0.0.38)",
                       ver);
    if (!slurmrest_jwt_user_ok(cfg->user))
        return ty_fail(err, TY_EINVAL, "user",
                       "the Slurm user must be a plain user name "
                       "(1-64 of A-Z a-z 0-9 . _ -)");
    int has_file = cfg->token_file && *cfg->token_file;
    int has_key = cfg->jwt_key_file && *cfg->jwt_key_file;
    if (has_file == has_key)
        return ty_fail(err, TY_EINVAL, has_file ? "jwt_key_file" : "token_file",
                       "give exactly one of a token file and a jwt_key file");
    if (cfg->token_lifespan_s < 0 || cfg->timeout_s < 0)
        return ty_fail(err, TY_EINVAL,
                       cfg->timeout_s < 0 ? "timeout_s" : "token_lifespan_s",
                       "must not be negative");
    if (has_file && strlen(cfg->token_file) >= 4096)
        return ty_fail(err, TY_EINVAL, "token_file", "path too long");

    slurmrest *c = calloc(1, sizeof *c);
    if (!c)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    snprintf(c->url, sizeof c->url, "%s", cfg->url);
    size_t ul = strlen(c->url);
    while (ul > 0 && c->url[ul - 1] == '/')
        c->url[--ul] = '\0';
    snprintf(c->user, sizeof c->user, "%s", cfg->user);
    c->api = api;
    c->lifespan_s =
        cfg->token_lifespan_s ? cfg->token_lifespan_s : SR_DEFAULT_LIFESPAN_S;
    c->timeout_s = cfg->timeout_s ? cfg->timeout_s : SR_DEFAULT_TIMEOUT_S;
    ty_status s = TY_OK;
    if (has_key) {
        char *buf = NULL;
        s = read_small_file(cfg->jwt_key_file, "jwt_key_file", &buf,
                            &c->key_len, err);
        if (s != TY_OK) {
            free(c);
            return s;
        }
        c->key = (uint8_t *)buf;
    } else {
        snprintf(c->token_file, sizeof c->token_file, "%s", cfg->token_file);
        char *buf = NULL;
        size_t len;
        s = read_small_file(c->token_file, "token_file", &buf, &len, err);
        free(buf);
        if (s != TY_OK) {
            free(c);
            return s;
        }
    }
    pthread_mutex_init(&c->mu, NULL);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    *out = c;
    return TY_OK;
}

void slurmrest_destroy(slurmrest *c)
{
    if (!c)
        return;
    if (c->key) {
        memset(c->key, 0, c->key_len);
        free(c->key);
    }
    memset(c->token, 0, sizeof c->token);
    pthread_mutex_destroy(&c->mu);
    free(c);
    curl_global_cleanup();
}

const char *slurmrest_version(const slurmrest *c) { return c->api->version; }

/* Reads the token file into c->token when its mtime changed or the token
 * went stale. Under c->mu. */
static ty_status token_from_file(slurmrest *c, ty_err *err)
{
    struct stat st;
    if (stat(c->token_file, &st) != 0)
        return ty_fail(err, TY_EIO, "token_file",
                       "slurmrestd auth: cannot stat the token file %s: %s",
                       c->token_file, strerror(errno));
    if (c->token[0] && !c->token_stale &&
        st.st_mtim.tv_sec == c->token_mtime.tv_sec &&
        st.st_mtim.tv_nsec == c->token_mtime.tv_nsec)
        return TY_OK;
    char *buf = NULL;
    size_t len = 0;
    ty_status s = read_small_file(c->token_file, "token_file", &buf, &len, err);
    if (s != TY_OK) {
        ty_err_prefix(err, "slurmrestd auth");
        return TY_EIO;
    }
    /* `scontrol token` prints SLURM_JWT=<token>: take either form. */
    char *t = buf;
    while (*t && isspace((unsigned char)*t))
        t++;
    if (!strncmp(t, "SLURM_JWT=", 10))
        t += 10;
    size_t tl = strcspn(t, " \t\r\n");
    if (tl == 0 || tl >= sizeof c->token) {
        free(buf);
        return ty_fail(err, TY_EIO, "token_file",
                       "slurmrestd auth: the token file %s holds no token "
                       "(or one over %d bytes)",
                       c->token_file, SR_TOKEN_MAX - 1);
    }
    memcpy(c->token, t, tl);
    c->token[tl] = '\0';
    memset(buf, 0, len);
    free(buf);
    c->token_mtime = st.st_mtim;
    c->token_stale = 0;
    return TY_OK;
}

/* Signs a new token when there is none, it went stale, or under a third
 * of its life is left. Under c->mu. */
static ty_status token_signed(slurmrest *c, ty_err *err)
{
    time_t now = time(NULL);
    if (c->token[0] && !c->token_stale &&
        now < c->token_iat + (time_t)c->lifespan_s * 2 / 3)
        return TY_OK;
    ty_status s = slurmrest_jwt_sign(c->key, c->key_len, c->user, (long)now,
                                     (long)now + c->lifespan_s, c->token,
                                     sizeof c->token, err);
    if (s != TY_OK)
        return s;
    c->token_iat = now;
    c->token_stale = 0;
    return TY_OK;
}

/* Copies the current token into out (renewing as needed). */
static ty_status token_get(slurmrest *c, char *out, size_t n, ty_err *err)
{
    pthread_mutex_lock(&c->mu);
    ty_status s = c->key ? token_signed(c, err) : token_from_file(c, err);
    if (s == TY_OK)
        snprintf(out, n, "%s", c->token);
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* Marks the token `used` stale, unless another thread renewed it since. */
static void token_refused(slurmrest *c, const char *used)
{
    pthread_mutex_lock(&c->mu);
    if (!strcmp(c->token, used))
        c->token_stale = 1;
    pthread_mutex_unlock(&c->mu);
}

typedef struct {
    char *data;
    size_t len, cap;
    int over;
} sr_buf;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    sr_buf *b = ud;
    size_t n = size * nmemb;
    if (b->len + n + 1 > SR_BODY_MAX) {
        b->over = 1;
        return 0;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return 0;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

/* One HTTP exchange with token `token`: *http and the body's JSON (*doc,
 * NULL when not JSON). TY_EIO for transport failures. */
static ty_status http_once(slurmrest *c, const char *method, const char *path,
                           const char *body, const char *token, long *http,
                           json_t **doc, ty_err *err)
{
    *doc = NULL;
    *http = 0;
    char url[1024];
    snprintf(url, sizeof url, "%s/slurm/%s%s", c->url, c->api->version, path);
    CURL *h = curl_easy_init();
    if (!h)
        return ty_fail(err, TY_ENOMEM, NULL, "curl_easy_init failed");
    struct curl_slist *hdr = NULL;
    char line[SR_TOKEN_MAX + 64];
    snprintf(line, sizeof line, "X-SLURM-USER-NAME: %s", c->user);
    struct curl_slist *t = curl_slist_append(hdr, line);
    hdr = t ? t : hdr;
    snprintf(line, sizeof line, "X-SLURM-USER-TOKEN: %s", token);
    t = curl_slist_append(hdr, line);
    hdr = t ? t : hdr;
    memset(line, 0, sizeof line);
    t = curl_slist_append(hdr, "Accept: application/json");
    hdr = t ? t : hdr;
    if (body) {
        t = curl_slist_append(hdr, "Content-Type: application/json");
        hdr = t ? t : hdr;
    }
    sr_buf b = {0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)c->timeout_s);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)c->timeout_s);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    CURLcode rc = curl_easy_perform(h);
    ty_status s = TY_OK;
    if (rc != CURLE_OK) {
        s = ty_fail(err, TY_EIO, NULL, "slurmrestd at %s: %s %s: %s", c->url,
                    method, path,
                    b.over ? "answer over 64 MiB" : curl_easy_strerror(rc));
    } else {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, http);
        if (b.len)
            *doc = json_loadb(b.data, b.len, 0, NULL);
    }
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    free(b.data);
    return s;
}

/* Whether an answer says the token was refused: HTTP 401, or what the
 * version says a refused token looks like. */
static int token_was_refused(const slurmrest *c, long http, const json_t *doc)
{
    return http == 401 || (doc && c->api->token_refused(http, doc));
}

/* A call: takes a token, sends, and on a refused token renews it and tries
 * once more. On TY_OK *doc is the answer's JSON (the caller's) with
 * Slurm's errors still in it for the version's reader; transport failures,
 * 401 and non-JSON answers are TY_EIO. */
static ty_status rest_call(slurmrest *c, const char *method, const char *path,
                           const char *body, json_t **doc, ty_err *err)
{
    *doc = NULL;
    char token[SR_TOKEN_MAX];
    long http = 0;
    ty_status s = TY_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        json_decref(*doc);
        *doc = NULL;
        s = token_get(c, token, sizeof token, err);
        if (s == TY_OK)
            s = http_once(c, method, path, body, token, &http, doc, err);
        if (s != TY_OK || !token_was_refused(c, http, *doc))
            break;
        token_refused(c, token);
    }
    memset(token, 0, sizeof token);
    if (s != TY_OK)
        return s;
    if (http == 401) {
        json_decref(*doc);
        *doc = NULL;
        return ty_fail(err, TY_EIO, NULL,
                       "slurmrestd at %s refused the auth token for user %s "
                       "(HTTP 401)",
                       c->url, c->user);
    }
    if (!json_is_object(*doc)) {
        json_decref(*doc);
        *doc = NULL;
        return ty_fail(err, TY_EIO, NULL,
                       "slurmrestd at %s: %s %s answered HTTP %ld without a "
                       "JSON object",
                       c->url, method, path, http);
    }
    if (http >= 400) {
        /* Slurm's refusals come as 500 (or 400) with an errors array; the
         * version's reader turns it into a status. Without one it is an
         * outage. */
        s = c->api->errors(*doc, err);
        if (s == TY_OK) {
            json_decref(*doc);
            *doc = NULL;
            return ty_fail(err, http >= 500 ? TY_EIO : TY_EINVAL, NULL,
                           "slurmrestd at %s: %s %s answered HTTP %ld", c->url,
                           method, path, http);
        }
    }
    return TY_OK;
}

ty_status slurmrest_submit(slurmrest *c, const slurm_submit *s, long *job_id,
                           ty_err *err)
{
    ty_status st;
    json_t *body = c->api->submit_body(s, &st, err);
    if (!body)
        return st;
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    json_t *doc = NULL;
    st = rest_call(c, "POST", c->api->submit_path, text, &doc, err);
    free(text);
    if (st == TY_OK)
        st = c->api->submit_reply(doc, job_id, err);
    json_decref(doc);
    return st;
}

ty_status slurmrest_job(slurmrest *c, long job_id, slurm_job_info *out,
                        ty_err *err)
{
    char path[64];
    c->api->job_path(job_id, path, sizeof path);
    json_t *doc = NULL;
    ty_status s = rest_call(c, "GET", path, NULL, &doc, err);
    if (s == TY_OK)
        s = c->api->job_reply(doc, job_id, out, err);
    json_decref(doc);
    return s;
}

ty_status slurmrest_cancel(slurmrest *c, long job_id, int sig, ty_err *err)
{
    char path[96];
    ty_status s = c->api->cancel_path(job_id, sig, path, sizeof path, err);
    if (s != TY_OK)
        return s;
    json_t *doc = NULL;
    s = rest_call(c, "DELETE", path, NULL, &doc, err);
    if (s == TY_OK)
        s = c->api->cancel_reply(doc, err);
    json_decref(doc);
    return s;
}

ty_status slurmrest_nodes(slurmrest *c, slurm_node **nodes, size_t *n,
                          ty_err *err)
{
    *nodes = NULL;
    *n = 0;
    json_t *doc = NULL;
    ty_status s = rest_call(c, "GET", c->api->nodes_path, NULL, &doc, err);
    if (s == TY_OK)
        s = c->api->nodes_reply(doc, nodes, n, err);
    json_decref(doc);
    return s;
}

ty_status slurmrest_ping(slurmrest *c, ty_err *err)
{
    json_t *doc = NULL;
    ty_status s = rest_call(c, "GET", c->api->ping_path, NULL, &doc, err);
    if (s == TY_OK)
        s = c->api->ping_reply(doc, err);
    json_decref(doc);
    return s;
}

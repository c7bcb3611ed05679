/*
 * wremote_rules.c - the remote worker shim's pure pieces (see
 * wremote_internal.h): the queue of lines waiting to be relayed and its
 * coalescing, the job document turned into a local job.json, URLs, the
 * retry schedule, the exit status. No I/O here, so the unit test
 * (tests/unit/test_wremote.c) reaches all of it.
 */
#include "node/wremote_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "node/protocol.h"
#include "node/wremote.h"

void wremote_queue_init(wremote_queue *q) { memset(q, 0, sizeof *q); }

void wremote_queue_free(wremote_queue *q)
{
    wremote_queue_drop_front(q, q->n);
    free(q->v);
    memset(q, 0, sizeof *q);
}

ty_status wremote_queue_push(wremote_queue *q, wproto_msg kind, json_t *line)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 64;
        wremote_line *v = realloc(q->v, cap * sizeof *v);
        if (!v) {
            json_decref(line);
            return TY_ENOMEM;
        }
        q->v = v;
        q->cap = cap;
    }
    q->v[q->n++] = (wremote_line){.line = line, .kind = kind};
    return TY_OK;
}

void wremote_queue_drop_front(wremote_queue *q, size_t n)
{
    if (n > q->n)
        n = q->n;
    for (size_t i = 0; i < n; i++)
        json_decref(q->v[i].line);
    memmove(q->v, q->v + n, (q->n - n) * sizeof *q->v);
    q->n -= n;
}

void wremote_queue_coalesce(wremote_queue *q)
{
    size_t newest_hb = SIZE_MAX, newest_progress = SIZE_MAX;
    for (size_t i = 0; i < q->n; i++) {
        if (q->v[i].kind == WPROTO_MSG_HEARTBEAT)
            newest_hb = i;
        else if (q->v[i].kind == WPROTO_MSG_PROGRESS)
            newest_progress = i;
    }
    size_t kept = 0;
    for (size_t i = 0; i < q->n; i++) {
        wproto_msg k = q->v[i].kind;
        if ((k == WPROTO_MSG_HEARTBEAT && i != newest_hb) ||
            (k == WPROTO_MSG_PROGRESS && i != newest_progress)) {
            json_decref(q->v[i].line);
            continue;
        }
        q->v[kept++] = q->v[i];
    }
    q->n = kept;
}

json_t *wremote_relay_line(const char *text, const char *node,
                           wproto_msg *kind)
{
    json_t *msg = NULL;
    *kind = wproto_decode(text, &msg);
    if (*kind == WPROTO_MSG_NONE)
        return NULL;
    if (*kind == WPROTO_MSG_STARTED &&
        json_object_set_new(msg, WREMOTE_F_NODE, json_string(node)) != 0) {
        json_decref(msg);
        *kind = WPROTO_MSG_NONE;
        return NULL;
    }
    return msg;
}

wremote_upload wremote_upload_before(wproto_msg kind, const json_t *line)
{
    switch (kind) {
    case WPROTO_MSG_EPOCH:
        return WREMOTE_UPLOAD_CHECKPOINT;
    case WPROTO_MSG_PREEMPTED:
        return json_is_true(json_object_get(line, WPROTO_F_CHECKPOINT))
                   ? WREMOTE_UPLOAD_CHECKPOINT
                   : WREMOTE_UPLOAD_NONE;
    case WPROTO_MSG_DONE:
        return WREMOTE_UPLOAD_MODEL;
    default:
        return WREMOTE_UPLOAD_NONE;
    }
}

int wremote_job_id_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > 128 || id[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int wremote_sha256_ok(const char *hex)
{
    if (!hex || strlen(hex) != 64)
        return 0;
    for (int i = 0; i < 64; i++)
        if (!((hex[i] >= '0' && hex[i] <= '9') ||
              (hex[i] >= 'a' && hex[i] <= 'f')))
            return 0;
    return 1;
}

ty_status wremote_blob_ref(const json_t *ref, const char *what, char sha[65],
                           ty_err *err)
{
    const char *hex =
        json_string_value(json_object_get(ref, WREMOTE_F_SHA256));
    if (!json_is_object(ref) || !wremote_sha256_ok(hex))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the job document's %s is not {\"sha256\": 64 hex "
                       "digits, \"bytes\": n}",
                       what);
    memcpy(sha, hex, 65);
    return TY_OK;
}

void wremote_blob_path(const char *dir, const char *sha, char *out, size_t n)
{
    snprintf(out, n, "%s/" BLOB_PREFIX "%s", dir, sha);
}

/* Sets key to dir/file in job; -1 when out of memory. */
static int set_path(json_t *job, const char *key, const char *dir,
                    const char *file)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return json_object_set_new(job, key, json_string(path));
}

ty_status wremote_job_file(const json_t *doc, const char *dir, json_t **out,
                           ty_err *err)
{
    char sha[65], vsha[65], isha[65], path[PATH_MAX];
    *out = NULL;
    if (!json_is_object(doc))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the job document is not a JSON object");
    ty_status s = wremote_blob_ref(json_object_get(doc, WREMOTE_F_DATASET),
                                   "dataset", sha, err);
    const json_t *val = json_object_get(doc, WPROTO_JOB_VALIDATION);
    const json_t *val_ds = json_object_get(val, WREMOTE_F_DATASET);
    if (s == TY_OK && val_ds)
        s = wremote_blob_ref(val_ds, "validation dataset", vsha, err);
    const json_t *init = json_object_get(doc, WREMOTE_F_INIT);
    if (s == TY_OK && init)
        s = wremote_blob_ref(init, "init model", isha, err);
    if (s != TY_OK)
        return s;
    json_t *job = json_deep_copy(doc);
    if (!job)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    json_object_del(job, WREMOTE_F_DATASET);
    json_object_del(job, WREMOTE_F_INIT);
    json_object_del(job, DOC_CHECKPOINT);
    wremote_blob_path(dir, sha, path, sizeof path);
    int bad = json_object_set_new(job, WPROTO_JOB_DATASET_PATH,
                                  json_string(path)) != 0;
    if (val_ds) { /* else {"split": x} (or nothing) as the document has it */
        wremote_blob_path(dir, vsha, path, sizeof path);
        bad |= json_object_set_new(job, WPROTO_JOB_VALIDATION,
                                   json_pack("{s:s}", WPROTO_JOB_DATASET_PATH,
                                             path)) != 0;
    }
    if (init) {
        wremote_blob_path(dir, isha, path, sizeof path);
        bad |= json_object_set_new(job, WPROTO_JOB_INIT_PATH,
                                   json_string(path)) != 0;
    }
    bad |= set_path(job, WPROTO_JOB_CHECKPOINT_PATH, dir, CHECKPOINT_FILE);
    bad |= set_path(job, WPROTO_JOB_MODEL_PATH, dir, MODEL_FILE);
    /* "All the cores" on a cluster node means the CPUs Slurm gave the job,
     * not the node's. */
    json_t *threads = json_object_get(job, WPROTO_JOB_THREADS);
    const char *cpus = getenv("SLURM_CPUS_PER_TASK");
    long n = cpus ? strtol(cpus, NULL, 10) : 0;
    if (json_is_integer(threads) && json_integer_value(threads) == 0 &&
        n > 0 && n < 4096)
        bad |= json_object_set_new(job, WPROTO_JOB_THREADS,
                                   json_integer(n)) != 0;
    if (bad) {
        json_decref(job);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    *out = job;
    return TY_OK;
}

/* Appends len bytes of s to out (n bytes, *k used); -1 when they do not
 * fit with the NUL. */
static int append(char *out, size_t n, size_t *k, const char *s, size_t len)
{
    if (*k + len + 1 > n)
        return -1;
    memcpy(out + *k, s, len);
    *k += len;
    out[*k] = '\0';
    return 0;
}

ty_status wremote_url(char *out, size_t n, const char *server,
                      const char *tmpl, const char *id, const char *sha)
{
    static const char id_var[] = "{id}", sha_var[] = "{sha256}";
    size_t k = 0, slen = strlen(server);
    while (slen > 0 && server[slen - 1] == '/')
        slen--;
    int bad = n == 0 || append(out, n, &k, server, slen);
    for (const char *p = tmpl; *p && !bad;) {
        if (!strncmp(p, id_var, strlen(id_var))) {
            bad = append(out, n, &k, id, strlen(id));
            p += strlen(id_var);
        } else if (!strncmp(p, sha_var, strlen(sha_var))) {
            bad = append(out, n, &k, sha ? sha : "", sha ? strlen(sha) : 0);
            p += strlen(sha_var);
        } else {
            bad = append(out, n, &k, p++, 1);
        }
    }
    return bad ? TY_EINVAL : TY_OK;
}

wremote_action wremote_action_of(const json_t *reply)
{
    const char *a = json_string_value(json_object_get(reply, WREMOTE_F_ACTION));
    if (a && !strcmp(a, WREMOTE_ACTION_PREEMPT))
        return WREMOTE_DO_PREEMPT;
    if (a && !strcmp(a, WREMOTE_ACTION_CANCEL))
        return WREMOTE_DO_CANCEL;
    return WREMOTE_DO_RUN;
}

void wremote_retry_init(wremote_retry *r, double budget_s)
{
    r->budget_s = budget_s;
    wremote_retry_ok(r);
}

void wremote_retry_ok(wremote_retry *r)
{
    r->first_failure = -1;
    r->next_try = 0;
    r->delay_ms = 0;
}

int wremote_retry_failed(wremote_retry *r, double now)
{
    if (r->first_failure < 0) {
        r->first_failure = now;
        r->delay_ms = WREMOTE_RETRY_MS;
    } else {
        r->delay_ms = r->delay_ms * 2 > WREMOTE_RETRY_MAX_MS
                          ? WREMOTE_RETRY_MAX_MS
                          : r->delay_ms * 2;
    }
    if (now - r->first_failure >= r->budget_s)
        return -1;
    r->next_try = now + r->delay_ms / 1000.0;
    return 0;
}

int wremote_retry_due(const wremote_retry *r, double now)
{
    return r->first_failure < 0 || now >= r->next_try;
}

/* value as a whole number from lo to hi, or -1 (strtol alone would take
 * blanks, signs and trailing text). */
static long whole_number(const char *value, long lo, long hi)
{
    if (!value || *value < '0' || *value > '9')
        return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    return v;
}

double wremote_retry_budget(const char *value)
{
    long s = whole_number(value, 1, 86400);
    return s < 0 ? 600.0 : (double)s;
}

long wremote_post_interval_ms(const char *value)
{
    long ms =
        whole_number(value, WPROTO_HEARTBEAT_MIN_MS, WPROTO_HEARTBEAT_MAX_MS);
    return ms < 0 ? WPROTO_HEARTBEAT_DEFAULT_MS : ms;
}

int wremote_exit_status(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return 1;
}

int wremote_rank(const char *pmix_rank, const char *slurm_procid)
{
    const char *v = pmix_rank && *pmix_rank ? pmix_rank : slurm_procid;
    if (!v || !*v)
        return 0;
    long r = 0;
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9' || r > 1000000)
            return -1;
        r = r * 10 + (*c - '0');
    }
    return (int)r;
}

int wremote_rank_exit(int status)
{
    if (status == WPROTO_EXIT_OK || status == WPROTO_EXIT_PREEMPTED ||
        status == WPROTO_EXIT_CANCELLED)
        return 0;
    return status;
}

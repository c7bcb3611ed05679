/*
 * cmd_jobs.c - `trainyard jobs submit|list|show|cancel|watch`. watch
 * follows GET /v1/jobs/{id}/events until job.finished, reconnecting with
 * Last-Event-ID when the stream drops and refetching the job on `reset`;
 * its exit code is the job's outcome.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cmd.h"
#include "cli/output.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: trainyard jobs submit FILE|- [--watch]\n"
        "       trainyard jobs list [--status S] [--limit N]\n"
        "       trainyard jobs show ID|NAME\n"
        "       trainyard jobs cancel ID|NAME\n"
        "       trainyard jobs watch ID|NAME\n"
        "\n"
        "A NAME means your newest job of that name (an id always wins); list\n"
        "shows the ID and CREATED that tell same-named ones apart, newest\n"
        "first. The request FILE may name its dataset by id or name too.\n"
        "FILE is the job request (POST /v1/jobs body); - reads standard "
        "input.\n"
        "watch draws a progress bar on a terminal (plain lines otherwise) and\n"
        "exits with the job's outcome: 0 succeeded, 1 failed, 2 cancelled.\n"
        "With --json it prints each event as one JSON line.\n");
}

static const char *status_of(const json_t *job)
{
    return cli_str(job, "status");
}

static int is_final(const char *st)
{
    return st && (!strcmp(st, "succeeded") || !strcmp(st, "failed") ||
                  !strcmp(st, "cancelled"));
}

static double num(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : -1;
}

/* "loss 0.3421 acc 0.9120 1234 samples/s" from a metrics object. */
static void metrics_text(const json_t *m, char *out, size_t size)
{
    size_t o = 0;
    out[0] = '\0';
    double loss = num(m, "train_loss"), acc = num(m, "train_accuracy");
    double vloss = num(m, "val_loss"), vacc = num(m, "val_accuracy");
    double rate = num(m, "samples_per_sec");
    if (loss >= 0)
        o += (size_t)snprintf(out + o, size - o, "loss %.4f ", loss);
    if (acc >= 0 && o < size)
        o += (size_t)snprintf(out + o, size - o, "accuracy %.4f ", acc);
    if (vloss >= 0 && o < size)
        o += (size_t)snprintf(out + o, size - o, "val_loss %.4f ", vloss);
    if (vacc >= 0 && o < size)
        o += (size_t)snprintf(out + o, size - o, "val_accuracy %.4f ", vacc);
    /* Regression, in the target's units (R^2 may be below 0). */
    static const char *const reg[] = {"train_rmse", "val_rmse", "val_mae",
                                      "val_r2"};
    for (size_t i = 0; i < sizeof reg / sizeof *reg && o < size; i++) {
        const json_t *v = json_object_get(m, reg[i]);
        if (json_is_number(v))
            o += (size_t)snprintf(out + o, size - o,
                                  i == 3 ? "%s %.4f " : "%s %.6g ", reg[i],
                                  json_number_value(v));
    }
    /* Language models: perplexities and tokens/s instead of samples/s. */
    double vppl = num(m, "val_perplexity"), tps = num(m, "tokens_per_second");
    if (vppl >= 0 && o < size)
        o += (size_t)snprintf(out + o, size - o, "val_perplexity %.3f ", vppl);
    if (tps > 0 && o < size)
        o += (size_t)snprintf(out + o, size - o, "%.0f tokens/s ", tps);
    else if (rate >= 0 && o < size)
        o += (size_t)snprintf(out + o, size - o, "%.0f samples/s ", rate);
    if (o > 0 && o <= size)
        out[o - 1] = '\0';
}

typedef struct {
    cli_ctx *c;
    /* What the command line named (an id or a name) until the server's
     * first job document, then that job's id: a reconnect follows the job
     * it started with, not a newer one of the same name. */
    char job_id[CLI_REF_PATH_MAX];
    char last_id[32];
    json_t *job; /* the newest representation (owned) */
    int finished;
    int events; /* events seen since the last connect */
    int fatal;  /* an exit code from a refetch */
} watch_state;

static void take_job(watch_state *w, json_t *job)
{
    if (!json_is_object(job))
        return;
    json_incref(job);
    json_decref(w->job);
    w->job = job;
    const char *id = cli_str(job, "id");
    if (id && *id)
        snprintf(w->job_id, sizeof w->job_id, "%s", id);
}

/* The epochs the job runs: its progress's, or before its first progress
 * line (queued, on a server older than the epochs in a queued job's
 * progress) its hyperparameters'. */
static long long planned_epochs(const json_t *job)
{
    long long n = json_integer_value(
        json_object_get(json_object_get(job, "progress"), "epochs"));
    if (n <= 0)
        n = json_integer_value(
            json_object_get(json_object_get(job, "hyperparameters"), "epochs"));
    return n;
}

/* The bar: the job's progress, or further along when an epoch record (the
 * event's `epoch`, may be NULL) says so: the server writes progress at
 * most once a second, so a fast job's epochs outrun it. */
static void draw(const watch_state *w, const json_t *epoch_rec)
{
    const json_t *p = json_object_get(w->job, "progress");
    long long epoch = json_integer_value(json_object_get(p, "epoch"));
    long long epochs = planned_epochs(w->job);
    double f = num(p, "fraction");
    long long done = json_integer_value(json_object_get(epoch_rec, "epoch"));
    if (done > 0 && epochs > 0 && (double)done / (double)epochs > f) {
        f = (double)done / (double)epochs;
        epoch = done;
    }
    char label[64], extra[200];
    const char *st = status_of(w->job);
    if (st && strcmp(st, "running"))
        snprintf(label, sizeof label, "%s", st);
    else if (epoch <= 0)
        snprintf(label, sizeof label, "starting");
    else
        snprintf(label, sizeof label, "epoch %lld/%lld", epoch, epochs);
    metrics_text(json_object_get(w->job, "metrics"), extra, sizeof extra);
    cli_progress_draw(label, f < 0 ? 0 : f, extra);
}

/* GET the job again (after `reset`, or to start). */
static int refetch(watch_state *w)
{
    char path[CLI_REF_PATH_MAX];
    int rc = cli_ref_path(path, "jobs", "/v1/jobs", w->job_id, "");
    if (rc)
        return rc;
    cli_resp r;
    rc = cli_http_request(&w->c->http, "GET", path, NULL, NULL, 0, &r);
    if (rc)
        return rc;
    if ((rc = cli_http_check(&r)) == 0) {
        take_job(w, r.json);
        /* An event's job may already read finished while the stream still
         * replays its epochs; only a fetched job ends the watch. */
        if (is_final(status_of(w->job)))
            w->finished = 1;
    }
    cli_resp_free(&r);
    return rc;
}

static int on_event(void *ctx, const char *id, const char *event,
                    const char *data)
{
    watch_state *w = ctx;
    if (id && *id)
        snprintf(w->last_id, sizeof w->last_id, "%s", id);
    w->events++;
    json_t *d = json_loads(data, 0, NULL);
    if (w->c->json) {
        json_t *line = json_pack("{s:s, s:s, s:O?}", "id", id ? id : "",
                                 "event", event, "data", d);
        if (line && !d)
            json_object_set_new(line, "data", json_string(data));
        char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
        if (text)
            printf("%s\n", text);
        fflush(stdout);
        free(text);
        json_decref(line);
    }
    if (!strcmp(event, "reset")) {
        int rc = refetch(w);
        if (rc)
            w->fatal = rc;
    } else {
        take_job(w, json_object_get(d, "job"));
    }
    if (!w->c->json && w->job) {
        if (cli_stderr_tty()) {
            draw(w, json_object_get(d, "epoch"));
        } else if (!strcmp(event, "job.epoch")) {
            char m[200];
            const json_t *p = json_object_get(w->job, "progress");
            const json_t *e = json_object_get(d, "epoch");
            metrics_text(e ? e : json_object_get(w->job, "metrics"), m,
                         sizeof m);
            fprintf(stderr, "epoch %lld/%lld: %s\n",
                    (long long)json_integer_value(
                        json_object_get(e ? e : p, "epoch")),
                    planned_epochs(w->job), m);
        }
    }
    json_decref(d);
    if (!strcmp(event, "job.finished"))
        w->finished = 1;
    return w->finished || w->fatal;
}

static int outcome(const watch_state *w)
{
    const char *st = status_of(w->job);
    cli_progress_end();
    if (!w->c->json) {
        char m[200];
        metrics_text(json_object_get(w->job, "metrics"), m, sizeof m);
        const char *model = cli_str(w->job, "model");
        const char *error = cli_str(w->job, "error");
        printf("%s %s", w->job_id, st ? st : "?");
        if (*m)
            printf(": %s", m);
        if (model)
            printf("; model %s", model);
        printf("\n");
        if (error && *error)
            fprintf(stderr, "trainyard: job %s %s: %s\n", w->job_id, st, error);
    }
    if (st && !strcmp(st, "succeeded"))
        return 0;
    if (st && !strcmp(st, "cancelled"))
        return CLI_EXIT_JOB_CANCELLED;
    return CLI_EXIT_JOB_FAILED;
}

/* How long a watch waits for the server to come back: a restart (an
 * upgrade, a slow disk, a loaded machine) can take well over ten seconds. */
#define WATCH_PATIENCE_S 60.0

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_watch_job(cli_ctx *c, const char *job_id)
{
    watch_state w = {.c = c};
    snprintf(w.job_id, sizeof w.job_id, "%s", job_id);
    char path[CLI_REF_PATH_MAX];
    int rc = 0, quiet_tries = 0;
    double last_contact = mono_now();
    while (!w.finished && !w.fatal) {
        cli_resp r;
        int stopped = 0;
        w.events = 0;
        if ((rc = cli_ref_path(path, "jobs", "/v1/jobs", w.job_id, "/events")))
            break;
        rc =
            cli_http_sse(&c->http, path, w.last_id, on_event, &w, &stopped, &r);
        if (rc == 0 && !stopped && (rc = cli_http_check(&r)) != 0) {
            cli_resp_free(&r);
            break;
        }
        cli_resp_free(&r);
        if (w.finished || w.fatal)
            break;
        if (rc && !w.job && !*w.last_id)
            break; /* never got through: nothing to resume */
        /* The stream dropped: reconnect after it, giving up when the
         * server has said nothing for WATCH_PATIENCE_S. */
        if (w.events) {
            quiet_tries = 0;
            last_contact = mono_now();
        }
        if (mono_now() - last_contact > WATCH_PATIENCE_S)
            break;
        ++quiet_tries;
        if (rc == 0 && quiet_tries > 1) {
            /* Connected but told nothing twice: ask for the job itself.
             * A server that is restarting (unreachable, 5xx) is waited
             * for like a dropped stream; any other answer is final. */
            rc = refetch(&w);
            if (rc && rc != CLI_EXIT_UNREACHABLE && rc != CLI_EXIT_SERVER)
                break;
            if (w.finished)
                break;
            if (!rc)
                last_contact = mono_now();
        }
        sleep(quiet_tries < 4 ? 1 : 3);
        rc = 0;
    }
    if (w.fatal)
        rc = w.fatal;
    if (!w.finished) {
        cli_progress_end();
        json_decref(w.job);
        if (!rc) {
            fprintf(stderr, "trainyard: lost the event stream of %s\n", job_id);
            rc = CLI_EXIT_UNREACHABLE;
        }
        return rc;
    }
    rc = outcome(&w);
    json_decref(w.job);
    return rc;
}

static int submit(cli_ctx *c)
{
    static const char *const allowed[] = {"--watch", NULL};
    int rc = cli_only_opts(c, "jobs", allowed);
    if (rc)
        return rc;
    if (c->npos != 2)
        return cli_usage_error("jobs", "submit takes one FILE (or - for "
                                       "standard input)");
    char *body;
    size_t len;
    if ((rc = cli_read_input(c->pos[1], &body, &len)) != 0)
        return rc;
    cli_resp r;
    rc = cli_call(c, "POST", "/v1/jobs", "application/json", body, len, &r);
    free(body);
    if (rc)
        return rc;
    char job[128];
    snprintf(job, sizeof job, "%s",
             cli_str(r.json, "id") ? cli_str(r.json, "id") : "");
    if (!c->json)
        printf("Submitted %s (%s)\n", job, status_of(r.json));
    cli_resp_free(&r);
    if (!cli_opt(c, "--watch"))
        return 0;
    fflush(stdout);
    return cli_watch_job(c, job);
}

static int list(cli_ctx *c)
{
    static const char *const allowed[] = {"--status", "--limit", NULL};
    int rc = cli_only_opts(c, "jobs", allowed);
    if (rc)
        return rc;
    if (c->npos != 1)
        return cli_usage_error("jobs", "list takes no arguments");
    char path[256] = "/v1/jobs";
    const char *st = cli_opt(c, "--status");
    if (st) {
        char esc[128];
        cli_http_escape(st, esc, sizeof esc);
        snprintf(path, sizeof path, "/v1/jobs?status=%s", esc);
    }
    json_t *items;
    if ((rc = cli_list(c, path, &items)) != 0 || !items)
        return rc;
    /* The latest training values: a running job's validation values come
     * only at each epoch's end (`jobs show` has every metric). TRAIN
     * METRICS: a classifier's accuracy, a regression's RMSE and R^2 (the
     * target's units), so a list of both tasks reads in one column. */
    static const char *const head[] = {"ID",    "NAME",       "STATUS",
                                       "EPOCH", "TRAIN LOSS", "TRAIN METRICS",
                                       "MODEL", "CREATED",    NULL};
    cli_table t;
    cli_table_init(&t, head);
    size_t i;
    json_t *j;
    json_array_foreach (items, i, j) {
        const json_t *p = json_object_get(j, "progress");
        const json_t *m = json_object_get(j, "metrics");
        char ep[32], loss[32], acc[96], created[64];
        snprintf(ep, sizeof ep, "%lld/%lld",
                 (long long)json_integer_value(json_object_get(p, "epoch")),
                 planned_epochs(j));
        cli_fmt_value(json_object_get(m, "train_loss"), loss, sizeof loss);
        cli_fmt_metrics(m, "train_", acc, sizeof acc);
        cli_fmt_time(cli_str(j, "created_at"), created, sizeof created);
        const char *row[] = {cli_str(j, "id"),
                             cli_str(j, "name"),
                             status_of(j),
                             ep,
                             loss,
                             acc,
                             cli_str(j, "model"),
                             created};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, stdout);
    cli_table_free(&t);
    json_decref(items);
    return 0;
}

static int one(cli_ctx *c)
{
    const char *sub = c->pos[0];
    int rc = cli_only_opts(c, "jobs", NULL);
    if (rc)
        return rc;
    if (c->npos != 2)
        return cli_usage_error("jobs", "%s takes one job ID or NAME", sub);
    if (!strcmp(sub, "watch"))
        return cli_watch_job(c, c->pos[1]);
    char path[CLI_REF_PATH_MAX];
    int cancel = !strcmp(sub, "cancel");
    if ((rc = cli_ref_path(path, "jobs", "/v1/jobs", c->pos[1],
                           cancel ? "/cancel" : "")))
        return rc;
    cli_resp r;
    if ((rc = cli_call(c, cancel ? "POST" : "GET", path, NULL, NULL, 0, &r)))
        return rc;
    if (!c->json) {
        if (cancel)
            printf("Cancelling %s (%s)\n",
                   cli_str(r.json, "id") ? cli_str(r.json, "id") : c->pos[1],
                   status_of(r.json));
        else
            cli_print_object(r.json, stdout);
    }
    cli_resp_free(&r);
    return 0;
}

int cli_cmd_jobs(cli_ctx *c)
{
    if (c->help) {
        usage(stdout);
        return 0;
    }
    const char *sub = c->npos ? c->pos[0] : "";
    if (!strcmp(sub, "submit"))
        return submit(c);
    if (!strcmp(sub, "list") || !strcmp(sub, "ls"))
        return list(c);
    if (!strcmp(sub, "show") || !strcmp(sub, "cancel") || !strcmp(sub, "watch"))
        return one(c);
    return cli_usage_error(
        "jobs", *sub ? "unknown jobs command '%s'" : "jobs needs a command%s",
        sub);
}

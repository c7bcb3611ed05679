/*
 * deployspec.c - a deployment's spec: POST and PATCH bodies parsed into a
 * deploy_spec, checked as a whole, and rendered back (see deployspec.h).
 *
 * POST and PATCH share one walk over the body (apply): POST starts from
 * the defaults, PATCH from a copy of the current spec, and every member a
 * section names replaces the value it started from. Whatever the walk
 * finds wrong leaves the caller's spec as it was: the walk works on a
 * copy that is moved into place only when the whole is valid.
 *
 * Derived defaults: replicas.max is max(1, min) when only min is given on
 * POST; limits.burst is max(1, ceil(rps)) whenever requests_per_second is
 * given without burst (also on PATCH: a new rate gets its own burst);
 * autoscaling.target_in_flight is batching.max_batch_size on POST.
 */
#include "deploy/deployspec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jsonutil.h"
#include "jobs/jobreq.h"

#define DEPLOY_RPS_MAX 1000000.0
#define DEPLOY_BURST_MAX 1000000
#define DEPLOY_CONCURRENCY_MAX 100000
#define DEPLOY_TOKENS_MAX 1000000000
#define DEPLOY_DELAY_MAX_US 1000000
#define DEPLOY_TARGET_MAX 1000000.0

/* A name as a URL path segment carries it: 1..63 of [A-Za-z0-9._-]. */
static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= DEPLOY_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* The burst a rate gets when none is given: a second's worth of requests,
 * at least 1. */
static uint32_t default_burst(double rps)
{
    double b = ceil(rps);
    if (b < 1)
        b = 1;
    if (b > DEPLOY_BURST_MAX)
        b = DEPLOY_BURST_MAX;
    return (uint32_t)b;
}

/* The number above 0 and at most max at obj[key] (present, not null) into
 * *io. TY_EINVAL naming path.key. */
static ty_status positive(const json_t *obj, const char *key, const char *path,
                          double max, double *io, ty_err *err)
{
    double v;
    ty_status s = tyjson_get_number(obj, key, path, 0, 0, max, *io, &v, err);
    if (s != TY_OK)
        return s;
    if (!(v > 0)) {
        char field[128];
        tyjson_path(field, sizeof field, path, key);
        return ty_fail(err, TY_EINVAL, field,
                       "%s must be a number above 0 and at most %g", field,
                       max);
    }
    *io = v;
    return TY_OK;
}

static ty_status parse_name(const json_t *body, deploy_spec *io, ty_err *err)
{
    const char *name;
    ty_status s = tyjson_get_string(body, "name", "", 1, DEPLOY_NAME_MAX - 1,
                                    NULL, &name, err);
    if (s != TY_OK)
        return s;
    if (!name_ok(name))
        return ty_fail(err, TY_EINVAL, "name",
                       "name must be 1 to %d letters, digits, '.', '_' or "
                       "'-' (it appears in URLs), got \"%.70s\"",
                       DEPLOY_NAME_MAX - 1, name);
    snprintf(io->name, sizeof io->name, "%s", name);
    return TY_OK;
}

static ty_status parse_model(const json_t *body, int required, deploy_spec *io,
                             ty_err *err)
{
    const char *model;
    ty_status s = tyjson_get_string(body, "model", "", required,
                                    sizeof io->model - 1, NULL, &model, err);
    if (s == TY_OK && model)
        snprintf(io->model, sizeof io->model, "%s", model);
    return s;
}

static ty_status parse_replicas(const json_t *r, int is_post, deploy_spec *io,
                                ty_err *err)
{
    static const char *const keys[] = {"min", "max", NULL};
    ty_status s = tyjson_check_keys(r, keys, "replicas", err);
    if (s != TY_OK)
        return s;
    int64_t min, max;
    if ((s = tyjson_get_int(r, "min", "replicas", 0, 0, DEPLOY_MAX_REPLICAS,
                            io->min_replicas, &min, err)) != TY_OK)
        return s;
    /* On POST, {"min": 3} alone means 3 to 3, not a min above the default
     * max. */
    int64_t def_max = io->max_replicas;
    if (is_post)
        def_max = min > 1 ? min : 1;
    if ((s = tyjson_get_int(r, "max", "replicas", 0, 1, DEPLOY_MAX_REPLICAS,
                            def_max, &max, err)) != TY_OK)
        return s;
    io->min_replicas = (int)min;
    io->max_replicas = (int)max;
    return TY_OK;
}

static ty_status parse_batching(const json_t *b, deploy_spec *io, ty_err *err)
{
    static const char *const keys[] = {"max_batch_size", "max_queue_delay_us",
                                       "preferred_batch_sizes", NULL};
    ty_status s = tyjson_check_keys(b, keys, "batching", err);
    if (s != TY_OK)
        return s;
    int64_t v;
    if ((s = tyjson_get_int(b, "max_batch_size", "batching", 0, 1,
                            DEPLOY_MAX_BATCH, io->max_batch_size, &v, err)) !=
        TY_OK)
        return s;
    io->max_batch_size = (uint32_t)v;
    if ((s = tyjson_get_int(b, "max_queue_delay_us", "batching", 0, 0,
                            DEPLOY_DELAY_MAX_US, io->max_queue_delay_us, &v,
                            err)) != TY_OK)
        return s;
    io->max_queue_delay_us = (uint32_t)v;
    const json_t *pref = json_object_get(b, "preferred_batch_sizes");
    if (!pref || json_is_null(pref))
        return TY_OK;
    const char *field = "batching.preferred_batch_sizes";
    if (!json_is_array(pref))
        return ty_fail(err, TY_EINVAL, field,
                       "%s must be an array of batch sizes such as [8, 16, "
                       "32]",
                       field);
    if (json_array_size(pref) > DEPLOY_MAX_PREFERRED)
        return ty_fail(err, TY_EINVAL, field,
                       "%s holds at most %d sizes, got %zu", field,
                       DEPLOY_MAX_PREFERRED, json_array_size(pref));
    /* Each within 1..max_batch_size and above the one before; the bound
     * against max_batch_size is checked with the whole (check_whole). */
    size_t i;
    json_t *e;
    json_array_foreach (pref, i, e) {
        char at[160];
        tyjson_path_index(at, sizeof at, field, i);
        int64_t n = json_integer_value(e);
        if (!json_is_integer(e) || n < 1 || n > DEPLOY_MAX_BATCH)
            return ty_fail(err, TY_EINVAL, at,
                           "%s must be a whole number from 1 to %d", at,
                           DEPLOY_MAX_BATCH);
        if (i > 0 && (uint32_t)n <= io->preferred[i - 1])
            return ty_fail(err, TY_EINVAL, at,
                           "%s must be above the size before it (%u): the "
                           "sizes are strictly increasing",
                           at, io->preferred[i - 1]);
        io->preferred[i] = (uint32_t)n;
    }
    io->npreferred = (int)json_array_size(pref);
    return TY_OK;
}

static ty_status parse_limits(const json_t *l, deploy_spec *io, ty_err *err)
{
    static const char *const keys[] = {"requests_per_second", "burst",
                                       "max_concurrency", "tokens_per_minute",
                                       NULL};
    ty_status s = tyjson_check_keys(l, keys, "limits", err);
    if (s != TY_OK)
        return s;
    const json_t *rps = json_object_get(l, "requests_per_second");
    const json_t *burst = json_object_get(l, "burst");
    const json_t *conc = json_object_get(l, "max_concurrency");
    const json_t *tpm = json_object_get(l, "tokens_per_minute");
    if (rps) {
        if (json_is_null(rps)) {
            io->rps = 0;
            io->burst = 0;
        } else {
            double v = -1;
            if ((s = positive(l, "requests_per_second", "limits",
                              DEPLOY_RPS_MAX, &v, err)) != TY_OK)
                return s;
            io->rps = v;
            io->burst = default_burst(v);
        }
    }
    if (burst && !json_is_null(burst)) {
        if (io->rps <= 0)
            return ty_fail(err, TY_EINVAL, "limits.burst",
                           "limits.burst is the rate limit's bucket: it needs "
                           "limits.requests_per_second");
        int64_t v;
        if ((s = tyjson_get_int(l, "burst", "limits", 1, 1, DEPLOY_BURST_MAX, 0,
                                &v, err)) != TY_OK)
            return s;
        io->burst = (uint32_t)v;
    } else if (burst && io->rps > 0) {
        io->burst = default_burst(io->rps);
    }
    if (conc) {
        int64_t v = 0;
        if (!json_is_null(conc) &&
            (s = tyjson_get_int(l, "max_concurrency", "limits", 1, 1,
                                DEPLOY_CONCURRENCY_MAX, 0, &v, err)) != TY_OK)
            return s;
        io->max_concurrency = (uint32_t)v;
    }
    if (tpm) {
        int64_t v = 0;
        if (!json_is_null(tpm) &&
            (s = tyjson_get_int(l, "tokens_per_minute", "limits", 1, 1,
                                DEPLOY_TOKENS_MAX, 0, &v, err)) != TY_OK)
            return s;
        io->tokens_per_minute = (uint32_t)v;
    }
    return TY_OK;
}

static ty_status parse_autoscaling(const json_t *a, deploy_spec *io,
                                   ty_err *err)
{
    static const char *const keys[] = {"target_in_flight", "target_queue_ms",
                                       "scale_up_after_s", "scale_down_after_s",
                                       NULL};
    ty_status s = tyjson_check_keys(a, keys, "autoscaling", err);
    if (s != TY_OK)
        return s;
    const json_t *t = json_object_get(a, "target_in_flight");
    if (t && !json_is_null(t) &&
        (s = positive(a, "target_in_flight", "autoscaling", DEPLOY_TARGET_MAX,
                      &io->target_in_flight, err)) != TY_OK)
        return s;
    /* null (or absent on POST): no latency target. */
    const json_t *q = json_object_get(a, "target_queue_ms");
    if (q && json_is_null(q))
        io->target_queue_ms = 0;
    else if (q && (s = positive(a, "target_queue_ms", "autoscaling", 60000,
                                &io->target_queue_ms, err)) != TY_OK)
        return s;
    if ((s = tyjson_get_number(a, "scale_up_after_s", "autoscaling", 0, 0, 600,
                               io->scale_up_after_s, &io->scale_up_after_s,
                               err)) != TY_OK)
        return s;
    return tyjson_get_number(a, "scale_down_after_s", "autoscaling", 0, 1,
                             86400, io->scale_down_after_s,
                             &io->scale_down_after_s, err);
}

/* What no single member can say: min against max, the preferred sizes
 * against max_batch_size. */
static ty_status check_whole(const deploy_spec *s, ty_err *err)
{
    if (s->min_replicas > s->max_replicas)
        return ty_fail(err, TY_EINVAL, "replicas.min",
                       "replicas.min (%d) must not be above replicas.max (%d)",
                       s->min_replicas, s->max_replicas);
    for (int i = 0; i < s->npreferred; i++)
        if (s->preferred[i] > s->max_batch_size) {
            char at[80];
            snprintf(at, sizeof at, "batching.preferred_batch_sizes[%d]", i);
            return ty_fail(err, TY_EINVAL, at,
                           "%s (%u) must not be above "
                           "batching.max_batch_size (%u)",
                           at, s->preferred[i], s->max_batch_size);
        }
    return TY_OK;
}

/* The members of body that are objects of their own, each handed to its
 * parser when present. */
static ty_status apply_sections(const json_t *body, int is_post,
                                deploy_spec *io, ty_err *err)
{
    ty_status s = TY_OK;
    const json_t *v;
    if ((v = json_object_get(body, "replicas")) &&
        (s = parse_replicas(v, is_post, io, err)) != TY_OK)
        return s;
    if ((v = json_object_get(body, "batching")) &&
        (s = parse_batching(v, io, err)) != TY_OK)
        return s;
    if ((v = json_object_get(body, "limits")) &&
        (s = parse_limits(v, io, err)) != TY_OK)
        return s;
    if ((v = json_object_get(body, "autoscaling")) &&
        (s = parse_autoscaling(v, io, err)) != TY_OK)
        return s;
    if ((v = json_object_get(body, "priority")) && !json_is_null(v)) {
        int p;
        if ((s = jobreq_priority(v, &p, err)) != TY_OK)
            return s;
        io->priority = p;
    }
    return TY_OK;
}

ty_status deploy_spec_parse(const json_t *body, int host_has_gpus,
                            deploy_spec *out, ty_err *err)
{
    static const char *const keys[] = {"name",        "model",    "replicas",
                                       "resources",   "batching", "limits",
                                       "autoscaling", "priority", NULL};
    memset(out, 0, sizeof *out);
    deploy_spec s = {
        .min_replicas = 1,
        .max_replicas = 1,
        .max_batch_size = 32,
        .max_queue_delay_us = 500,
        .scale_up_after_s = 2,
        .scale_down_after_s = 60,
    };
    ty_status st;
    if ((st = tyjson_check_keys(body, keys, "", err)) != TY_OK ||
        (st = parse_name(body, &s, err)) != TY_OK ||
        (st = parse_model(body, 1, &s, err)) != TY_OK ||
        (st = jobreq_parse(json_object_get(body, "resources"), host_has_gpus,
                           &s.request, NULL, &s.resources, err)) != TY_OK ||
        (st = apply_sections(body, 1, &s, err)) != TY_OK)
        goto fail;
    if (s.target_in_flight <= 0)
        s.target_in_flight = s.max_batch_size;
    if ((st = check_whole(&s, err)) != TY_OK)
        goto fail;
    *out = s;
    return TY_OK;
fail:
    deploy_spec_free(&s);
    return st;
}

ty_status deploy_spec_patch(const json_t *body, deploy_spec *io,
                            int *model_changed, ty_err *err)
{
    static const char *const keys[] = {"model",  "replicas",    "batching",
                                       "limits", "autoscaling", "priority",
                                       NULL};
    if (model_changed)
        *model_changed = 0;
    if (json_is_object(body)) {
        /* Said plainly, not as an unknown key: these are known, and fixed
         * for a deployment's life. */
        if (json_object_get(body, "name"))
            return ty_fail(err, TY_EINVAL, "name",
                           "a deployment's name cannot change; create a "
                           "deployment with the new name and delete this one");
        if (json_object_get(body, "resources"))
            return ty_fail(err, TY_EINVAL, "resources",
                           "a deployment's resources cannot change (a "
                           "different slice is a different deployment); "
                           "create a new deployment with them");
    }
    ty_status st = tyjson_check_keys(body, keys, "", err);
    if (st != TY_OK)
        return st;
    deploy_spec s;
    deploy_spec_copy(&s, io);
    int given_model = json_object_get(body, "model") != NULL;
    if ((given_model && (st = parse_model(body, 1, &s, err)) != TY_OK) ||
        (st = apply_sections(body, 0, &s, err)) != TY_OK ||
        (st = check_whole(&s, err)) != TY_OK) {
        deploy_spec_free(&s);
        return st;
    }
    deploy_spec_free(io);
    *io = s;
    if (model_changed)
        *model_changed = given_model;
    return TY_OK;
}

json_t *deploy_spec_json(const deploy_spec *s)
{
    json_t *pref = json_array();
    for (int i = 0; pref && i < s->npreferred; i++)
        if (json_array_append_new(pref, json_integer(s->preferred[i])) != 0) {
            json_decref(pref);
            pref = NULL;
        }
    json_t *resources = s->resources ? json_deep_copy(s->resources) : NULL;
    if (!pref || !resources) {
        json_decref(pref);
        json_decref(resources);
        return NULL;
    }
    /* json_pack's "o" steals even when it fails, so nothing leaks here. */
    return json_pack(
        "{s:s, s:s, s:{s:i, s:i}, s:o, s:{s:I, s:I, s:o}, s:{s:o, s:o, s:o, "
        "s:o}, "
        "s:{s:f, s:o, s:f, s:f}, s:i}",
        "name", s->name, "model", s->model, "replicas", "min", s->min_replicas,
        "max", s->max_replicas, "resources", resources, "batching",
        "max_batch_size", (json_int_t)s->max_batch_size, "max_queue_delay_us",
        (json_int_t)s->max_queue_delay_us, "preferred_batch_sizes", pref,
        "limits", "requests_per_second",
        s->rps > 0 ? json_real(s->rps) : json_null(), "burst",
        s->rps > 0 ? json_integer(s->burst) : json_null(), "max_concurrency",
        s->max_concurrency ? json_integer(s->max_concurrency) : json_null(),
        "tokens_per_minute",
        s->tokens_per_minute ? json_integer(s->tokens_per_minute) : json_null(),
        "autoscaling", "target_in_flight", s->target_in_flight,
        "target_queue_ms",
        s->target_queue_ms > 0 ? json_real(s->target_queue_ms) : json_null(),
        "scale_up_after_s", s->scale_up_after_s, "scale_down_after_s",
        s->scale_down_after_s, "priority", s->priority);
}

void deploy_spec_copy(deploy_spec *dst, const deploy_spec *src)
{
    *dst = *src;
    dst->resources = json_incref(src->resources);
}

void deploy_spec_free(deploy_spec *s)
{
    if (!s)
        return;
    json_decref(s->resources);
    s->resources = NULL;
}

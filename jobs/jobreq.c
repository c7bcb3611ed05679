/* jobreq.c - a job's resource request and priority (see jobreq.h). */
#include "jobs/jobreq.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jsonutil.h"

/* A MIG profile name as the driver spells them: "1g.18gb", "1g.18gb+me",
 * "3g.71gb" - letters, digits, '.', '+'. */
static int profile_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= SCHED_PROFILE_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '+'))
            return 0;
    }
    return 1;
}

/* Whether resources[key] is given (present and not null). */
static int given(const json_t *resources, const char *key)
{
    const json_t *v = json_object_get(resources, key);
    return v && !json_is_null(v);
}

/* resources[key] (given) as a whole number from 1 to max into *n, or
 * TY_EINVAL naming resources.<key> with what it means. */
static ty_status count_of(const json_t *resources, const char *key, int max,
                          const char *means, int *n, ty_err *err)
{
    const json_t *v = json_object_get(resources, key);
    const int64_t k = json_integer_value(v);
    if (json_is_integer(v) && k >= 1 && k <= max) {
        *n = (int)k;
        return TY_OK;
    }
    char field[64];
    snprintf(field, sizeof field, "resources.%s", key);
    return ty_fail(err, TY_EINVAL, field,
                   "%s must be a whole number from 1 to %d: %s", field, max,
                   means);
}

/* resources.workers (absent or null: 1), for a caller that takes it. */
static ty_status parse_workers(const json_t *resources, int *workers,
                               ty_err *err)
{
    *workers = 1;
    if (!given(resources, "workers"))
        return TY_OK;
    return count_of(resources, "workers", JOBREQ_WORKERS_MAX,
                    "the CPU processes that train the model together "
                    "(data-parallel)",
                    workers, err);
}

/* A gang of whole GPUs, one rank each: resources.gpus (n GPUs of one
 * node; 1: an ordinary whole-GPU job), or resources.nodes and
 * resources.gpus_per_node (m nodes of n GPUs each, with the Slurm
 * executor; the service checks that). resources.gpu beside it may narrow
 * what each member must be ("whole", "any" or {"min_memory_gb": n}); the
 * request is always a whole GPU. *workers gets the ranks. */
static ty_status parse_gpus(const json_t *resources, int host_has_gpus,
                            sched_request *out, int *workers,
                            json_t **normalized, ty_err *err)
{
    const int on_nodes =
        given(resources, "nodes") || given(resources, "gpus_per_node");
    int n = 0, nodes = 0, per_node = 0;
    ty_status st = TY_OK;
    if (given(resources, "gpus")) {
        st = count_of(resources, "gpus", JOBREQ_GPUS_MAX,
                      "the whole GPUs of one node that train the model "
                      "together (data-parallel, one process each)",
                      &n, err);
        if (st != TY_OK)
            return st;
        if (on_nodes)
            return ty_fail(err, TY_EINVAL, "resources.gpus",
                           "give resources.gpus (GPUs of one node) or "
                           "resources.nodes with resources.gpus_per_node "
                           "(GPUs of several Slurm nodes), not both");
    } else {
        static const char *const pair[] = {"nodes", "gpus_per_node"};
        for (int i = 0; i < 2; i++)
            if (!given(resources, pair[i]))
                return ty_fail(err, TY_EINVAL,
                               i ? "resources.gpus_per_node"
                                 : "resources.nodes",
                               "resources.%s goes with resources.%s: a gang "
                               "of m Slurm nodes of n whole GPUs each",
                               pair[i], pair[1 - i]);
        if ((st = count_of(resources, "nodes", JOBREQ_NODES_MAX,
                           "the Slurm nodes of the gang", &nodes, err)) !=
                TY_OK ||
            (st = count_of(resources, "gpus_per_node", JOBREQ_GPUS_MAX,
                           "the whole GPUs of each node, one rank each",
                           &per_node, err)) != TY_OK)
            return st;
        if (nodes * per_node > JOBREQ_GANG_MAX)
            return ty_fail(err, TY_EINVAL, "resources.nodes",
                           "a gang of %d nodes of %d GPUs is %d ranks, above "
                           "the %d a job may have",
                           nodes, per_node, nodes * per_node, JOBREQ_GANG_MAX);
        n = nodes * per_node;
    }
    const char *field = on_nodes ? "resources.nodes" : "resources.gpus";
    if (given(resources, "workers"))
        return ty_fail(err, TY_EINVAL, field,
                       "give %s (whole GPUs) or resources.workers (CPU "
                       "processes), not both",
                       field);
    if (given(resources, "min_workers"))
        return ty_fail(err, TY_EINVAL, "resources.min_workers",
                       "resources.min_workers makes a gang of CPU workers "
                       "elastic; a gang of GPUs (%s) always runs whole",
                       field);
    if (!host_has_gpus)
        return ty_fail(err, TY_EINVAL, field,
                       "this server has no GPUs: leave %s out, or train on "
                       "CPU processes with resources.workers",
                       field);
    /* What each member must be: resources.gpu alone, parsed as for any
     * job, then made a whole GPU. */
    const json_t *gpu = json_object_get(resources, "gpu");
    json_t *only = json_object();
    json_t *norm = NULL;
    if (!only)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (gpu && !json_is_null(gpu))
        json_object_set(only, "gpu", (json_t *)gpu);
    ty_status s = jobreq_parse(only, 1, out, NULL, &norm, err);
    json_decref(only);
    if (s != TY_OK)
        return s;
    if (out->kind == SCHED_REQ_NONE || out->kind == SCHED_REQ_PROFILE) {
        json_decref(norm);
        return ty_fail(err, TY_EINVAL, "resources.gpu",
                       out->kind == SCHED_REQ_NONE
                           ? "%s asks for GPUs: resources.gpu \"none\" "
                             "contradicts it"
                           : "%s takes whole GPUs: a MIG profile in "
                             "resources.gpu cannot be used with it "
                             "(collectives do not run between MIG slices)",
                       field);
    }
    const char *v = json_string_value(json_object_get(norm, "gpu"));
    if (out->kind == SCHED_REQ_ANY || (v && !strcmp(v, "any"))) {
        out->kind = SCHED_REQ_MIN;
        json_object_set_new(norm, "gpu", json_string("whole"));
    }
    out->min_compute_slices = 7;
    if (json_is_object(json_object_get(norm, "gpu")))
        json_object_set_new(json_object_get(norm, "gpu"), "min_compute_slices",
                            json_integer(7));
    *workers = n;
    if (on_nodes) {
        json_object_set_new(norm, "nodes", json_integer(nodes));
        json_object_set_new(norm, "gpus_per_node", json_integer(per_node));
    } else {
        json_object_set_new(norm, "gpus", json_integer(n));
    }
    if (normalized)
        *normalized = norm;
    else
        json_decref(norm);
    return TY_OK;
}

ty_status jobreq_parse(const json_t *resources, int host_has_gpus,
                       sched_request *out, int *workers, json_t **normalized,
                       ty_err *err)
{
    memset(out, 0, sizeof *out);
    if (normalized)
        *normalized = NULL;
    if (workers)
        *workers = 1;
    const json_t *gpu = NULL;
    if (resources) {
        static const char *const keys[] = {"gpu", NULL};
        static const char *const job_keys[] = {
            "gpu",   "workers",       "min_workers", "gpus",
            "nodes", "gpus_per_node", NULL};
        if (!json_is_object(resources))
            return ty_fail(err, TY_EINVAL, "resources",
                           "resources must be an object such as "
                           "{\"gpu\": \"any\"}");
        ty_status s = tyjson_check_keys(resources, workers ? job_keys : keys,
                                        "resources", err);
        /* A gang of whole GPUs (resources.gpus, or resources.nodes and
         * resources.gpus_per_node): its own rules. */
        if (s == TY_OK && workers &&
            (given(resources, "gpus") || given(resources, "nodes") ||
             given(resources, "gpus_per_node")))
            return parse_gpus(resources, host_has_gpus, out, workers,
                              normalized, err);
        if (s == TY_OK && workers)
            s = parse_workers(resources, workers, err);
        if (s != TY_OK)
            return s;
        gpu = json_object_get(resources, "gpu");
    }
    /* A gang of CPU processes: the GPU default does not apply, and a GPU
     * asked for beside it is refused (a gang of GPUs is resources.gpus). */
    if (workers && *workers > 1) {
        if (gpu && !json_is_null(gpu) &&
            !(json_is_string(gpu) && !strcmp(json_string_value(gpu), "none")))
            return ty_fail(err, TY_EINVAL, "resources.gpu",
                           "resources.workers trains on CPU processes: give "
                           "resources.gpu \"none\" with it, or leave it out "
                           "(for data-parallel training on GPUs, ask for "
                           "resources.gpus instead)");
        out->kind = SCHED_REQ_NONE;
        if (normalized) {
            *normalized =
                json_pack("{s:s, s:i}", "gpu", "none", "workers", *workers);
            if (!*normalized)
                return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        }
        return TY_OK;
    }
    json_t *norm = NULL;
    if (!gpu || json_is_null(gpu)) {
        out->kind = host_has_gpus ? SCHED_REQ_ANY : SCHED_REQ_NONE;
        norm = json_string(host_has_gpus ? "any" : "none");
    } else if (json_is_string(gpu)) {
        const char *v = json_string_value(gpu);
        if (!strcmp(v, "none")) {
            out->kind = SCHED_REQ_NONE;
        } else if (!strcmp(v, "any")) {
            out->kind = SCHED_REQ_ANY;
        } else if (!strcmp(v, "whole")) {
            /* A whole GPU: any slot with all 7 compute slices (a GPU with
             * MIG off, or a 7g MIG device, which is the whole GPU too). */
            out->kind = SCHED_REQ_MIN;
            out->min_compute_slices = 7;
        } else if (profile_name_ok(v)) {
            out->kind = SCHED_REQ_PROFILE;
            snprintf(out->profile, sizeof out->profile, "%s", v);
        } else {
            return ty_fail(err, TY_EINVAL, "resources.gpu",
                           "resources.gpu must be \"none\", \"any\", "
                           "\"whole\", a MIG profile name such as "
                           "\"1g.18gb\", or "
                           "{\"min_memory_gb\": n, \"min_compute_slices\": k}; "
                           "got \"%.40s\"",
                           v);
        }
        norm = json_string(v);
    } else if (json_is_object(gpu)) {
        static const char *const keys[] = {"min_memory_gb",
                                           "min_compute_slices", NULL};
        ty_status s = tyjson_check_keys(gpu, keys, "resources.gpu", err);
        if (s != TY_OK)
            return s;
        const json_t *mem = json_object_get(gpu, "min_memory_gb");
        const json_t *cs = json_object_get(gpu, "min_compute_slices");
        double gb = 0;
        if (mem) {
            gb = json_number_value(mem);
            if (!json_is_number(mem) || !isfinite(gb) || gb <= 0 || gb > 1e6)
                return ty_fail(err, TY_EINVAL, "resources.gpu.min_memory_gb",
                               "resources.gpu.min_memory_gb must be a number "
                               "of GiB above 0 and at most 1000000");
        }
        int64_t k = 0;
        if (cs) {
            k = json_integer_value(cs);
            if (!json_is_integer(cs) || k < 1 || k > 7)
                return ty_fail(err, TY_EINVAL,
                               "resources.gpu.min_compute_slices",
                               "resources.gpu.min_compute_slices must be a "
                               "whole number from 1 to 7 (a whole GPU has 7)");
        }
        out->kind = SCHED_REQ_MIN;
        out->min_memory_bytes = (uint64_t)llround(gb * (double)(1ull << 30));
        out->min_compute_slices = (int)k;
        norm = json_object();
        if (mem)
            json_object_set_new(norm, "min_memory_gb", json_real(gb));
        if (cs)
            json_object_set_new(norm, "min_compute_slices", json_integer(k));
    } else {
        return ty_fail(err, TY_EINVAL, "resources.gpu",
                       "resources.gpu must be \"none\", \"any\", "
                       "\"whole\", a MIG profile name, or "
                       "{\"min_memory_gb\": n, "
                       "\"min_compute_slices\": k}");
    }
    if (normalized) {
        *normalized = json_pack("{s:o}", "gpu", norm);
        if (!*normalized)
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    } else {
        json_decref(norm);
    }
    return TY_OK;
}

ty_status jobreq_priority(const json_t *priority, int *out, ty_err *err)
{
    *out = 0;
    if (!priority || json_is_null(priority))
        return TY_OK;
    int64_t v = json_integer_value(priority);
    if (!json_is_integer(priority) || v < -JOBREQ_PRIORITY_MAX ||
        v > JOBREQ_PRIORITY_MAX)
        return ty_fail(err, TY_EINVAL, "priority",
                       "priority must be a whole number from -%d to %d "
                       "(higher runs first among the tenant's jobs)",
                       JOBREQ_PRIORITY_MAX, JOBREQ_PRIORITY_MAX);
    *out = (int)v;
    return TY_OK;
}

ty_status jobreq_min_workers(const json_t *resources, int workers,
                             int *min_workers, json_t *normalized, ty_err *err)
{
    *min_workers = workers;
    const json_t *m = json_object_get(resources, "min_workers");
    if (!m || json_is_null(m))
        return TY_OK;
    if (workers <= 1)
        return ty_fail(err, TY_EINVAL, "resources.min_workers",
                       "resources.min_workers makes a data-parallel job "
                       "elastic: give it with resources.workers above 1");
    int64_t n = json_integer_value(m);
    if (!json_is_integer(m) || n < 1 || n > workers)
        return ty_fail(err, TY_EINVAL, "resources.min_workers",
                       "resources.min_workers must be a whole number from 1 "
                       "to resources.workers (%d): the fewest workers the "
                       "job may run with",
                       workers);
    *min_workers = (int)n;
    if (normalized &&
        json_object_set_new(normalized, "min_workers", json_integer(n)))
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    return TY_OK;
}

int jobreq_world(int workers, int min_workers, int can_run)
{
    if (workers < 1)
        workers = 1;
    if (min_workers < 1 || min_workers > workers)
        min_workers = workers;
    if (can_run < 0 || can_run >= workers)
        return workers;
    return can_run >= min_workers ? can_run : 0;
}

/*
 * admission.h - the checks a job passes at submit, against the store and
 * this server (jobs/service.h's jobs_submit runs them after the quota
 * check): hyperparameters.max_attempts, the dataset, the validation set,
 * the model spec against the dataset's shape, the hyperparameters and the
 * augmentation, and the memory its training will take (over
 * --max-job-memory, or over the training device's memory, it is refused).
 * Everything that can be checked at submit is checked, so a mistake is an
 * error naming the field (a 422), not a job that fails minutes later.
 */
#ifndef TY_ADMISSION_H
#define TY_ADMISSION_H

#include <stdint.h>

#include <jansson.h>

#include "common/ids.h"
#include "common/ty.h"
#include "jobs/env.h"
#include "sched/sched.h"

/* A job as submitted: the request's fields, parsed but not yet checked
 * against anything (all borrowed). */
typedef struct {
    const char *name;              /* NULL: the dataset's name */
    const char *dataset;           /* the dataset's id or name */
    const json_t *validation;      /* as given; NULL: the default split */
    const json_t *model;           /* as given; NULL is refused */
    const json_t *hyperparameters; /* as given; may be NULL */
    const json_t *resources;       /* normalized by jobreq_parse */
    sched_request req;             /* jobreq_parse's */
    int workers;                   /* jobreq_parse's: the ranks, 1 or more */
    int min_workers; /* jobreq_min_workers': elastic down to this; 0 or
                        workers: not elastic */
    int priority;    /* jobreq_priority's */
} job_submission;

/* What admission_check found: the normalized documents to store. */
typedef struct {
    char dataset_id[TY_ID_MAX]; /* the training dataset sub->dataset names */
    json_t *dataset;            /* the training dataset's document */
    const char *name;           /* the submission's or the dataset's */
    json_t *validation;         /* {"split": f} or {"dataset": id} (an id,
                                whether the submission gave an id or a
                                name) */
    json_t *spec;               /* the normalized model spec */
    json_t *hyperparameters;    /* normalized, with max_attempts */
    uint64_t memory_bytes;      /* train_memory's total */
    uint64_t param_count;       /* the model's trainable parameters */
} admission;

/* Checks sub for tenant (see the file comment) and fills *a (caller frees
 * it with admission_free, also on failure). TY_EINVAL naming the field
 * when the job cannot be accepted, TY_ENOMEM, or the store's error. */
ty_status admission_check(const jobs_env *env, const char *tenant,
                          const job_submission *sub, admission *a, ty_err *err);

/* Releases what admission_check filled. */
void admission_free(admission *a);

#endif

/*
 * replicas.h - the serving kind's hooks (deploy/replicas.c), which the
 * controller adds to the job service at start-up. Not for use outside
 * deploy/.
 */
#ifndef TY_DEPLOY_REPLICAS_H
#define TY_DEPLOY_REPLICAS_H

#include "deploy/deploy.h"
#include "jobs/kind.h"

/* The serving kind over controller b (its ctx): replicas of b's
 * deployments are its jobs. */
jobs_kind replicas_kind(deploy_ctl *b);

#endif

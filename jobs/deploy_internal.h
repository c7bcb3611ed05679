/*
 * deploy_internal.h - the deployment controller's state and the hooks the
 * job service calls (jobs/service*.c). Not for use outside jobs/.
 *
 * Locking: the controller's books (deployments, their replicas, traffic)
 * are guarded by their own mutex, dmu, so that requests (jobs_deploy_admit,
 * _pick, _unpick, _finish) never wait on the job service's mu, which the
 * supervisor holds through its passes. Lock order: mu, then dmu, then the
 * store's. A replica record outlives its process until no request holds it
 * (in_flight 0); a deployment outlives its deletion until its last replica
 * is gone.
 */
#ifndef TY_DEPLOY_INTERNAL_H
#define TY_DEPLOY_INTERNAL_H

#include <pthread.h>

#include <jansson.h>

#include "jobs/protocol.h"

typedef struct jobs_service jobs_service;
typedef struct deploy_books deploy_books;

/* Reads the stored deployments and queues their replicas (jobs_start,
 * before the supervisor starts). NULL when out of memory. */
deploy_books *deploy_books_create(jobs_service *r);
void deploy_books_destroy(deploy_books *b);

/* Whether a scheduler job id is a serving replica's. */
int deploy_is_replica(const char *sched_id);

/* The scheduler placed replica job sj on slot (-1: the CPU): its process
 * is started in supervisor place `place`. mu held. */
void deploy_replica_start(jobs_service *r, int sj, int slot, int place);

/* A line of the replica in place `place`. mu not held. */
void deploy_replica_message(jobs_service *r, int place, wproto_msg kind,
                            const json_t *msg);

/* The replica in place `place` exited. mu held. */
void deploy_replica_exit(jobs_service *r, int place, int ws, int lost);

/* Autoscaling, rolling updates, drains, restarts: before each scheduling
 * pass. mu held. */
void deploy_tick(jobs_service *r);

#endif

/*
 * slurmrest_internal.h - what tests/unit/test_slurmrest.c checks without a
 * daemon, gathered from the modules the client is made of: the JWT signing
 * (slurmrest_jwt.h), the state names (slurm.h) and v0.0.38's JSON
 * documents (slurmrest_v0038.h). No product file includes it: slurmrest.c
 * includes those headers itself, and other modules use slurmrest.h, which
 * hides the version.
 */
#ifndef TY_SLURMREST_INTERNAL_H
#define TY_SLURMREST_INTERNAL_H

#include "cluster/slurm.h"
#include "cluster/slurmrest.h"
#include "cluster/slurmrest_jwt.h"
#include "cluster/slurmrest_v0038.h"

#endif

/*
 * slurm.h - what trainyard tells Slurm and hears back, the same in every
 * slurmrestd API version: a batch job to submit, a job's states (the names
 * Slurm gives them, "PENDING", "RUNNING", ..., and which are an end), a
 * job and a node as Slurm reports them. The client (slurmrest.h) takes and
 * fills these; each API version's reader (slurmrest_v0038.c) maps its JSON
 * onto them; the executor (jobs/exec_slurm.c) reads them.
 */
#ifndef TY_SLURM_H
#define TY_SLURM_H

#include <stdint.h>

/* A batch job to submit. Strings NULL or "" are left out. */
typedef struct {
    const char *name;        /* the job's name ("trainyard-job_...") */
    const char *script;      /* "#!/bin/sh\n..." */
    const char *cwd;         /* current_working_directory */
    const char *stdout_path; /* standard_output and standard_error */
    const char *partition, *account, *qos;
    const char *gres;       /* "gpu:1g.18gb:1", "gpu:1", or NULL (CPU) */
    int cpus;               /* cpus_per_task; 0: Slurm's default */
    int nodes;              /* a gang: this many nodes, tasks_per_node
                               tasks on each (srun in the script starts
                               them); 0: one task on one node */
    int tasks_per_node;     /* with nodes; 0: 1 */
    uint64_t memory_mb;     /* memory_per_node; 0: Slurm's default */
    int time_limit_min;     /* 0: the partition's */
    const char *const *env; /* "NAME=value", NULL-terminated; must not be
                               empty (v0.0.38 refuses a job without) */
} slurm_submit;

/* A job's state. */
typedef enum {
    SLURM_ST_UNKNOWN = 0, /* a state this client does not know */
    SLURM_ST_PENDING,
    SLURM_ST_RUNNING,
    SLURM_ST_SUSPENDED,
    SLURM_ST_COMPLETING, /* still ending: not terminal */
    SLURM_ST_COMPLETED,
    SLURM_ST_CANCELLED,
    SLURM_ST_FAILED,
    SLURM_ST_TIMEOUT,
    SLURM_ST_NODE_FAIL,
    SLURM_ST_PREEMPTED,
    SLURM_ST_BOOT_FAIL,
    SLURM_ST_DEADLINE,
    SLURM_ST_OUT_OF_MEMORY,
} slurm_state;

/* Whether a job in state st has ended (COMPLETED and later). */
int slurm_state_terminal(slurm_state st);
/* Slurm's own spelling ("PENDING"); "UNKNOWN" for SLURM_ST_UNKNOWN. */
const char *slurm_state_name(slurm_state st);

/* Slurm's state name to the enum (a leading "PENDING" of
 * "PENDING+..." counts); SLURM_ST_UNKNOWN for others. */
slurm_state slurm_state_parse(const char *name);

/* A job as Slurm reports it (slurmrest_job). */
typedef struct {
    slurm_state state;
    char state_name[32]; /* as Slurm said it */
    char reason[128];    /* state_reason ("Resources", "Priority",
                            "None", ...) */
    int exit_code;       /* the batch script's exit status; -1 while
                            the job has not ended, when unknown, or when
                            a signal ended it (then exit_signal) */
    int exit_signal;     /* the signal that ended it (SIGTERM after a
                            cancel), 0 none */
    char node[128];      /* nodes ("" while pending) */
    char gres[128];      /* the gres it asked for, as Slurm shows it */
    char user[64];       /* the user it runs as */
    char cwd[512];       /* current_working_directory */
} slurm_job_info;

/* A node as Slurm lists it (slurmrest_nodes). */
typedef struct {
    char name[64];
    char state[64];  /* "idle", "mixed", "allocated", "down", ... */
    char flags[128]; /* state_flags, comma-separated: "DRAIN",
                        "NOT_RESPONDING", ...; "" none */
    int cpus;
    uint64_t memory_mb; /* real_memory */
    char gres[256];     /* "gpu:1g.18gb:7", "gpu:h100:4,gpu:a100:2", "" */
    char partitions[128];
} slurm_node;

/* Whether a node with this state and these flags (slurm_node's) takes
 * jobs now: idle, mixed, allocated or completing (any case, a "+..."
 * or trailing "*" of sinfo's spelling read as flags), without DRAIN,
 * NOT_RESPONDING, FAIL, POWER..., MAINT or REBOOT among its flags. A down
 * node, one that stopped answering (a lost node until Slurm marks it
 * down), or one being drained is not up. NULL flags: none. */
int slurm_node_up(const char *state, const char *flags);

#endif

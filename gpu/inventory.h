/*
 * inventory.h - the node's devices in MIG terms, and the slots jobs are
 * placed on.
 *
 * An inventory is read once at startup from one source (--devices):
 *   auto / nvml     the driver, through NVML loaded with dlopen (nvml.c);
 *                   no library, driver or GPU is an empty inventory with
 *                   the reason, never an error
 *   sim:<file>      a JSON file describing GPUs and MIG layouts, checked
 *                   against the real profile rules (mig.h); an impossible
 *                   layout is an error naming the file, GPU and instance
 *   none            a CPU-only host
 *
 * GPUs hold their MIG devices (when MIG is on). The slots are the flat list
 * the scheduler places jobs on: one per GPU with MIG off, one per MIG
 * device on GPUs with MIG on, in GPU order. A slot's uuid is what a worker
 * gets as CUDA_VISIBLE_DEVICES. A real GPU's layout never changes while
 * the server runs (MIG.md: a service schedules onto the existing layout).
 * A simulated GPU's may, through inv_gpu_recut (POST /v1/admin/mig-layout,
 * once the GPU's slots are idle): its slots keep their indices where the
 * new layout has as many instances, further ones are appended at the end,
 * and the ones left over are retired (`retired`: in the list, no device),
 * so no other GPU's slot ever changes index. Holders, telemetry and a
 * re-cut change under `mu`.
 */
#ifndef TY_INVENTORY_H
#define TY_INVENTORY_H

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#include "common/ids.h"
#include "common/ty.h"
#include "gpu/mig.h"

#define INV_NAME_MAX 96 /* NVML's name and UUID buffer size */
#define INV_MAX_GPUS 64
#define INV_UNKNOWN (-1)    /* telemetry or placement the driver did not give */
#define INV_MAX_DOMAIN 1024 /* the largest interconnect domain number */

typedef enum {
    INV_SOURCE_NONE = 0, /* --devices none: a CPU-only host */
    INV_SOURCE_NVML,     /* --devices auto: the driver */
    INV_SOURCE_SIM,      /* --devices sim:<file> */
    INV_SOURCE_SLURM,    /* --executor slurm: the cluster's GRES (cluster/) */
} inv_source;

/* A MIG device: one compute instance inside one GPU instance. */
typedef struct {
    char uuid[INV_NAME_MAX];            /* "MIG-..." */
    char profile[MIG_PROFILE_NAME_MAX]; /* "1g.18gb", from the driver */
    int gpu_instance_id;
    int compute_instance_id;
    int compute_slices;
    uint64_t memory_bytes;
    int placement_start; /* memory slice; INV_UNKNOWN */
    int placement_size;  /* memory slices; INV_UNKNOWN */
} inv_mig;

typedef struct {
    int index;               /* NVML's index */
    char name[INV_NAME_MAX]; /* "NVIDIA H200" */
    char model[32];          /* mig.h's key ("H200-141GB"),
                                             "" when unknown */
    char uuid[INV_NAME_MAX]; /* "GPU-..." */
    uint64_t memory_bytes;
    int mig_enabled;
    /* Telemetry; INV_UNKNOWN where the driver gives none (simulated GPUs,
     * utilisation on a MIG-enabled GPU). */
    int utilization_gpu_pct;
    int utilization_memory_pct;
    int temperature_c;
    int power_mw;
    /* Where the GPU is: its host (0 on a local inventory; the Slurm
     * inventory numbers its nodes 0, 1, ... in the order Slurm lists them)
     * and its interconnect domain within that host: GPUs with the same
     * non-zero nvlink_domain reach each other over NVLink or NVSwitch
     * (NVML topology, inv_domains_from_links; a sim file's
     * "nvlink_domain"). 0: none or unknown. Its MIG devices share it. */
    int node;
    int nvlink_domain;
    int nmig;
    inv_mig *migs;
} inv_gpu;

typedef enum {
    INV_SLOT_GPU = 0, /* a whole GPU, MIG off */
    INV_SLOT_MIG,     /* one MIG device */
} inv_slot_kind;

/* Somewhere one job can run. */
typedef struct {
    inv_slot_kind kind;
    int gpu;             /* index into inventory.gpus */
    int mig;             /* index into that GPU's migs;
                                             -1 for a whole GPU */
    const char *uuid;    /* borrowed from the GPU or MIG
                                             device: CUDA_VISIBLE_DEVICES */
    const char *profile; /* "1g.18gb"; NULL: whole GPU */
    int compute_slices;  /* whole GPU: 7 */
    uint64_t memory_bytes;
    int node;   /* its GPU's node */
    int domain; /* its GPU's nvlink_domain (0: none) */
    /* The holder, set by the scheduler under inventory.mu; "" = free. */
    char job_id[TY_ID_MAX];
    char tenant_id[TY_ID_MAX];
    /* 1: a re-cut removed this slot (uuid "", profile NULL, no slices);
     * it stays so that the slots after it keep their indices. */
    int retired;
} inv_slot;

typedef struct inventory {
    inv_source source;
    char source_label[PATH_MAX + 8]; /* "nvml", "sim:<file name>", "none" */
    char reason[256];                /* nvml: why there are no GPUs, or
                                             what could not be read; "" */
    int ngpus;
    inv_gpu *gpus;
    int nslots;
    inv_slot *slots;
    int slot_cap;    /* slots' room: a simulated inventory's re-cuts
                           never move the array */
    void **old_migs; /* MIG arrays a re-cut replaced (freed at destroy:
                           a reader may still hold a pointer into one) */
    int nold_migs;
    pthread_mutex_t mu; /* guards holders, telemetry and re-cuts */
    /* A source with a live part (NVML: the loaded library, nvml.c) sets
     * these: refresh re-reads the telemetry (taking mu), close releases
     * ctx with the inventory. NULL for the others. */
    void *source_ctx;
    void (*source_refresh)(struct inventory *inv);
    void (*source_close)(void *ctx);
} inventory;

/* Opens the inventory a --devices value names ("auto", "nvml", "none",
 * "sim:<file>"). On success *out is the caller's (inv_destroy). An NVML
 * source without a library, driver or GPU succeeds with no GPUs and the
 * reason. Errors: TY_EINVAL for an unknown spec; TY_EIO, TY_EFORMAT or
 * TY_EINVAL for a sim file that cannot be read, is not JSON, or describes
 * an impossible layout (the message names the file, GPU and instance, the
 * field the JSON path); *out is then NULL. */
ty_status inv_open(const char *spec, inventory **out, ty_err *err);

/* Parses and checks a simulated inventory document. label names it in
 * messages (the file's path). Same errors as inv_open's sim case. */
/* A GPU's MIG instances as the sim files and POST /v1/admin/mig-layout
 * give them ([{"profile", "start"}], at most MIG_COMPUTE_SLICES) on a GPU
 * of model m, into out[0..*n), checked as one layout (mig_layout_check).
 * TY_EINVAL names field[i] (its profile or start) and says why; the
 * messages start with where (e.g. "gpus[0]"), or the model when NULL. */
ty_status inv_instances_parse(const mig_model *m, const json_t *insts,
                              const char *field, const char *where,
                              mig_placed *out, int *n, ty_err *err);

ty_status inv_sim_parse(const json_t *doc, const char *label, inventory **out,
                        ty_err *err);

/* Reads and parses a simulated inventory file. */
ty_status inv_sim_load(const char *path, inventory **out, ty_err *err);

/* Reads the driver's GPUs through NVML from library `lib` (NULL:
 * "libnvidia-ml.so.1"). Never fails for a missing library, driver or
 * GPU: the inventory is empty and says why in `reason`. TY_ENOMEM only. */
ty_status inv_nvml_open(const char *lib, inventory **out, ty_err *err);

/* An empty inventory of source `source` (the CPU-only host). */
ty_status inv_empty(inv_source source, const char *label, inventory **out,
                    ty_err *err);

/* Re-reads the GPUs' telemetry (through source_refresh: NVML only;
 * others: nothing). Takes mu. */
void inv_refresh(inventory *inv);

/* Releases everything (inv may be NULL). */
void inv_destroy(inventory *inv);

/* The builder the sources (nvml.c, the sim part of inventory.c) fill: an
 * inv_empty inventory gets its gpus, then inv_build_slots builds
 * inv->slots from them (TY_ENOMEM only). */
ty_status inv_build_slots(inventory *inv, ty_err *err);

/* Re-cuts simulated GPU g (an index into gpus): MIG on with the n
 * instances inst (mig_layout_check's rules, for the GPU's model), or MIG
 * off (mig 0, n 0): one whole-GPU slot. The GPU's slots must all be free.
 * Slot indices as the header says; new MIG devices get UUIDs made from
 * the GPU, the profile and the start (the same layout, the same UUIDs).
 * Takes mu. TY_EINVAL (not a simulated inventory, no such GPU, a model
 * without MIG, a bad layout: the message names the instance),
 * TY_ECONFLICT (a slot of the GPU is held: the message names it),
 * TY_ENOMEM; nothing changes then. */
ty_status inv_gpu_recut(inventory *inv, int g, int mig, const mig_placed *inst,
                        int n, ty_err *err);

/* The layout of GPU g as instances in the shape of a sim file:
 * [{"profile": "3g.40gb", "start": 4}, ...] ([] with MIG off; a device
 * without a known placement has start null). New reference; takes mu. */
json_t *inv_gpu_layout_json(inventory *inv, int g);

/* One active NVLink of inventory GPU `gpu` as NVML reports its far end:
 * another GPU of the inventory (peer, an index into gpus), an NVSwitch
 * (to_switch), or something else (peer -1, to_switch 0: an IBM NPU, a GPU
 * the inventory left out), which joins nothing. */
typedef struct {
    int gpu;
    int peer;
    int to_switch;
} inv_link;

/* The interconnect domains of ngpus GPUs from their active NVLinks, into
 * domain[0..ngpus): GPUs joined by a chain of GPU-to-GPU links are one
 * domain (union-find), and all GPUs with a link to an NVSwitch are one
 * (a host's NVSwitches are one fabric, as on HGX boards). Domains are
 * numbered 1, 2, ... in the order of their lowest GPU; a GPU linked to no
 * other is 0 (none). Links naming a GPU outside 0..ngpus-1 are ignored.
 * Pure; never fails. */
void inv_domains_from_links(int ngpus, const inv_link *links, int nlinks,
                            int *domain);

/* Who may see what of a slot's holder. */
typedef struct {
    const char *tenant_id; /* the caller's tenant */
    int is_admin;          /* sees every holder */
} inv_viewer;

/* What `viewer` may see of slot s's holder, as the fields "state" ("free",
 * "held", "held_by_other_tenant"), "job" and "tenant" set on obj: the
 * admin sees every holder, a tenant its own jobs, and of another tenant's
 * only that the slot is held (job and tenant null). Call under mu. */
void inv_slot_holder_json(const inv_slot *s, const inv_viewer *viewer,
                          json_t *obj);

/* The whole inventory as GET /v1/devices answers it, for viewer: source,
 * reason, and every GPU with its slices (new reference). Takes mu. NULL
 * only when out of memory. */
json_t *inv_to_json(inventory *inv, const inv_viewer *viewer);

/* Refills the slot and GPU families from inv (NULL: empties them): slots
 * and slots held by profile, and each GPU's info, memory and the telemetry
 * the driver gave (NVML re-read first; INV_UNKNOWN values are left out).
 * Takes inv->mu. */
void opm_collect_inventory(inventory *inv);

#endif

/*
 * mig.h - the MIG facts trainyard relies on: which GPU models can be split,
 * which GPU-instance profiles each has (compute and memory slices, memory,
 * allowed placements), and the check that a layout of instances is one the
 * hardware could really hold. Source: ../shared/reference/MIG.md (NVIDIA's
 * MIG user guide and nvml.h).
 *
 * A MIG-capable GPU has 7 compute slices and 8 memory slices. A GPU
 * instance occupies a run of memory slices ("placement": start, size) that
 * begins at one of its profile's allowed starts; instances never overlap
 * and their compute slices add up to at most 7. A whole GPU (MIG off)
 * counts as 7 compute slices, as its 7g profile would.
 *
 * Everything here is a constant table and pure functions.
 */
#ifndef TY_MIG_H
#define TY_MIG_H

#include <stdint.h>

#include "common/ty.h"

#define MIG_COMPUTE_SLICES 7
#define MIG_MEMORY_SLICES 8
#define MIG_PROFILE_NAME_MAX 32

typedef struct {
    const char *name;    /* "1g.18gb", as the driver names it */
    unsigned profile_id; /* NVML_GPU_INSTANCE_PROFILE_* */
    int compute_slices;  /* 1..7 */
    int memory_slices;   /* placement size: 1, 2, 4 or 8 */
    uint64_t memory_mib; /* what the driver reports, approximately */
    uint8_t starts;      /* bit s set: placement may start at s */
} mig_profile;

typedef struct {
    const char *model;       /* "H200-141GB": the key a sim file uses */
    const char *alias;       /* "H200", or NULL */
    const char *device_name; /* what NVML names such a GPU */
    uint64_t memory_mib;     /* the whole GPU, as nvidia-smi reports it */
    const mig_profile *profiles;
    int nprofiles;
} mig_model;

/* The model with this name or alias (exact, case-insensitive), or NULL. */
const mig_model *mig_model_find(const char *name);

/* Writes the known model names ("A100-40GB, A100-80GB, ...") into buf. */
void mig_model_names(char *buf, size_t n);

/* The model's profile with this name, or NULL. */
const mig_profile *mig_profile_find(const mig_model *m, const char *name);

/* Writes the model's profile names ("1g.18gb, 1g.35gb, ...") into buf. */
void mig_profile_names(const mig_model *m, char *buf, size_t n);

/* Writes a profile's allowed starts ("0, 2, 4") into buf. */
void mig_profile_starts(const mig_profile *p, char *buf, size_t n);

/* One GPU instance of a layout: a profile at a placement start. */
typedef struct {
    const mig_profile *profile;
    int start;
} mig_placed;

/* Checks that the n instances could coexist on one GPU of model m: each
 * start is allowed for its profile, the placement fits the 8 memory
 * slices, no two overlap, the compute slices add up to at most 7. TY_OK,
 * or TY_EINVAL with a sentence naming the offending instance by position
 * ("instances[3] (1g.18gb at start 2) overlaps instances[1] ...") and
 * *bad set to its index. Pure. */
ty_status mig_layout_check(const mig_model *m, const mig_placed *inst, int n,
                           int *bad, ty_err *err);

#define MIG_CMD_MAX 192
#define MIG_CMDS_MAX 5

/* The nvidia-smi commands that turn GPU `gpu` (nvidia-smi's index), MIG
 * on or off now (mig_now), into the layout asked for: MIG on with the n
 * instances inst (a layout mig_layout_check accepted), or MIG off
 * (mig_after 0). In order: enable MIG (`nvidia-smi -i G -mig 1`) when it
 * is off; destroy every compute and GPU instance (`nvidia-smi mig -i G
 * -dci`, `-dgi`) when it is on; create the GPU instances by profile id at
 * their placements with their default compute instances (`nvidia-smi mig
 * -i G -cgi 9:4,14:0 -C`); or disable MIG (`-mig 0`). Writes at most
 * MIG_CMDS_MAX lines into out and returns how many. Pure. */
int mig_smi_commands(int gpu, int mig_now, int mig_after,
                     const mig_placed *inst, int n, char out[][MIG_CMD_MAX]);

/* The profile part of a MIG device's name ("NVIDIA H200 MIG 1g.18gb" ->
 * "1g.18gb"), copied into out; "" when the name has no " MIG " part. */
void mig_profile_from_device_name(const char *device_name, char *out, size_t n);

#endif

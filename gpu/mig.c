/*
 * mig.c - MIG profile tables and the layout check (see mig.h).
 *
 * The tables follow ../shared/reference/MIG.md: per model, the six
 * GPU-instance profiles with their NVML profile ids, slice counts and
 * allowed placement starts. Memory figures are what the driver reports for
 * each profile (nvidia-smi mig -lgip), rounded; a simulated inventory uses
 * them, a real one reads the driver's.
 */
#include "gpu/mig.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Allowed starts, as bit masks over memory slices 0..7. */
#define STARTS_1 0x7f  /* 0,1,2,3,4,5,6 */
#define STARTS_2 0x55  /* 0,2,4,6 */
#define STARTS_2G 0x15 /* 0,2,4 */
#define STARTS_3G 0x11 /* 0,4 */
#define STARTS_0 0x01  /* 0 */

static const mig_profile a100_40[] = {
    {"1g.5gb", 19, 1, 1, 4864, STARTS_1},
    {"1g.10gb", 15, 1, 2, 9856, STARTS_2},
    {"2g.10gb", 14, 2, 2, 9856, STARTS_2G},
    {"3g.20gb", 9, 3, 4, 19968, STARTS_3G},
    {"4g.20gb", 5, 4, 4, 19968, STARTS_0},
    {"7g.40gb", 0, 7, 8, 40192, STARTS_0},
};

static const mig_profile a100_80[] = {
    {"1g.10gb", 19, 1, 1, 9728, STARTS_1},
    {"1g.20gb", 15, 1, 2, 19968, STARTS_2},
    {"2g.20gb", 14, 2, 2, 19968, STARTS_2G},
    {"3g.40gb", 9, 3, 4, 40192, STARTS_3G},
    {"4g.40gb", 5, 4, 4, 40192, STARTS_0},
    {"7g.80gb", 0, 7, 8, 80640, STARTS_0},
};

static const mig_profile h100_80[] = {
    {"1g.10gb", 19, 1, 1, 9984, STARTS_1},
    {"1g.20gb", 15, 1, 2, 20096, STARTS_2},
    {"2g.20gb", 14, 2, 2, 20096, STARTS_2G},
    {"3g.40gb", 9, 3, 4, 40448, STARTS_3G},
    {"4g.40gb", 5, 4, 4, 40448, STARTS_0},
    {"7g.80gb", 0, 7, 8, 81152, STARTS_0},
};

static const mig_profile h200_141[] = {
    {"1g.18gb", 19, 1, 1, 16384, STARTS_1},
    {"1g.35gb", 15, 1, 2, 33280, STARTS_2},
    {"2g.35gb", 14, 2, 2, 33280, STARTS_2G},
    {"3g.71gb", 9, 3, 4, 71424, STARTS_3G},
    {"4g.71gb", 5, 4, 4, 71424, STARTS_0},
    {"7g.141gb", 0, 7, 8, 143360, STARTS_0},
};

#define MODEL(key, alias, dev, mib, tbl)                  \
    {                                                     \
        key, alias, dev, mib, tbl, (int)TY_ARRAY_LEN(tbl) \
    }

static const mig_model models[] = {
    MODEL("A100-40GB", NULL, "NVIDIA A100-SXM4-40GB", 40960, a100_40),
    MODEL("A100-80GB", NULL, "NVIDIA A100-SXM4-80GB", 81920, a100_80),
    MODEL("H100-80GB", "H100", "NVIDIA H100 80GB HBM3", 81559, h100_80),
    MODEL("H200-141GB", "H200", "NVIDIA H200", 143771, h200_141),
};

const mig_model *mig_model_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < TY_ARRAY_LEN(models); i++) {
        if (!strcasecmp(name, models[i].model) ||
            (models[i].alias && !strcasecmp(name, models[i].alias)))
            return &models[i];
    }
    return NULL;
}

void mig_model_names(char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < TY_ARRAY_LEN(models) && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "",
                                 models[i].model);
}

const mig_profile *mig_profile_find(const mig_model *m, const char *name)
{
    if (!m || !name)
        return NULL;
    for (int i = 0; i < m->nprofiles; i++)
        if (!strcmp(name, m->profiles[i].name))
            return &m->profiles[i];
    return NULL;
}

void mig_profile_names(const mig_model *m, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->nprofiles && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "",
                                 m->profiles[i].name);
}

void mig_profile_starts(const mig_profile *p, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int s = 0; s < MIG_MEMORY_SLICES && used < n; s++)
        if (p->starts & (1u << s))
            used += (size_t)snprintf(buf + used, n - used, "%s%d",
                                     used ? ", " : "", s);
}

ty_status mig_layout_check(const mig_model *m, const mig_placed *inst, int n,
                           int *bad, ty_err *err)
{
    /* owner[s]: the instance holding memory slice s, or -1. */
    int owner[MIG_MEMORY_SLICES];
    for (int s = 0; s < MIG_MEMORY_SLICES; s++)
        owner[s] = -1;
    int compute = 0;
    for (int i = 0; i < n; i++) {
        const mig_profile *p = inst[i].profile;
        int start = inst[i].start;
        *bad = i;
        if (start < 0 || start >= MIG_MEMORY_SLICES ||
            !(p->starts & (1u << start))) {
            char starts[64];
            mig_profile_starts(p, starts, sizeof starts);
            int one = (p->starts & (p->starts - 1)) == 0;
            return ty_fail(err, TY_EINVAL, NULL,
                           "instances[%d] (%s at start %d): a %s instance "
                           "can start only at memory slice%s %s",
                           i, p->name, start, p->name, one ? "" : "s", starts);
        }
        if (start + p->memory_slices > MIG_MEMORY_SLICES)
            return ty_fail(err, TY_EINVAL, NULL,
                           "instances[%d] (%s at start %d) ends past memory "
                           "slice %d",
                           i, p->name, start, MIG_MEMORY_SLICES - 1);
        for (int s = start; s < start + p->memory_slices; s++) {
            if (owner[s] >= 0) {
                const mig_placed *o = &inst[owner[s]];
                return ty_fail(err, TY_EINVAL, NULL,
                               "instances[%d] (%s at start %d, memory slices "
                               "%d-%d) overlaps instances[%d] (%s at start "
                               "%d, memory slices %d-%d)",
                               i, p->name, start, start,
                               start + p->memory_slices - 1, owner[s],
                               o->profile->name, o->start, o->start,
                               o->start + o->profile->memory_slices - 1);
            }
            owner[s] = i;
        }
        compute += p->compute_slices;
        if (compute > MIG_COMPUTE_SLICES)
            return ty_fail(err, TY_EINVAL, NULL,
                           "instances[%d] (%s at start %d) brings the compute "
                           "slices to %d, more than the GPU's %d",
                           i, p->name, start, compute, MIG_COMPUTE_SLICES);
    }
    *bad = -1;
    return TY_OK;
}

void mig_profile_from_device_name(const char *device_name, char *out, size_t n)
{
    const char *p = device_name ? strstr(device_name, " MIG ") : NULL;
    if (!p) {
        snprintf(out, n, "%s", "");
        return;
    }
    p += 5;
    size_t len = strcspn(p, " ");
    snprintf(out, n, "%.*s", (int)len, p);
}

int mig_smi_commands(int gpu, int mig_now, int mig_after,
                     const mig_placed *inst, int n, char out[][MIG_CMD_MAX])
{
    int k = 0;
    if (mig_after && !mig_now)
        snprintf(out[k++], MIG_CMD_MAX, "nvidia-smi -i %d -mig 1", gpu);
    if (mig_now) {
        snprintf(out[k++], MIG_CMD_MAX, "nvidia-smi mig -i %d -dci", gpu);
        snprintf(out[k++], MIG_CMD_MAX, "nvidia-smi mig -i %d -dgi", gpu);
    }
    if (mig_after && n > 0) {
        size_t used = (size_t)snprintf(out[k], MIG_CMD_MAX,
                                       "nvidia-smi mig -i %d -cgi ", gpu);
        for (int i = 0; i < n && used < MIG_CMD_MAX; i++)
            used += (size_t)snprintf(
                out[k] + used, MIG_CMD_MAX - used, "%s%u:%d", i ? "," : "",
                inst[i].profile->profile_id, inst[i].start);
        if (used < MIG_CMD_MAX)
            snprintf(out[k] + used, MIG_CMD_MAX - used, " -C");
        k++;
    }
    if (!mig_after && mig_now)
        snprintf(out[k++], MIG_CMD_MAX, "nvidia-smi -i %d -mig 0", gpu);
    return k;
}

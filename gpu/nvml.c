/*
 * nvml.c - the inventory's NVML source: the driver's GPUs and MIG devices,
 * read through libnvidia-ml.so.1 loaded with dlopen, so the binary has no
 * build-time or link-time dependency on the driver.
 *
 * The few NVML types and prototypes used are declared here from nvml.h
 * (versioned symbol names, as ../shared/reference/MIG.md lists them). A
 * host without the library, the driver or a GPU gets an empty inventory
 * whose reason says which; a GPU or MIG device that cannot be read is left
 * out and named in the reason. The library stays loaded (and initialised)
 * while the inventory lives, for inv_refresh's telemetry.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/inventory.h"

typedef int nvmlReturn_t;
typedef struct nvml_device_st *nvmlDevice_t;
typedef struct nvml_gpu_instance_st *nvmlGpuInstance_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_FOUND 6
#define NVML_TEMPERATURE_GPU 0
#define NVML_BUF 96
/* NVML_NVLINK_MAX_LINKS: 18 since Hopper (12 on Ampere); a link number
 * past a GPU's own count is an error, read as "not active". */
#define NVML_NVLINK_MAX_LINKS 18
#define NVML_FEATURE_ENABLED 1
#define NVML_NVLINK_DEVICE_TYPE_GPU 0
#define NVML_NVLINK_DEVICE_TYPE_SWITCH 2

typedef struct {
    unsigned long long total, free, used; /* bytes */
} nvml_memory;

typedef struct {
    unsigned int gpu, memory; /* percent */
} nvml_utilization;

/* nvmlDeviceAttributes_t: 8 unsigned ints, then memorySizeMB. */
typedef struct {
    unsigned int multiprocessor_count;
    unsigned int shared_copy_engine_count;
    unsigned int shared_decoder_count;
    unsigned int shared_encoder_count;
    unsigned int shared_jpeg_count;
    unsigned int shared_ofa_count;
    unsigned int gpu_instance_slice_count;
    unsigned int compute_instance_slice_count;
    unsigned long long memory_size_mb;
} nvml_attributes;

typedef struct {
    unsigned int start, size;
} nvml_placement;

/* nvmlPciInfo_t as the _v3 and _v2 functions below fill it: only domain,
 * bus and device are read (a GPU's PCI address, matched between its own
 * info and the far end of another GPU's link). */
typedef struct {
    char bus_id_legacy[16];
    unsigned int domain, bus, device;
    unsigned int pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci_info;

/* nvmlGpuInstanceInfo_t */
typedef struct {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profile_id;
    nvml_placement placement;
} nvml_gpu_instance_info;

struct inv_nvml {
    void *lib;
    int initialised;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvml_memory *);
    /* Optional: absent in old drivers, or only telemetry. */
    nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned int *, unsigned int *);
    nvmlReturn_t (*max_mig)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*mig_by_index)(nvmlDevice_t, unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*gi_id)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*ci_id)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*attributes)(nvmlDevice_t, nvml_attributes *);
    nvmlReturn_t (*gi_by_id)(nvmlDevice_t, unsigned int, nvmlGpuInstance_t *);
    nvmlReturn_t (*gi_info)(nvmlGpuInstance_t, nvml_gpu_instance_info *);
    nvmlReturn_t (*utilization)(nvmlDevice_t, nvml_utilization *);
    nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned int *);
    /* Optional: the NVLink topology (no NVLink: every GPU in no domain). */
    nvmlReturn_t (*pci_info)(nvmlDevice_t, nvml_pci_info *);
    nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned int, unsigned int *);
    nvmlReturn_t (*link_remote_pci)(nvmlDevice_t, unsigned int,
                                    nvml_pci_info *);
    nvmlReturn_t (*link_remote_type)(nvmlDevice_t, unsigned int,
                                     unsigned int *);
    nvmlDevice_t dev[INV_MAX_GPUS]; /* per inventory GPU */
};

static const char *nv_err(const struct inv_nvml *n, nvmlReturn_t r)
{
    const char *s = n->error_string ? n->error_string(r) : NULL;
    return s ? s : "unknown error";
}

/* Appends "; what" to reason (the first thing kept whole). */
static void note(inventory *inv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(inventory *inv, const char *fmt, ...)
{
    size_t used = strlen(inv->reason);
    if (used + 3 >= sizeof inv->reason)
        return;
    if (used) {
        memcpy(inv->reason + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(inv->reason + used, sizeof inv->reason - used, fmt, ap);
    va_end(ap);
}

/* An NVML call's result: 1 on success; else 0, with "context: function:
 * error (code)" added to the inventory's reason. */
static int nv_ok(inventory *inv, const struct inv_nvml *n, const char *ctx,
                 const char *fn, nvmlReturn_t r)
{
    if (r == NVML_SUCCESS)
        return 1;
    note(inv, "%s: %s: %s (%d)", ctx, fn, nv_err(n, r), r);
    return 0;
}

static void nvml_close(void *ctx)
{
    struct inv_nvml *n = ctx;
    if (!n)
        return;
    if (n->initialised && n->shutdown)
        n->shutdown();
    if (n->lib)
        dlclose(n->lib);
    free(n);
}

#define SYM(field, name) (*(void **)&n->field = dlsym(n->lib, name))

static void read_telemetry(struct inv_nvml *n, nvmlDevice_t d, inv_gpu *g)
{
    nvml_utilization u;
    unsigned int v;
    g->utilization_gpu_pct = g->utilization_memory_pct = INV_UNKNOWN;
    g->temperature_c = g->power_mw = INV_UNKNOWN;
    /* Not supported on MIG-enabled GPUs: left unknown, not an error. */
    if (n->utilization && n->utilization(d, &u) == NVML_SUCCESS) {
        g->utilization_gpu_pct = (int)u.gpu;
        g->utilization_memory_pct = (int)u.memory;
    }
    if (n->temperature &&
        n->temperature(d, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
        g->temperature_c = (int)v;
    if (n->power && n->power(d, &v) == NVML_SUCCESS)
        g->power_mw = (int)v;
}

/* Reads the MIG devices of GPU g (MIG on). Devices that cannot be read
 * are left out and noted. */
static ty_status read_migs(inventory *inv, struct inv_nvml *n, nvmlDevice_t d,
                           inv_gpu *g, ty_err *err)
{
    char ctx[64];
    unsigned int max = 0;
    snprintf(ctx, sizeof ctx, "GPU %d", g->index);
    if (!n->max_mig || !n->mig_by_index) {
        note(inv, "%s: this driver's NVML has no MIG device functions", ctx);
        return TY_OK;
    }
    if (!nv_ok(inv, n, ctx, "nvmlDeviceGetMaxMigDeviceCount",
               n->max_mig(d, &max)) ||
        max == 0)
        return TY_OK;
    g->migs = calloc(max, sizeof *g->migs);
    if (!g->migs)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory for the inventory");
    for (unsigned int j = 0; j < max; j++) {
        nvmlDevice_t md;
        nvmlReturn_t r = n->mig_by_index(d, j, &md);
        if (r == NVML_ERROR_NOT_FOUND)
            continue;
        snprintf(ctx, sizeof ctx, "GPU %d MIG device %u", g->index, j);
        if (r != NVML_SUCCESS) {
            note(inv, "%s: nvmlDeviceGetMigDeviceHandleByIndex: %s (%d)", ctx,
                 nv_err(n, r), r);
            continue;
        }
        inv_mig *m = &g->migs[g->nmig];
        memset(m, 0, sizeof *m);
        char name[NVML_BUF] = "";
        unsigned int gi = 0, ci = 0;
        nvml_memory mem;
        if (!nv_ok(inv, n, ctx, "nvmlDeviceGetUUID",
                   n->uuid(md, m->uuid, sizeof m->uuid)) ||
            !nv_ok(inv, n, ctx, "nvmlDeviceGetName",
                   n->name(md, name, sizeof name)) ||
            !nv_ok(inv, n, ctx, "nvmlDeviceGetMemoryInfo", n->memory(md, &mem)))
            continue;
        m->memory_bytes = mem.total;
        mig_profile_from_device_name(name, m->profile, sizeof m->profile);
        m->gpu_instance_id = m->compute_instance_id = INV_UNKNOWN;
        if (n->gi_id && n->gi_id(md, &gi) == NVML_SUCCESS)
            m->gpu_instance_id = (int)gi;
        if (n->ci_id && n->ci_id(md, &ci) == NVML_SUCCESS)
            m->compute_instance_id = (int)ci;
        nvml_attributes a;
        m->compute_slices = 0;
        if (n->attributes && n->attributes(md, &a) == NVML_SUCCESS) {
            m->compute_slices = (int)a.compute_instance_slice_count;
            if (!m->profile[0])
                snprintf(m->profile, sizeof m->profile, "%ug.%llugb",
                         a.gpu_instance_slice_count,
                         (a.memory_size_mb + 1023) / 1024);
        } else {
            note(inv, "%s: no compute slice count from the driver", ctx);
        }
        m->placement_start = m->placement_size = INV_UNKNOWN;
        nvmlGpuInstance_t gih;
        nvml_gpu_instance_info info;
        if (m->gpu_instance_id != INV_UNKNOWN && n->gi_by_id && n->gi_info &&
            n->gi_by_id(d, gi, &gih) == NVML_SUCCESS &&
            n->gi_info(gih, &info) == NVML_SUCCESS) {
            m->placement_start = (int)info.placement.start;
            m->placement_size = (int)info.placement.size;
        }
        g->nmig++;
    }
    return TY_OK;
}

/* The inventory GPU whose PCI address is p's (pci[0..n) holds theirs,
 * have[g] whether it was read); -1 when none is. */
static int gpu_at(const nvml_pci_info *pci, const int *have, int n,
                  const nvml_pci_info *p)
{
    for (int g = 0; g < n; g++)
        if (have[g] && pci[g].domain == p->domain && pci[g].bus == p->bus &&
            pci[g].device == p->device)
            return g;
    return -1;
}

/* Sets each GPU's nvlink_domain from the active NVLinks
 * (inv_domains_from_links): a link's far end is a GPU when its PCI address
 * is one of the inventory's, an NVSwitch when the driver says so. A driver
 * without these functions, or GPUs without NVLink (NOT_SUPPORTED), leave
 * every GPU in no domain; nothing here is an error. MIG devices take
 * their GPU's domain when the slots are built. */
static void read_domains(inventory *inv, struct inv_nvml *n)
{
    if (!n->pci_info || !n->link_state || !n->link_remote_pci || inv->ngpus < 2)
        return;
    nvml_pci_info pci[INV_MAX_GPUS];
    int have[INV_MAX_GPUS];
    for (int g = 0; g < inv->ngpus; g++)
        have[g] = n->pci_info(n->dev[g], &pci[g]) == NVML_SUCCESS;
    inv_link *links =
        calloc((size_t)inv->ngpus * NVML_NVLINK_MAX_LINKS, sizeof *links);
    if (!links) {
        note(inv, "out of memory reading the NVLink topology");
        return;
    }
    int nl = 0;
    for (int g = 0; g < inv->ngpus; g++) {
        for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
            unsigned int active = 0, type = NVML_NVLINK_DEVICE_TYPE_GPU;
            nvml_pci_info far;
            if (n->link_state(n->dev[g], l, &active) != NVML_SUCCESS ||
                active != NVML_FEATURE_ENABLED)
                continue;
            /* without the type function, a far end is a GPU or nothing */
            if (n->link_remote_type &&
                n->link_remote_type(n->dev[g], l, &type) != NVML_SUCCESS)
                continue;
            inv_link *k = &links[nl];
            k->gpu = g;
            k->peer = -1;
            k->to_switch = type == NVML_NVLINK_DEVICE_TYPE_SWITCH;
            if (type == NVML_NVLINK_DEVICE_TYPE_GPU &&
                n->link_remote_pci(n->dev[g], l, &far) == NVML_SUCCESS)
                k->peer = gpu_at(pci, have, inv->ngpus, &far);
            if (k->to_switch || k->peer >= 0)
                nl++;
        }
    }
    int domain[INV_MAX_GPUS];
    inv_domains_from_links(inv->ngpus, links, nl, domain);
    for (int g = 0; g < inv->ngpus; g++)
        inv->gpus[g].nvlink_domain = domain[g];
    free(links);
}

static void nvml_refresh(inventory *inv);

ty_status inv_nvml_open(const char *lib, inventory **out, ty_err *err)
{
    inventory *inv = NULL;
    ty_status s = inv_empty(INV_SOURCE_NVML, "nvml", &inv, err);
    if (s != TY_OK)
        return s;
    struct inv_nvml *n = calloc(1, sizeof *n);
    if (!n) {
        inv_destroy(inv);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory for NVML");
    }
    inv->source_ctx = n;
    inv->source_refresh = nvml_refresh;
    inv->source_close = nvml_close;
    if (!lib)
        lib = "libnvidia-ml.so.1";
    n->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        const char *why = dlerror();
        note(inv, "NVML is not available (%s): no NVIDIA driver on this host",
             why ? why : lib);
        goto empty;
    }
    SYM(init, "nvmlInit_v2");
    SYM(shutdown, "nvmlShutdown");
    SYM(error_string, "nvmlErrorString");
    SYM(count, "nvmlDeviceGetCount_v2");
    SYM(by_index, "nvmlDeviceGetHandleByIndex_v2");
    SYM(name, "nvmlDeviceGetName");
    SYM(uuid, "nvmlDeviceGetUUID");
    SYM(memory, "nvmlDeviceGetMemoryInfo");
    SYM(mig_mode, "nvmlDeviceGetMigMode");
    SYM(max_mig, "nvmlDeviceGetMaxMigDeviceCount");
    SYM(mig_by_index, "nvmlDeviceGetMigDeviceHandleByIndex");
    SYM(gi_id, "nvmlDeviceGetGpuInstanceId");
    SYM(ci_id, "nvmlDeviceGetComputeInstanceId");
    SYM(attributes, "nvmlDeviceGetAttributes_v2");
    SYM(gi_by_id, "nvmlDeviceGetGpuInstanceById");
    SYM(gi_info, "nvmlGpuInstanceGetInfo");
    SYM(utilization, "nvmlDeviceGetUtilizationRates");
    SYM(temperature, "nvmlDeviceGetTemperature");
    SYM(power, "nvmlDeviceGetPowerUsage");
    SYM(pci_info, "nvmlDeviceGetPciInfo_v3");
    SYM(link_state, "nvmlDeviceGetNvLinkState");
    SYM(link_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    SYM(link_remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
    const char *missing = !n->init       ? "nvmlInit_v2"
                          : !n->count    ? "nvmlDeviceGetCount_v2"
                          : !n->by_index ? "nvmlDeviceGetHandleByIndex_v2"
                          : !n->name     ? "nvmlDeviceGetName"
                          : !n->uuid     ? "nvmlDeviceGetUUID"
                          : !n->memory   ? "nvmlDeviceGetMemoryInfo"
                                         : NULL;
    if (missing) {
        note(inv, "%s has no %s: the NVIDIA driver is too old", lib, missing);
        goto empty;
    }
    if (!nv_ok(inv, n, "NVML", "nvmlInit_v2", n->init()))
        goto empty;
    n->initialised = 1;
    unsigned int count = 0;
    if (!nv_ok(inv, n, "NVML", "nvmlDeviceGetCount_v2", n->count(&count)))
        goto empty;
    if (count == 0) {
        note(inv, "the NVIDIA driver sees no GPUs");
        goto empty;
    }
    if (count > INV_MAX_GPUS) {
        note(inv, "the driver sees %u GPUs; only the first %d are used", count,
             INV_MAX_GPUS);
        count = INV_MAX_GPUS;
    }
    inv->gpus = calloc(count, sizeof *inv->gpus);
    if (!inv->gpus) {
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory for the inventory");
        goto fail;
    }
    for (unsigned int i = 0; i < count; i++) {
        char ctx[32];
        snprintf(ctx, sizeof ctx, "GPU %u", i);
        inv_gpu *g = &inv->gpus[inv->ngpus];
        nvmlDevice_t d;
        nvml_memory mem;
        if (!nv_ok(inv, n, ctx, "nvmlDeviceGetHandleByIndex_v2",
                   n->by_index(i, &d)) ||
            !nv_ok(inv, n, ctx, "nvmlDeviceGetName",
                   n->name(d, g->name, sizeof g->name)) ||
            !nv_ok(inv, n, ctx, "nvmlDeviceGetUUID",
                   n->uuid(d, g->uuid, sizeof g->uuid)) ||
            !nv_ok(inv, n, ctx, "nvmlDeviceGetMemoryInfo",
                   n->memory(d, &mem))) {
            free(g->migs);
            memset(g, 0, sizeof *g);
            continue;
        }
        g->index = (int)i;
        g->memory_bytes = mem.total;
        unsigned int cur = 0, pending = 0;
        /* Not supported (GPUs without MIG) means off. */
        if (n->mig_mode && n->mig_mode(d, &cur, &pending) == NVML_SUCCESS)
            g->mig_enabled = cur == 1;
        read_telemetry(n, d, g);
        if (g->mig_enabled) {
            s = read_migs(inv, n, d, g, err);
            if (s != TY_OK)
                goto fail;
        }
        n->dev[inv->ngpus] = d;
        inv->ngpus++;
    }
    read_domains(inv, n);
    s = inv_build_slots(inv, err);
    if (s != TY_OK)
        goto fail;
    *out = inv;
    return TY_OK;
empty:
    /* No library, driver or GPU: an empty inventory that says why. */
    inv->source_ctx = NULL;
    inv->source_refresh = NULL;
    inv->source_close = NULL;
    nvml_close(n);
    *out = inv;
    return TY_OK;
fail:
    inv_destroy(inv);
    return s;
}

/* inv_refresh for the NVML source. */
static void nvml_refresh(inventory *inv)
{
    struct inv_nvml *n = inv->source_ctx;
    pthread_mutex_lock(&inv->mu);
    for (int i = 0; i < inv->ngpus; i++)
        read_telemetry(n, n->dev[i], &inv->gpus[i]);
    pthread_mutex_unlock(&inv->mu);
}

/*
 * fake_nvml.c - a stand-in libnvidia-ml for test_inventory: the few NVML
 * functions gpu/nvml.c loads with dlopen, over six fake GPUs with a fixed
 * NVLink topology, so that the NVML source's topology reading runs on a
 * machine without a driver. Signatures and struct layouts as nvml.h's
 * (see the declarations in gpu/nvml.c).
 *
 * The topology (NVML_NVLINK_MAX_LINKS is 18; links not listed are
 * inactive, past a GPU's count INVALID_ARGUMENT):
 *   GPU 0 <-> GPU 1  links 0 and 1 (an NVLink bridge), seen from both ends
 *   GPU 2, GPU 3     links 0-3 to an NVSwitch
 *   GPU 4            link 0 active to a PCI device that is no GPU here;
 *                    link 1 to GPU 5 but inactive
 *   GPU 5            no NVLink (NOT_SUPPORTED)
 * so the domains are 1, 1, 2, 2, none, none.
 */
#include <stdio.h>
#include <string.h>

#define NGPUS 6
#define NLINKS 4 /* links per fake GPU */
#define OK 0
#define ERR_INVALID_ARGUMENT 2
#define ERR_NOT_SUPPORTED 3
#define TYPE_GPU 0
#define TYPE_SWITCH 2

typedef struct {
    char bus_id_legacy[16];
    unsigned int domain, bus, device;
    unsigned int pci_device_id, pci_subsystem_id;
    char bus_id[32];
} pci_info;

typedef struct {
    unsigned long long total, free, used;
} memory_info;

struct nvml_device_st {
    int index;
};

static struct nvml_device_st devs[NGPUS] = {{0}, {1}, {2}, {3}, {4}, {5}};

/* Each link: active, far end type, far end's bus (0: none). */
typedef struct {
    unsigned int active, type, bus;
} link;

static const link links[NGPUS][NLINKS] = {
    {{1, TYPE_GPU, 0x11}, {1, TYPE_GPU, 0x11}},
    {{1, TYPE_GPU, 0x10}, {1, TYPE_GPU, 0x10}},
    {{1, TYPE_SWITCH, 0},
     {1, TYPE_SWITCH, 0},
     {1, TYPE_SWITCH, 0},
     {1, TYPE_SWITCH, 0}},
    {{1, TYPE_SWITCH, 0},
     {1, TYPE_SWITCH, 0},
     {1, TYPE_SWITCH, 0},
     {1, TYPE_SWITCH, 0}},
    {{1, TYPE_GPU, 0x99}, {0, TYPE_GPU, 0x15}},
    {{0}},
};

static unsigned int bus_of(int g) { return 0x10 + (unsigned int)g; }

int nvmlInit_v2(void) { return OK; }

int nvmlShutdown(void) { return OK; }

const char *nvmlErrorString(int r)
{
    return r == ERR_NOT_SUPPORTED ? "Not Supported" : "Invalid Argument";
}

int nvmlDeviceGetCount_v2(unsigned int *n)
{
    *n = NGPUS;
    return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, struct nvml_device_st **d)
{
    if (i >= NGPUS)
        return ERR_INVALID_ARGUMENT;
    *d = &devs[i];
    return OK;
}

int nvmlDeviceGetName(struct nvml_device_st *d, char *buf, unsigned int n)
{
    (void)d;
    snprintf(buf, n, "NVIDIA H100 80GB HBM3");
    return OK;
}

int nvmlDeviceGetUUID(struct nvml_device_st *d, char *buf, unsigned int n)
{
    snprintf(buf, n, "GPU-fake-%d", d->index);
    return OK;
}

int nvmlDeviceGetMemoryInfo(struct nvml_device_st *d, memory_info *m)
{
    (void)d;
    m->total = 80ull << 30;
    m->free = m->total;
    m->used = 0;
    return OK;
}

int nvmlDeviceGetPciInfo_v3(struct nvml_device_st *d, pci_info *p)
{
    memset(p, 0, sizeof *p);
    p->bus = bus_of(d->index);
    snprintf(p->bus_id, sizeof p->bus_id, "00000000:%02X:00.0", p->bus);
    return OK;
}

/* The link's entry, or the error NVML gives for it. */
static int link_get(const struct nvml_device_st *d, unsigned int l,
                    const link **out)
{
    if (d->index == 5)
        return ERR_NOT_SUPPORTED;
    if (l >= NLINKS)
        return ERR_INVALID_ARGUMENT;
    *out = &links[d->index][l];
    return OK;
}

int nvmlDeviceGetNvLinkState(struct nvml_device_st *d, unsigned int l,
                             unsigned int *active)
{
    const link *k;
    int r = link_get(d, l, &k);
    if (r == OK)
        *active = k->active;
    return r;
}

int nvmlDeviceGetNvLinkRemoteDeviceType(struct nvml_device_st *d,
                                        unsigned int l, unsigned int *type)
{
    const link *k;
    int r = link_get(d, l, &k);
    if (r == OK)
        *type = k->type;
    return r;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(struct nvml_device_st *d,
                                        unsigned int l, pci_info *p)
{
    const link *k;
    int r = link_get(d, l, &k);
    if (r != OK)
        return r;
    memset(p, 0, sizeof *p);
    p->bus = k->bus;
    return OK;
}

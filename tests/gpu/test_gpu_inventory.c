/*
 * GPU test for the NVML inventory (label gpu): what gpu/nvml.c reads
 * through libnvidia-ml.so.1 must match `nvidia-smi -L` — every GPU's index,
 * name and UUID, and every MIG device's profile and UUID under its GPU —
 * and the slot list must hold one slot per MIG device (or per GPU with MIG
 * off). Exits 77 (skipped) without nvidia-smi, NVML or a GPU.
 *
 * nvidia-smi -L prints, per GPU and then per MIG device:
 *   GPU 0: NVIDIA H200 (UUID: GPU-0c3e...)
 *     MIG 1g.18gb     Device  0: (UUID: MIG-5d1a...)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/inventory.h"

#define MAX_LINES 1024

typedef struct {
    int is_mig;
    int gpu;                 /* the GPU a MIG line belongs to */
    char name[INV_NAME_MAX]; /* GPU name, or MIG profile */
    char uuid[INV_NAME_MAX];
} smi_line;

static int failures;

#define CHECK(cond, ...)                           \
    do {                                           \
        if (!(cond)) {                             \
            fprintf(stderr, "FAIL: " __VA_ARGS__); \
            fputc('\n', stderr);                   \
            failures++;                            \
        }                                          \
    } while (0)

/* Parses nvidia-smi -L; returns the number of lines kept, -1 when it
 * cannot run. */
static int read_smi(smi_line *out, int max)
{
    FILE *p = popen("nvidia-smi -L 2>/dev/null", "r");
    if (!p)
        return -1;
    char line[512];
    int n = 0, gpu = -1;
    while (fgets(line, sizeof line, p) && n < max) {
        char *u = strstr(line, "(UUID: ");
        if (!u)
            continue;
        smi_line *l = &out[n];
        memset(l, 0, sizeof *l);
        char *end = strchr(u, ')');
        if (!end)
            continue;
        snprintf(l->uuid, sizeof l->uuid, "%.*s", (int)(end - u - 7), u + 7);
        int idx;
        if (sscanf(line, "GPU %d:", &idx) == 1) {
            gpu = idx;
            l->gpu = idx;
            const char *name = strchr(line, ':') + 2;
            snprintf(l->name, sizeof l->name, "%.*s", (int)(u - 1 - name),
                     name);
        } else if (strstr(line, "MIG ")) {
            l->is_mig = 1;
            l->gpu = gpu;
            sscanf(strstr(line, "MIG ") + 4, "%31s", l->name);
        } else {
            continue;
        }
        n++;
    }
    int rc = pclose(p);
    return rc == 0 ? n : -1;
}

int main(void)
{
    static smi_line smi[MAX_LINES];
    int n = read_smi(smi, MAX_LINES);
    if (n <= 0) {
        printf("SKIPPED: nvidia-smi -L did not run or listed no GPU\n");
        return 77;
    }
    inventory *inv = NULL;
    ty_err err = {0};
    if (inv_nvml_open(NULL, &inv, &err) != TY_OK) {
        fprintf(stderr, "FAIL: inv_nvml_open: %s\n", err.msg);
        return 1;
    }
    if (inv->ngpus == 0) {
        printf("SKIPPED: nvidia-smi lists GPUs but NVML gave none: %s\n",
               inv->reason);
        inv_destroy(inv);
        return 77;
    }
    if (inv->reason[0])
        printf("note: %s\n", inv->reason);

    int smi_gpus = 0, smi_migs = 0;
    for (int i = 0; i < n; i++) {
        if (!smi[i].is_mig) {
            smi_gpus++;
            const inv_gpu *g = NULL;
            for (int k = 0; k < inv->ngpus; k++)
                if (inv->gpus[k].index == smi[i].gpu)
                    g = &inv->gpus[k];
            CHECK(g, "GPU %d (%s) is not in the inventory", smi[i].gpu,
                  smi[i].uuid);
            if (!g)
                continue;
            CHECK(!strcmp(g->name, smi[i].name),
                  "GPU %d: name '%s', "
                  "nvidia-smi says '%s'",
                  smi[i].gpu, g->name, smi[i].name);
            CHECK(!strcmp(g->uuid, smi[i].uuid),
                  "GPU %d: UUID %s, "
                  "nvidia-smi says %s",
                  smi[i].gpu, g->uuid, smi[i].uuid);
            CHECK(g->memory_bytes > 0, "GPU %d: no memory", smi[i].gpu);
            printf("GPU %d: %s %s, %.1f GiB, MIG %s, %d MIG devices, "
                   "%d C, %.1f W\n",
                   g->index, g->name, g->uuid,
                   (double)g->memory_bytes / (1u << 30),
                   g->mig_enabled ? "on" : "off", g->nmig, g->temperature_c,
                   g->power_mw / 1000.0);
            continue;
        }
        smi_migs++;
        const inv_mig *m = NULL;
        const inv_gpu *g = NULL;
        for (int k = 0; k < inv->ngpus; k++)
            for (int j = 0; j < inv->gpus[k].nmig; j++)
                if (!strcmp(inv->gpus[k].migs[j].uuid, smi[i].uuid)) {
                    m = &inv->gpus[k].migs[j];
                    g = &inv->gpus[k];
                }
        CHECK(m, "MIG device %s (%s) of GPU %d is not in the inventory",
              smi[i].uuid, smi[i].name, smi[i].gpu);
        if (!m)
            continue;
        CHECK(g->index == smi[i].gpu,
              "MIG device %s: under GPU %d, "
              "nvidia-smi says GPU %d",
              m->uuid, g->index, smi[i].gpu);
        CHECK(g->mig_enabled, "MIG device %s on GPU %d, whose MIG is off",
              m->uuid, g->index);
        CHECK(!strcmp(m->profile, smi[i].name),
              "MIG device %s: profile "
              "'%s', nvidia-smi says '%s'",
              m->uuid, m->profile, smi[i].name);
        CHECK(m->compute_slices >= 1 && m->compute_slices <= 7,
              "MIG device %s: %d compute slices", m->uuid, m->compute_slices);
        CHECK(m->memory_bytes > 0, "MIG device %s: no memory", m->uuid);
        printf("  %s %s: GI %d CI %d, %d compute slices, %.1f GiB, "
               "placement %d+%d\n",
               m->profile, m->uuid, m->gpu_instance_id, m->compute_instance_id,
               m->compute_slices, (double)m->memory_bytes / (1u << 30),
               m->placement_start, m->placement_size);
    }
    int inv_migs = 0, want_slots = 0;
    for (int k = 0; k < inv->ngpus; k++) {
        inv_migs += inv->gpus[k].nmig;
        want_slots += inv->gpus[k].mig_enabled ? inv->gpus[k].nmig : 1;
    }
    CHECK(inv->ngpus == smi_gpus, "%d GPUs, nvidia-smi lists %d", inv->ngpus,
          smi_gpus);
    CHECK(inv_migs == smi_migs, "%d MIG devices, nvidia-smi lists %d", inv_migs,
          smi_migs);
    CHECK(inv->nslots == want_slots, "%d slots, expected %d", inv->nslots,
          want_slots);
    inv_destroy(inv);
    if (failures) {
        fprintf(stderr, "%d mismatches with nvidia-smi -L\n", failures);
        return 1;
    }
    printf("the NVML inventory matches nvidia-smi -L (%d GPUs, %d MIG "
           "devices)\n",
           smi_gpus, smi_migs);
    return 0;
}

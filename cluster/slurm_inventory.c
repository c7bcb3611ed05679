/*
 * slurm_inventory.c - a cluster's GRES as an inventory (see
 * slurm_inventory.h).
 *
 * A GRES string is entries separated by commas outside parentheses:
 *   name[:type][:count][(suffix)]   "gpu:1g.18gb:7", "gpu:2",
 *                                   "gpu:h100:4(S:0-1)", "gpu:a100:2(IDX:0,1)"
 * Only entries named "gpu" become GPUs; others ("mps:100", "shard:8") are
 * Slurm's own business and are skipped. "", "(null)" and "N/A" are no GRES.
 * A malformed gpu entry (no count where one is expected, a count that is
 * not a number or over SLI_MAX_COUNT, an unclosed parenthesis, an empty
 * entry) is TY_EINVAL naming the node: the inventory is what quotas count,
 * so it is better refused than guessed.
 */
#include "cluster/slurm_inventory.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLI_MAX_COUNT 1024  /* GPUs of one type on one node */
#define SLI_MAX_SLOTS 65536 /* in the whole inventory */

/* One gpu entry. type "" when the entry names none. */
typedef struct {
    char type[MIG_PROFILE_NAME_MAX];
    int count;
} sli_entry;

/* Whether type is a MIG profile name, <n>g.<m>gb (n 1-7); its compute
 * slices and memory in GiB. */
static int mig_profile_parse(const char *type, int *slices, int *gib)
{
    int n = 0, m = 0, used = 0;
    if (sscanf(type, "%dg.%dgb%n", &n, &m, &used) != 2 ||
        (size_t)used != strlen(type))
        return 0;
    if (n < 1 || n > MIG_COMPUTE_SLICES || m < 1 || m > 4096)
        return 0;
    if (!isdigit((unsigned char)type[0]))
        return 0;
    *slices = n;
    *gib = m;
    return 1;
}

static int all_digits(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

/* Parses one entry e (len bytes, no commas at depth 0). *is_gpu 0 for
 * another GRES name. */
static ty_status entry_parse(const char *node, const char *e, size_t len,
                             int *is_gpu, sli_entry *out, ty_err *err)
{
    *is_gpu = 0;
    memset(out, 0, sizeof *out);
    const char *paren = memchr(e, '(', len);
    size_t body = paren ? (size_t)(paren - e) : len;
    if (paren && e[len - 1] != ')')
        return ty_fail(err, TY_EINVAL, "gres",
                       "node %s: GRES entry '%.*s' has an unclosed '('", node,
                       (int)len, e);
    if (!paren && memchr(e, ')', len))
        return ty_fail(err, TY_EINVAL, "gres",
                       "node %s: GRES entry '%.*s' has a ')' without '('",
                       node, (int)len, e);
    /* name[:type][:count] */
    const char *f[4];
    size_t fl[4];
    int nf = 0;
    size_t i = 0;
    while (nf < 4) {
        size_t start = i;
        while (i < body && e[i] != ':')
            i++;
        f[nf] = e + start;
        fl[nf] = i - start;
        nf++;
        if (i >= body)
            break;
        i++; /* the ':' */
    }
    if (i < body || nf > 3)
        return ty_fail(err, TY_EINVAL, "gres",
                       "node %s: GRES entry '%.*s' has more than "
                       "name:type:count",
                       node, (int)len, e);
    if (fl[0] == 0)
        return ty_fail(err, TY_EINVAL, "gres",
                       "node %s: GRES entry '%.*s' has no name", node,
                       (int)len, e);
    if (!(fl[0] == 3 && !strncmp(f[0], "gpu", 3)))
        return TY_OK; /* another GRES: not ours */
    *is_gpu = 1;
    const char *type = "", *count = NULL;
    size_t tl = 0, cl = 0;
    if (nf == 2) {
        if (all_digits(f[1], fl[1])) {
            count = f[1];
            cl = fl[1];
        } else {
            type = f[1];
            tl = fl[1];
        }
    } else if (nf == 3) {
        type = f[1];
        tl = fl[1];
        count = f[2];
        cl = fl[2];
    }
    if ((nf >= 2 && tl == 0 && !count) || (nf == 3 && tl == 0))
        return ty_fail(err, TY_EINVAL, "gres",
                       "node %s: GRES entry '%.*s' has an empty type", node,
                       (int)len, e);
    if (tl >= sizeof out->type)
        return ty_fail(err, TY_EINVAL, "gres",
                       "node %s: GRES type '%.*s' is over %zu characters",
                       node, (int)tl, type, sizeof out->type - 1);
    for (size_t k = 0; k < tl; k++)
        if (!isalnum((unsigned char)type[k]) && !strchr("._-", type[k]))
            return ty_fail(err, TY_EINVAL, "gres",
                           "node %s: GRES type '%.*s' has a character other "
                           "than A-Z a-z 0-9 . _ -",
                           node, (int)tl, type);
    memcpy(out->type, type, tl);
    out->type[tl] = '\0';
    if (!count) {
        out->count = 1;
        return TY_OK;
    }
    if (!all_digits(count, cl) || cl > 5 || atoi(count) > SLI_MAX_COUNT)
        return ty_fail(err, TY_EINVAL, "gres",
                       "node %s: GRES entry '%.*s': the count must be a "
                       "whole number up to %d",
                       node, (int)len, e, SLI_MAX_COUNT);
    out->count = atoi(count);
    return TY_OK;
}

/* Appends n zeroed GPUs to inv (capacity in *cap). */
static ty_status gpus_add(inventory *inv, int *cap, int n, inv_gpu **first,
                          ty_err *err)
{
    if (inv->ngpus + n > *cap) {
        int nc = *cap ? *cap : 8;
        while (nc < inv->ngpus + n)
            nc *= 2;
        inv_gpu *g = realloc(inv->gpus, (size_t)nc * sizeof *g);
        if (!g)
            return ty_fail(err, TY_ENOMEM, NULL,
                           "out of memory for the inventory");
        inv->gpus = g;
        *cap = nc;
    }
    memset(&inv->gpus[inv->ngpus], 0, (size_t)n * sizeof *inv->gpus);
    *first = &inv->gpus[inv->ngpus];
    for (int i = 0; i < n; i++) {
        inv_gpu *g = &inv->gpus[inv->ngpus + i];
        g->index = inv->ngpus + i;
        g->utilization_gpu_pct = INV_UNKNOWN;
        g->utilization_memory_pct = INV_UNKNOWN;
        g->temperature_c = INV_UNKNOWN;
        g->power_mw = INV_UNKNOWN;
    }
    inv->ngpus += n;
    return TY_OK;
}

static ty_status node_add(inventory *inv, int *cap, int *slots,
                          const slurm_node *node, ty_err *err)
{
    const char *g = node->gres;
    if (!*g || !strcmp(g, "(null)") || !strcmp(g, "N/A"))
        return TY_OK;
    int whole = 0; /* this node's whole GPUs so far: their uuid index */
    while (1) {
        size_t len = 0;
        int depth = 0;
        while (g[len] && !(g[len] == ',' && depth == 0)) {
            depth += g[len] == '(' ? 1 : g[len] == ')' ? -1 : 0;
            len++;
        }
        if (len == 0)
            return ty_fail(err, TY_EINVAL, "gres",
                           "node %s: an empty GRES entry in '%s'", node->name,
                           node->gres);
        int is_gpu = 0;
        sli_entry en;
        ty_status s = entry_parse(node->name, g, len, &is_gpu, &en, err);
        if (s != TY_OK)
            return s;
        if (is_gpu && en.count > 0) {
            if (*slots + en.count > SLI_MAX_SLOTS)
                return ty_fail(err, TY_EINVAL, "gres",
                               "over %d GPUs and MIG devices in the cluster",
                               SLI_MAX_SLOTS);
            *slots += en.count;
            int slices = 0, gib = 0;
            inv_gpu *gpu = NULL;
            if (mig_profile_parse(en.type, &slices, &gib)) {
                /* One GPU holding the node's devices of this profile. */
                s = gpus_add(inv, cap, 1, &gpu, err);
                if (s != TY_OK)
                    return s;
                gpu->mig_enabled = 1;
                snprintf(gpu->name, sizeof gpu->name, "%.40s MIG %s",
                         node->name, en.type);
                snprintf(gpu->uuid, sizeof gpu->uuid, "slurm:%.60s:%s",
                         node->name, en.type);
                gpu->migs = calloc((size_t)en.count, sizeof *gpu->migs);
                if (!gpu->migs)
                    return ty_fail(err, TY_ENOMEM, NULL,
                                   "out of memory for the inventory");
                gpu->nmig = en.count;
                for (int i = 0; i < en.count; i++) {
                    inv_mig *m = &gpu->migs[i];
                    snprintf(m->uuid, sizeof m->uuid, "slurm:%.60s:%s:%d",
                             node->name, en.type, i);
                    snprintf(m->profile, sizeof m->profile, "%s", en.type);
                    m->gpu_instance_id = i;
                    m->compute_instance_id = 0;
                    m->compute_slices = slices;
                    m->memory_bytes = (uint64_t)gib << 30;
                    m->placement_start = INV_UNKNOWN;
                    m->placement_size = INV_UNKNOWN;
                    gpu->memory_bytes += m->memory_bytes;
                }
            } else {
                s = gpus_add(inv, cap, en.count, &gpu, err);
                if (s != TY_OK)
                    return s;
                for (int i = 0; i < en.count; i++, whole++) {
                    inv_gpu *w = &gpu[i];
                    snprintf(w->name, sizeof w->name, "%s",
                             en.type[0] ? en.type : "GPU");
                    snprintf(w->model, sizeof w->model, "%s", en.type);
                    snprintf(w->uuid, sizeof w->uuid, "slurm:%.60s:gpu:%d",
                             node->name, whole);
                }
            }
        }
        g += len;
        if (!*g)
            break;
        g++; /* the ',' */
        if (!*g)
            return ty_fail(err, TY_EINVAL, "gres",
                           "node %s: GRES '%s' ends with a comma", node->name,
                           node->gres);
    }
    return TY_OK;
}

ty_status slurm_inventory_build(const slurm_node *nodes, size_t n,
                                const char *label, inventory **out,
                                ty_err *err)
{
    *out = NULL;
    char src[PATH_MAX + 8];
    label = label ? label : "";
    snprintf(src, sizeof src, "%s%s", strncmp(label, "slurm:", 6) ? "slurm:"
                                                                   : "",
             label);
    inventory *inv = NULL;
    ty_status s = inv_empty(INV_SOURCE_SLURM, src, &inv, err);
    if (s != TY_OK)
        return s;
    int cap = 0, slots = 0;
    for (size_t i = 0; i < n; i++) {
        int first = inv->ngpus;
        s = node_add(inv, &cap, &slots, &nodes[i], err);
        if (s != TY_OK)
            goto fail;
        /* the scheduler keeps a gang's members on one node */
        for (int g = first; g < inv->ngpus; g++)
            inv->gpus[g].node = (int)i;
    }
    s = inv_build_slots(inv, err);
    if (s != TY_OK)
        goto fail;
    *out = inv;
    return TY_OK;
fail:
    inv_destroy(inv);
    return s;
}

void slurm_gres_for_slot(const inv_slot *s, char *buf, size_t n)
{
    if (s->kind == INV_SLOT_MIG && s->profile)
        snprintf(buf, n, "gpu:%s:1", s->profile);
    else
        snprintf(buf, n, "gpu:1");
}

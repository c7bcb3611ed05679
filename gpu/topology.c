/*
 * topology.c - a host's GPUs grouped into interconnect domains from the
 * NVLinks NVML reports (inv_domains_from_links, see inventory.h).
 *
 * A domain is a set of GPUs that reach each other over NVLink, directly or
 * through other GPUs of the set, or through the host's NVSwitches. It is
 * what a data-parallel gang wants its members inside: NCCL's rings and
 * trees run over NVLink there instead of PCIe. Pure: nvml.c gathers the
 * links, the unit tests give fake tables.
 *
 * Kept out on purpose: PCIe proximity (nvmlDeviceGetTopologyCommonAncestor,
 * NVML_TOPOLOGY_SINGLE and the like). GPUs under one PCIe switch are
 * closer than GPUs across sockets, but their collectives still run at PCIe
 * speed; calling them a domain would make the scheduler prefer them as if
 * they were an NVLink island, and its one level of preference has no room
 * for a weaker kind.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu/inventory.h"

/* The root of x, halving the path on the way (parent[] is the forest). */
static int uf_find(int *parent, int x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

/* Joins the sets of a and b under the lower root, so that a set's root is
 * its lowest GPU. */
static void uf_union(int *parent, int a, int b)
{
    int ra = uf_find(parent, a), rb = uf_find(parent, b);
    if (ra < rb)
        parent[rb] = ra;
    else if (rb < ra)
        parent[ra] = rb;
}

void inv_domains_from_links(int ngpus, const inv_link *links, int nlinks,
                            int *domain)
{
    if (ngpus <= 0)
        return;
    if (ngpus > INV_MAX_GPUS)
        ngpus = INV_MAX_GPUS;
    int parent[INV_MAX_GPUS], number[INV_MAX_GPUS];
    int first_switched = -1; /* the first GPU seen on an NVSwitch */
    for (int g = 0; g < ngpus; g++) {
        parent[g] = g;
        number[g] = 0;
    }
    for (int i = 0; i < nlinks; i++) {
        const inv_link *l = &links[i];
        if (l->gpu < 0 || l->gpu >= ngpus)
            continue;
        if (l->to_switch) {
            if (first_switched < 0)
                first_switched = l->gpu;
            else
                uf_union(parent, first_switched, l->gpu);
            continue;
        }
        /* a link to itself (a loopback) joins nothing */
        if (l->peer < 0 || l->peer >= ngpus || l->peer == l->gpu)
            continue;
        uf_union(parent, l->gpu, l->peer);
    }
    /* number the sets with two or more GPUs by their lowest GPU: a set's
     * root is its lowest GPU, so walking g upward meets roots in order */
    int size[INV_MAX_GPUS] = {0}, next = 1;
    for (int g = 0; g < ngpus; g++)
        size[uf_find(parent, g)]++;
    for (int g = 0; g < ngpus; g++) {
        int r = uf_find(parent, g);
        if (r == g && size[g] >= 2)
            number[g] = next++;
        domain[g] = size[r] >= 2 ? number[r] : 0; /* alone: none */
    }
}

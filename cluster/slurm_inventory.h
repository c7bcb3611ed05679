/*
 * slurm_inventory.h - a cluster's GPUs, as slurmrestd's /nodes lists them
 * in GRES, turned into the inventory the scheduler places jobs on
 * (gpu/inventory.h), so that quotas and fair share count the cluster's
 * GPUs and MIG slices.
 *
 * Each node's GRES "gpu:<type>:<count>" (or "gpu:<count>", entries
 * separated by commas, "(S:0-1)" socket suffixes and "gpu:type:count(IDX:..)"
 * forms accepted) becomes one inventory GPU per node and type:
 *   a type that is a MIG profile name ("1g.18gb", "3g.71gb", "7g.141gb":
 *   <n>g.<m>gb) - a GPU with MIG on and <count> MIG devices of that profile
 *   (compute slices n, memory m GiB); a slot per device, whose uuid is
 *   "slurm:<node>:<type>:<i>" and whose profile is the type;
 *   any other type, or none - <count> whole GPUs (MIG off, 7 compute
 *   slices), uuid "slurm:<node>:gpu:<i>", model the type.
 * Each GPU's node is its node's place in the list (0, 1, ...), so that the
 * scheduler keeps a gang on one node; no GPU has an NVLink domain (GRES
 * does not say).
 * The source is INV_SOURCE_SLURM, its label the caller's ("slurm"). Nodes whose
 * state says down or drained count all the same (Slurm decides; the
 * scheduler only bounds how many run at once).
 */
#ifndef TY_SLURM_INVENTORY_H
#define TY_SLURM_INVENTORY_H

#include "cluster/slurmrest.h"
#include "common/ty.h"
#include "gpu/inventory.h"

/* Parses one GRES string into the inventory entries above (appends to
 * inv); TY_EINVAL naming the node for a malformed entry. */
ty_status slurm_inventory_build(const slurm_node *nodes, size_t n,
                                const char *label, inventory **out,
                                ty_err *err);

/* The gres a job on slot s asks Slurm for: "gpu:<profile>:1" for a MIG
 * slot, "gpu:1" for a whole GPU. */
void slurm_gres_for_slot(const inv_slot *s, char *buf, size_t n);

#endif

/*
 * open.c - the inventory a --devices value names: NVML (nvml.c), a
 * simulated layout (the sim part of inventory.c) or none. Above the sources,
 * which fill an inventory through the builder of inventory.h and never call
 * back up.
 */
#include <string.h>

#include "gpu/inventory.h"

ty_status inv_open(const char *spec, inventory **out, ty_err *err)
{
    *out = NULL;
    if (!spec || !strcmp(spec, "auto") || !strcmp(spec, "nvml"))
        return inv_nvml_open(NULL, out, err);
    if (!strcmp(spec, "none"))
        return inv_empty(INV_SOURCE_NONE, "none", out, err);
    if (!strncmp(spec, "sim:", 4) && spec[4])
        return inv_sim_load(spec + 4, out, err);
    return ty_fail(err, TY_EINVAL, "--devices",
                   "--devices %s: expected auto, none or sim:<file.json>",
                   spec);
}

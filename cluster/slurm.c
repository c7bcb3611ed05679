/*
 * slurm.c - Slurm's job state names (see slurm.h): one table of names
 * indexed by the enum, checked at compile time to have a name for every
 * value.
 */
#include "cluster/slurm.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "common/ty.h"

static const char *const state_names[] = {
    [SLURM_ST_UNKNOWN] = "UNKNOWN",
    [SLURM_ST_PENDING] = "PENDING",
    [SLURM_ST_RUNNING] = "RUNNING",
    [SLURM_ST_SUSPENDED] = "SUSPENDED",
    [SLURM_ST_COMPLETING] = "COMPLETING",
    [SLURM_ST_COMPLETED] = "COMPLETED",
    [SLURM_ST_CANCELLED] = "CANCELLED",
    [SLURM_ST_FAILED] = "FAILED",
    [SLURM_ST_TIMEOUT] = "TIMEOUT",
    [SLURM_ST_NODE_FAIL] = "NODE_FAIL",
    [SLURM_ST_PREEMPTED] = "PREEMPTED",
    [SLURM_ST_BOOT_FAIL] = "BOOT_FAIL",
    [SLURM_ST_DEADLINE] = "DEADLINE",
    [SLURM_ST_OUT_OF_MEMORY] = "OUT_OF_MEMORY",
};
_Static_assert(TY_ARRAY_LEN(state_names) == SLURM_ST_OUT_OF_MEMORY + 1,
               "a name for every slurm_state");

const char *slurm_state_name(slurm_state st)
{
    if ((int)st < 0 || (size_t)st >= TY_ARRAY_LEN(state_names))
        return "UNKNOWN";
    return state_names[st];
}

int slurm_state_terminal(slurm_state st) { return st >= SLURM_ST_COMPLETED; }

slurm_state slurm_state_parse(const char *name)
{
    if (!name)
        return SLURM_ST_UNKNOWN;
    size_t n = strcspn(name, "+ ");
    for (size_t i = 1; i < TY_ARRAY_LEN(state_names); i++)
        if (strlen(state_names[i]) == n && !strncmp(name, state_names[i], n))
            return (slurm_state)i;
    return SLURM_ST_UNKNOWN;
}

/* Whether text (any case) holds one of the words that keep a node from
 * taking jobs. */
static int has_blocking_flag(const char *text)
{
    static const char *const words[] = {
        "DRAIN", "NOT_RESPONDING", "FAIL", "POWER", "MAINT", "REBOOT", NULL};
    char up[256];
    size_t n = 0;
    for (; text && text[n] && n < sizeof up - 1; n++)
        up[n] = (char)toupper((unsigned char)text[n]);
    up[n] = '\0';
    for (int i = 0; words[i]; i++)
        if (strstr(up, words[i]))
            return 1;
    return 0;
}

int slurm_node_up(const char *state, const char *flags)
{
    static const char *const up_states[] = {"idle", "mixed", "allocated",
                                            "completing", NULL};
    if (!state)
        return 0;
    size_t n = strcspn(state, "+*");
    if (state[n] == '*') /* sinfo's "idle*": not responding */
        return 0;
    int up = 0;
    for (int i = 0; up_states[i] && !up; i++)
        up = strlen(up_states[i]) == n && !strncasecmp(state, up_states[i], n);
    return up && !has_blocking_flag(state + n) && !has_blocking_flag(flags);
}

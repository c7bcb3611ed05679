/*
 * fuzz_last_event_id - api/events.c's Last-Event-ID parsing: accepted
 * values are decimal ids within EV_ID_MAX that print back to the header
 * (less leading zeros).
 */
#include <inttypes.h>
#include <stdint.h>

#include "api/api.h"
#include "events/hub.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    char *v = fz_strndup(d, size);
    uint64_t id = 7;
    if (api_parse_last_event_id(v, &id)) {
        if (id > EV_ID_MAX)
            abort();
        const char *p = v;
        while (*p == '0' && p[1])
            p++;
        char back[32];
        snprintf(back, sizeof back, "%" PRIu64, id);
        if (strcmp(back, p) != 0)
            abort();
    }
    free(v);
    return 0;
}

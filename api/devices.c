/* devices.c - GET /v1/devices: the GPUs, their MIG slices and who holds
 * them, as the caller may see it (inv_slot_holder_json: the admin sees
 * every holder, a tenant its own jobs, and of another tenant's slices only
 * that they are held). */
#include "api/api.h"

#include "gpu/inventory.h"

void api_devices_list(api_ctx *app, http_req *r)
{
    const store_key *key = http_req_key(r);
    inv_viewer viewer = {.tenant_id = key->tenant_id,
                         .is_admin = key->is_admin};
    json_t *doc = NULL;
    if (app->inventory) {
        doc = inv_to_json(app->inventory, &viewer);
    } else {
        /* A server made without an inventory (tests): a CPU-only host. */
        doc = json_pack("{s:s, s:n, s:[]}", "source", "none", "reason", "gpus");
    }
    if (!doc) {
        http_reply_problem(r, 503, NULL, "out of memory listing the devices");
        return;
    }
    http_reply_json(r, 200, doc);
}

/* routes.c - the routing table: every endpoint of the API in one place. */
#include "api/api.h"
#include "api/tenants.h"
#include "api/web.h"

#define PUB ROUTE_PUBLIC
#define KEY ROUTE_KEY
#define ADMIN ROUTE_ADMIN
/* The remote worker protocol: the attempt's token, checked from the
 * headers by api_worker_auth (http_server_opts.token_check) before any
 * body is read. */
#define WORKER ROUTE_TOKEN
#define NOBODY ROUTE_BODY_NONE
#define JSON ROUTE_BODY_JSON
#define RAW ROUTE_BODY_JSON_RAW /* big numbers: decoded by the handler */
#define UPLOAD ROUTE_BODY_UPLOAD
#define TENSOR ROUTE_BODY_TENSOR /* KServe v2: JSON or binary, raw */

/* One endpoint per line, so the table reads as a list (clang-format off). */
/* clang-format off */
const route api_routes[] = {
    {HTTP_GET, "/healthz", "healthz", PUB, NOBODY, api_healthz},
    {HTTP_GET, "/readyz", "readyz", PUB, NOBODY, api_readyz},
    {HTTP_GET, "/openapi.yaml", "openapi", PUB, NOBODY, api_openapi},

    {HTTP_POST, "/v1/datasets", "datasets.create", KEY, UPLOAD, api_datasets_create},
    {HTTP_GET, "/v1/datasets", "datasets.list", KEY, NOBODY, api_datasets_list},
    {HTTP_GET, "/v1/datasets/{id}", "datasets.get", KEY, NOBODY, api_datasets_get},
    {HTTP_DELETE, "/v1/datasets/{id}", "datasets.delete", KEY, NOBODY, api_datasets_delete},

    {HTTP_POST, "/v1/jobs", "jobs.create", KEY, JSON, api_jobs_create},
    {HTTP_GET, "/v1/jobs", "jobs.list", KEY, NOBODY, api_jobs_list},
    {HTTP_GET, "/v1/jobs/{id}", "jobs.get", KEY, NOBODY, api_jobs_get},
    {HTTP_GET, "/v1/jobs/{id}/metrics", "jobs.metrics", KEY, NOBODY, api_jobs_metrics},
    {HTTP_GET, "/v1/jobs/{id}/curves", "jobs.curves", KEY, NOBODY, api_jobs_curves},
    {HTTP_POST, "/v1/jobs/{id}/cancel", "jobs.cancel", KEY, NOBODY, api_jobs_cancel},

    {HTTP_POST, "/v1/models", "models.create", KEY, UPLOAD, api_models_create},
    {HTTP_GET, "/v1/models", "models.list", KEY, NOBODY, api_models_list},
    {HTTP_GET, "/v1/models/{id}", "models.get", KEY, NOBODY, api_models_get},
    {HTTP_DELETE, "/v1/models/{id}", "models.delete", KEY, NOBODY, api_models_delete},
    {HTTP_GET, "/v1/models/{id}/weights", "models.weights", KEY, NOBODY, api_models_weights},
    {HTTP_POST, "/v1/models/{id}/predict", "models.predict", KEY, RAW, api_models_predict},
    {HTTP_POST, "/v1/models/{id}/evaluate", "models.evaluate", KEY, JSON, api_models_evaluate},
    {HTTP_POST, "/v1/models/{id}/transform", "models.transform", KEY, JSON, api_models_transform},
    {HTTP_POST, "/v1/models/{id}/tokenize", "models.tokenize", KEY, JSON, api_models_tokenize},
    {HTTP_POST, "/v1/models/{id}/detokenize", "models.detokenize", KEY, JSON, api_models_detokenize},

    {HTTP_POST, "/v1/deployments", "deployments.create", KEY, JSON, api_deployments_create},
    {HTTP_GET, "/v1/deployments", "deployments.list", KEY, NOBODY, api_deployments_list},
    {HTTP_GET, "/v1/deployments/{id}", "deployments.get", KEY, NOBODY, api_deployments_get},
    {HTTP_PATCH, "/v1/deployments/{id}", "deployments.update", KEY, JSON, api_deployments_update},
    {HTTP_DELETE, "/v1/deployments/{id}", "deployments.delete", KEY, NOBODY, api_deployments_delete},

    /* The remote worker protocol: the attempt's token, not an API key. */
    {HTTP_GET, "/v1/worker/jobs/{id}", "worker.job", WORKER, NOBODY, api_worker_job},
    {HTTP_GET, "/v1/worker/jobs/{id}/blobs/{sha256}", "worker.blob", WORKER, NOBODY, api_worker_blob},
    {HTTP_GET, "/v1/worker/jobs/{id}/checkpoint", "worker.checkpoint", WORKER, NOBODY, api_worker_checkpoint_get},
    {HTTP_POST, "/v1/worker/jobs/{id}/checkpoint", "worker.checkpoint_upload", WORKER, UPLOAD, api_worker_checkpoint_put},
    {HTTP_POST, "/v1/worker/jobs/{id}/model", "worker.model", WORKER, UPLOAD, api_worker_model},
    {HTTP_POST, "/v1/worker/jobs/{id}/log", "worker.log", WORKER, UPLOAD, api_worker_log},
    {HTTP_POST, "/v1/worker/jobs/{id}/events", "worker.events", WORKER, JSON, api_worker_events},

    {HTTP_GET, "/v2", "kserve.server", KEY, NOBODY, api_kserve_server},
    {HTTP_GET, "/v2/health/live", "kserve.live", KEY, NOBODY, api_kserve_live},
    {HTTP_GET, "/v2/health/ready", "kserve.ready", KEY, NOBODY, api_kserve_ready},
    {HTTP_GET, "/v2/models/stats", "kserve.stats_all", KEY, NOBODY, api_kserve_stats},
    {HTTP_GET, "/v2/models/{name}", "kserve.model", KEY, NOBODY, api_kserve_model},
    {HTTP_GET, "/v2/models/{name}/versions/{version}", "kserve.model_version", KEY, NOBODY, api_kserve_model},
    {HTTP_GET, "/v2/models/{name}/ready", "kserve.model_ready", KEY, NOBODY, api_kserve_model_ready},
    {HTTP_GET, "/v2/models/{name}/versions/{version}/ready", "kserve.model_version_ready", KEY, NOBODY, api_kserve_model_ready},
    {HTTP_POST, "/v2/models/{name}/infer", "kserve.infer", KEY, TENSOR, api_kserve_infer},
    {HTTP_POST, "/v2/models/{name}/versions/{version}/infer", "kserve.version_infer", KEY, TENSOR, api_kserve_infer},
    {HTTP_POST, "/v2/models/{name}/generate", "kserve.generate", KEY, JSON, api_kserve_generate},
    {HTTP_POST, "/v2/models/{name}/generate_stream", "kserve.generate_stream", KEY, JSON, api_kserve_generate_stream},
    {HTTP_POST, "/openai/v1/completions", "openai.completions", KEY, JSON, api_openai_completions},
    {HTTP_POST, "/openai/v1/chat/completions", "openai.chat", KEY, JSON, api_openai_chat},
    {HTTP_GET, "/openai/v1/models", "openai.models", KEY, NOBODY, api_openai_models},
    {HTTP_GET, "/v2/models/{name}/config", "kserve.config", KEY, NOBODY, api_kserve_config},
    {HTTP_GET, "/v2/models/{name}/versions/{version}/config", "kserve.version_config", KEY, NOBODY, api_kserve_config},
    {HTTP_GET, "/v2/models/{name}/stats", "kserve.stats", KEY, NOBODY, api_kserve_stats},
    {HTTP_GET, "/v2/models/{name}/versions/{version}/stats", "kserve.version_stats", KEY, NOBODY, api_kserve_stats},
    {HTTP_POST, "/v2/repository/index", "kserve.repository_index", KEY, TENSOR, api_kserve_index},
    {HTTP_POST, "/v2/repository/models/{name}/load", "kserve.repository_load", KEY, TENSOR, api_kserve_load},
    {HTTP_POST, "/v2/repository/models/{name}/unload", "kserve.repository_unload", KEY, TENSOR, api_kserve_unsupported},
    {HTTP_GET, "/v2/models/{name}/trace/setting", "kserve.model_trace", KEY, NOBODY, api_kserve_unsupported},
    {HTTP_POST, "/v2/models/{name}/trace/setting", "kserve.model_trace_update", KEY, TENSOR, api_kserve_unsupported},
    {HTTP_GET, "/v2/trace/setting", "kserve.trace", KEY, NOBODY, api_kserve_unsupported},
    {HTTP_POST, "/v2/trace/setting", "kserve.trace_update", KEY, TENSOR, api_kserve_unsupported},
    {HTTP_GET, "/v2/logging", "kserve.logging", KEY, NOBODY, api_kserve_unsupported},
    {HTTP_POST, "/v2/logging", "kserve.logging_update", KEY, TENSOR, api_kserve_unsupported},
    {HTTP_GET, "/v2/systemsharedmemory/status", "kserve.shm_status", KEY, NOBODY, api_kserve_unsupported},
    {HTTP_GET, "/v2/systemsharedmemory/region/{region}/status", "kserve.shm_region_status", KEY, NOBODY, api_kserve_unsupported},
    {HTTP_POST, "/v2/systemsharedmemory/region/{region}/register", "kserve.shm_register", KEY, TENSOR, api_kserve_unsupported},
    {HTTP_POST, "/v2/systemsharedmemory/unregister", "kserve.shm_unregister_all", KEY, TENSOR, api_kserve_unsupported},
    {HTTP_POST, "/v2/systemsharedmemory/region/{region}/unregister", "kserve.shm_unregister", KEY, TENSOR, api_kserve_unsupported},
    {HTTP_GET, "/v2/cudasharedmemory/status", "kserve.cudashm_status", KEY, NOBODY, api_kserve_unsupported},
    {HTTP_GET, "/v2/cudasharedmemory/region/{region}/status", "kserve.cudashm_region_status", KEY, NOBODY, api_kserve_unsupported},
    {HTTP_POST, "/v2/cudasharedmemory/region/{region}/register", "kserve.cudashm_register", KEY, TENSOR, api_kserve_unsupported},
    {HTTP_POST, "/v2/cudasharedmemory/unregister", "kserve.cudashm_unregister_all", KEY, TENSOR, api_kserve_unsupported},
    {HTTP_POST, "/v2/cudasharedmemory/region/{region}/unregister", "kserve.cudashm_unregister", KEY, TENSOR, api_kserve_unsupported},

    {HTTP_GET, "/v1/devices", "devices.list", KEY, NOBODY, api_devices_list},
    {HTTP_POST, "/v1/admin/mig-layout", "admin.mig_layout.apply", ADMIN, JSON, api_mig_layout_apply},
    {HTTP_GET, "/v1/admin/mig-layout", "admin.mig_layout.list", ADMIN, NOBODY, api_mig_layout_list},
    {HTTP_GET, "/v1/admin/mig-layout/{gpu}", "admin.mig_layout.get", ADMIN, NOBODY, api_mig_layout_get},
    {HTTP_POST, "/v1/tenants", "tenants.create", ADMIN, JSON, api_tenants_create},
    {HTTP_GET, "/v1/tenants", "tenants.list", ADMIN, NOBODY, api_tenants_list},
    {HTTP_GET, "/v1/tenants/{id}", "tenants.get", KEY, NOBODY, api_tenants_get},
    {HTTP_PATCH, "/v1/tenants/{id}", "tenants.update", ADMIN, JSON, api_tenants_update},
    {HTTP_POST, "/v1/tenants/{id}/keys", "tenants.keys.create", ADMIN, NOBODY, api_tenant_keys_create},
    {HTTP_GET, "/v1/tenants/{id}/keys", "tenants.keys.list", ADMIN, NOBODY, api_tenant_keys_list},
    {HTTP_DELETE, "/v1/tenants/{id}/keys/{key_id}", "tenants.keys.revoke", ADMIN, NOBODY, api_tenant_keys_revoke},
    {HTTP_GET, "/v1/admin/mig-advice", "admin.mig_advice", ADMIN, NOBODY, api_admin_mig_advice},

    {HTTP_GET, "/v1/events", "events.stream", KEY, NOBODY, api_events_stream},
    {HTTP_GET, "/v1/jobs/{id}/events", "jobs.events", KEY, NOBODY, api_jobs_events},
    {HTTP_GET, "/metrics", "metrics", PUB, NOBODY, api_metrics},
    {HTTP_GET, "/", "web.index", PUB, NOBODY, api_web_index},
    {HTTP_GET, "/web/vendor/chart.min.js", "web.chartjs", PUB, NOBODY, api_web_chartjs},
    {HTTP_GET, "/web/{file}", "web.file", PUB, NOBODY, api_web_file},
    {HTTP_GET, "/v1/datasets/{id}/examples", "datasets.examples", KEY, NOBODY, api_datasets_examples},
    {HTTP_GET, "/v1/usage", "usage.get", KEY, NOBODY, api_usage_get},
};
/* clang-format on */

const size_t api_routes_count = sizeof api_routes / sizeof api_routes[0];

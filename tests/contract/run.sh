#!/usr/bin/env bash
# Contract test: schemathesis fuzzes a live `trainyard serve` from
# openapi.yaml and fails on any response that does not match the document
# (status code, content type, headers, body schema), on any 5xx, and on any
# endpoint that answers without the API key it declares.
#
#   tests/contract/run.sh path/to/trainyard
#
# Dataset URLs may only name 127.0.0.1 here (--fetch-hosts), and fetches go
# through a proxy address where nothing listens, so generated URLs never
# leave the machine. The failed-authentication throttle is off
# (--auth-fail-rate 0): schemathesis's auth checks send many requests
# without a key from one address, and test_clients covers the 429.
# Exit 77 (skipped) when schemathesis is not installed; `make test`
# installs it.
set -euo pipefail
bin=${1:?usage: run.sh path/to/trainyard}
root=$(cd "$(dirname "$0")/../.." && pwd)
st=${SCHEMATHESIS:-$root/.venv/bin/schemathesis}
if [ ! -x "$st" ]; then
  echo "SKIPPED: schemathesis is not installed (make venv installs it)"
  exit 77
fi

data=$(mktemp -d)
out="$data.stdout"
# made before the server starts: the loop below reads it at once, and a
# sed on a file the server's shell has not opened yet fails (set -e)
: >"$out"
http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 no_proxy= \
  "$bin" serve --listen 127.0.0.1:0 --data "$data" --fetch-hosts 127.0.0.1 \
  --train-device cpu \
  --max-upload-bytes 8M --max-json-bytes 1M --fetch-timeout 5 \
  --auth-fail-rate 0 >"$out" 2>"$data.log" &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$data" "$out" "$data.log" "$data.toml" "$data.csv"
}
trap cleanup EXIT
port=
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "the server did not start:"; cat "$data.log"; exit 1; }
key=$(cat "$data/admin.key")
base="http://127.0.0.1:$port"
api() { curl -sS -H "Authorization: Bearer $key" "$@"; }
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }

# A real dataset and a trained model, so the operations that take an id
# are fuzzed against something that exists, not only answered 404.
csv="$data.csv"
{ echo "x1,x2,label"; for i in $(seq 60); do echo "$((i % 7)).5,$((i % 5)).25,c$((i % 3))"; done; } >"$csv"
ds=$(api -F name=contract -F format=csv -F label_column=label -F "file=@$csv" "$base/v1/datasets" | field id)
job=$(api -H "Content-Type: application/json" "$base/v1/jobs" -d "{\"dataset\": \"$ds\",
  \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 8}, {\"type\": \"relu\"},
  {\"type\": \"dense\", \"units\": 3}]}, \"hyperparameters\": {\"epochs\": 2}}" | field id)
model=
for _ in $(seq 300); do
  doc=$(api "$base/v1/jobs/$job")
  case "$doc" in *'"status":"succeeded"'*) model=$(echo "$doc" | field model); break ;;
                 *'"status":"failed"'*|*'"status":"cancelled"'*) break ;; esac
  sleep 0.1
done
[ -n "$ds" ] && [ -n "$job" ] && [ -n "$model" ] || { echo "could not seed a dataset and model: ds=$ds job=$job"; exit 1; }
rm -f "$csv"
tenant=$(api "$base/v1/tenants" | field id)
[ -n "$tenant" ] || { echo "could not read the admin's tenant"; exit 1; }
# A deployment of the model, scaled to zero: the model then cannot be
# deleted (409) while the operations pinned to it run.
dep=$(api -o /dev/null -D - -H "Content-Type: application/json" "$base/v1/deployments" \
  -d "{\"name\": \"contract\", \"model\": \"$model\", \"replicas\": {\"min\": 0, \"max\": 1}}" |
  tr -d '\r' | sed -n 's|^[Ll]ocation: /v1/deployments/||p')
[ -n "$dep" ] || { echo "could not seed a deployment"; exit 1; }
cfg="$data.toml"
cat >"$cfg" <<TOML
[[operations]]
include-operation-id = ["getModel", "getModelWeights", "predict", "evaluate"]
parameters = { id = "$model" }

[[operations]]
include-operation-id = ["kserveModelMetadata", "kserveModelReady", "kserveInfer",
  "kserveModelConfig", "kserveModelStats", "kserveRepositoryLoad",
  "kserveRepositoryUnload", "kserveModelTrace", "kserveModelTraceUpdate"]
parameters = { name = "$model" }

[[operations]]
include-operation-id = ["kserveModelVersionMetadata", "kserveModelVersionReady",
  "kserveVersionInfer", "kserveModelVersionConfig", "kserveModelVersionStats"]
parameters = { name = "$model", version = "1" }

[[operations]]
include-operation-id = ["getDataset"]
parameters = { id = "$ds" }

[[operations]]
include-operation-id = ["getJob", "getJobMetrics", "getJobEvents"]
parameters = { id = "$job" }

[[operations]]
include-operation-id = ["getTenant", "listTenantKeys"]
parameters = { id = "$tenant" }
TOML
# The deployment operations are not pinned to the seeded one: the stateful
# phase creates deployments (POST) and follows the reply's id to GET, PATCH
# and DELETE, and a pinned id there is a deployment another step may have
# deleted, reported as the created one missing (ST302).

# use_after_free is left out: DELETE /v1/deployments/{id} is a 202 (its
# replicas drain after the reply) and a GET shows the deployment, desired
# 0, until they have stopped, as an object being finalized stays visible;
# whether the check's GET comes before the drain ends is timing (it failed
# one run in two with a replica running).
# streamEvents never ends (a live stream), so it is left out;
# tests/integration/test_events.c covers it. getJobEvents on the seeded
# (finished) job ends at once.
set +e
"$st" --config-file "$cfg" run "$root/openapi.yaml" --url "$base" \
  -H "Authorization: Bearer $key" \
  --checks all --exclude-checks positive_data_acceptance,use_after_free \
  --max-examples "${TY_CONTRACT_EXAMPLES:-100}" --seed 1 --workers 1 \
  --suppress-health-check all --no-color \
  --exclude-operation-id streamEvents
rc=$?
set -e
if ! kill -0 "$pid" 2>/dev/null; then
  echo "the server died during the contract test; its log:"
  tail -50 "$data.log"
  exit 1
fi
if grep -q '"level":"error","event":"internal_error"' "$data.log"; then
  echo "the server logged internal errors:"
  grep '"internal_error"' "$data.log" | head -20
  exit 1
fi
exit $rc

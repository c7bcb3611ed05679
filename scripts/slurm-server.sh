#!/usr/bin/env bash
# Runs `trainyard serve --executor slurm` from an environment file, so the
# cluster's settings live in one place a service manager can read:
#
#   scripts/slurm-server.sh [/etc/trainyard/slurm.env]
#
# The file (shell syntax, KEY=value) sets, with these defaults:
#   TRAINYARD_BIN=trainyard          the binary (also run on the nodes, at
#                                    TRAINYARD_WORKER_COMMAND, default the same)
#   TRAINYARD_LISTEN=0.0.0.0:8080    TRAINYARD_DATA=/var/lib/trainyard
#   TRAINYARD_URL                    this server as the nodes reach it (required)
#   SLURMRESTD_URL=http://127.0.0.1:6820   SLURM_API_VERSION=v0.0.38
#   SLURM_USER                       the Slurm user jobs run as (required)
#   SLURM_JWT_KEY or SLURM_TOKEN_FILE   one of the two (see docs/slurm.md,
#                                    "Run on a Slurm cluster")
#   SLURM_PARTITION, SLURM_ACCOUNT, SLURM_QOS, SLURM_WORKDIR=/tmp,
#   SLURM_TIME_LIMIT (minutes), TRAINYARD_MAX_JOBS=32, TRAINYARD_EXTRA
#                                    (more flags, word-split)
set -euo pipefail
env_file=${1:-/etc/trainyard/slurm.env}
if [ ! -r "$env_file" ]; then
  echo "slurm-server.sh: cannot read $env_file (see the header of $0)" >&2
  exit 64
fi
# shellcheck disable=SC1090
. "$env_file"
: "${TRAINYARD_URL:?set TRAINYARD_URL: this server as the nodes reach it}"
: "${SLURM_USER:?set SLURM_USER: the Slurm user jobs run as}"
if [ -z "${SLURM_JWT_KEY:-}" ] && [ -z "${SLURM_TOKEN_FILE:-}" ]; then
  echo "slurm-server.sh: set SLURM_JWT_KEY or SLURM_TOKEN_FILE" >&2
  exit 64
fi
bin=${TRAINYARD_BIN:-trainyard}
args=(serve --listen "${TRAINYARD_LISTEN:-0.0.0.0:8080}"
      --data "${TRAINYARD_DATA:-/var/lib/trainyard}"
      --executor slurm
      --slurm-url "${SLURMRESTD_URL:-http://127.0.0.1:6820}"
      --slurm-api-version "${SLURM_API_VERSION:-v0.0.38}"
      --slurm-user "$SLURM_USER"
      --slurm-server-url "$TRAINYARD_URL"
      --slurm-workdir "${SLURM_WORKDIR:-/tmp}"
      --max-jobs "${TRAINYARD_MAX_JOBS:-32}")
[ -n "${SLURM_JWT_KEY:-}" ] && args+=(--slurm-jwt-key "$SLURM_JWT_KEY")
[ -n "${SLURM_TOKEN_FILE:-}" ] && args+=(--slurm-token-file "$SLURM_TOKEN_FILE")
[ -n "${SLURM_PARTITION:-}" ] && args+=(--slurm-partition "$SLURM_PARTITION")
[ -n "${SLURM_ACCOUNT:-}" ] && args+=(--slurm-account "$SLURM_ACCOUNT")
[ -n "${SLURM_QOS:-}" ] && args+=(--slurm-qos "$SLURM_QOS")
[ -n "${SLURM_TIME_LIMIT:-}" ] && args+=(--slurm-time-limit "$SLURM_TIME_LIMIT")
[ -n "${TRAINYARD_WORKER_COMMAND:-}" ] && args+=(--slurm-worker-command "$TRAINYARD_WORKER_COMMAND")
# shellcheck disable=SC2206
[ -n "${TRAINYARD_EXTRA:-}" ] && args+=(${TRAINYARD_EXTRA})
exec "$bin" "${args[@]}"

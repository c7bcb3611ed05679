#!/usr/bin/env bash
# `make run`: starts the built server with its data in ./var (or $DATA) on
# 127.0.0.1:8080 (or $LISTEN), and says how to reach it.
set -euo pipefail
bin=${BIN:-build/trainyard}
data=${DATA:-./var}
listen=${LISTEN:-127.0.0.1:8080}
if [ -f "$data/admin.key" ]; then
  echo "Admin API key (saved in $data/admin.key):"
  echo
  echo "    $(cat "$data/admin.key")"
  echo
fi
echo "API:  http://$listen   (try: curl -H \"Authorization: Bearer \$(cat $data/admin.key)\" http://$listen/v1/datasets)"
echo "Docs: http://$listen/openapi.yaml   Stop with Ctrl-C."
echo
exec "$bin" serve --listen "$listen" --data "$data"

#!/usr/bin/python3
"""Reads Prometheus text (exposition format 0.0.4) on stdin, parses it with
prometheus_client's parser (Debian python3-prometheus-client), checks what
that parser lets pass (every histogram's buckets cumulative and its +Inf
bucket equal to _count; every sample under a # TYPE; one # HELP and one
# TYPE per family; no series twice), and prints the samples
as JSON: [[name, {labels}, value], ...]. Exits 1 on any error."""
import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

text = sys.stdin.read()
typed = {l.split()[2] for l in text.splitlines() if l.startswith("# TYPE ")}
for kind in ("# HELP ", "# TYPE "):
    names = [l.split()[2] for l in text.splitlines() if l.startswith(kind)]
    twice = {n for n in names if names.count(n) > 1}
    if twice:
        sys.exit("%sgiven twice for %s" % (kind, ", ".join(sorted(twice))))
seen = set()
out = []
for fam in text_string_to_metric_families(text):
    if fam.type == "unknown":
        sys.exit("untyped family %s" % fam.name)
    series = {}
    for s in fam.samples:
        out.append([s.name, s.labels, s.value])
        key = (s.name, tuple(sorted(s.labels.items())))
        if key in seen:
            sys.exit("series %s%s given twice" % key)
        seen.add(key)
        if fam.type != "histogram":
            continue
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        h = series.setdefault(key, {"buckets": [], "count": None})
        if s.name.endswith("_bucket"):
            h["buckets"].append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            h["count"] = s.value
    for key, h in series.items():
        b = h["buckets"]
        if not b or b[-1][0] != math.inf or b[-1][1] != h["count"]:
            sys.exit("%s%s: +Inf bucket missing or not _count" % (fam.name, key))
        if any(b[i][0] >= b[i + 1][0] or b[i][1] > b[i + 1][1]
               for i in range(len(b) - 1)):
            sys.exit("%s%s: buckets not cumulative" % (fam.name, key))
for name, _, _ in out:
    if not any(name == t or name.startswith(t + "_") for t in typed):
        sys.exit("sample %s has no # TYPE" % name)
json.dump(out, sys.stdout)

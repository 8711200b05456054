#!/usr/bin/env bash
# Checks deploy/prometheus with promtool: the rule files (`check rules`), the configuration with
# the example file_sd targets in place (`check config`, which also parses the targets), the
# agents' `node` relabelling (`check service-discovery`), and the rules' unit tests
# (`test rules`). Run by //deploy/prometheus:rules_test.
set -euo pipefail
src=deploy/prometheus
work="${TEST_TMPDIR:-$(mktemp -d)}/prometheus-config"
rm -rf "$work" && mkdir -p "$work/targets"
cp "$src"/prometheus.yml "$src"/recording_rules.yml "$src"/alert_rules.yml "$work/"
for example in "$src"/targets/*.json.example; do
  cp "$example" "$work/targets/$(basename "$example" .example)"
done

out=$(promtool check rules "$src/recording_rules.yml" "$src/alert_rules.yml" 2>&1) || {
  echo "$out"; exit 1; }
echo "$out"
out=$(promtool check config "$work/prometheus.yml" 2>&1) || { echo "$out"; exit 1; }
echo "$out"
# A warning (e.g. a file_sd pattern that matches no file) is a failure here.
if grep -q WARNING <<<"$out"; then echo "promtool check config warned"; exit 1; fi
# Service discovery with the real relabelling: listed agents keep their `node`; an agent listed
# without one gets its host name.
echo '[{"targets": ["unlabelled-host:9401"]}]' >"$work/targets/agents-unlabelled.json"
sd=$(cd "$work" && promtool check service-discovery --timeout=5s prometheus.yml ringmaster-agent 2>/dev/null)
for node in gpu-node-1 gpu-node-2 unlabelled-host; do
  if ! grep -q "\"node\": \"$node\"" <<<"$sd"; then
    echo "service discovery: no target with node=\"$node\":"; echo "$sd"; exit 1
  fi
done
echo "service discovery: node labels as expected"
promtool test rules "$src/alert_rules_test.yml"

#!/usr/bin/env bash
# tools/cluster up --netns / down for real (root; skipped otherwise): two agents in their own
# network namespaces on a bridge, DIR/env pointing at the bridge address, a DP=2 job over Gloo
# that SUCCEEDS with its bytes through the agents' veths; `down` leaves no namespace or link of
# the cluster; an `up` that fails half-way cleans up after itself; and `down` cleans up after an
# `up` that was killed half-way.
#
#   netns_cluster_script_test.sh CLUSTER COORDINATOR AGENT RINGCTL TRAINER
set -euo pipefail
if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "SKIPPED: needs root and ip netns"
  exit 0
fi
# As tests/netns_cluster.cc's Unsupported(): a namespace that can be made and deleted, with a
# bridge, a veth pair and a tbf qdisc in it (a container may list namespaces, yet refuse these).
probe="rmp$$-probe"
probe_why=""
if ! ip netns add "$probe" 2>/dev/null; then
  probe_why="ip netns add refused"
else
  if ! ip -n "$probe" link add probebr type bridge 2>/dev/null; then
    probe_why="cannot create a bridge"
  elif ! ip -n "$probe" link add probev0 type veth peer name probev1 2>/dev/null; then
    probe_why="cannot create a veth pair"
  elif ! ip netns exec "$probe" tc qdisc add dev probev0 root tbf rate 20mbit burst 64kb \
    latency 500ms 2>/dev/null; then
    probe_why="cannot add a tbf qdisc (tc)"
  fi
  ip netns del "$probe" 2>/dev/null || probe_why="${probe_why:-ip netns del refused}"
fi
if [ -n "$probe_why" ]; then
  echo "SKIPPED: $probe_why"
  exit 0
fi
cluster_script="$PWD/$1"
bin="$TEST_TMPDIR/bin"
mkdir -p "$bin/coordinator" "$bin/agent" "$bin/ctl" "$bin/trainer"
ln -sf "$PWD/$2" "$bin/coordinator/coordinator"
ln -sf "$PWD/$3" "$bin/agent/agent"
ln -sf "$PWD/$4" "$bin/ctl/ringctl"
ln -sf "$PWD/$5" "$bin/trainer/trainer"
# Short: the agents' Unix socket paths must fit in 107 bytes, which $TEST_TMPDIR's may not.
dir=$(mktemp -d /tmp/rm-netns-script.XXXXXX)
trap '"$cluster_script" down --dir "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
fail() { echo "FAILED: $*"; for f in "$dir"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }
prefix="rmc$(printf '%s' "$dir" | sha1sum | cut -c1-6)"
leftovers() { { ip netns list; ip -o link show; } | grep -F "$prefix" || true; }
# Bytes both ways through agent I's veth (its end in this namespace).
veth_bytes() {
  ip -j -s link show dev "${prefix}v$1" | grep -Eo '"(rx|tx)":\{"bytes":[0-9]+' |
    grep -Eo '[0-9]+$' | awk '{s += $1} END {print s}'
}

# 1. up --netns: the coordinator on the bridge, each agent in its namespace at its own address.
"$cluster_script" up --dir "$dir" --agents 2 --slots 1 --netns --bin "$bin" || fail "up --netns"
# shellcheck disable=SC1091
source "$dir/env"
[[ "$RINGMASTER_COORDINATOR" =~ ^10\.[0-9]+\.[0-9]+\.1:[0-9]+$ ]] ||
  fail "RINGMASTER_COORDINATOR=$RINGMASTER_COORDINATOR is not the bridge"
[ "$RINGMASTER_INSECURE" = 1 ] || fail "RINGMASTER_INSECURE"
nodes=$("$bin/ctl/ringctl" nodes) || fail "ringctl nodes: $nodes"
[ "$(grep -c ' yes ' <<<"$nodes")" -eq 2 ] || fail "two live agents: $nodes"
net=${RINGMASTER_COORDINATOR%.1:*}
for i in 0 1; do
  ip netns exec "$prefix-a$i" ip -o -4 addr show dev eth0 | grep -qF " $net.$((i + 2))/24" ||
    fail "agent-$i's namespace has no $net.$((i + 2))"
done

# 2. A DP=2 job over Gloo (no shared memory) crosses the veths.
before=$(veth_bytes 0)
cat >"$dir/job.yaml" <<YAML
name: netns
nodes: 2
devices_per_node: 1
parallelism: {tensor: 1, pipeline: 1, data: 2}
trainer:
  command: ["$bin/trainer/trainer", "--shared_memory=false"]
  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}
  batch: {micro_batch: 2, global_batch: 4}
  optimizer: {lr: 2.0e-3}
  steps: 5
restart: {max_restarts: 0}
YAML
submitted=$("$bin/ctl/ringctl" submit -f "$dir/job.yaml") || fail "submit: $submitted"
job=$(grep -Eo 'job [^ ]+ submitted' <<<"$submitted" | awk '{print $2}')
state=""
for _ in $(seq 600); do  # 60 s at most
  state=$("$bin/ctl/ringctl" get job "$job" | grep -Eo 'SUCCEEDED|FAILED|CANCELLED' | head -1 || true)
  [ -n "$state" ] && break
  sleep 0.1
done
[ "$state" = SUCCEEDED ] || fail "job $job: '$state': $("$bin/ctl/ringctl" describe job "$job")"
after=$(veth_bytes 0)
# 5 steps of a gradient of about 110,000 fp32 parameters each way: well over a megabyte.
[ $((after - before)) -gt 1000000 ] || fail "agent-0's veth carried $((after - before)) bytes"

# 3. down: nothing of the cluster is left.
"$cluster_script" down --dir "$dir" || fail "down"
[ -z "$(leftovers)" ] || fail "left after down: $(leftovers)"
[ ! -e "$dir/netns" ] && [ ! -e "$dir/pids" ] || fail "DIR/netns or DIR/pids left"

# 4. An up that fails half-way (agent-1 cannot start) cleans up after itself.
fake="$TEST_TMPDIR/fake"
mkdir -p "$fake/coordinator" "$fake/agent" "$fake/trainer"
ln -sf "$PWD/$2" "$fake/coordinator/coordinator"
printf '#!/bin/sh\necho "no agent here" >&2\nexit 1\n' >"$fake/agent/agent"
chmod +x "$fake/agent/agent"
if "$cluster_script" up --dir "$dir" --agents 2 --netns --bin "$fake" >"$dir/failed-up.out" 2>&1; then
  fail "up with an agent that exits succeeded"
fi
grep -q "up failed; cleaning up" "$dir/failed-up.out" || fail "$(cat "$dir/failed-up.out")"
[ -z "$(leftovers)" ] || fail "left after a failed up: $(leftovers)"

# 5. An up killed half-way (agent-0 never says it listens, so up waits on it): the coordinator
# and agent-0 live on, the namespaces and links exist; down removes all of it.
printf '#!/bin/sh\nexec sleep 300\n' >"$fake/agent/agent"
"$cluster_script" up --dir "$dir" --agents 2 --netns --bin "$fake" >"$dir/killed-up.out" 2>&1 &
up=$!
for _ in $(seq 300); do  # 30 s at most
  n=$(grep -c . "$dir/pids" 2>/dev/null || true)
  [ "${n:-0}" -ge 2 ] && break
  sleep 0.1
done
started=$(cat "$dir/pids")
[ "$(wc -l <<<"$started")" -eq 2 ] || fail "up never started agent-0: $(cat "$dir/killed-up.out")"
kill -KILL "$up"  # the script alone
wait "$up" 2>/dev/null || true
[ -n "$(leftovers)" ] || fail "nothing was left to clean (the test proves nothing)"
"$cluster_script" down --dir "$dir" || fail "down after a killed up"
[ -z "$(leftovers)" ] || fail "left after down: $(leftovers)"
for pid in $started; do
  stat=$(ps -o stat= -p "$pid" || true)  # a zombie (Z) no one reaped yet has stopped
  if [ -n "$stat" ] && [[ "$stat" != Z* ]]; then fail "pid $pid still runs after down"; fi
done
echo "PASSED"

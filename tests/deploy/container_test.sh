#!/usr/bin/env bash
# Container test: the deployment files, run for real with podman (no Docker engine and no image
# registry on these machines; deploy/container-env.sh installs podman and makes the base image).
#   1. builds deploy/Dockerfile as it is (the image tests/run_all.sh and the README use);
#   2. runs it with its ports published on 127.0.0.1, calls health and every RPC through the
#      host's CLI and checks the results, checks that a POSENC_* variable reaches the server,
#      that the server runs as a non-root user, that the image's HEALTHCHECK passes, and that
#      `podman stop` (SIGTERM) drains it to exit status 0;
#   3. brings deploy/compose.yaml up (two replicas and the one-shot client) with podman-compose,
#      calls each replica and checks the client's calls through the service name;
#   4. renders the Kubernetes base (deploy/k8s/base) and runs it with `podman kube play`: checks
#      the ConfigMap's flags, the securityContext (user, read-only root, capabilities) and calls it.
# Everything it starts is removed on exit (trap); every wait is bounded. The image stays in
# podman's storage, so the next run reuses its layers.
# Usage: tests/deploy/container_test.sh [CLI]   (CLI: the host's posenc, default build/release/posenc)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cli=$(realpath "${1:-build/release/posenc}")
[ -x "$cli" ] || { echo "container_test: no CLI at $cli (build the release preset first)" >&2; exit 1; }
jobs=${POSENC_JOBS:-$(nproc)}
image=localhost/posenc:latest
project=posenc-ci
run_name=posenc-ci-run
work=$(mktemp -d /tmp/posenc-container-test.XXXXXX)
t0=$SECONDS
step() { printf -- '--- %s (%ds)\n' "$1" $((SECONDS - t0)); }
fail() { echo "container_test: FAILED: $*" >&2; exit 1; }

# The engine settings in this run's own folder (another checkout's run may remove its own).
export CONTAINER_ENV_DIR=$work/env
# shellcheck source=deploy/container-env.sh
source deploy/container-env.sh

cleanup() {
  local status=$?
  set +e
  if [ $status != 0 ]; then
    echo "container_test: logs of what is still running:" >&2
    for c in $(podman ps -a --format '{{.Names}}' | grep -E "^(${run_name}|${project}_|posenc-pod-)"); do
      echo "== $c" >&2
      timeout 10 podman logs --tail 20 "$c" >&2
    done
  fi
  timeout 60 podman rm -f -t 0 "$run_name" >/dev/null 2>&1
  (cd deploy && timeout 120 podman-compose -p "$project" -f compose.yaml down -t 0 >/dev/null 2>&1)
  for c in $(podman ps -a --format '{{.Names}}' | grep "^${project}_"); do
    timeout 30 podman rm -f -t 0 "$c" >/dev/null 2>&1
  done
  timeout 30 podman network rm -f "${project}_default" >/dev/null 2>&1
  [ -f "$work/k8s.yaml" ] && timeout 120 podman kube down "$work/k8s.yaml" >/dev/null 2>&1
  # kube play's network, unless something else uses it (no -f).
  timeout 30 podman network rm podman-default-kube-network >/dev/null 2>&1
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT

# posenc ARGS...: the host's CLI against $server.
posenc() { timeout 60 "$cli" --server "$server" --timeout 10s "$@"; }
# expect NAME PYTHON-EXPR CLI-ARGS...: runs the CLI with --format json; the expression (over j,
# the parsed output, and math) must hold.
expect() {
  local name=$1 expr=$2
  shift 2
  local out
  out=$(posenc --format json "$@") || fail "$name: posenc $* exited $?"
  printf '%s' "$out" | python3 -c "
import json, math, sys
j = json.load(sys.stdin)
sys.exit(0 if ($expr) else 1)" || fail "$name: posenc $*: not ($expr): ${out:0:600}"
  echo "ok  $name"
}
# wait_healthy ADDRESS: until `posenc health` answers SERVING at ADDRESS (at most 60 s).
wait_healthy() {
  local _
  for _ in $(seq 1 120); do
    if timeout 5 "$cli" --server "$1" --timeout 2s health >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  fail "no SERVING health at $1 within 60 s"
}
# host_port CONTAINER PORT: the 127.0.0.1 port podman published for the container's PORT.
host_port() { podman port "$1" "$2/tcp" | head -n1 | sed 's/.*://'; }

# Every RPC (and health) through the CLI at $server, with known results.
check_rpcs() {
  local out
  out=$(posenc health) || fail "health: exit $?"
  [[ $out == *"status: SERVING"* ]] || fail "health: $out"
  echo "ok  health"
  expect info "j['version'] and 'cpu' in j['backends']" info
  # PE[p] = [sin p, cos p, ...] (interleaved): position 0 is [0, 1, 0, 1].
  expect sinusoidal "j['shape'] == [2, 4] and j['data'][:4] == [0, 1, 0, 1] and \
abs(j['data'][4] - math.sin(1)) < 1e-6" sinusoidal --positions 0:2 --dim 4
  expect add "j['shape'] == [1, 2, 4] and j['data'][:4] == [1, 2, 1, 2]" \
    add --shape 1,2,4 --fill ones --positions 0:2
  expect rope-cache "j['cos']['shape'] == [2, 4] and j['cos']['data'][:4] == [1, 1, 1, 1] and \
abs(j['cos']['data'][4] - math.cos(1)) < 1e-6 and j['sin']['data'][:4] == [0, 0, 0, 0]" \
    rope-cache --positions 0:2 --head-dim 8
  # Position 0 leaves q as it is; position 1 rotates the first pair by 1 radian (NEOX).
  expect apply-rope "j['shape'] == [1, 2, 1, 4] and j['data'][:4] == [1, 1, 1, 1] and \
abs(j['data'][4] - (math.cos(1) - math.sin(1))) < 1e-6" \
    apply-rope --shape 1,2,1,4 --fill ones --positions 0:2
  expect alibi-slopes "j['shape'] == [8] and j['data'][0] == 0.5 and j['data'][7] == 2**-8" \
    alibi-slopes --heads 8
  expect alibi-bias "j['shape'] == [2, 3, 3] and j['data'][1] == '-inf' and len(j['slopes']) == 2" \
    alibi-bias --heads 2 --q-len 3 --k-len 3 --query-offset 0
  # T5 buckets, bidirectional: distance 0 is bucket 0, key after query in the upper half.
  expect relative-bias "j['shape'] == [3, 5] and j['data'][0] == 0 and j['data'][1] >= 16" \
    relative-bias --q-len 3 --k-len 5 --query-offset 0 --form buckets
  expect relative-embedding "j['shape'] == [3, 3, 4]" \
    relative-embedding --q-len 3 --k-len 3 --max-relative 2 --random-table 7
}

step "build deploy/Dockerfile"
timeout 2400 podman build --format docker --build-arg JOBS="$jobs" -t "$image" -f deploy/Dockerfile . \
  >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; fail "podman build"; }
size=$(podman image inspect --format '{{.Size}}' "$image")
echo "image $image: $((size / 1000000)) MB ($size bytes)"

step "podman run: every RPC from the host CLI"
# (podman's errors about periodic health checks without systemd go to podman.log.)
podman run -d --name "$run_name" -p 127.0.0.1::50051 -p 127.0.0.1::9090 \
  -e POSENC_MAX_OUTPUT_ELEMENTS=65536 "$image" >/dev/null 2>>"$work/podman.log"
server=127.0.0.1:$(host_port "$run_name" 50051)
wait_healthy "$server"
check_rpcs
# A POSENC_* variable reaches the server: the output limit set above.
expect env-flag "j['limits']['max_output_elements'] == 65536" info
if err=$(posenc sinusoidal --positions 0:65536 --dim 2 2>&1 >/dev/null); then
  fail "a 131072-element output passed --max_output_elements=65536"
fi
[[ $err == *RESOURCE_EXHAUSTED*65536* ]] || fail "over the limit: $err"
echo "ok  POSENC_MAX_OUTPUT_ELEMENTS=65536 enforced"
metrics=$(curl -sf --max-time 5 "http://127.0.0.1:$(host_port "$run_name" 9090)/metrics") ||
  fail "GET /metrics"
grep -q 'posenc_requests_total{.*method="AlibiSlopes"' <<<"$metrics" || fail "/metrics: no AlibiSlopes"
echo "ok  /metrics on the published port"
uid=$(podman exec "$run_name" id -u)
[ "$uid" != 0 ] || fail "the container runs as root"
host_uid=$(ps -o uid= -p "$(podman inspect --format '{{.State.Pid}}' "$run_name")" | tr -d ' ')
[ "$host_uid" != 0 ] || fail "posenc-server runs as root on the host"
echo "ok  non-root: uid $uid in the container, $host_uid on the host"
timeout 60 podman healthcheck run "$run_name" || fail "podman healthcheck run: exit $?"
echo "ok  HEALTHCHECK passes"
timeout 60 podman stop -t 30 "$run_name" >/dev/null 2>>"$work/podman.log"
code=$(podman inspect --format '{{.State.ExitCode}}' "$run_name")
[ "$code" = 0 ] || fail "posenc-server exited $code after podman stop (SIGTERM)"
podman logs "$run_name" 2>&1 | grep -q "posenc-server stopped" || fail "no drain on SIGTERM"
echo "ok  podman stop drains, exit status 0"
podman rm -f "$run_name" >/dev/null 2>>"$work/podman.log"

step "compose: two replicas and the one-shot client"
(cd deploy && timeout 300 podman-compose -p "$project" -f compose.yaml up -d >"$work/compose.log" 2>&1) ||
  { tail -n 40 "$work/compose.log"; fail "podman-compose up"; }
for n in 1 2; do
  server=127.0.0.1:$(host_port "${project}_posenc_$n" 50051)
  wait_healthy "$server"
  expect "replica $n alibi-slopes" "j['data'][0] == 0.5" alibi-slopes --heads 8
done
code=$(timeout 120 podman wait "${project}_client_1") || fail "the client container did not finish in 120 s"
client_log=$(podman logs "${project}_client_1" 2>&1)
if [ "$code" != 0 ] || [[ $client_log != *"client: done"* ]]; then
  fail "client container exit $code: ${client_log: -1500}"
fi
served=()
for n in 1 2; do
  served+=("$(podman logs "${project}_posenc_$n" 2>&1 | grep -c '"rpc":"AlibiSlopes"' || true)")
done
echo "ok  the client container's calls via dns:///posenc:50051 finished (AlibiSlopes calls served by replica 1: ${served[0]}, replica 2: ${served[1]}, 1 each from the host)"
[ $((served[0] + served[1])) -ge 8 ] || fail "the replicas served ${served[*]} AlibiSlopes calls, expected 2 + 6"
(cd deploy && timeout 120 podman-compose -p "$project" -f compose.yaml down -t 15 >>"$work/compose.log" 2>&1) ||
  fail "podman-compose down"

step "Kubernetes: the kustomize base with podman kube play"
# The overlays render (with a kubectl whose kustomize is v4 or later: they use `patches`): the
# image of each, and the GPU request of the gpu overlay.
if command -v kubectl >/dev/null &&
   kubectl version --client 2>/dev/null | grep -qE 'Kustomize Version: v([4-9]|[1-9][0-9])'; then
  kubectl kustomize deploy/k8s/overlays/cpu >"$work/cpu.yaml" || fail "kubectl kustomize overlays/cpu"
  kubectl kustomize deploy/k8s/overlays/gpu >"$work/gpu.yaml" || fail "kubectl kustomize overlays/gpu"
  grep -q 'image: registry.example.com/posenc:' "$work/cpu.yaml" || fail "overlays/cpu: image"
  grep -q 'image: registry.example.com/posenc-cuda:' "$work/gpu.yaml" || fail "overlays/gpu: image"
  grep -q 'nvidia.com/gpu: 1' "$work/gpu.yaml" || fail "overlays/gpu: no nvidia.com/gpu"
  grep -qE 'POSENC_THREADS: "?4' "$work/gpu.yaml" || fail "overlays/gpu: threads"
  echo "ok  overlays cpu and gpu render"
fi
deploy/k8s/podman-kube.sh "$work/k8s.yaml" | tee "$work/render.log"
grep -q 'ConfigMap, Deployment, HorizontalPodAutoscaler, PodDisruptionBudget, Service, Service' \
  "$work/render.log" || fail "the rendered base lacks an object"
timeout 300 podman kube play "$work/k8s.yaml" >"$work/kube.log" 2>&1 ||
  { cat "$work/kube.log"; fail "podman kube play"; }
replicas=$(/usr/bin/python3 -c 'import sys, yaml; print(next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment")["spec"]["replicas"])' "$work/k8s.yaml")
pods=()
for i in $(seq 0 $((replicas - 1))); do
  ctr=posenc-pod-$i-posenc
  ip=$(podman inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$ctr") ||
    { cat "$work/kube.log"; fail "no container $ctr from the Deployment ($replicas replicas)"; }
  [ -n "$ip" ] || fail "$ctr has no IP"
  pods+=("$ip:50051")
  server=$ip:50051
  wait_healthy "$server"
  env=$(podman inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$ctr")
  grep -qx 'POSENC_DRAIN_TIMEOUT=20s' <<<"$env" || fail "$ctr: the ConfigMap's POSENC_DRAIN_TIMEOUT is not in the environment"
  [ "$(podman exec "$ctr" id -u)" = 10001 ] || fail "$ctr does not run as uid 10001"
  [ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$ctr")" = true ] || fail "$ctr: root filesystem not read-only"
  caps=$(podman exec "$ctr" sh -c 'grep ^CapEff /proc/1/status' | awk '{print $2}')
  [ "$caps" = 0000000000000000 ] || fail "$ctr: effective capabilities $caps, expected none"
  nnp=$(podman exec "$ctr" sh -c 'grep ^NoNewPrivs /proc/1/status' | awk '{print $2}')
  [ "$nnp" = 1 ] || fail "$ctr: no_new_privs not set"
  echo "ok  pod $i at $ip: ConfigMap flags, uid 10001, read-only root, no capabilities, no_new_privs"
done
server=${pods[0]}
check_rpcs
# Both replicas through one client-side round_robin target, as the headless Service gives it.
server=ipv4:$(IFS=,; echo "${pods[*]}")
expect "round_robin over the pods" "j['data'][0] == 0.5" alibi-slopes --heads 8
timeout 120 podman kube down "$work/k8s.yaml" >/dev/null 2>>"$work/podman.log"
rm -f "$work/k8s.yaml"

step "done"
echo "container_test: OK in $((SECONDS - t0)) s (image $((size / 1000000)) MB)"

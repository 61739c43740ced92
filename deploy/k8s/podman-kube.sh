#!/usr/bin/env bash
# Renders the Kubernetes base (deploy/k8s/base) for `podman kube play`, to try the Deployment
# without a cluster (tests/deploy/container_test.sh does exactly this):
#   deploy/k8s/podman-kube.sh posenc.yaml && podman kube play posenc.yaml   # pods posenc-pod-0, -1
#   podman kube down posenc.yaml
# Rendering: `kubectl kustomize` where there is a kubectl (Debian 12's own kubernetes-client is
# 1.20, with a kustomize too old for current files), else the base's resources concatenated in
# the order its kustomization.yaml lists them: the base is plain resources (no generators, no
# patches), so both give the same objects. Then, for podman 4.3 only: it publishes every
# containerPort on the host's port of the same number, which two replicas cannot share, so the
# containers' ports are dropped (reach each pod at its own IP, as in a cluster). podman skips
# the Services, the HPA and the PDB. Needs python3 with PyYAML (Debian: python3-yaml, which
# podman-compose depends on).
set -euo pipefail
out=${1:?usage: deploy/k8s/podman-kube.sh OUT.yaml}
base=$(cd "$(dirname "$0")/base" && pwd)
rendered=$(mktemp)
trap 'rm -f "$rendered"' EXIT
if command -v kubectl >/dev/null && kubectl kustomize "$base" >"$rendered" 2>/dev/null; then
  how="kubectl kustomize"
else
  sed -n '/^resources:/,/^[^ ]/s/^  - //p' "$base/kustomization.yaml" | while read -r f; do
    printf -- '---\n'
    cat "$base/$f"
  done >"$rendered"
  how="the base's resources in kustomization.yaml order (no kubectl)"
fi
/usr/bin/python3 - "$rendered" "$out" "$how" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    if d["kind"] == "Deployment":
        for c in d["spec"]["template"]["spec"]["containers"]:
            c.pop("ports", None)
with open(sys.argv[2], "w") as f:
    yaml.safe_dump_all(docs, f, sort_keys=False)
print("podman-kube: %s (rendered with %s): %s" % (
    sys.argv[2], sys.argv[3], ", ".join(sorted(d["kind"] for d in docs))))
PY

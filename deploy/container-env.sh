#!/bin/bash
# Prepares a Debian 12 machine that has no Docker engine and reaches no image registry to build
# and run posenc's images: installs podman, podman-compose and the network stack (netavark with
# iptables, aardvark-dns so compose services find each other by name), writes the engine settings
# these machines need (in $CONTAINER_ENV_DIR, default /tmp/posenc-container-env), and makes a
# local debian:bookworm-slim base image with debootstrap from the Debian mirror apt already uses.
# Idempotent; needs root. Used by tests/deploy/container_test.sh.
#
#   source deploy/container-env.sh            # exports CONTAINERS_CONF; then, e.g.:
#   podman build --format docker -t localhost/posenc:latest -f deploy/Dockerfile .
#   podman run -d --name posenc -p 127.0.0.1:50051:50051 localhost/posenc:latest
#
# Why the settings: crun refuses the hybrid cgroup layout of these machines (so runc), and
# podman's default rlimits exceed the hard limits here (no CAP_SYS_RESOURCE), so containers get
# the current hard limits instead. On an ordinary Docker or podman host none of this is needed.
# (Adapted from the shared tools' container-env.sh, so the repository depends on nothing beside it.)
set -eo pipefail
container_env_dir=${CONTAINER_ENV_DIR:-/tmp/posenc-container-env}
mkdir -p "$container_env_dir"
export DEBIAN_FRONTEND=noninteractive
need=()
for p in podman buildah runc fuse-overlayfs slirp4netns uidmap debootstrap netavark aardvark-dns iptables \
  podman-compose; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]} > 0)); then
  echo "container-env: installing ${need[*]}"
  apt-get update -qq
  apt-get -o DPkg::Lock::Timeout=900 install -y -qq "${need[@]}" >/dev/null
fi
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu); pidmax=$(cat /proc/sys/kernel/pid_max)
if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pidmax" ]; then nproc=$pidmax; fi
cat >"$container_env_dir/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
[network]
network_backend = "netavark"
CONF
export CONTAINERS_CONF=$container_env_dir/containers.conf
if ! podman image exists docker.io/library/debian:bookworm-slim; then
  # The mirror apt is configured with on this machine (deb822 or one-line format).
  mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n1)
  [ -n "$mirror" ] || mirror=$(awk '$1=="deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  rootfs=$container_env_dir/rootfs
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >/dev/null
  rm -f "$rootfs/etc/apt/sources.list"
  printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" >"$rootfs/etc/apt/sources.list.d/debian.sources"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* "$rootfs/etc/hostname"
  : >"$rootfs/etc/resolv.conf"
  tar --numeric-owner -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' - docker.io/library/debian:bookworm-slim >/dev/null
  rm -rf "$rootfs"
fi
echo "container-env: podman $(podman --version | awk '{print $3}') ready, base image debian:bookworm-slim present, CONTAINERS_CONF=$CONTAINERS_CONF"

#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs Python dependencies (and Java /
# Maven if missing), checks lint and types, starts real servers (Cassandra) with the
# project's own harness, runs pytest, and stops the servers.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
  log "installing Java 17 and Maven (Debian packages)"
  apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
fi

if ! command -v nft >/dev/null || ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 \
  || ! command -v redis-server >/dev/null; then
  log "installing nftables, libfaketime and redis-server (partition and clock-jump nemeses; the Celery peer's broker in the benchmark smoke test; Debian packages)"
  apt-get update -qq && apt-get install -y -qq nftables libfaketime redis-server >/dev/null
fi

# The real Kubernetes node (e2e/infra/node.py) and the image build (e2e/infra/images.py).
have_node_tools() {
  local tool
  for tool in containerd ctr runc buildah podman debootstrap iptables conntrack; do
    command -v "$tool" >/dev/null || return 1
  done
  [ -x /usr/lib/cni/bridge ]
}
if ! have_node_tools; then
  log "installing containerd, runc, the CNI plugins, buildah, podman, debootstrap, iptables and conntrack (the real node's pods; Debian packages)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd runc \
    containernetworking-plugins buildah podman debootstrap iptables conntrack >/dev/null
fi

log "python environment"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The bench extras too: CI runs every benchmark, the peers included, at a tiny size.
.venv/bin/python -m pip install -q -e '.[dev,bench]'

log "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check clockwork_svc operator tests e2e bench scripts

log "mypy --strict"
.venv/bin/mypy

log "starting servers (e2e/infra)"
.venv/bin/python -m e2e.infra up > .infra.env
trap '.venv/bin/python -m e2e.infra down || true' EXIT
cat .infra.env
set -a; . ./.infra.env; set +a

export CLOCKWORK_REQUIRE_INFRA=1
# pytest's exit code 5 (no test collected) fails the run, unless the caller chose the
# tests (`make test ARGS`) and none of them is in this stage.
run_pytest() {
  local rc=0
  .venv/bin/python -m pytest -q -ra -p no:cacheprovider "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then
    if [ "$CALLER_ARGS" -gt 0 ]; then return 0; fi
    echo "pytest collected no tests: failing" >&2
    return 1
  fi
  return "$rc"
}
CALLER_ARGS=$#

log "pytest: single-node stores"
set +e
run_pytest -m "not replicated" "$@"
rc=$?
set -e

# The replicated stores: three Cassandra nodes at replication factor 3 and three etcd
# members, as production runs them. The single servers stop first: two cores.
log "starting the replicated stores (e2e/infra)"
.venv/bin/python -m e2e.infra down
.venv/bin/python -m e2e.infra up cassandra-cluster etcd-cluster > .infra-replicated.env
cat .infra-replicated.env
set -a; . ./.infra-replicated.env; set +a

log "pytest: replicated stores"
set +e
run_pytest -m replicated "$@"
rc_replicated=$?
set -e
if [ "$rc" -ne 0 ]; then exit "$rc"; fi
exit "$rc_replicated"

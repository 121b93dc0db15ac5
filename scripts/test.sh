#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs Python dependencies (and Java,
# Maven, Prometheus, Chromium and the other Debian packages below if missing), checks
# lint and types, starts real servers (Cassandra, etcd, Kafka, Kubernetes) with the
# project's own harness, runs pytest, and stops the servers; then
# runs the replicated stores' suite on a three-node Cassandra and a three-member etcd
# (scripts/test-replicated.sh).
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

if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null \
  || ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  log "installing prometheus and promtool (the alert rules' tests), chromium and chromium-driver (the dashboard's browser tests; Debian packages)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends prometheus chromium chromium-driver >/dev/null
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
# The single Cassandra node skips flushing schema changes (each test's keyspace in about
# 1 s instead of 2-3 s): no test kills it; the tests that kill Cassandra start their own.
.venv/bin/python -m e2e.infra up --cassandra-unsafe-system > .infra.env
trap '.venv/bin/python -m e2e.infra down || true' EXIT
cat .infra.env
set -a; . ./.infra.env; set +a

log "pytest: single-node servers"
export CLOCKWORK_REQUIRE_INFRA=1
# The replicated stores' tests need the three-member clusters: the second stage below.
# It also runs the single-node fault tests that apply to a cluster (marked on_clusters),
# so the whole suite runs those there only; with arguments they run here.
select="not replicated and not on_clusters"
if [ "$#" -gt 0 ]; then
  select="not replicated"
fi
set +e
.venv/bin/python -m pytest -q -ra -p no:cacheprovider --durations=40 -m "$select" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  rc=1
fi
# Arguments select single-node tests (e.g. `./scripts/test.sh tests/unit`): no second stage.
if [ "$#" -gt 0 ]; then
  exit "$rc"
fi

# Second stage: a three-node Cassandra and a three-member etcd, in the memory and CPU the
# single-node servers leave free.
log "stopping the single-node servers"
.venv/bin/python -m e2e.infra down
replicated=0
./scripts/test-replicated.sh || replicated=$?
if [ "$rc" -ne 0 ]; then
  exit "$rc"
fi
exit "$replicated"

#!/usr/bin/env bash
# The replicated stores' suite: three Cassandra nodes at replication factor 3 and three
# etcd members, secured (TLS, logins), started by the project's harness; the store
# contract suite and the replicated-store nemeses (pytest -m replicated) against them,
# then the single-node nemeses that apply to a cluster (arguments go to the first
# pytest run, and skip the second). The second stage of `make test` (scripts/test.sh);
# on its own, `make test-replicated` reuses the .venv that `make test` made.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

[ -x .venv/bin/python ] || { echo "run make test first (it creates .venv)" >&2; exit 1; }

log "starting the replicated stores (e2e/infra)"
.venv/bin/python -m e2e.infra up cassandra-cluster etcd-cluster > .infra-replicated.env
trap '.venv/bin/python -m e2e.infra down cassandra-cluster etcd-cluster || true' EXIT
cat .infra-replicated.env
set -a; . ./.infra-replicated.env; set +a

export CLOCKWORK_REQUIRE_INFRA=1
# pytest's exit code, failing on 5 (no test collected) too; run through $WRAP if set.
WRAP=""
run_pytest() {
  local rc=0
  $WRAP .venv/bin/python -m pytest -q -ra -p no:cacheprovider --durations=15 "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: failing" >&2
    return 1
  fi
  return "$rc"
}

log "pytest: replicated stores (contract suite, replicated-store nemeses)"
rc=0
run_pytest -m replicated "$@" || rc=$?

if [ "$#" -eq 0 ]; then
  log "pytest: the single-node fault suite on the replicated stores"
  # The single-node nemeses marked on_clusters: the others restart, throttle or reroute
  # the one single server (their replicated counterparts are
  # tests/nemesis/test_replicated_stores.py). CLOCKWORK_CASSANDRA and CLOCKWORK_ETCD,
  # with their TLS and login, name the clusters.
  WRAP=scripts/on-clusters.sh
  run_pytest -m "on_clusters and not replicated" tests/nemesis || rc=$?
fi
exit "$rc"

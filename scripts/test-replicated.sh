#!/usr/bin/env bash
# The replicated stores' suite: three Cassandra nodes at replication factor 3 and three
# etcd members, started by the project's harness; the store contract suite and the
# replicated-store nemeses (pytest -m replicated) against them. The second stage of
# `make test` (scripts/test.sh); on its own, `make test-replicated` reuses the .venv that
# `make test` made.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

[ -x .venv/bin/python ] || { echo "run make test first (it creates .venv)" >&2; exit 1; }

log "starting the replicated stores (e2e/infra)"
.venv/bin/python -m e2e.infra up cassandra-cluster etcd-cluster > .infra-replicated.env
trap '.venv/bin/python -m e2e.infra down cassandra-cluster etcd-cluster || true' EXIT
cat .infra-replicated.env
set -a; . ./.infra-replicated.env; set +a

log "pytest: replicated stores"
export CLOCKWORK_REQUIRE_INFRA=1
rc=0
.venv/bin/python -m pytest -q -ra -p no:cacheprovider -m replicated "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"

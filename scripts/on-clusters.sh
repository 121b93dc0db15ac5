#!/usr/bin/env bash
# Run a command against the secured three-node clusters as if they were the single test
# servers: CLOCKWORK_CASSANDRA and CLOCKWORK_ETCD, and their TLS and login companions
# (e2e/stores.py), take the values of CLOCKWORK_CASSANDRA_CLUSTER* and
# CLOCKWORK_ETCD_CLUSTER*, the env lines of `python -m e2e.infra up cassandra-cluster
# etcd-cluster`. For example: scripts/on-clusters.sh .venv/bin/python -m bench.fire
set -euo pipefail
: "${CLOCKWORK_CASSANDRA_CLUSTER:?not set: export the env lines of python -m e2e.infra up cassandra-cluster}"
: "${CLOCKWORK_ETCD_CLUSTER:?not set: export the env lines of python -m e2e.infra up etcd-cluster}"
for suffix in "" _TLS_CA _TLS_CERT _TLS_KEY _USER _PASSWORD; do
  for store in CASSANDRA ETCD; do
    from="CLOCKWORK_${store}_CLUSTER${suffix}"
    if [ -n "${!from:-}" ]; then
      export "CLOCKWORK_${store}${suffix}=${!from}"
    else
      unset "CLOCKWORK_${store}${suffix}"
    fi
  done
done
exec "$@"

#!/usr/bin/env bash
# Every benchmark at its default size, from a fresh machine: installs the bench extras
# (and redis-server for the Celery peer, Java/Maven for Cassandra if missing), starts
# Cassandra, etcd and Kafka with the project's harness in their own state dir, runs
# accept, fire (with the burst case; then again with Kafka as the target, 1M firings
# due within a minute), peers, cost (10M pending one-shots created through the batch API:
# about two and a half hours here), store_ops, api_overhead, overload and isolation, and
# stops the servers. Tables go to stdout; JSON and the plot to bench/results/. Extra
# arguments are passed to every benchmark but store_ops and api_overhead (e.g.
# `scripts/bench.sh --shards 32`); sizes: BENCH_N, BENCH_M, BENCH_PEERS_M,
# BENCH_KAFKA_BURST_N.
# Cassandra syncs its commit log as a production node does, every 10 s (`periodic`,
# Cassandra's default: a cluster's durability is its replicas), and the Celery peer's
# Redis keeps an AOF synced every second (bench/durability.py);
# BENCH_COMMITLOG_SYNC=batch runs everything with a synced log before every
# acknowledgement instead (the test harness's setting; Redis then fsyncs always).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
  log "installing Java 17 and Maven (Debian packages)"
  apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
fi
if ! command -v redis-server >/dev/null; then
  log "installing redis-server (Debian package; the Celery peer's broker)"
  apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
fi

log "python environment"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev,bench]'

export CLOCKWORK_INFRA_STATE="${CLOCKWORK_INFRA_STATE:-$PWD/.infra-bench}"
log "starting servers (e2e/infra, state in $CLOCKWORK_INFRA_STATE)"
.venv/bin/python -m e2e.infra up cassandra etcd kafka \
  --cassandra-commitlog-sync "${BENCH_COMMITLOG_SYNC:-periodic}" > "$CLOCKWORK_INFRA_STATE.env"
trap '.venv/bin/python -m e2e.infra down cassandra etcd kafka || true' EXIT
set -a; . "$CLOCKWORK_INFRA_STATE.env"; set +a

log "accept"
.venv/bin/python -m bench.accept --n "${BENCH_N:-200000}" "$@"
log "fire (1, 2, 3 workers; half rate; burst)"
.venv/bin/python -m bench.fire --m "${BENCH_M:-200000}" --workers 1,2,3 --burst "$@"
log "fire to Kafka (1 worker; half rate; 1M due within a minute)"
.venv/bin/python -m bench.fire --target kafka --m "${BENCH_M:-200000}" --workers 1 \
  --burst --burst-n "${BENCH_KAFKA_BURST_N:-1000000}" --burst-window-s 60 "$@"
log "peers"
.venv/bin/python -m bench.peers --m "${BENCH_PEERS_M:-20000}" "$@"
log "cost (10M pending one-shots)"
.venv/bin/python -m bench.cost "$@"
log "store operations"
.venv/bin/python -m bench.store_ops
log "api call overhead (the call pipeline against a bare gRPC server)"
.venv/bin/python -m bench.api_overhead
log "overload (bursts of 10x and 100x the api's in-flight limit)"
.venv/bin/python -m bench.overload "$@"
log "isolation (a hung tenant beside a steady one)"
.venv/bin/python -m bench.isolation "$@"

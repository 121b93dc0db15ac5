.PHONY: dev test test-replicated proto lint typecheck infra-up infra-down unit bench

VENV := .venv
PY := $(VENV)/bin/python

INSTALLED := $(VENV)/.installed

# Again whenever pyproject.toml changes (a new or re-pinned dependency).
$(INSTALLED): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

## Run Clockwork on this machine (embedded store, one process).
dev: $(INSTALLED)
	$(VENV)/bin/clockwork dev

## The whole test suite: installs everything, starts real servers, runs all tests.
test:
	./scripts/test.sh

## Only the replicated stores' suite (three Cassandra nodes, three etcd members), the
## second stage of `make test`; needs the .venv that `make test` makes.
test-replicated:
	./scripts/test-replicated.sh

## Only the tests that need no servers.
unit: $(INSTALLED)
	$(PY) -m pytest -q tests/unit

## Regenerate the gRPC/protobuf code from proto/.
proto: $(INSTALLED)
	$(PY) scripts/gen_proto.py
	$(PY) scripts/gen_api_docs.py

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check clockwork_svc operator tests e2e bench scripts

typecheck: $(INSTALLED)
	$(VENV)/bin/mypy

## Start real Cassandra, etcd, Kafka, a Kubernetes control plane and a real node; prints CLOCKWORK_* lines.
infra-up: $(INSTALLED)
	@$(PY) -m e2e.infra up

infra-down: $(INSTALLED)
	@$(PY) -m e2e.infra down

## Every benchmark at its default size (installs the bench extras and servers; long).
bench:
	./scripts/bench.sh

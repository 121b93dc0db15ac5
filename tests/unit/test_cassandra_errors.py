"""Driver errors as the store raises them (storage/cassandra/bridge.py): an unknown
compare-and-set outcome is retryable, not an internal error."""

from __future__ import annotations

from cassandra import InvalidRequest, Unauthorized, WriteTimeout, WriteType
from cassandra.protocol import ErrorMessage

from clockwork_svc.errors import StoreUnavailable
from clockwork_svc.storage.cassandra import bridge


def test_an_unknown_cas_outcome_is_retryable_and_told_apart() -> None:
    raw = ErrorMessage(
        bridge.CAS_WRITE_UNKNOWN, "CAS operation result is unknown - proposal accepted by 1", {}
    )
    mapped = bridge.translate(raw)
    assert isinstance(mapped, bridge.CasResultUnknown)
    assert isinstance(mapped, StoreUnavailable)
    assert mapped.__cause__ is raw


def test_other_server_errors_pass_through() -> None:
    raw = ErrorMessage(0x2200, "bad query", {})
    assert bridge.translate(raw) is raw
    invalid = InvalidRequest("keyspace x does not exist")
    assert bridge.translate(invalid) is invalid


def test_permissions_that_could_not_be_read_are_retryable() -> None:
    """With two of three replicas of system_auth down, a node cannot check a role's
    permissions once its cache expires: the store is unavailable, the role is not
    unauthorized."""
    unchecked = Unauthorized(
        'Error from server: code=2100 [Unauthorized] message="Unable to perform '
        "authorization of super-user permission: Cannot achieve consistency level "
        'LOCAL_QUORUM"'
    )
    mapped = bridge.translate(unchecked)
    assert isinstance(mapped, StoreUnavailable)
    assert mapped.__cause__ is unchecked
    denied = Unauthorized("User clockwork has no MODIFY permission on <table ks.schedules>")
    assert bridge.translate(denied) is denied


def test_a_timed_out_paxos_round_is_an_unknown_cas_outcome() -> None:
    cas = WriteTimeout("Operation timed out", write_type=WriteType.CAS)
    assert isinstance(bridge.translate(cas), bridge.CasResultUnknown)
    plain = WriteTimeout("Operation timed out", write_type=WriteType.SIMPLE)
    mapped = bridge.translate(plain)
    assert isinstance(mapped, StoreUnavailable)
    assert not isinstance(mapped, bridge.CasResultUnknown)

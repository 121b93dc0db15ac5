"""Two apis create the same keys at once with different specs, through unary and batch
calls: for every key exactly one create wins and the other is refused ALREADY_EXISTS,
the stored schedule is the winner's, and a repeat of either call gets the same answer.

The creates of one batch that share a partition are one conditional batch (one Paxos
round), so the race is between conditional batches of different apis, between a batch
and a single compare-and-set, and within one api's concurrent batches."""

from __future__ import annotations

import asyncio
import random

import pytest

from clockwork_svc.client import ClockworkClient
from clockwork_svc.domain.model import Created
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.domain.triggers import OnceTrigger
from clockwork_svc.errors import AlreadyExists, ClockworkError, Unavailable
from e2e.cluster import now_ms
from tests.nemesis.conftest import MakeCluster

pytestmark = [
    pytest.mark.cassandra,
    pytest.mark.slow,
    pytest.mark.nemesis,
    pytest.mark.on_clusters,
]

KEYS = [f"race-{i:04d}" for i in range(600)]
BATCH = 100

Answer = Created | ClockworkError


def spec(side: str) -> ScheduleSpec:
    # Far in the future: the race is about creation, nothing fires.
    at_ms = now_ms() // 1000 * 1000 + 3_600_000
    return ScheduleSpec(OnceTrigger(at_ms), HttpTarget(f"http://127.0.0.1:9/{side}"))


async def unary(client: ClockworkClient, key: str, s: ScheduleSpec) -> Answer:
    try:
        return await client.create(key, s)
    except ClockworkError as exc:
        return exc


async def create_all(
    client: ClockworkClient, keys: list[str], s: ScheduleSpec, batched: bool
) -> tuple[dict[str, Answer], set[str]]:
    """Every key, at once (batches of BATCH, or one unary call each); a key answered
    UNAVAILABLE (retryable: a Paxos round whose outcome stayed unknown under the
    race, a cold node) is sent again, as a client would. The answers, and the keys
    that were sent more than once."""
    answers: dict[str, Answer] = {}
    retried: set[str] = set()
    todo = keys
    for _ in range(10):
        answers |= await create_once(client, todo, s, batched)
        todo = [k for k in todo if isinstance(answers[k], Unavailable)]
        if not todo:
            break
        print(f"UNAVAILABLE for {len(todo)} keys, e.g. {answers[todo[0]]}")
        retried |= set(todo)
        await asyncio.sleep(0.5)
    return answers, retried


async def create_once(
    client: ClockworkClient, keys: list[str], s: ScheduleSpec, batched: bool
) -> dict[str, Answer]:
    if batched:
        chunks = [keys[i : i + BATCH] for i in range(0, len(keys), BATCH)]
        answers = await asyncio.gather(*(client.create_many([(k, s) for k in c]) for c in chunks))
        pairs = (zip(c, got, strict=True) for c, got in zip(chunks, answers, strict=True))
        return {k: answer for pair in pairs for k, answer in pair}
    return dict(zip(keys, await asyncio.gather(*(unary(client, k, s) for k in keys)), strict=True))


async def test_same_keys_different_specs_through_two_apis(make_cluster: MakeCluster) -> None:
    cluster = await make_cluster(workers=1)
    other = await cluster.add_api()
    a, b = spec("a"), spec("b")
    shuffled = random.Random(5).sample(KEYS, len(KEYS))
    async with cluster.client(timeout_s=60) as first, cluster.client(60, other) as second:
        rounds = [
            # batches against batches, then batches against unary calls
            (first, second, KEYS[:300], True, True),
            (first, second, KEYS[300:], True, False),
        ]
        for left, right, keys, left_batched, right_batched in rounds:
            order = [k for k in shuffled if k in set(keys)]
            (got_a, retried_a), (got_b, retried_b) = await asyncio.gather(
                create_all(left, keys, a, left_batched),
                create_all(right, order, b, right_batched),
            )
            print(f"{len(keys)} keys; sent again after UNAVAILABLE: {len(retried_a | retried_b)}")
            for key in keys:
                answers = (got_a[key], got_b[key])
                won = [x for x in answers if isinstance(x, Created)]
                lost = [x for x in answers if isinstance(x, AlreadyExists)]
                assert len(won) == 1 and len(lost) == 1, (key, answers)
                # Created by that very call, unless an earlier try of it was
                # answered UNAVAILABLE and had applied after all.
                retried = key in (retried_a if won[0] is got_a[key] else retried_b)
                assert won[0].created or retried, (key, answers)
            # A repeat of each call: the winner's finds its schedule, the loser's is
            # refused again.
            again_a, _ = await create_all(left, keys, a, left_batched)
            for key in keys:
                winner = a if isinstance(got_a[key], Created) else b
                stored = await first.get(key)
                assert stored.spec == winner, key
                if winner is a:
                    repeat = again_a[key]
                    assert isinstance(repeat, Created) and not repeat.created, key
                    assert repeat.schedule.id == stored.id
                else:
                    assert isinstance(again_a[key], AlreadyExists), key
        listed = [s.key async for s in first.list_all()]
    assert listed == KEYS

"""Label rules and selectors (Kubernetes' syntax)."""

from __future__ import annotations

import pytest

from clockwork_svc.domain.labels import MAX_LABELS, decode, encode, normalize, parse_selector
from clockwork_svc.errors import InvalidArgument


def test_labels_are_normalized_sorted_and_stored_as_pairs() -> None:
    labels = normalize({"team": "payments", "app.kubernetes.io/name": "api", "canary": ""})
    assert labels == (("app.kubernetes.io/name", "api"), ("canary", ""), ("team", "payments"))
    assert decode(encode(labels)) == labels
    assert decode(None) == ()


@pytest.mark.parametrize(
    ("labels", "words"),
    [
        ({"": "x"}, "key '' must be"),
        ({"-team": "x"}, "key '-team' must be"),
        ({"a" * 64: "x"}, "must be at most 63"),
        ({"Example.com/a": "x"}, "prefix"),
        ({"/a": "x"}, "prefix"),
        ({"team": "a b"}, "value of 'team' must be"),
        ({"team": "x" * 64}, "value of 'team' must be"),
        ({f"k{i}": "" for i in range(MAX_LABELS + 1)}, "at most 32"),
    ],
)
def test_bad_labels_name_the_label(labels: dict[str, str], words: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        normalize(labels)
    assert err.value.field == "labels" and words in err.value.message


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("team=payments", {"team": "payments"}, True),
        ("team==payments", {"team": "search"}, False),
        ("team!=payments", {}, True),  # != holds without the label, as in Kubernetes
        ("team!=payments", {"team": "payments"}, False),
        ("tier in (gold, silver)", {"tier": "silver"}, True),
        ("tier notin (gold,silver)", {"tier": "bronze"}, True),
        ("tier notin (gold,silver)", {"tier": "gold"}, False),
        ("canary", {"canary": ""}, True),
        ("!canary", {"canary": ""}, False),
        ("team=payments, env!=dev, !canary", {"team": "payments", "env": "prod"}, True),
        ("team=payments,env!=dev", {"team": "payments", "env": "dev"}, False),
        ("example.com/tier=gold", {"example.com/tier": "gold"}, True),
    ],
)
def test_selector_matching(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_selector(selector).matches(labels) is matches


def test_the_index_gets_the_equality_terms() -> None:
    selector = parse_selector("team=payments,tier in (gold),env!=dev,zone in (a,b)")
    assert selector.equalities() == [("team", "payments"), ("tier", "gold")]
    assert selector.text == "team=payments,tier in (gold),env!=dev,zone in (a,b)"


@pytest.mark.parametrize(
    "text", ["", "team>payments", "=x", "tier in gold", "a=b c", "team=a b", "x in (a b)"]
)
def test_a_bad_selector_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        parse_selector(text, "label_selector")
    assert err.value.field == "label_selector"

"""Schedule labels and label selectors, with Kubernetes' rules and syntax.

A label key is an optional DNS-subdomain prefix and a slash, then a name of at most 63
characters (alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric); a value
is empty or a name. A selector is a comma-separated list of requirements, all of which
must hold: `key=value` (or `==`), `key!=value`, `key in (a,b)`, `key notin (a,b)`,
`key` (has the label) and `!key` (has not).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from clockwork_svc.errors import InvalidArgument

MAX_LABELS = 32
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

Labels = tuple[tuple[str, str], ...]
"""A schedule's labels: (key, value) pairs sorted by key."""


def key_error(key: str) -> str | None:
    """Why `key` is not a label key, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return "the prefix before '/' must be a DNS subdomain (lowercase, at most 253)"
    if not _NAME.fullmatch(name):
        return (
            "must be at most 63 characters of [A-Za-z0-9-_.], starting and ending "
            "with a letter or digit (after an optional 'prefix/')"
        )
    return None


def value_error(value: str) -> str | None:
    """Why `value` is not a label value, or None."""
    if value and not _NAME.fullmatch(value):
        return (
            "must be empty or at most 63 characters of [A-Za-z0-9-_.], starting and "
            "ending with a letter or digit"
        )
    return None


def normalize(labels: Mapping[str, str], field: str = "labels") -> Labels:
    """The labels sorted by key; raises InvalidArgument naming the first bad one."""
    if len(labels) > MAX_LABELS:
        raise InvalidArgument(field, f"at most {MAX_LABELS} labels, got {len(labels)}")
    for key, value in labels.items():
        problem = key_error(key)
        if problem:
            raise InvalidArgument(field, f"key {key!r} {problem}")
        problem = value_error(value)
        if problem:
            raise InvalidArgument(field, f"value of {key!r} {problem}")
    return tuple(sorted(labels.items()))


def encode(labels: Labels) -> list[str]:
    """As stored: `key=value` strings (neither part holds '=')."""
    return [f"{key}={value}" for key, value in labels]


def decode(stored: Iterable[str] | None) -> Labels:
    pairs = (item.partition("=") for item in stored or ())
    return tuple(sorted((key, value) for key, _, value in pairs))


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    # "=", "!=", "in", "notin", "exists", "!exists"
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.op == "exists":
            return has
        if self.op == "!exists":
            return not has
        if self.op in ("=", "in"):
            return has and labels[self.key] in self.values
        # != and notin hold for a schedule without the label, as in Kubernetes.
        return not has or labels[self.key] not in self.values


@dataclass(frozen=True, slots=True)
class Selector:
    requirements: tuple[Requirement, ...]
    # As written (what a client sends on).
    text: str = ""

    def matches(self, labels: Labels | Mapping[str, str]) -> bool:
        found = labels if isinstance(labels, Mapping) else dict(labels)
        return all(r.matches(found) for r in self.requirements)

    def equalities(self) -> list[tuple[str, str]]:
        """The `key=value` requirements (and one-value `in`s): what an index can find."""
        return [
            (r.key, next(iter(r.values)))
            for r in self.requirements
            if r.op in ("=", "in") and len(r.values) == 1
        ]


_TERM = re.compile(
    r"\s*(?:(?P<not>!)\s*(?P<absent>[^\s,=!()]+)"
    r"|(?P<key>[^\s,=!()]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[^\s,=!()]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<set>[^()]*)\))?)\s*(?:,|$)"
)


def parse_selector(text: str, field: str = "selector") -> Selector:
    """Raises InvalidArgument naming `field` for a selector that does not parse or
    names a bad key or value."""
    if len(text) > 4096:
        raise InvalidArgument(field, "is longer than 4096 characters")
    requirements: list[Requirement] = []
    position = 0
    while position < len(text):
        found = _TERM.match(text, position)
        if found is None or found.end() == position:
            raise InvalidArgument(
                field,
                f"cannot parse {text[position : position + 40]!r}: use key=value, "
                "key!=value, key in (a,b), key notin (a,b), key or !key, comma-separated",
            )
        requirements.append(_requirement(found, field))
        position = found.end()
    if not requirements:
        raise InvalidArgument(field, "is empty")
    return Selector(tuple(requirements), text)


def _requirement(found: re.Match[str], field: str) -> Requirement:
    if found["absent"]:
        key, op, values = found["absent"], "!exists", frozenset[str]()
    elif found["op"]:
        key, values = found["key"], frozenset({found["value"]})
        op = "!=" if found["op"] == "!=" else "="
    elif found["setop"]:
        key, op = found["key"], found["setop"]
        values = frozenset(v.strip() for v in found["set"].split(","))
    else:
        key, op, values = found["key"], "exists", frozenset()
    problem = key_error(key)
    if problem:
        raise InvalidArgument(field, f"label key {key!r} {problem}")
    for value in values:
        problem = value_error(value)
        if problem:
            raise InvalidArgument(field, f"label value {value!r} {problem}")
    return Requirement(key, op, values)

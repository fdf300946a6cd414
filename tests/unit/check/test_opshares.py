"""The -p patterns that split a device's cases between processes (builder/check/opshares.py), read by Python's
re, which reads these constructs as ECMAScript does; the slow tier asks the pin's own std::regex
(tests/integration/check/test_verify_ops.py)."""

from __future__ import annotations

import random
import re

import pytest

from builder.check import opshares
from builder.check.ops import parse_sql
from builder.check.opshares import ecma_literal, exact_filter, exact_shares, shard_filter
from tests.support.common import REPO

CAPTURED = REPO / "tests" / "data" / "ops-output"
SYNTAX = "^$\\.*+?()[]{}|/"


def _real_params() -> list[str]:
    return [c.params for f in sorted(CAPTURED.glob("*.sql")) for mode in ("test", "support")
            for c in parse_sql(f.read_text(), mode).cases]


def _random_strings(rng: random.Random, n: int, alphabet: str = "ab=,[]._019" + SYNTAX) -> list[str]:
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(n)]


def test_a_literal_matches_its_text_and_only_it():
    rng = random.Random(3)
    for text in _random_strings(rng, 3000) + [SYNTAX, ""]:
        assert re.fullmatch(ecma_literal(text), text), text
    assert ecma_literal("ne=[1,2],eps=0.5") == "ne=\\[1,2\\],eps=0\\.5"
    assert not re.fullmatch(ecma_literal("0.5"), "0x5")


def test_an_exact_filter_matches_exactly_its_strings():
    """Over real params strings and random ones full of ECMAScript's syntax characters: each member matches,
    every other string (prefixes, extensions, neighbours) does not."""
    rng = random.Random(11)
    real = _real_params()
    assert len(real) == 21                       # 7 cases in each captured file
    universe = sorted(set(real + _random_strings(rng, 4000) + [r[:-1] for r in real] + [r + "0" for r in real]))
    for size in (1, 2, 7, 50, 400):
        for _ in range(5):
            members = set(rng.sample(universe, size))
            pattern = re.compile(exact_filter(members))
            assert {s for s in universe if pattern.search(s)} == members, size
    assert re.search(exact_filter([""]), "") and not re.search(exact_filter([""]), "a")
    with pytest.raises(ValueError, match="no strings"):
        exact_filter([])


def test_exact_shares_hold_every_string_once_and_evenly_with_each_run_spread():
    """Strings in the program's order: runs of one op's cases. Every share holds each string once, sizes differ
    by at most one, and each op's run is spread over every share."""
    strings = [f"op{op}=x,n=[{i},{i % 7}]" for op, count in ((1, 50), (2, 7), (3, 200)) for i in range(count)]
    for shares in (1, 2, 3, 16):
        patterns = exact_shares(strings, shares)
        assert patterns is not None and len(patterns) == shares
        owners = [[k for k, p in enumerate(patterns) if re.search(p, s)] for s in strings]
        assert all(len(o) == 1 for o in owners)
        sizes = [sum(o == [k] for o in owners) for k in range(shares)]
        assert max(sizes) - min(sizes) <= 1, sizes
        for op in ("op1=", "op3="):
            assert {o[0] for s, o in zip(strings, owners, strict=True) if s.startswith(op)} == set(range(shares))
    assert len(exact_shares(strings[:3], 16) or []) == 3           # no empty share: fewer processes
    assert exact_shares([], 4) == []


def test_a_share_over_the_limit_gives_no_exact_shares(monkeypatch):
    """A longer pattern than Linux takes in one argument could not start a process: the caller splits by odd digits."""
    strings = [f"type=f32,ne=[{i},1,1,1]" for i in range(100)]
    assert exact_shares(strings, 2) is not None
    monkeypatch.setattr(opshares, "PATTERN_LIMIT", 200)
    assert exact_shares(strings, 2) is None


def test_the_shard_filters_split_every_params_string_into_exactly_one_shard():
    """What -p is searched in: real params strings, every count of odd digits up to 400, random strings."""
    rng = random.Random(7)
    alphabet = "abcxyz=,[]()._-0123456789 "
    strings = _real_params() + ["1" * n for n in range(401)] + ["x9" * n for n in range(50)]
    strings += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(600))) for _ in range(2000)]
    for shards in range(1, 18):
        patterns = [re.compile(shard_filter(k, shards)) for k in range(shards)]
        for text in strings:
            odd = sum(ch in "13579" for ch in text)
            assert [k for k, p in enumerate(patterns) if p.search(text)] == [odd % shards], (shards, text)

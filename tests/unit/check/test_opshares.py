"""The -p patterns that split a device's cases between processes (builder/check/opshares.py), read by Python's
re, which reads these constructs as ECMAScript does; the slow tier asks the pin's own std::regex
(tests/integration/check/test_verify_ops.py)."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from builder.check import opshares
from builder.check.ops import DEFAULT_SELECTION, parse_sql
from builder.check.opshares import (at_least, ecma_literal, joined, range_runs, run_fractions, separator,
                                    shard_filter)
from tests.support.common import REPO

CAPTURED = REPO / "tests" / "data" / "ops-output"
SYNTAX = "^$\\.*+?()[]{}|/"
PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F))


def _real_params() -> list[str]:
    return [c.params for f in sorted(CAPTURED.glob("*.sql")) for mode in ("test", "support")
            for c in parse_sql(f.read_text(), mode).cases]


def _random_strings(rng: random.Random, n: int, alphabet: str = "ab=,[]._019~ " + SYNTAX) -> list[str]:
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(n)]


def test_a_literal_matches_its_text_and_only_it():
    rng = random.Random(3)
    for text in _random_strings(rng, 3000) + [SYNTAX, ""]:
        assert re.fullmatch(ecma_literal(text), text), text
    assert ecma_literal("ne=[1,2],eps=0.5") == "ne=\\[1,2\\],eps=0\\.5"
    assert not re.fullmatch(ecma_literal("0.5"), "0x5")


def test_at_least_is_the_lexicographic_order():
    """Over printable ASCII, syntax characters included: the pattern matches exactly the strings >= the bound."""
    rng = random.Random(5)
    strings = _random_strings(rng, 1500) + _random_strings(rng, 500, PRINTABLE) + ["", "~", " ", "~~~"]
    for bound in strings[:150] + ["a", "~", " ", "]", "\\", "^", "-", "type_a=bf16,"]:
        pattern = re.compile("^" + at_least(bound))
        assert [bool(pattern.search(s)) for s in strings] == [s >= bound for s in strings], bound


def test_a_separator_lies_between_its_neighbours():
    rng = random.Random(9)
    for before, after in zip(*[iter(sorted(set(_random_strings(rng, 2000))))] * 2, strict=False):
        sep = separator(before, after)
        assert before < sep <= after and after.startswith(sep)
    assert separator("type_a=f16,m=16", "type_a=f32,m=1") == "type_a=f3"
    assert separator("ab", "abc") == "abc"


def _owners(patterns: list[str], strings: list[str]) -> dict[str, list[int]]:
    compiled = [re.compile(p) for p in patterns]
    return {s: [k for k, p in enumerate(compiled) if p.search(s)] for s in strings}


def test_range_runs_hold_every_string_once_listed_or_not():
    """Any string at all (a case the list left out, a random one) falls in exactly one run."""
    rng = random.Random(11)
    listed = [f"type_a={t},type_b=f32,m={m},n={n}" for t in ("bf16", "f16", "q4_0", "iq1_m") for m in (16, 512)
              for n in range(1, 30)] + _real_params()
    unlisted = _random_strings(rng, 2000, PRINTABLE) + ["type=f32,ne=[16,5,4,3],nr=[1,1,1,1],nf=16", "", "~"]
    for slots, rounds in ((1, 1), (2, 1), (3, 2), (16, 4), (5, 7)):
        patterns = range_runs(listed, slots, rounds)
        assert patterns is not None and len(patterns) == slots * rounds
        owners = _owners(patterns, listed + unlisted)
        assert all(len(o) == 1 for o in owners.values()), [s for s, o in owners.items() if len(o) != 1][:3]
    assert len(range_runs(listed[:3], 16, 4) or []) == 3                  # no empty run: fewer runs
    assert range_runs([], 4, 4) == []


def test_runs_shrink_round_by_round():
    """Round r of R weighs R - r: with 4 rounds, 40%, 30%, 20% and 10% of the cost, each round's share split
    evenly between its runs, in the order they start."""
    assert run_fractions(2, 4) == [0.2, 0.2, 0.15, 0.15, 0.1, 0.1, 0.05, 0.05]
    assert run_fractions(16, 1) == [1 / 16] * 16 and sum(run_fractions(16, 4)) == pytest.approx(1)
    listed = [f"type=f32,ne=[{n},1]" for n in range(1000, 3000)]
    patterns = range_runs(listed, 4, 4) or []
    sizes = Counter(k for k, in _owners(patterns, listed).values())
    expected = [len(listed) * f for f in run_fractions(4, 4)]
    assert all(abs(sizes[k] - expected[k]) <= 1 for k in range(16)), sizes


def test_runs_are_sized_by_cost():
    """A costly kind (flash attention, 8 times a cheap case) is spread over more runs than its count says:
    each run carries its fraction of the cost, within one case, and the strings are still split exactly."""
    heavy = [f"hsk=128,kv={n}" for n in range(100, 140)]
    cheap = [f"type=f32,ne=[{n},1]" for n in range(100, 420)]
    cost = {**dict.fromkeys(heavy, 8.0), **dict.fromkeys(cheap, 1.0)}
    total = sum(cost.values())
    for slots, rounds in ((4, 1), (4, 4), (16, 2)):
        patterns = range_runs(heavy + cheap, slots, rounds, cost) or []
        owners = _owners(patterns, heavy + cheap)
        assert all(len(o) == 1 for o in owners.values())
        load = Counter()
        for s, (k,) in owners.items():
            load[k] += cost[s]
        for k, fraction in enumerate(run_fractions(slots, rounds)):
            assert abs(load[k] - total * fraction) <= 8 + 8, (slots, rounds, k, load[k], total * fraction)
    by_count = range_runs(heavy + cheap, 4, 1) or []
    heavy_run = next(k for k, p in enumerate(by_count) if re.search(p, heavy[0]))
    assert sum(cost[s] for s in heavy + cheap if re.search(by_count[heavy_run], s)) > 1.5 * total / 4


def test_a_run_keeps_like_cases_together():
    """In sorted order one type's cases are neighbours: with one round, each type meets few runs."""
    types = ("f32", "f16", "q4_0", "q8_0")
    listed = [f"type_a={t},type_b=f32,m={n},n=1" for n in range(100, 140) for t in types]     # types inner
    patterns = [re.compile(p) for p in range_runs(listed, 4, 1) or []]
    for t in types:
        met = {k for s in listed if s.startswith(f"type_a={t},") for k, p in enumerate(patterns) if p.search(s)}
        assert len(met) <= 2, (t, met)


def test_a_run_joins_the_selection_from_the_same_start():
    sel = DEFAULT_SELECTION.params
    strings = _real_params()
    patterns = [re.compile(joined(sel, p)) for p in range_runs(strings, 3, 2) or []]
    for s in strings:
        assert len([p for p in patterns if p.search(s)]) == (1 if re.search(sel, s) else 0), s


def test_a_run_over_the_limit_gives_no_runs(monkeypatch):
    """A longer pattern than Linux takes in one argument could not start a process: the caller splits by odd digits."""
    strings = [f"type=f32,ne=[{i},1,1,1]" for i in range(100)]
    assert range_runs(strings, 2, 4) is not None
    monkeypatch.setattr(opshares, "PATTERN_LIMIT", 40)
    assert range_runs(strings, 2, 4) is None


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

"""How verify --ops splits one device's cases into runs, each its own process, several at once (a Vulkan
device: see ops.SHARDED_BACKENDS), as test-backend-ops' -p patterns: the only way to hand a process its cases,
since the program has no option that names cases. -p is an ECMAScript pattern (std::regex) searched in each
case's params string (vars()) before the op filter; what the program's regex reads is checked by the slow tier.
Every pattern here is zero-width and anchored at the start, so it joins the selection's lookaheads
(ops.Selection.params).

Two splits, each exact (every string in exactly one run, whatever the string):
- range_runs: ranges of the strings in lexicographic order, cut where the program's own list of the device's
  supported cases (support mode, no computing) puts P x R runs (P at once, R rounds) whose cost, each case
  weighed by its op (ops.OP_COST_MS), shrinks round by round; ops starts run j+1 when a slot frees.
  Neighbours in that order are like cases (the same op family and types lead the string: `type_a=bf16,...`),
  so a process compiles the Vulkan pipelines of its own run only: each Vulkan process compiles every pipeline
  its cases need, and NVIDIA's compiler is slow (a GET_ROWS iq1_m case took 12 s in each of 16 processes that
  met one). A range also holds the cases the list leaves out: support mode drops upstream's fusion cases
  (run_whole_graph(): ADD with nf > 1, RMS_NORM + MUL + ROPE, ...), 15 of the default selection at the pin,
  which test mode runs.
- by_odd_digits: without a list, by the count of odd digits in the string, one share per process. Short, but
  uneven: of the default selection's 4,206 cases at the pin, 16 shares held 39 to 648, and on an H100
  (2026-12-05) the one of 541 set Vulkan0's time while the other 15 were done by 85 s.

Why a queue of shrinking runs and not one fixed share per process: on an H100's Vulkan0 (2026-12-05), 16
processes each holding 4 runs of even cost, as OP_COST_MS weighs them, printed their last case between 29 and
56 s (64-67 s in all with the list). A case's cost depends on the pipelines its process compiled before it, so
no per-case weight predicts a share: weights per op, per op and type, or per string measured in five other runs
were off by up to 2.5 times per process. On a faster H100 host the queue's slots ended within 4 s of each other
(30-34 s) where the fixed shares' ended within 15 s (20-35 s), but its extra starts ate the gain: 39.5 s
against 40.8 s in all, one run each. docs/lab/2026-12-02-ops-h200.md has the runs.
"""

from __future__ import annotations

from itertools import accumulate

# Linux takes at most 131,072 bytes in one argument (MAX_ARG_STRLEN): a longer pattern cannot start a process.
PATTERN_LIMIT = 120_000

# ECMAScript's syntax characters (ECMA-262, SyntaxCharacter): escaped, everything else is itself.
_SYNTAX = frozenset("^$\\.*+?()[]{}|/")
_FIRST, _LAST = " ", "~"                     # params strings are printable ASCII: the order's alphabet


def ecma_literal(text: str) -> str:
    """`text` as an ECMAScript pattern that matches it literally."""
    return "".join("\\" + ch if ch in _SYNTAX else ch for ch in text)


def at_least(bound: str) -> str:
    """A pattern (no anchor) matching, at the string's start, every string >= `bound` in lexicographic order of
    printable ASCII (any other character sorts below all of them): at the first position where the string
    leaves the bound, its character is greater; or the bound is a prefix of it."""
    pattern = ""
    for ch in reversed(bound):
        above = _above(ch)
        pattern = f"(?:{above}|{ecma_literal(ch)}{pattern})" if above else ecma_literal(ch) + pattern
    return pattern


def _above(ch: str) -> str:
    """A class of the printable ASCII characters after `ch`, "" if none."""
    low = chr(max(ord(ch) + 1, ord(_FIRST)))
    if low > _LAST:
        return ""
    return f"[{_in_class(low)}-{_LAST}]" if low < _LAST else f"[{_LAST}]"


def _in_class(ch: str) -> str:
    return "\\" + ch if ch in "\\]^-[" else ch


def separator(before: str, after: str) -> str:
    """The shortest prefix of `after` that sorts above `before` (before < after): a short bound between them."""
    i = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
             min(len(before), len(after)))
    return after[:i + 1]


def range_filter(low: str | None, high: str | None) -> str:
    """Zero-width, anchored: the strings s with low <= s < high (None: no bound on that side)."""
    return "^" + (f"(?={at_least(low)})" if low is not None else "") + (
        f"(?!{at_least(high)})" if high is not None else "")


def range_runs(strings: list[str], slots: int, rounds: int, cost: dict[str, float] | None = None) -> list[str] | None:
    """One pattern per run, in the order to start them: the listed strings sorted and cut into up to
    slots x rounds runs (fewer where there are fewer strings) whose cost (`cost` per string, 1 where it names
    none) shrinks round by round (run_fractions), each run the range from its first string's separator to the
    next run's (the first run from nothing, the last to nothing, so every string has a run). None when a
    pattern would be over PATTERN_LIMIT."""
    ordered = sorted(set(strings))
    if not ordered:
        return []
    starts = _cuts([(cost or {}).get(s, 1.0) for s in ordered], run_fractions(slots, rounds))
    bounds: list[str | None] = [None] + [separator(ordered[i - 1], ordered[i]) for i in starts[1:]] + [None]
    patterns = [range_filter(bounds[j], bounds[j + 1]) for j in range(len(starts))]
    return None if any(len(p.encode()) > PATTERN_LIMIT for p in patterns) else patterns


def run_fractions(slots: int, rounds: int) -> list[float]:
    """Each run's share of the whole cost, in start order: `rounds` rounds of `slots` runs, round r's runs
    weighing rounds - r (4 rounds: 40%, 30%, 20% and 10% of the cost). Processes that start together rarely end
    together (a case's cost depends on which pipelines its process has compiled), so a slot that frees early
    takes the next run, and the last runs are the smallest: the slowest slot ends at most a small run late."""
    slots, rounds = max(1, slots), max(1, rounds)
    total = slots * rounds * (rounds + 1) / 2
    return [(rounds - r) / total for r in range(rounds) for _ in range(slots)]


def _cuts(weights: list[float], fractions: list[float]) -> list[int]:
    """Where runs start (0 first) so that run j carries about fractions[j] of the whole weight: run j starts at
    the first item whose weight before it reaches the fractions before j. A heavy item can fill more than its
    run: fewer runs then."""
    total = sum(weights) or 1.0
    targets = [total * f for f in accumulate(fractions)][:-1]
    starts, before = [0], 0.0
    for i, weight in enumerate(weights):
        if i > starts[-1] and len(starts) <= len(targets) and before >= targets[len(starts) - 1] - 1e-9 * total:
            starts.append(i)
        before += weight
    return starts


def shard_filter(k: int, shards: int) -> str:
    """The odd-digit share k of `shards` (0 <= k < shards): the cases whose params string holds k odd digits
    modulo `shards`. A string has one count, so the shares split all cases exactly and disjointly, with no
    list of them. ECMAScript, as std::regex reads it (`{0}` matches nothing, for k = 0). Odd digits and not
    the length: a case's length is mostly its op's field names, so lengths cluster (the pin's default list of
    10,602 cases in 16 shares by length: 73 to 2,389 cases; by odd digits: 144 to 1,109)."""
    return f"^[^13579]*(?:(?:[13579][^13579]*){{{shards}}})*(?:[13579][^13579]*){{{k}}}$"


def joined(params: str | None, pattern: str) -> str:
    """A share's -p: the selection's zero-width lookaheads (`params`, anchored), then the share's own pattern
    from the same start."""
    return (params or "^") + pattern[1:]


def by_odd_digits(params: str | None, shares: int) -> list[str]:
    return [joined(params, shard_filter(k, shares)) for k in range(shares)]

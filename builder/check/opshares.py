"""How verify --ops splits one device's cases between processes that run at once (a Vulkan device: see
ops.SHARDED_BACKENDS), as test-backend-ops' -p patterns: the only way to hand a process its share, since the
program has no option that names cases. -p is an ECMAScript pattern (std::regex) searched in each case's params
string (vars()) before the op filter; what the program's regex reads is checked by the slow tier.

Two splits:
- exact_shares: from the program's own list of the device's supported cases (support mode, no computing), each
  process gets every P-th string in the program's order, so each gets about 1/P of every op's cases. Its
  patterns name their strings, so they grow with the list (PATTERN_LIMIT).
- by_odd_digits: without a list, by the count of odd digits in the string. Always short, always exact and
  disjoint, but uneven: of the default selection's 4,206 cases at the pin, 16 shares held 39 to 648, and on an
  H100 (2026-12-05) the one of 541 set Vulkan0's time while the other 15 were done by 85 s.
"""

from __future__ import annotations

from collections.abc import Iterable

# Linux takes at most 131,072 bytes in one argument (MAX_ARG_STRLEN): a share whose pattern is longer cannot be
# started. The default selection in 16 shares is about 19 KB a share; every case of the 14 default ops
# (10,370 strings) needs 72 KB a share in 16 and 133 KB in 8 (measured at the pin, 2026-12-05).
PATTERN_LIMIT = 120_000

# ECMAScript's syntax characters (ECMA-262, SyntaxCharacter): escaped, everything else is itself.
_SYNTAX = frozenset("^$\\.*+?()[]{}|/")
_Trie = dict[str, "_Trie"]                   # a character to the rest; "" marks the end of a string


def ecma_literal(text: str) -> str:
    """`text` as an ECMAScript pattern that matches it literally."""
    return "".join("\\" + ch if ch in _SYNTAX else ch for ch in text)


def exact_filter(strings: Iterable[str]) -> str:
    """A pattern matching exactly these whole strings, written as a trie: a prefix many strings share (the field
    names, the leading values) is written once. A share of the default selection is about 19 KB this way, 24 KB
    as a plain list of alternatives."""
    root: _Trie = {}
    for text in strings:
        node = root
        for ch in text:
            node = node.setdefault(ch, {})
        node[""] = {}                         # a string ends here
    if not root:
        raise ValueError("no strings to match")
    return "^" + _branches(root) + "$"


def _branches(node: _Trie) -> str:
    alternatives = []
    for ch in sorted(node):
        if ch == "":
            alternatives.append("")
            continue
        run, child = ch, node[ch]
        while len(child) == 1 and "" not in child:    # a chain with no branch: one literal
            ((ch, child),) = child.items()
            run += ch
        alternatives.append(ecma_literal(run) + ("" if child == {"": {}} else _branches(child)))
    return alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"


def exact_shares(strings: list[str], shares: int) -> list[str] | None:
    """One pattern per share (fewer where there are fewer strings): string i goes to share i mod `shares`, so
    neighbours in the program's order (an op's cases, from small to large) are spread over all of them. None when
    a pattern would be over PATTERN_LIMIT."""
    parts = [strings[k::shares] for k in range(min(shares, len(strings)))]
    patterns = [exact_filter(part) for part in parts]
    return None if any(len(p.encode()) > PATTERN_LIMIT for p in patterns) else patterns


def shard_filter(k: int, shards: int) -> str:
    """The odd-digit share k of `shards` (0 <= k < shards): the cases whose params string holds k odd digits
    modulo `shards`. A string has one count, so the shares split all cases exactly and disjointly, with no
    list of them. ECMAScript, as std::regex reads it (`{0}` matches nothing, for k = 0). Odd digits and not
    the length: a case's length is mostly its op's field names, so lengths cluster (the pin's default list of
    10,602 cases in 16 shares by length: 73 to 2,389 cases; by odd digits: 144 to 1,109)."""
    return f"^[^13579]*(?:(?:[13579][^13579]*){{{shards}}})*(?:[13579][^13579]*){{{k}}}$"


def by_odd_digits(params: str | None, shares: int) -> list[str]:
    """Each share's -p: the selection's zero-width lookaheads (`params`, anchored at the start), then the share's
    own pattern, from the same start."""
    return [(params or "^") + shard_filter(k, shares)[1:] for k in range(shares)]

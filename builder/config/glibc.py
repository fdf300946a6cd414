"""The glibc floor: the oldest glibc a Linux runtime promises to start on, and who promised it.

A recipe may state it (`glibc_floor = "2.35"`); `verify` then fails a runtime whose files need a
newer GLIBC_ symbol version than that. A recipe that states none is promised what the build host
has: its own files were linked against that glibc, so that is the floor the build vouches for (a
Debian 12 build promises 2.36, an ubuntu-latest one 2.39). A promise nobody can keep on the machine
that builds (a fixed 2.35 default on a 2.39 host) would fail every build there, and a promise of
"nothing" would let a release's archive say nothing about where it runs. Files linked elsewhere
have no such host: a repaired runtime's inputs, a container unit's (the CUDA 12.8 image is Ubuntu
24.04, glibc 2.39, on a Debian 12 host) or another machine's unit: then nothing is promised unless
the recipe states it, and verify reports what the files need. The generated release workflow builds
on ubuntu-22.04 (glibc 2.35, RELEASE_FLOOR), so its runtimes promise 2.35 as their build host's.
"""

from __future__ import annotations

import platform
import re

from builder.config.versions import version_tuple

# "2.35": glibc has been 2.x for 25 years; a third part (2.35.1) never appears in a symbol version.
FLOOR_RE = re.compile(r"2\.[0-9]{1,3}")
FLOOR_FORM = 'a glibc version like "2.35"'
RELEASE_FLOOR = "2.35"          # Ubuntu 22.04, the oldest GitHub-hosted runner: starts on Debian 12, RHEL 9 too
BY_RECIPE = "recipe"
BY_BUILD_HOST = "build host"
STATED_BY = (BY_RECIPE, BY_BUILD_HOST)
SYMBOL_PREFIX = "GLIBC_"


def host_glibc() -> str | None:
    """This machine's glibc ("2.36"), None where the C library is another one (musl)."""
    libc, version = platform.libc_ver()
    return version if libc == "glibc" and version else None


def default_promise(stated: str | None, built_here: bool = True) -> tuple[str | None, str | None]:
    """(floor, who stated it) for a build: the recipe's, else the build host's glibc when every unit
    was built on it (a container unit or another machine's links against another glibc: nothing)."""
    if stated:
        return stated, BY_RECIPE
    if not built_here:
        return None, None
    have = host_glibc()
    return (have, BY_BUILD_HOST) if have and FLOOR_RE.fullmatch(have) else (None, None)


def newer(need: str, floor: str) -> bool:
    return version_tuple(need) > version_tuple(floor)

"""`assemble matrix --emit github-actions`: the whole release workflow, generated from the matrix.

    units     the --only-unit jobs of split recipes (their folders uploaded as artifacts)
    runtimes  one job per matrix entry: check the runner with `assemble doctor` (the rules build
              enforces), build (merging unit folders downloaded from the units stage), package
              (tar.zst + SBOM + provenance + SHA256SUMS), upload
    release   on a tag: every job's files in one folder, one SHA256SUMS checked, a GitHub release

Which runner each job gets comes from a runner map (`[tool.assemble.runners]` in pyproject.toml,
or a TOML file given with --runners): keys are job names (exact) or the kinds `cuda`, `rocm`,
`container`, `vulkan`, `default`; a job takes its own name first, then the first kind it needs in
that order. The map is checked against the matrix: a key that names no job and no kind is refused.
Every job's matrix entry carries its `needs` in words (the same rules as `build`), so the log says
what its runner must have. The YAML is written here (no YAML library is a dependency): block style,
every string quoted the JSON way, which YAML reads as the same string.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from builder.config import remotecache
from builder.errors import AssembleError
from builder.release.matrix import Entry
from builder.release.package import DEFAULT_FORMAT, SUMS

KINDS = ("cuda", "rocm", "container", "vulkan", "default")
DEFAULT_RUNNERS = {
    "default": "ubuntu-latest",
    "container": "ubuntu-latest",              # docker is there; the toolkit is in the image
    "vulkan": "ubuntu-latest",
    # GPU toolkits are not on GitHub's hosted runners: self-hosted labels by convention
    "cuda": ["self-hosted", "linux", "x64", "cuda"],
    "rocm": ["self-hosted", "linux", "x64", "rocm"],
}
CACHE_SECRET = "ASSEMBLE_REMOTE_CACHE"       # the shared compile cache's URL (it may hold a password): a secret
PYTHON = "3.11"


@dataclass(frozen=True)
class RunnerMap:
    labels: dict[str, str | tuple[str, ...]]
    source: str                               # where it was read, for messages

    def runs_on(self, e: Entry) -> str | list[str]:
        return self.label(next(k for k in (e.name, *_kinds(e), "default") if k in self.labels))

    def label(self, key: str) -> str | list[str]:
        v = self.labels[key]
        return list(v) if isinstance(v, tuple) else v


def _kinds(e: Entry) -> list[str]:
    n = e.needs
    return [k for k, has in (("rocm", n.rocm), ("cuda", n.cuda_toolkit), ("container", n.container_engine),
                             ("vulkan", n.vulkan_sdk)) if has]


def load_runners(path: Path | None, entries: list[Entry]) -> RunnerMap:
    """The runner map: --runners FILE, else ./pyproject.toml's [tool.assemble.runners], else defaults."""
    raw, source = {}, "the defaults"
    if path is None and Path("pyproject.toml").is_file():
        candidate = Path("pyproject.toml")
        data = _toml(candidate)
        if isinstance(data.get("tool", {}).get("assemble", {}).get("runners"), dict):
            raw, source = data["tool"]["assemble"]["runners"], f"{candidate} [tool.assemble.runners]"
    elif path is not None:
        data = _toml(path)
        table = data.get("tool", {}).get("assemble", {}).get("runners") if "tool" in data else data.get("runners", data)
        if not isinstance(table, dict):
            raise AssembleError("no runner map in it", where=str(path),
                                fix="write a [runners] table (or [tool.assemble.runners] in pyproject.toml), "
                                    'e.g. cuda = ["self-hosted", "cuda"]')
        raw, source = table, str(path)
    names = {e.name for e in entries}
    labels: dict[str, str | tuple[str, ...]] = dict(DEFAULT_RUNNERS)
    for key, value in raw.items():
        if key not in KINDS and key not in names:
            raise AssembleError(f"runner map key {key!r} is neither a job of this matrix nor a kind", where=source,
                                fix=f"use a job name ({', '.join(sorted(names))}) or one of {', '.join(KINDS)}")
        if isinstance(value, str) and value.strip():
            labels[key] = value
        elif isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
            labels[key] = tuple(value)
        else:
            raise AssembleError(f"runner map {key!r}: {value!r} is not a runner label or a list of labels",
                                where=source, fix=f'write {key} = "ubuntu-24.04" or {key} = ["self-hosted", "gpu"]')
    return RunnerMap(labels, source)


def _toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise AssembleError(f"cannot read the runner map ({exc})", where=str(path),
                            fix="fix the TOML, or pass --runners FILE") from None


# --- the workflow -----------------------------------------------------------------------------

def _row(e: Entry, runners: RunnerMap) -> dict:
    return {"name": e.name, "recipe": e.recipe, "args": e.args, "artifact": e.artifact,
            "runs-on": runners.runs_on(e), "needs": e.needs.summary, "merges-units": bool(e.after)}


def _setup() -> list[dict]:
    return [
        {"uses": "actions/checkout@v4"},
        {"uses": "actions/setup-python@v5", "with": {"python-version": PYTHON}},
        {"name": "Install assemble", "run": "python -m pip install ."},
        {"name": "Check this runner (the rules build enforces)",
         "run": 'echo "needs: ${{ matrix.needs }}"\nassemble doctor --recipe "${{ matrix.recipe }}"'},
    ]


def _cache_env() -> dict:
    # assemble's own setting (config.remotecache): each launcher is told in its words, the build's hit
    # counts land in its log and manifest; an unset secret is empty, which means local caching only
    return {remotecache.ENV: "${{ secrets.%s }}" % CACHE_SECRET}


def workflow(entries: list[Entry], runners: RunnerMap, name: str = "release") -> dict:
    units = [e for e in entries if e.unit is not None]
    runtimes = [e for e in entries if e.unit is None]
    jobs: dict = {}
    if units:
        jobs["units"] = {
            "name": "unit ${{ matrix.name }}",
            "runs-on": "${{ matrix.runs-on }}",
            "strategy": {"fail-fast": False, "matrix": {"include": [_row(e, runners) for e in units]}},
            "steps": _setup() + [
                {"name": "Build the unit", "env": _cache_env(),
                 "run": 'assemble build ${{ matrix.args }} --out "unit-out"'},
                # named as the merge job's --unit-from expects the folder (the matrix's artifact)
                {"uses": "actions/upload-artifact@v4",
                 "with": {"name": "${{ matrix.artifact }}", "path": "unit-out/", "if-no-files-found": "error"}},
            ],
        }
    jobs["runtimes"] = {
        "name": "runtime ${{ matrix.name }}",
        **({"needs": ["units"]} if units else {}),
        "runs-on": "${{ matrix.runs-on }}",
        "strategy": {"fail-fast": False, "matrix": {"include": [_row(e, runners) for e in runtimes]}},
        "steps": _setup() + ([
            # each lands in ./<artifact>/, the folder the job's --unit-from names
            {"name": "Fetch the unit folders this runtime merges", "if": "matrix.merges-units",
             "uses": "actions/download-artifact@v4", "with": {"pattern": "unit-*", "path": "."}},
        ] if units else []) + [
            {"name": "Build", "env": _cache_env(), "run": 'assemble build ${{ matrix.args }} --out runtime'},
            {"name": "Package", "run": f"assemble package runtime --format {DEFAULT_FORMAT} --out-dir dist"},
            {"uses": "actions/upload-artifact@v4",
             "with": {"name": "runtime-${{ matrix.name }}", "path": "dist/", "if-no-files-found": "error"}},
        ],
    }
    jobs["release"] = {
        "needs": ["runtimes"],
        "if": "startsWith(github.ref, 'refs/tags/')",
        "runs-on": runners.label("default"),
        "permissions": {"contents": "write"},
        "steps": [
            {"uses": "actions/download-artifact@v4", "with": {"pattern": "runtime-*", "path": "jobs"}},
            {"name": f"One folder, one {SUMS}, checked",
             "run": "\n".join([
                 "mkdir release",
                 f"for d in jobs/*/; do (cd \"$d\" && sha256sum -c {SUMS}) && cat \"$d/{SUMS}\" >> all-sums; "
                 f"find \"$d\" -type f ! -name {SUMS} -exec mv -t release {{}} +; done",
                 f"sort -k2 all-sums > release/{SUMS}",
                 f"(cd release && sha256sum -c {SUMS})",
             ])},
            {"name": "GitHub release: archives, SBOMs, provenance, SHA256SUMS",
             "env": {"GH_TOKEN": "${{ github.token }}"},
             "run": 'gh release create "${{ github.ref_name }}" release/* --title "${{ github.ref_name }}" '
                    '--notes "Runtimes built by assemble; verify with: sha256sum -c SHA256SUMS"'},
        ],
    }
    return {"name": name, "on": {"push": {"tags": ["v*", "b*"]}, "workflow_dispatch": {}},
            "permissions": {"contents": "read"}, "jobs": jobs}


# --- YAML, written by hand -------------------------------------------------------------------

def to_yaml(doc: dict, header: str = "") -> str:
    lines = [f"# {ln}" if ln else "#" for ln in header.splitlines()]
    _block(doc, 0, lines)
    return "\n".join(lines) + "\n"


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, dict) and not v:
        return "{}"
    if isinstance(v, list) and not v:
        return "[]"
    return json.dumps(v, ensure_ascii=False)


_YAML11_BOOLEANS = {"on", "off", "yes", "no", "y", "n", "true", "false"}


def _key(k: str) -> str:
    # "on" is quoted: a YAML 1.1 reader (PyYAML) would read the bare word as true
    plain = k.replace("-", "").replace("_", "").isalnum() and k.lower() not in _YAML11_BOOLEANS
    return k if plain else json.dumps(k)


def _block(v, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    if isinstance(v, dict):
        for k, x in v.items():
            if isinstance(x, str) and "\n" in x.rstrip("\n") and not x.endswith("\n\n") and not x[:1].isspace():
                # a literal block: "|" keeps one final newline, "|-" none
                out.append(f"{pad}{_key(k)}: {'|' if x.endswith(chr(10)) else '|-'}")
                out.extend(f"{pad}  {ln}" if ln else "" for ln in x.rstrip("\n").split("\n"))
            elif isinstance(x, (dict, list)) and x:
                out.append(f"{pad}{_key(k)}:")
                _block(x, indent + 1, out)
            else:
                out.append(f"{pad}{_key(k)}: {_scalar(x)}")
    elif isinstance(v, list):
        for x in v:
            if isinstance(x, (dict, list)) and x:
                sub: list[str] = []
                _block(x, indent + 1, sub)
                first = sub[0].lstrip()
                out.append(f"{pad}- {first}")
                out.extend(sub[1:])
            else:
                out.append(f"{pad}- {_scalar(x)}")

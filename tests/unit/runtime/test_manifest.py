"""Property tests of the typed manifest: whatever manifest.json holds, `Manifest.from_json`
returns a Manifest or raises ManifestInvalid (one line, exit 1), never another exception; a
valid manifest survives to_json -> from_json unchanged, and to_json gives the same bytes every
time. The integrity checks and a static verify read a runtime whose manifest.json was mutated
the same ways without any other exception either."""

from __future__ import annotations

import copy
import json
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from builder.check import integrity
from builder.check.verify import FAIL, verify_runtime
from builder.runtime.gpuruntime import CudaModuleCode, CudaRuntimeRecord, GpuRuntimes, RocmRecord
from builder.runtime.manifest import (
    NAME,
    ROLES,
    FileEntry,
    GpuTargets,
    LeftOutRecord,
    LinkEntry,
    Manifest,
    ManifestInvalid,
    PatchRecord,
    Provenance,
    RecipeRecord,
    SourceRecord,
    SystemLib,
    UnitRecord,
)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])
MANY = settings(FAST, max_examples=400)        # the cheap properties: parsing only

# --- valid manifests ---------------------------------------------------------------------

_text = st.text(max_size=12)
_free = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | _text
                     | st.floats(allow_nan=False, allow_infinity=False),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                     max_leaves=8)
_obj = st.dictionaries(_text, _free, max_size=4)
_strs = st.lists(_text, max_size=3).map(tuple)
_segment = st.from_regex(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,8}", fullmatch=True)
_relpath = st.lists(_segment, min_size=1, max_size=3).map("/".join).filter(lambda p: p != NAME)
_hex = st.text("0123456789abcdef", min_size=64, max_size=64)
_line = st.text(st.characters(blacklist_characters="\x00\n\r"), min_size=1, max_size=12)
_version = st.from_regex(r"[0-9]{1,4}(\.[0-9]{1,4}){1,2}", fullmatch=True)
_cuda_targets = st.lists(st.sampled_from(["75-virtual", "86-real", "90", "90a", "120f"]), max_size=3).map(tuple)
_hip_targets = st.lists(st.sampled_from(["gfx1100", "gfx90a:xnack-", "gfx11-generic", "gfx942"]), max_size=3).map(tuple)

_provenance = st.builds(Provenance, kind=st.sampled_from(["git", "sdist", "local"]), verified_by=_text,
                        url=st.none() | _text, package=st.none() | _text, version=st.none() | _text,
                        sha256=st.none() | _text, subdir=st.none() | _text, path=st.none() | _text,
                        dirty=st.none() | st.booleans())
_source = st.builds(SourceRecord, sha=st.none() | st.text("0123456789abcdef", min_size=40, max_size=40), commit_time=st.none() | st.integers(-2**40, 2**62),
                    source=_provenance, features=_obj,
                    patches=st.lists(st.builds(PatchRecord, name=_text, file=_segment.filter(lambda s: s[0] not in "._+-"),
                                               sha256=_text, fixes=_text),
                                     max_size=2).map(tuple))
_recipe = st.builds(RecipeRecord, name=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,10}", fullmatch=True),
                    description=_text, backends=_strs, targets=_strs, file=_text)
_unit = st.builds(UnitRecord, name=_text, backends=_strs, container=st.none() | _text,
                  cuda_policy=st.none() | _obj, hip_policy=st.none() | _obj, built_elsewhere=st.none() | _obj,
                  build_dir=_text, configure=_strs, build=_strs, defines=_obj, toolchain=_obj)


@st.composite
def manifests(draw) -> Manifest:
    paths = draw(st.lists(_relpath, max_size=8, unique=True))
    n_files = draw(st.integers(0, len(paths)))
    files = tuple(FileEntry(p, draw(st.sampled_from(ROLES)), draw(_text), draw(_hex), draw(st.integers(0, 2**62)),
                            draw(st.integers(0, 0o7777))) for p in paths[:n_files])
    # a link points at a sibling: its target never leaves the runtime
    links = tuple(LinkEntry(p, draw(_segment)) for p in paths[n_files:])
    return Manifest(recipe=draw(_recipe), llama_cpp=draw(_source), files=files, symlinks=links,
                    gpu_targets=GpuTargets(draw(_cuda_targets), draw(_hip_targets)),
                    units=tuple(draw(st.lists(_unit, max_size=2))),
                    system_libs=tuple(draw(st.lists(st.builds(SystemLib, soname=_text, reason=_text, needed_by=_strs),
                                                    max_size=2))),
                    glibc_min=draw(st.none() | _version), glibcxx_min=draw(st.none() | _version),
                    size_by_role=draw(st.dictionaries(st.sampled_from(ROLES), st.integers(0, 2**62))), config=draw(st.none() | _obj), schema=draw(st.sampled_from([1, 2])),
                    left_out=tuple(draw(st.lists(st.builds(LeftOutRecord, path=_line, reason=_line), max_size=2))),
                    created_by="assemble " + draw(_text))


@FAST
@given(manifests())
def test_valid_manifests_round_trip_byte_for_byte(m):
    text = m.to_json()
    assert text == m.to_json()
    back = Manifest.from_json(text)
    assert back == m
    assert back.to_json() == text


# --- anything else ---------------------------------------------------------------------------

BASE = Manifest(
    recipe=RecipeRecord("cpu", "CPU only", ("cpu",), ("llama-server",), "cpu.toml"),
    llama_cpp=SourceRecord("0c1e57098bba43ac29e6e3b677cdceebdd22334f", 1700000000, Provenance("git", "sha", url="u"),
                           {"backend-dl": "evidence"}, (PatchRecord("p", "p.patch", "a" * 64, "why"),)),
    files=(FileEntry("bin/llama-server", "own", "/b/llama-server", "a" * 64, 10, 0o755),
           FileEntry("lib/libllama.so.0.5.0", "own", "/b/libllama.so", "b" * 64, 20, 0o755)),
    symlinks=(LinkEntry("lib/libllama.so.0", "libllama.so.0.5.0"),),
    gpu_targets=GpuTargets(("90",), ("gfx1100",)),
    units=(UnitRecord("main", ("cpu",), None, None, None, None, "/b", ("cmake",), ("cmake", "--build"), {"A": "1"},
                      {"cmake": {"version": "3.28", "path": "/usr/bin/cmake"}},
                      {"passed": ["HOME", "PATH"], "keyed": {}, "scrubbed": ["CFLAGS"]}),),
    system_libs=(SystemLib("libc.so.6", "glibc", ("bin/llama-server",)),),
    glibc_min="2.34", size_by_role={"own": 30}, config={"jobs": 2},
    gpu_runtimes=GpuRuntimes(cuda=CudaRuntimeRecord("12.8", "525.60.13", "570.26", "NVIDIA release notes", (
        CudaModuleCode("bin/libggml-cuda.so", ("sm_90", "sm_120a"), ("compute_75",)),)),
        rocm=RocmRecord("6.4", "amdgpu 6.1.x-6.4.x", "AMD matrix")))
BASE_DOC = json.loads(BASE.to_json())


def test_gpu_runtimes_round_trip_and_are_checked_on_reading():
    assert Manifest.from_json(BASE.to_json()) == BASE
    for where, value in ((("cuda", "modules", 0, "sass", 0), "sm_90; rm -rf /"), (("cuda", "modules", 0, "path"),
                         "../../etc/x"), (("cuda", "version"), "twelve"), (("rocm", "version"), 6.4)):
        doc = json.loads(BASE.to_json())
        node = doc["gpu_runtimes"]
        for k in where[:-1]:
            node = node[k]
        node[where[-1]] = value
        with pytest.raises(ManifestInvalid) as err:
            Manifest.from_json(json.dumps(doc))
        assert "gpu_runtimes" in err.value.what and "\n" not in err.value.what

# values aimed at the checks: paths leaving the runtime, links out, impossible numbers, wrong types
NASTY = st.sampled_from([
    "../x", "/etc/passwd", "lib/../../x", "./lib/x", "lib//x", "lib/", ".", "..", "", NAME, "lib\\x", "lib/x\x00y",
    "\ud800", "lib/\udcff", "\x1b[31mred\nline", "assemble ", "assemble", -1, 2**63, 10**400, -(10**400), 0o10000,
    1.5, float("inf"), float("nan"), True, None, [], {}, [1, "a"], {"path": "../x", "target": "/"},
    {"path": "lib/evil", "target": "/etc/passwd"}, {"path": "lib/up", "target": "../../.."}, "a" * 64, "A" * 64,
])
_scalar = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
           | st.binary(max_size=8).map(lambda b: b.decode("latin-1")) | NASTY)
JSONISH = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=6) | st.sampled_from(sorted(BASE_DOC)), inner, max_size=4),
                       max_leaves=12)


def _mutate(data, doc):
    """One to three edits somewhere in the tree: a value replaced, a key or item deleted, one added."""
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        node = doc
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = data.draw(st.sampled_from(keys))
            if isinstance(node[key], (dict, list)) and node[key] and data.draw(st.booleans()):
                node = node[key]
                continue
            op = data.draw(st.sampled_from(["set", "delete", "add"]))
            if op == "set":
                node[key] = data.draw(JSONISH)
            elif op == "delete":
                del node[key]
            elif isinstance(node, dict):
                node[data.draw(st.text(max_size=6))] = data.draw(JSONISH)
            else:
                node.append(data.draw(JSONISH))
            break
    return doc


def _dump(doc) -> str:
    return json.dumps(doc)         # NaN and Infinity as Python writes them; lone surrogates escaped


def assert_manifest_or_one_line(text) -> Manifest | None:
    try:
        m = Manifest.from_json(text)
    except ManifestInvalid as exc:
        assert exc.code == 1 and exc.what.startswith("manifest.json")
        assert "\n" not in exc.line() and "Traceback" not in exc.line()
        return None
    assert isinstance(m, Manifest)
    assert Manifest.from_json(m.to_json()) == m      # what it writes, it reads back as the same manifest
    return m


@MANY
@given(st.data())
def test_mutated_manifests_give_a_manifest_or_one_line(data):
    doc = _mutate(data, BASE_DOC)
    assert_manifest_or_one_line(_dump(doc))


def test_a_source_without_kind_is_invalid():
    """Found by the fuzz above: a llama_cpp.source without 'kind' once raised TypeError."""
    doc = copy.deepcopy(BASE_DOC)
    del doc["llama_cpp"]["source"]["kind"]
    assert assert_manifest_or_one_line(_dump(doc)) is None


@pytest.mark.parametrize("kind, value", [("hip", "../../x"), ("hip", "gfx1100:xnack"), ("cuda", "sm_90"),
                                         ("cuda", "native")])
def test_gpu_targets_outside_the_build_grammar_are_invalid(kind, value):
    """verify reads the targets with the grammar build wrote them in: anything else is a tampered manifest."""
    doc = copy.deepcopy(BASE_DOC)
    doc["gpu_targets"][kind] = [value]
    with pytest.raises(ManifestInvalid) as info:
        Manifest.from_json(_dump(doc))
    assert f"gpu_targets.{kind}" in info.value.line() and repr(value) in info.value.line()


@pytest.mark.parametrize("key, value", [("glibc_min", "9" * 5000), ("glibc_min", "2.34\n"), ("glibc_min", "two"),
                                        ("glibcxx_min", "../3.4"), ("llama_cpp.sha", "../../escaped"),
                                        ("llama_cpp.sha", "0c1e570"), ("llama_cpp.patches[0].file", "../../etc/passwd")])
def test_values_other_stages_use_as_names_or_numbers_are_checked_on_reading(key, value):
    """An archive name, an image tag, a patches/ path and the glibc comparison are made of these."""
    doc = copy.deepcopy(BASE_DOC)
    target = doc
    for part in key.split(".")[:-1]:
        target = target[part.split("[")[0]]
        if "[" in part:
            target = target[int(part.split("[")[1].rstrip("]"))]
    target[key.split(".")[-1]] = value
    with pytest.raises(ManifestInvalid) as info:
        Manifest.from_json(_dump(doc))
    line = info.value.line()
    assert key in line and "\n" not in line and len(line) < 300, line


def test_a_deeply_nested_manifest_is_refused_not_crashed_on():
    """Found by the fuzz: free-form objects nested 600 levels deep once parsed and then broke to_json."""
    doc = copy.deepcopy(BASE_DOC)
    doc["llama_cpp"]["features"] = json.loads('{"a":' * 600 + "0" + "}" * 600)
    assert assert_manifest_or_one_line(_dump(doc)) is None
    doc["llama_cpp"]["features"] = json.loads('{"a":' * 20 + "0" + "}" * 20)   # deep but plausible: kept
    m = assert_manifest_or_one_line(_dump(doc))
    assert m is not None and Manifest.from_json(m.to_json()) == m


@MANY
@given(JSONISH)
@example([[[[[]]]]])
@example({"schema": 2, "created_by": "assemble x", "recipe": {"name": "../x", "backends": []}})
def test_any_json_value(value):
    assert_manifest_or_one_line(_dump(value))


@MANY
@given(st.binary(max_size=64), st.integers(0, len(BASE.to_json())))
@example(b"\xff\xfe\xfa", 0)
@example(b"\xc3\x28", 10)
def test_bytes_spliced_into_a_valid_manifest(junk, at):
    raw = BASE.to_json().encode()
    assert_manifest_or_one_line(raw[:at] + junk + raw[at:])


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 200_000), st.sampled_from(["[", '{"a":']))
@example(100_000, "[")
@example(299, '{"a":')
def test_deep_nesting(depth, opener):
    closer = "]" if opener == "[" else "}"
    deep = opener * depth + "0" + closer * depth
    assert_manifest_or_one_line(deep)
    doc = copy.deepcopy(BASE_DOC)
    doc["llama_cpp"]["features"] = {"deep": 0}
    # inside a manifest, as a free-form value (within json.loads' own limit; deeper than MAX_DEPTH: refused)
    inner = min(depth, 299)
    text = _dump(doc).replace('{"deep": 0}', '{"deep": ' + opener * inner + "0" + closer * inner + "}")
    assert text != _dump(doc)
    assert_manifest_or_one_line(text)


def test_huge_numbers_and_a_lone_surrogate():
    for text in ('{"schema": 1' + "0" * 5000 + "}", '{"schema": 1e999}', '{"schema": -1}', '"\\ud800"'):
        assert assert_manifest_or_one_line(text) is None
    doc = copy.deepcopy(BASE_DOC)
    doc["files"][0]["size"] = 10 ** 400            # parses: an impossible size is caught by the hash check
    assert assert_manifest_or_one_line(_dump(doc)).files[0].size == 10 ** 400
    doc["files"][0]["size"] = -1
    assert assert_manifest_or_one_line(_dump(doc)) is None


# --- a runtime folder holding such a manifest -------------------------------------------------

def _tiny_runtime(root):
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "lib").mkdir(exist_ok=True)
    (root / "bin" / "llama-server").write_bytes(b"#!/bin/sh\nexit 0\n")
    os.chmod(root / "bin" / "llama-server", 0o755)
    (root / "lib" / "libllama.so.0.5.0").write_bytes(b"not an ELF file\n")
    if not os.path.lexists(root / "lib" / "libllama.so.0"):
        (root / "lib" / "libllama.so.0").symlink_to("libllama.so.0.5.0")
    return root


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_verify_reads_any_mutated_manifest_without_an_internal_error(tmp_path, data):
    runtime = _tiny_runtime(tmp_path / "runtime-cpu")
    doc = _mutate(data, BASE_DOC)
    (runtime / NAME).write_text(_dump(doc))
    assert all(isinstance(p, str) and "\n" not in p for p in integrity.problems(runtime))
    report = verify_runtime(runtime, static=True)
    # the tiny runtime never matches the base manifest's hashes: every variant must fail somewhere
    assert any(c.status == FAIL for c in report.checks)


HAND_PICKED = {
    "a file path no file system can hold": lambda d: d["files"][0].__setitem__("path", "\ud800"),
    "a link path no file system can hold": lambda d: d["symlinks"][0].__setitem__("path", "lib/\ud800"),
    "a 5000-digit glibc floor": lambda d: d.__setitem__("glibc_min", "9" * 5000),
    "hip targets that are paths": lambda d: d["gpu_targets"].__setitem__("hip", ["../../x", "\ud800"]),
    "an origin in stubs/ that no file system can hold": lambda d: d["files"][0].__setitem__("origin", "\ud800/stubs/x"),
    "a host soname that no file system can hold": lambda d: d["system_libs"][0].__setitem__("soname", "\ud800"),
}


@pytest.mark.parametrize("edit", sorted(HAND_PICKED))
def test_verify_reads_hand_picked_manifests_without_an_internal_error(tmp_path, edit):
    runtime = _tiny_runtime(tmp_path / "runtime-cpu")
    doc = copy.deepcopy(BASE_DOC)
    HAND_PICKED[edit](doc)
    (runtime / NAME).write_text(_dump(doc))
    integrity.problems(runtime)
    report = verify_runtime(runtime, static=True)
    assert any(c.status == FAIL for c in report.checks)


def test_the_environment_record_has_the_keys_the_build_writes():
    """units[].environment is read with ENVIRONMENT_KEYS (this layer cannot import builder.units): the same."""
    from builder.runtime.manifest import ENVIRONMENT_KEYS
    from builder.units.environment import build_env
    assert set(ENVIRONMENT_KEYS) == set(build_env({"PATH": "/usr/bin", "CFLAGS": "-O0"}).as_dict())


@pytest.mark.parametrize("where", ["", "recipe", "llama_cpp", "llama_cpp.source", "files[0]", "symlinks[0]",
                                   "gpu_targets", "units[0]", "units[0].environment", "system_libs[0]",
                                   "gpu_runtimes", "gpu_runtimes.cuda", "gpu_runtimes.cuda.modules[0]",
                                   "gpu_runtimes.rocm", "size_by_role"])
def test_a_key_the_writer_never_writes_is_refused_naming_its_path(where):
    doc = copy.deepcopy(BASE_DOC)
    target = doc
    for part in filter(None, where.split(".")):
        target = target[part.split("[")[0]]
        if "[" in part:
            target = target[int(part.split("[")[1].rstrip("]"))]
    target["surplus"] = 1
    with pytest.raises(ManifestInvalid) as info:
        Manifest.from_json(_dump(doc))
    line = info.value.line()
    assert f"key {where + '.' if where else ''}surplus is not a key assemble writes" in line and "\n" not in line

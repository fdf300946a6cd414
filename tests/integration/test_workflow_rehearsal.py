"""Rehearse the generated release workflow here, end to end (issue 27): the cpu recipe's jobs in
order, in clean folders, with the real `assemble` (doctor, build, package) and the real shell steps,
from a tag to a checked SHA256SUMS, attested files and a recorded `gh release create --repo ...`.

Slow: it builds llama.cpp. The `cpu_runtime` fixture builds the suite's shared cpu runtime first, so
the rehearsal's own `assemble build` reuses that build folder through the shared cache (ASSEMBLE_CACHE
is the suite's) instead of compiling again.
"""

from __future__ import annotations

import io
import subprocess
import tarfile

import yaml
import zstandard

from builder.release.package import SUMS
from tests.support import rehearsal
from tests.support.common import REPO, TEST_CACHE, assemble


def test_cpu_release_rehearsed_from_tag_to_release(tmp_path, cpu_runtime):
    # emitted from assemble's own checkout, the repository the rehearsal's checkout clones: the default
    # --assemble-repo (the repository the workflow runs in) holds the pinned commit
    proc = assemble("matrix", "--emit", "github-actions", "--recipe", "cpu", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    r = rehearsal.Rehearsal(tmp_path / "rehearsal", rehearsal.head(), cache=TEST_CACHE / "cache")
    results = r.workflow(doc)
    assert results == {"runtime-cpu": "success", "release": "success"}, results
    (call,) = r.gh_calls()
    argv = call["argv"]
    assert argv[:3] == ["release", "create", rehearsal.TAG] and "--draft" not in argv and call["problems"] == []
    assert argv[argv.index("--repo") + 1] == rehearsal.REPOSITORY == call["GH_REPO"]
    release = r.root / "jobs" / "release" / "release"
    archives = sorted(release.glob("*.tar.zst"))
    assert len(archives) == 1 and archives[0].name.startswith("runtime-cpu-"), call["files"]
    assert SUMS in call["files"] and archives[0].name in call["files"] and archives[0].name in r.attested
    check = subprocess.run(["sha256sum", "-c", SUMS], cwd=release, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == len(call["files"]) - 1, check.stdout
    # the archive is the runtime build made: its manifest inside, llama-server among its programs
    with _open_zst(archives[0]) as tar:
        names = tar.getnames()
    assert any(n.endswith("manifest.json") for n in names) and any(n.endswith("/llama-server") for n in names)


def _open_zst(path):
    with path.open("rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f).read()
    return tarfile.open(fileobj=io.BytesIO(data))

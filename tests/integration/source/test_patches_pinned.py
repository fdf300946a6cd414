"""The loader patch on the pinned llama.cpp tree (slow tier: the sdist)."""

from __future__ import annotations

import hashlib
import time

from builder.paths import data_dir
from builder.source import patches as PT
from builder.source.features import check_tree
from builder.source.fetch import SourceTree
from tests.support.common import SHA as PINNED
from tests.unit.source import test_patches as quick_tier

DL, RECIPE, SHA, recipe = quick_tier.DL, quick_tier.RECIPE, quick_tier.SHA, quick_tier.recipe
cache = quick_tier.cache                    # a fixture shared with the quick tier


def test_loader_patch_on_the_pinned_tree(tmp_path, cache, llama_tree):
    real = llama_tree
    reg = real / "ggml" / "src" / "ggml-backend-reg.cpp"
    before = hashlib.sha256(reg.read_bytes()).hexdigest()
    src = SourceTree(real, PINNED, {"kind": "test"})
    r = recipe(tmp_path, sha=PINNED)
    t0 = time.monotonic()
    prepared = PT.prepare(src, r, DL)
    first = time.monotonic() - t0
    # <cache>/trees/<sha>-<patch set>/src: units build beside it, in .../build/
    assert prepared.path.name == "src" and prepared.path.parent.parent == cache / "trees"
    assert prepared.path.parent.name.startswith(PINNED + "-")
    [applied] = prepared.applied
    patch_file = data_dir("patches") / "backend-loader-no-cwd.patch"
    assert applied.name == "backend-loader-no-cwd" and applied.file == patch_file.name
    assert applied.sha256 == hashlib.sha256(patch_file.read_bytes()).hexdigest()
    # the patched loader no longer searches the working directory; the pristine one still does
    assert check_tree(prepared.path, ["backend-loader-cwd"]).missing == ("backend-loader-cwd",)
    assert check_tree(real, ["backend-loader-cwd"]).ok
    patched = (prepared.path / "ggml/src/ggml-backend-reg.cpp").read_text()
    assert "current_path" not in patched and "search_paths.push_back(get_executable_path());" in patched
    assert hashlib.sha256(reg.read_bytes()).hexdigest() == before
    # the copy keeps git metadata (CMake asks git for the build number) and symlinks
    assert (prepared.path / ".git").exists() == (real / ".git").exists()
    # reused, not copied again
    t0 = time.monotonic()
    again = PT.prepare(src, r, DL)
    assert again == prepared and time.monotonic() - t0 < max(first / 4, 0.5)
    # opting out with a reason, or building without GGML_BACKEND_DL: the pristine tree
    off = recipe(tmp_path, '[patches]\ndisable = { "backend-loader-no-cwd" = "started only from bin/" }\n',
                 sha=PINNED)
    plain = PT.prepare(src, off, DL)
    # an unpatched copy in the same layout (so ccache serves both variants)
    assert plain.path == cache / "trees" / f"{PINNED}-pristine" / "src" and plain.applied == ()
    assert (plain.path / "ggml/src/ggml-backend-reg.cpp").read_text() == (real / "ggml/src/ggml-backend-reg.cpp").read_text()
    assert dict(plain.skipped)["backend-loader-no-cwd"] == "disabled by the recipe: started only from bin/"
    no_dl = PT.prepare(src, r, PT.PatchContext(("cpu",), None, (), backend_dl=False))
    assert no_dl.path == plain.path and dict(no_dl.skipped)["backend-loader-no-cwd"] == (
        "not for this build: GGML_BACKEND_DL is off")

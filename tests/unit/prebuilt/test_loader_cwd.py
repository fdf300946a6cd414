"""A prebuilt loader that searches the working directory is told from its imports, so
`verify --static`, `repair --verify-static` and `repair --dry-run` say it, and the static verify
fails it until --accept-loader-risk, as the dynamic one (a planted module) does.

Fast: builds compiled here whose libggml imports std::filesystem::current_path as ggml's
unpatched loader does (ggml-backend-reg.cpp) or does not. Slow: Debian's libggml.so.0.27.0 and
assemble's patched cpu build."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


from builder.check.prebuiltloader import CWD_NAME, cwd_search_check
from builder.check.report import FAIL, PASS, WARN
from builder.prebuilt.loader import cwd_readers, loader_facts
from tests.support.common import assemble
from tests.unit.prebuilt.test_discover import _cc, make_build

CURRENT_PATH = "_ZNSt10filesystem12current_pathB5cxx11ERSt10error_code"     # fs::current_path(std::error_code&)
ACCEPT = "a test: started only from its own folder"


def unpatched_build(folder: Path) -> Path:
    """make_build's folder with a libggml whose loader asks for the working directory, as upstream's."""
    root = make_build(folder)
    b = root / "bin"
    (b / "libggml.so.0.9.4").unlink()
    _cc(b / "libggml.so.0.9.4", f"int ggml_init(void);\nvoid {CURRENT_PATH}(void *, void *);\n"
        f"void *ggml_search_cwd = (void *)&{CURRENT_PATH};\n"
        "int ggml_backend_load_all(void) { return ggml_init(); }\n",
        "-shared", "-Wl,-soname,libggml.so.0", f"-L{b}", "-l:libggml-base.so.0.9.4", "-lstdc++")
    return root


def _checks(proc) -> dict:
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def test_the_import_is_read_and_named(tmp_path):
    plain = make_build(tmp_path / "plain") / "bin" / "libggml.so.0.9.4"
    unpatched = unpatched_build(tmp_path / "up") / "bin" / "libggml.so.0.9.4"
    assert cwd_readers(plain) == () and loader_facts(plain).reads_cwd == ()
    assert cwd_readers(unpatched) == ("std::filesystem::current_path",)
    assert loader_facts(unpatched).reads_cwd == ("std::filesystem::current_path",)


def test_the_check_fails_warns_when_accepted_and_passes_without_the_import(tmp_path):
    for name, root in (("plain", make_build(tmp_path / "plain")), ("up", unpatched_build(tmp_path / "up"))):
        (tmp_path / name / "lib").mkdir()
        shutil.copyfile(root / "bin" / "libggml.so.0.9.4", tmp_path / name / "lib" / "libggml.so.0.9.4")
    assert cwd_search_check(tmp_path / "plain", None).status == PASS
    failed = cwd_search_check(tmp_path / "up", None)
    assert failed.status == FAIL and failed.name == CWD_NAME and "--accept-loader-risk" in failed.hint
    assert "libggml.so.0.9.4 imports std::filesystem::current_path" in failed.reason
    accepted = cwd_search_check(tmp_path / "up", ACCEPT)
    assert accepted.status == WARN and accepted.reason.endswith(f"accepted when repaired: {ACCEPT}")
    (tmp_path / "none").mkdir()
    assert cwd_search_check(tmp_path / "none", None) is None            # no libggml: nothing to say


def test_repair_verify_static_refuses_until_the_risk_is_accepted(tmp_path):
    root = unpatched_build(tmp_path / "up")
    out = tmp_path / "rt"
    # --dry-run fails where the real run fails, with its exit status and its verify table (issue 49 item 7)
    dry = assemble("repair", str(root), "--name", "up", "--out", str(out), "--verify-static", "--dry-run")
    assert dry.returncode == 1 and not out.exists() and "Traceback" not in dry.stderr, dry.stderr
    assert ("also searches the working directory (it imports std::filesystem::current_path)" in dry.stdout
            and "verify fails until --accept-loader-risk" in dry.stdout)
    assert f"{CWD_NAME}  FAIL  libggml.so.0.9.4 imports std::filesystem::current_path" in dry.stderr
    assert dry.stderr.strip().splitlines()[-1].startswith(f"error: {out}: the repaired runtime (dry run) failed "
                                                          "verification")
    accepted = assemble("repair", str(root), "--name", "up", "--out", str(out), "--verify-static", "--dry-run",
                        "--accept-loader-risk", ACCEPT)
    assert accepted.returncode == 0 and not out.exists(), accepted.stderr
    refused = assemble("repair", str(root), "--name", "up", "--out", str(out), "--verify-static")
    assert refused.returncode == 1 and not out.exists()
    assert f"{CWD_NAME}  FAIL  libggml.so.0.9.4 imports std::filesystem::current_path" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith(f"error: {out}: the repaired runtime failed verification")
    done = assemble("repair", str(root), "--name", "up", "--out", str(out), "--verify-static",
                    "--accept-loader-risk", ACCEPT)
    assert done.returncode == 0, done.stderr
    verified = assemble("verify", str(out), "--static", "--json")
    assert verified.returncode == 0 and _checks(verified)[CWD_NAME]["status"] == WARN
    # the acceptance is the manifest's: without it the same files fail the static verify
    m = json.loads((out / "manifest.json").read_text())
    m["loader"]["accepted_risk"] = None
    (out / "manifest.json").write_text(json.dumps(m, indent=2))
    verified = assemble("verify", str(out), "--static", "--json")
    assert verified.returncode == 1 and _checks(verified)[CWD_NAME]["status"] == FAIL


def test_a_loader_without_the_import_says_nothing_in_dry_run_and_passes(tmp_path):
    root = make_build(tmp_path / "plain")
    dry = assemble("repair", str(root), "--dry-run", "--verify-static")
    assert dry.returncode == 0 and "working directory" not in dry.stdout, dry.stderr
    out = tmp_path / "rt"
    assert assemble("repair", str(root), "--name", "plain", "--out", str(out), "--verify-static").returncode == 0
    assert _checks(assemble("verify", str(out), "--static", "--json"))[CWD_NAME]["status"] == PASS


# --- real loaders (slow: Debian's packages, the cpu build) ----------------------------------



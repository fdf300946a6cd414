"""`assemble deploy --root` and `--dry-run` through the real CLI, on a runtime that passes verify --static:
the exact host tree, files that name host paths, a second deploy moving the first to trash, every refusal
before anything changes (one line, exit 2; a runtime failing verify --static, exit 1), status and retire."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from builder.check.tinymodel import write_tiny_llama
from builder.deploy.layout import HostTree
from tests.support.common import assemble, one_error_line
from tests.support.runtimes import make_runtime


@pytest.fixture
def image(tmp_path) -> tuple[Path, Path, Path]:
    """(root of an image with etc/, a runtime, the model inside the image)."""
    root = tmp_path / "img"
    (root / "etc").mkdir(parents=True)
    (root / "srv").mkdir()
    return root, make_runtime(tmp_path / "rt"), write_tiny_llama(root / "srv" / "tiny.gguf")


def tree_of(root: Path) -> set[str]:
    """Every path under root but inside runtime copies, relative, links shown with their target."""
    out = set()
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if "/runtime/" in rel + "/" and not rel.endswith("/runtime"):
                continue
            out.add(f"{rel} -> {os.readlink(p)}" if p.is_symlink() else rel)
    return out


def snapshot(root: Path) -> dict[str, bytes | str]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            out[str(p)] = os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
    return out


def deploy(root, rt, model, *extra, name="chat"):
    return assemble("deploy", str(rt), "--name", name, "--model", str(model), "--root", str(root), *extra)


def test_the_host_tree(image):
    root, rt, model = image
    proc = deploy(root, rt, model, "--port", "9000")
    assert proc.returncode == 0, proc.stderr
    rid = proc.stdout.strip()
    assert rid.startswith("runtime-cpu-") and "." in rid, rid
    assert tree_of(root) == {
        "etc", "etc/systemd", "etc/systemd/system", "etc/systemd/system/assemble-chat.service",
        "etc/sysusers.d", "etc/sysusers.d/assemble-chat.conf", "srv", "srv/tiny.gguf",
        "opt", "opt/assemble", "opt/assemble/chat", "opt/assemble/chat/.lock",
        f"opt/assemble/chat/current -> releases/{rid}", "opt/assemble/chat/releases",
        f"opt/assemble/chat/releases/{rid}", f"opt/assemble/chat/releases/{rid}/runtime",
        f"opt/assemble/chat/releases/{rid}/env", f"opt/assemble/chat/releases/{rid}/serve",
        f"opt/assemble/chat/releases/{rid}/release.json", "opt/assemble/chat/state",
        "opt/assemble/chat/state/ledger.json"}
    rel = root / "opt/assemble/chat/releases" / rid
    # what the host will read names host paths, never the --root path
    unit = (root / "etc/systemd/system/assemble-chat.service").read_text()
    assert "ExecStart=/opt/assemble/chat/current/serve" in unit and str(root) not in unit
    assert "LLAMA_ARG_MODEL='/srv/tiny.gguf'" in (rel / "env").read_text()
    assert str(root) not in (rel / "env").read_text() + (rel / "serve").read_text()
    record = json.loads((rel / "release.json").read_text())
    assert record["release"] == rid and record["port"] == 9000 and record["model"]["path"] == "/srv/tiny.gguf"
    assert record["runtime"]["identity"] == rid.rsplit(".", 1)[0] and record["runtime"]["backends"] == ["cpu"]
    assert os.access(rel / "serve", os.X_OK)
    # the copy is the runtime's bytes, file for file
    assert (rel / "runtime" / "manifest.json").read_bytes() == (rt / "manifest.json").read_bytes()
    assert "systemctl restart assemble-chat.service" in proc.stderr


def test_a_second_release_moves_the_first_to_trash(image):
    root, rt, model = image
    first = deploy(root, rt, model, "--port", "9000").stdout.strip()
    again = deploy(root, rt, model, "--port", "9000")
    assert again.returncode == 0 and again.stdout.strip() == first        # same release: reused, nothing trashed
    second = deploy(root, rt, model, "--port", "9001").stdout.strip()
    base = root / "opt/assemble/chat"
    assert second != first and os.readlink(base / "current") == f"releases/{second}"
    assert [p.name for p in (base / "releases").iterdir()] == [second]
    trash = [p.name for p in (base / "trash").iterdir()]
    assert len(trash) == 1 and trash[0].startswith(first + ".") and (base / "trash" / trash[0] / "runtime").is_dir()
    status = assemble("deploy", "--status", "chat", "--root", str(root), "--json")
    s = json.loads(status.stdout)
    assert s["current"] == second and s["port"] == 9001 and s["trash"] == trash and s["recipe"] == "cpu"
    retired = assemble("deploy", "--retire", "chat", "--root", str(root), "--keep", "0", "--json")
    assert json.loads(retired.stdout) == {"deleted": trash, "kept": []}
    assert list((base / "trash").iterdir()) == []


def test_a_hand_edited_release_is_never_reused_nor_rolled_back_to(image):
    """env and serve are hashed in release.json: an edit (another context size) is refused by name, as a deploy
    of the same release and as a --rollback target; neither refusal changes a byte or forgets a ledger entry."""
    from builder.deploy.service import Recorder
    from builder.deploy.switch import rollback
    from builder.errors import AssembleError

    def snap():                                       # the lock file holds the last locker's pid
        return {k: v for k, v in snapshot(root).items() if not k.endswith("/.lock")}

    root, rt, model = image
    first = deploy(root, rt, model, "--port", "9000").stdout.strip()
    base = root / "opt/assemble/chat"
    record = json.loads((base / "releases" / first / "release.json").read_text())
    assert set(record["files"]) == {"env", "serve"}
    env = base / "releases" / first / "env"
    env.write_text(env.read_text().replace("LLAMA_ARG_CTX_SIZE=", "LLAMA_ARG_CTX_SIZE='64'\n#"))
    before = snap()
    one_error_line(deploy(root, rt, model, "--port", "9000"), 2, ["env was changed after deploy wrote it", first])
    assert snap() == before
    env.write_text(env.read_text().replace("LLAMA_ARG_CTX_SIZE='64'\n#", "LLAMA_ARG_CTX_SIZE="))   # undone
    deploy(root, rt, model, "--port", "9001")                                    # first -> trash
    (serve := next((base / "trash").iterdir()) / "serve").write_text(serve.read_text() + "# edited\n")
    before = snap()
    with pytest.raises(AssembleError) as e:
        rollback("chat", Recorder(), root=root)
    assert "damaged (serve was changed after deploy wrote it" in e.value.what
    assert snap() == before


def test_dry_run_prints_everything_and_writes_nothing(image):
    root, rt, model = image
    before = snapshot(root)
    proc = deploy(root, rt, model, "--dry-run", "--env", "LLAMA_ARG_CTX_SIZE=2048")
    assert proc.returncode == 0, proc.stderr
    assert snapshot(root) == before
    out = proc.stdout
    for words in ("# would write: ", "/opt/assemble/chat/releases/", "/runtime/ (a copy of", "LLAMA_ARG_CTX_SIZE='2048'",
                  "exec \"$server\"", "ExecStart=/opt/assemble/chat/current/serve", "u assemble-chat",
                  f"{root}/etc/systemd/system/assemble-chat.service"):
        assert words in out, words
    existed = os.path.lexists("/opt/assemble/dry-run-test")
    live = assemble("deploy", str(rt), "--name", "dry-run-test", "--model", str(model), "--dry-run")
    assert live.returncode == 0, live.stderr
    assert os.path.lexists("/opt/assemble/dry-run-test") == existed
    assert not os.path.lexists("/etc/systemd/system/assemble-dry-run-test.service")
    for command in ("systemd-sysusers /etc/sysusers.d/assemble-dry-run-test.conf", "systemctl daemon-reload",
                    "systemctl enable assemble-dry-run-test.service", "systemctl restart assemble-dry-run-test.service"):
        assert f"# would run: {command}" in live.stdout


def test_a_foreign_file_is_refused_before_anything_changes(image):
    root, rt, model = image
    deploy(root, rt, model)
    unit = root / "etc/systemd/system/assemble-chat.service"
    unit.write_text(unit.read_text() + "# an operator's edit\n")
    before = snapshot(root)
    one_error_line(deploy(root, rt, model, "--port", "9002"), 2, [str(unit), "did not write"])
    assert snapshot(root) == before
    other = root / "etc/sysusers.d/assemble-new.conf"
    other.parent.mkdir(exist_ok=True)
    other.write_text("u someone\n")
    one_error_line(deploy(root, rt, model, name="new"), 2, [str(other), "did not write"])
    assert not (root / "opt/assemble/new").exists()
    stranger = root / "opt/assemble/x"
    stranger.mkdir(parents=True)
    (stranger / "notes.txt").write_text("mine")
    one_error_line(deploy(root, rt, model, name="x"), 2, [str(stranger), "notes.txt"])
    assert sorted(p.name for p in stranger.iterdir()) == ["notes.txt"]


def test_a_foreign_current_and_release_folder_are_refused(image):
    root, rt, model = image
    rid = deploy(root, rt, model).stdout.strip()
    base = root / "opt/assemble/chat"
    (base / "current").unlink()
    os.symlink("/etc", base / "current")
    one_error_line(deploy(root, rt, model), 2, [str(base / "current")])
    (base / "current").unlink()
    os.symlink(f"releases/{rid}", base / "current")
    (base / "releases" / rid / "release.json").write_text("{}")     # not what deploy wrote there
    one_error_line(deploy(root, rt, model), 2, [str(base / "releases" / rid)])


@pytest.mark.parametrize("args, code, words", [
    (["--name", "Bad"], 2, ["--name", "lower-case"]),
    (["--port", "0"], 2, ["--port 0 is not a TCP port"]),
    (["--env", "LLAMA_ARG_MODEL=/x"], 2, ["set by --model"]),
    (["--model", "/nonexistent/m.gguf"], 2, ["/nonexistent/m.gguf", "does not exist"]),
    (["--model", "OUTSIDE"], 2, ["outside --root"]),
])
def test_bad_input_is_one_line(image, tmp_path, args, code, words):
    root, rt, model = image
    if "OUTSIDE" in args:
        args = ["--model", str(write_tiny_llama(tmp_path / "out.gguf"))]
    argv = dict(zip(["--name", "--model"], ["chat", str(model)], strict=True))
    argv.update(dict(zip(args[::2], args[1::2], strict=True)))
    before = snapshot(root)
    proc = assemble("deploy", str(rt), "--root", str(root), *[x for kv in argv.items() for x in kv])
    one_error_line(proc, code, words)
    assert snapshot(root) == before


def test_a_runtime_failing_verify_static_is_refused(image):
    root, rt, model = image
    (rt / "lib" / "libz.so.1").unlink()                  # a carried library's link removed after the build
    proc = deploy(root, rt, model)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "fails verify --static" in proc.stderr and "FAIL" in proc.stderr
    assert not (root / "opt").exists()


@pytest.mark.parametrize("argv, words", [
    (["deploy"], ["deploy needs RUNTIME"]),
    (["deploy", "rt", "--name", "chat"], ["deploy needs --model"]),
    (["deploy", "--status", "chat", "--model", "m"], ["--status takes no --model"]),
    (["deploy", "--retire", "chat", "--env", "A=1"], ["--retire takes no --env"]),
    (["deploy", "--status", "a", "--rollback", "a"], ["not allowed with argument"]),
    (["deploy", "--status", "nothing-here"], ["nothing is deployed under the name nothing-here"]),
    (["deploy", "--root", "/", "--status", "x"], ["--root is the running system's own root"]),
    (["deploy", "rt", "--name", "chat", "--model", "m", "--gate-timeout", "0"],
     ["--gate-timeout 0 is not a positive number of seconds"]),
    (["deploy", "rt", "--name", "chat", "--model", "m", "--gate-timeout", "-5"], ["--gate-timeout -5 is not a positive"]),
    (["deploy", "--rollback", "chat", "--gate-timeout", "nan"], ["--gate-timeout nan is not a positive"]),
    (["deploy", "rt", "--name", "chat", "--model", "m", "--port-timeout", "-1"], ["--port-timeout -1 is not"]),
])
def test_argument_combinations(argv, words):
    one_error_line(assemble(*argv), 2, words)


def test_json_refusal_object():
    proc = assemble("deploy", "--status", "nothing-here", "--json")
    assert json.loads(proc.stdout)["error"]["exit"] == 2


def test_host_paths_under_root(tmp_path):
    t = HostTree(tmp_path, "chat")
    assert t.host_path(t.current) == Path("/opt/assemble/chat/current")
    assert t.host_path(t.unit) == Path("/etc/systemd/system/assemble-chat.service")

"""builder.prebuilt.inputs: what each argument of `assemble repair` is, and its content unpacked
safely. Real small archives and packages are made here (tarfile, zipfile, an ar container
written by hand, dpkg-deb when the machine has it), hostile ones included: each refusal is
one AssembleError line naming the member, with no dest and no temporary folder left behind."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import struct
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard

from builder.digest import sha256_file
from builder.errors import USAGE, AssembleError
from builder.prebuilt.inputs import Input, classify, unpack
from builder.source.archive import Limits

TRIPLET = "usr/lib/x86_64-linux-gnu"
SMALL = Limits(total=1 << 20, members=50, ratio=10, floor=64 << 10)


# --- makers -------------------------------------------------------------------------------------

def tar_bytes(members: list[tuple], mode: str = "w:gz") -> bytes:
    """(name, kind, payload[, mode]): file -> its bytes or text; symlink/hardlink -> the link
    name; dir, fifo, chr -> no payload; "huge" -> a header announcing `payload` bytes, no data."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, kind, payload, *rest in members:
            info = tarfile.TarInfo(name)
            info.mode = rest[0] if rest else 0o644
            if kind == "file":
                data = payload if isinstance(payload, bytes) else payload.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            if kind == "huge":
                info.size = payload
                tar.fileobj.write(info.tobuf(tar.format, tar.encoding, tar.errors))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
                         "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE}[kind]
            if kind in ("symlink", "hardlink"):
                info.linkname = payload
            tar.addfile(info)
    return buf.getvalue()


def tar_zst(members: list[tuple]) -> bytes:
    return zstandard.ZstdCompressor().compress(tar_bytes(members, "w"))


def zip_bytes(members: list[tuple]) -> bytes:
    """(name, kind, payload[, mode]): file -> bytes/text; symlink -> target; dir; "raw" -> payload
    with external_attr = mode << 16 as given (a device, say); "dos" -> a file with no unix bits."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, kind, payload, *rest in members:
            zi = zipfile.ZipInfo(name)
            zi.compress_type = zipfile.ZIP_DEFLATED
            data = payload if isinstance(payload, bytes) else payload.encode()
            if kind == "file":
                zi.external_attr = (stat.S_IFREG | (rest[0] if rest else 0o644)) << 16
            elif kind == "symlink":
                zi.external_attr = (stat.S_IFLNK | 0o777) << 16
            elif kind == "dir":
                zi.external_attr = (stat.S_IFDIR | 0o755) << 16 | 0x10
            elif kind == "raw":
                zi.external_attr = rest[0] << 16
            elif kind == "dos":
                zi.create_system = 0
                zi.external_attr = 0
            zf.writestr(zi, data)
            if kind == "dos":                  # writestr sets create_system from the host
                zf.filelist[-1].create_system = 0
    return buf.getvalue()


def ar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    out = [b"!<arch>\n"]
    for name, data in members:
        out.append(f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode())
        out.append(data + (b"\n" if len(data) % 2 else b""))
    return b"".join(out)


def deb_bytes(members: list[tuple], comp: str = "xz") -> bytes:
    """A .deb whose data.tar.<comp> holds `members` (tar_bytes' tuples, names as dpkg writes them)."""
    data = tar_zst(members) if comp == "zst" else tar_bytes(members, {"xz": "w:xz", "gz": "w:gz", "": "w"}[comp])
    control = tar_bytes([("./control", "file", "Package: t\nVersion: 1\n")], "w:xz")
    return ar_bytes([("debian-binary", b"2.0\n"), ("control.tar.xz", control),
                     (f"data.tar.{comp}".rstrip("."), data)])


# --- the place archives are unpacked, and what refusals must leave -------------------------

class Place:
    def __init__(self, root: Path):
        self.root = root
        self.inputs = root / "in"
        self.inputs.mkdir()
        self.work = root / "work"
        self.work.mkdir()
        (self.work / "beside.txt").write_text("keep\n")
        self.dest = self.work / "input-0"

    def write(self, name: str, data: bytes) -> Path:
        path = self.inputs / name
        path.write_bytes(data)
        return path

    def one(self, name: str, data: bytes) -> Input:
        (inp,) = classify([str(self.write(name, data))])
        return inp

    def refused(self, inp: Input, *expect: str, limits: Limits | None = None) -> str:
        kw = {"limits": limits} if limits else {}
        before = sorted(os.listdir(self.work))
        with pytest.raises(AssembleError) as err:
            unpack(inp, self.dest, **kw)
        text = err.value.line()
        assert err.value.code == USAGE
        assert "\n" not in text and text.strip() == text and text
        for e in expect:
            assert e in text, text
        assert sorted(os.listdir(self.work)) == before     # no dest, no temporary folder
        assert not self.dest.exists()
        return text


@pytest.fixture
def place(tmp_path) -> Place:
    return Place(tmp_path)


@pytest.fixture(params=["programs", "in-process"])
def decompressor(request, monkeypatch) -> str:
    """Each compressed stream read by the xz/zstd/gzip program in a pipe, then by Python's own readers:
    the same files and the same refusals either way."""
    from builder.prebuilt import streams
    if request.param == "programs":
        missing = [p for p, *_ in streams.PROGRAMS.values() if shutil.which(p) is None]
        assert not missing, f"not installed: {missing} (scripts/ci-setup.sh installs them)"
    monkeypatch.setattr(streams, "USE_PROGRAMS", request.param == "programs")
    return request.param


def listing(root: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
    return out


# --- classify --------------------------------------------------------------------------------

def test_classify_kinds_order_and_the_debs_grouped_where_the_first_was(place, tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    z = place.write("llama-b7416-bin-ubuntu-x64.zip", zip_bytes([("build/bin/llama-cli", "file", "x")]))
    t = place.write("vulkan.tar.gz", tar_bytes([("a", "file", "a")]))
    d1 = place.write("libggml0_0.27.0-1_amd64.deb", deb_bytes([("./usr/lib/a", "file", "a")]))
    d2 = place.write("llama.cpp-tools_0.7.0_amd64.deb", deb_bytes([("./usr/bin/b", "file", "b")]))
    got = classify([str(z), str(d2), str(build), str(d1), str(t)])
    assert [i.kind for i in got] == ["archive", "debs", "folder", "archive"]
    a, debs, folder, tgz = got
    assert a == Input(str(z), z.resolve(), "archive", (z.resolve(),), sha256_file(z), "b7416", (str(z),))
    assert tgz.build is None and tgz.files == (t.resolve(),) and tgz.sha256 == sha256_file(t)
    assert folder == Input(str(build), build.resolve(), "folder", (), None, None)
    assert debs.files == (d2.resolve(), d1.resolve()) and debs.path == d2.resolve()
    assert debs.given == f"{d2} {d1}"
    lines = sorted(f"{p.name} {sha256_file(p)}\n" for p in (d1, d2))
    assert debs.sha256 == hashlib.sha256("".join(lines).encode()).hexdigest()
    # the set's digest does not depend on the order given
    (again,) = classify([str(d1), str(d2)])
    assert again.sha256 == debs.sha256


@pytest.mark.parametrize("case, expect", [
    ("empty", "no input given"),
    ("missing", "no such file or folder"),
    ("dangling", "a symlink to nothing"),
    ("fifo", "special file"),
    ("unknown", "unknown file type"),
    ("bz2", "unknown file type"),
    ("twice", "given twice"),
    ("same-deb-name", "two .deb files named a.deb"),
])
def test_classify_refusals(place, tmp_path, case, expect):
    args: list[str] = []
    if case == "missing":
        args = [str(tmp_path / "nope.zip")]
    elif case == "dangling":
        (tmp_path / "l.zip").symlink_to(tmp_path / "gone.zip")
        args = [str(tmp_path / "l.zip")]
    elif case == "fifo":
        os.mkfifo(tmp_path / "p.tar.gz")
        args = [str(tmp_path / "p.tar.gz")]
    elif case in ("unknown", "bz2"):
        args = [str(place.write("notes.txt" if case == "unknown" else "x.tar.bz2", b"x"))]
    elif case == "twice":
        z = place.write("a.zip", zip_bytes([("a", "file", "a")]))
        args = [str(z), str(place.inputs / "." / "a.zip")]
    elif case == "same-deb-name":
        (tmp_path / "other").mkdir()
        args = [str(place.write("a.deb", b"x")), str(tmp_path / "other" / "a.deb")]
        Path(args[1]).write_bytes(b"y")
    with pytest.raises(AssembleError) as err:
        classify(args)
    text = err.value.line()
    assert err.value.code == USAGE and "\n" not in text and expect in text, text
    assert "fix:" in text


# --- what ordinary inputs give ----------------------------------------------------------------

def test_a_folder_is_read_in_place(place, tmp_path):
    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True)
    (inp,) = classify([str(build)])
    assert unpack(inp, place.dest) == build.resolve()
    assert not place.dest.exists()


def test_zip_keeps_permissions_links_and_returns_its_one_top_folder(place):
    inp = place.one("llama-b7416-bin-ubuntu-x64.zip", zip_bytes([
        ("build/", "dir", ""), ("build/bin/", "dir", ""),
        ("build/bin/llama-server", "file", b"\x7fELF server", 0o755),
        ("build/bin/libggml.so.0.9.4", "file", b"\x7fELF ggml", 0o644),
        ("build/bin/libggml.so.0", "symlink", "libggml.so.0.9.4"),
        ("build/bin/setuid", "file", "s", 0o4777),
        ("build/bin/odd", "file", "o", 0o611),
        ("build/LICENSE", "dos", "MIT"),
    ]))
    root = unpack(inp, place.dest)
    assert root == place.dest / "build"
    assert listing(root) == {
        "LICENSE": (b"MIT", 0o644),
        "bin": "dir",
        "bin/libggml.so.0": ("link", "libggml.so.0.9.4"),
        "bin/libggml.so.0.9.4": (b"\x7fELF ggml", 0o644),
        "bin/llama-server": (b"\x7fELF server", 0o755),
        "bin/odd": (b"o", 0o600),                 # no exec bits without the owner's, as tar's data filter
        "bin/setuid": (b"s", 0o755),              # no setuid, no group/other write
    }
    assert sorted(os.listdir(place.work)) == ["beside.txt", "input-0"]     # no temporary folder left


@pytest.mark.parametrize("name, data", [
    ("a.tar.gz", lambda m: tar_bytes(m, "w:gz")),
    ("a.tgz", lambda m: tar_bytes(m, "w:gz")),
    ("a.tar.xz", lambda m: tar_bytes(m, "w:xz")),
    ("a.tar.zst", tar_zst),
])
def test_tar_archives(place, name, data):
    inp = place.one(name, data([("./", "dir", ""), ("./bin/llama-cli", "file", "cli", 0o755),
                                ("./bin/libllama.so", "symlink", "libllama.so.0"),
                                ("./bin/libllama.so.0", "file", "lib", 0o644),
                                ("./bin/hard", "hardlink", "./bin/libllama.so.0"),
                                ("./README.md", "file", "hi")]))
    root = unpack(inp, place.dest)
    assert root == place.dest                       # two top-level entries: dest is the root
    got = listing(root)
    assert got["bin/llama-cli"] == (b"cli", 0o755) and got["bin/libllama.so"] == ("link", "libllama.so.0")
    assert os.path.samefile(root / "bin/hard", root / "bin/libllama.so.0")
    assert got["README.md"] == (b"hi", 0o644)


def test_an_existing_empty_dest_is_used_and_a_full_one_refused(place):
    inp = place.one("a.tar.gz", tar_bytes([("top/f", "file", "f")]))
    place.dest.mkdir()
    assert unpack(inp, place.dest) == place.dest / "top"
    assert (place.dest / "top/f").read_text() == "f"
    with pytest.raises(AssembleError, match="exists and is not empty"):
        unpack(inp, place.dest)


def test_absolute_symlinks_in_an_archive_are_rebased_or_left_out(place):
    notes: list[str] = []
    inp = place.one("a.zip", zip_bytes([
        ("lib/libggml.so.0", "file", "g"),
        ("lib/libggml.so", "symlink", "/lib/libggml.so.0"),
        ("lib/passwd", "symlink", "/etc/passwd"),
    ]))
    root = unpack(inp, place.dest, notes=notes)
    assert root == place.dest / "lib"
    assert os.readlink(root / "libggml.so") == "libggml.so.0" and (root / "libggml.so").read_text() == "g"
    assert not (root / "passwd").is_symlink()
    assert notes == [f"{inp.given}: symlink 'lib/passwd' -> '/etc/passwd' left out: its target is not in the unpacked tree"]


# --- .deb ----------------------------------------------------------------------------------------

LIBGGML0 = [("./", "dir", ""), ("./usr/", "dir", ""), ("./usr/lib/", "dir", ""), (f"./{TRIPLET}/", "dir", ""),
            (f"./{TRIPLET}/libggml.so.0.9.4", "file", "ggml", 0o644),
            (f"./{TRIPLET}/libggml.so.0", "symlink", "libggml.so.0.9.4"),
            (f"./{TRIPLET}/ggml/backends0/libggml-cpu-haswell.so", "file", "cpu", 0o644),
            ("./usr/share/doc/libggml0/copyright", "file", "MIT")]
DEV = [("./", "dir", ""), ("./usr/", "dir", ""), (f"./{TRIPLET}/", "dir", ""),
       (f"./{TRIPLET}/libggml.so", "symlink", f"/{TRIPLET}/libggml.so.0"),
       ("./usr/bin/", "dir", ""), ("./usr/bin/llama", "symlink", "/etc/alternatives/llama"),
       ("./usr/bin/ggml-module", "symlink", f"/{TRIPLET}/ggml/backends0/libggml-cpu-haswell.so")]
TOOLS = [("./", "dir", ""), ("./usr/bin/llama-server", "file", "server", 0o755),
         ("./usr/lib/", "dir", ""), ("./usr/share/doc/llama.cpp-tools/nightly-tag.txt", "file", "b7416\n")]


@pytest.mark.parametrize("comp", ["xz", "zst", "gz", ""])
def test_debs_unpack_into_one_root_with_absolute_links_rebased(place, decompressor, comp):
    debs = [place.write("libggml0_0.27.0-1_amd64.deb", deb_bytes(LIBGGML0, comp)),
            place.write("llama.cpp-tools_0.7.0_amd64.deb", deb_bytes(TOOLS, comp)),
            place.write("libggml-dev_0.27.0-1_amd64.deb", deb_bytes(DEV, comp))]
    (inp,) = classify([str(d) for d in debs])
    notes: list[str] = []
    members: dict[str, str] = {}
    root = unpack(inp, place.dest, notes=notes, members=members)
    assert root == place.dest                        # the packages' root (it holds usr/), not usr/
    # which package held each path: what the manifest's origins name (llama.cpp-tools_0.7.0_amd64.deb:usr/bin/...)
    assert members["usr/bin/llama-server"] == "llama.cpp-tools_0.7.0_amd64.deb"
    assert members[f"{TRIPLET}/libggml.so"] == "libggml-dev_0.27.0-1_amd64.deb"
    assert members[f"{TRIPLET}/ggml/backends0/libggml-cpu-haswell.so"] == "libggml0_0.27.0-1_amd64.deb"
    lib = root / TRIPLET
    # the -dev package's absolute link, to a file of another package: now relative, inside
    assert os.readlink(lib / "libggml.so") == "libggml.so.0" and (lib / "libggml.so").read_text() == "ggml"
    assert (lib / "ggml/backends0/libggml-cpu-haswell.so").read_text() == "cpu"
    module = root / "usr/bin/ggml-module"                    # a folder up, then down: the shortest relative link
    assert os.readlink(module) == "../lib/x86_64-linux-gnu/ggml/backends0/libggml-cpu-haswell.so"
    assert module.read_text() == "cpu"
    assert stat.S_IMODE((root / "usr/bin/llama-server").stat().st_mode) == 0o755
    assert (root / "usr/share/doc/llama.cpp-tools/nightly-tag.txt").read_text() == "b7416\n"
    assert not os.path.lexists(root / "usr/bin/llama")       # -> /etc/alternatives: not in the tree
    assert notes == [(f"{inp.given}: symlink 'usr/bin/llama' -> '/etc/alternatives/llama' left out: "
                      "its target is not in the unpacked tree")]
    for p in root.rglob("*"):                                 # nothing points outside
        if p.is_symlink():
            assert not os.readlink(p).startswith("/")
            assert os.path.realpath(p).startswith(str(root.resolve()) + os.sep)


def test_an_absolute_link_to_a_package_not_given_is_left_out(place):
    inp = place.one("libggml-dev.deb", deb_bytes(DEV))
    notes: list[str] = []
    unpack(inp, place.dest, notes=notes)
    assert not os.path.lexists(place.dest / TRIPLET / "libggml.so")
    assert len(notes) == 3 and "libggml.so' -> '/usr/lib/x86_64-linux-gnu/libggml.so.0' left out" in notes[0]


def test_notes_are_printed_without_a_list(place, capsys):
    unpack(place.one("libggml-dev.deb", deb_bytes(DEV)), place.dest)
    assert "left out" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")
@pytest.mark.parametrize("comp", ["xz", "zstd", "gzip"])
def test_a_package_built_by_dpkg_deb(place, tmp_path, comp):
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN/control").write_text("Package: t\nVersion: 1\nArchitecture: amd64\nMaintainer: x <x@y.z>\n"
                                        "Description: t\n")
    lib = pkg / TRIPLET
    lib.mkdir(parents=True)
    (lib / "libggml.so.0").write_text("ggml")
    (lib / "libggml.so").symlink_to(f"/{TRIPLET}/libggml.so.0")
    (pkg / "usr/bin").mkdir()
    (pkg / "usr/bin/llama-server").write_text("server")
    (pkg / "usr/bin/llama-server").chmod(0o755)
    deb = place.inputs / "t_1_amd64.deb"
    subprocess.run(["dpkg-deb", f"-Z{comp}", "--root-owner-group", "--build", str(pkg), str(deb)],
                   check=True, capture_output=True)
    (inp,) = classify([str(deb)])
    root = unpack(inp, place.dest)
    assert os.readlink(root / TRIPLET / "libggml.so") == "libggml.so.0"
    assert (root / TRIPLET / "libggml.so").read_text() == "ggml"
    assert stat.S_IMODE((root / "usr/bin/llama-server").stat().st_mode) == 0o755


# --- hostile and broken tar archives ------------------------------------------------------------

@pytest.mark.parametrize("members, expect", [
    ([("top/ok", "file", "ok"), ("/etc/evil", "file", "x")], ["'/etc/evil'", "absolute"]),
    ([("top/ok", "file", "ok"), ("top/../../evil", "file", "x")], ["'top/../../evil'", "escapes"]),
    ([("top/l", "symlink", "../../evil")], ["'top/l'", "points outside"]),
    ([("top/a", "symlink", "."), ("top/x", "symlink", "a/../..")], ["points outside"]),
    ([("top/a", "symlink", "b"), ("top/b", "symlink", "a")], ["loop"]),
    ([("top/tty", "chr", "")], ["'top/tty'", "device"]),
    ([("top/pipe", "fifo", "")], ["'top/pipe'", "fifo"]),
    ([("top/h", "hardlink", "/etc/passwd")], ["'top/h'", "absolute"]),
    ([("top/h", "hardlink", "../outside")], ["'top/h'", "escapes"]),
    ([("top/h", "hardlink", "top/missing")], ["'top/h'", "not a file extracted before it"]),
    ([("top/d", "symlink", "sub"), ("top/d/x", "file", "x")], ["'top/d/x'", "through the symlink"]),
    ([("top/f", "file", "a"), ("top/f", "file", "b")], ["'top/f'", "twice"]),
    ([("top/ok", "file", "ok"), ("top/huge", "huge", 100 << 30)], ["'top/huge'", "limit of 16.0 GiB"]),
])
def test_hostile_tar(place, decompressor, members, expect):
    # the hostile member comes last: nothing is written before the whole list is checked
    place.refused(place.one("a.tar.gz", tar_bytes(members)), *expect)


def test_tar_size_limits(place, decompressor):
    many = [(f"top/f{i}", "file", "x") for i in range(60)]
    text = place.refused(place.one("many.tar.gz", tar_bytes(many)), "more than 50 members", "'top/f50'", limits=SMALL)
    assert "fix: if it really holds that much, unpack it yourself" in text
    big = [("top/a", "file", b"a" * 600_000), ("top/b", "file", os.urandom(600_000))]
    place.refused(place.one("big.tar.xz", tar_bytes(big, "w:xz")), "'top/b'", "limit of 1.0 MiB", limits=SMALL)
    zeros = [("top/zeros", "file", bytes(200_000))]     # 200 kB of zeros pack into a few hundred bytes
    place.refused(place.one("bomb.tar.gz", tar_bytes(zeros)), "'top/zeros'", "compression bomb", limits=SMALL)
    place.refused(place.one("bomb.tar.zst", tar_zst(zeros)), "compression bomb", limits=SMALL)


def test_broken_tar(place, decompressor):
    good = tar_bytes([("top/a", "file", os.urandom(4000)), ("top/b", "file", os.urandom(4000))])
    place.refused(place.one("cut.tar.gz", good[: len(good) // 2]), "refused:", "cut.tar.gz")
    place.refused(place.one("junk.tar.xz", b"not an archive"), "refused:", "unreadable")
    place.refused(place.one("junk.tar.zst", b"not zstd at all"), "refused:", "zstd")


# --- hostile and broken zips ----------------------------------------------------------------------

@pytest.mark.parametrize("members, expect", [
    ([("ok", "file", "ok"), ("/etc/evil", "file", "x")], ["'/etc/evil'", "absolute"]),
    ([("ok", "file", "ok"), ("a/../../evil", "file", "x")], ["'a/../../evil'", "escapes"]),
    ([("ok", "file", "ok"), ("a\\..\\evil", "file", "x")], ["backslash"]),
    ([("ok", "file", "ok"), ("evil\x01.txt", "file", "x")], ["'evil\\x00.txt'", "NUL"]),  # \x01 -> NUL below
    ([("lib/l", "symlink", "../../etc/passwd")], ["'lib/l'", "points outside"]),
    ([("lib/d", "symlink", "."), ("lib/x", "symlink", "d/../..")], ["'lib/x'", "points outside"]),
    ([("lib/d", "symlink", "sub"), ("lib/d/x", "file", "x")], ["'lib/d/x'", "through the symlink"]),
    ([("lib/a", "file", "a"), ("lib/a", "file", "b")], ["'lib/a'", "twice"]),
    ([("lib/a", "file", "a"), ("lib//a", "file", "b")], ["'lib/a'", "twice"]),
    ([("lib/tty", "raw", "", stat.S_IFCHR | 0o600)], ["'lib/tty'", "special file"]),
    ([("lib/pipe", "raw", "", stat.S_IFIFO | 0o600)], ["'lib/pipe'", "special file"]),
    ([("lib/l", "symlink", "x" * 5000)], ["'lib/l'", "5000-byte target"]),
])
@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_hostile_zip(place, members, expect):
    data = zip_bytes(members).replace(b"evil\x01.txt", b"evil\x00.txt")    # zipfile cuts a name at NUL
    place.refused(place.one("a.zip", data), *expect)


def _patch_central(data: bytes, index: int, offset: int, fmt: str, value: int) -> bytes:
    """Change a field of the index-th central directory record."""
    pos = -1
    for _ in range(index + 1):
        pos = data.index(b"PK\x01\x02", pos + 1)
    return data[:pos + offset] + struct.pack(fmt, value) + data[pos + offset + struct.calcsize(fmt):]


def test_zip_size_limits(place):
    many = [(f"f{i}", "file", "x") for i in range(60)]
    place.refused(place.one("many.zip", zip_bytes(many)), "more than 50 members", limits=SMALL)
    big = [("a", "file", os.urandom(600_000)), ("b", "file", os.urandom(600_000))]
    place.refused(place.one("big.zip", zip_bytes(big)), "'b'", "limit of 1.0 MiB", limits=SMALL)
    bomb = [("small", "file", os.urandom(100_000)), ("zeros", "file", bytes(900_000))]
    place.refused(place.one("bomb.zip", zip_bytes(bomb)), "'zeros'", "compression bomb", limits=SMALL)
    # a central directory announcing 4 GiB for a member of a few bytes, at the default limits
    lying = _patch_central(zip_bytes([("a", "file", "a"), ("b", "file", "b")]), 0, 24, "<I", 0xFFFFFFF0)
    place.refused(place.one("lying.zip", lying), "'a'", "compression bomb")


def test_overlapping_zip_members(place):
    data = zip_bytes([("a", "file", "aaaa"), ("b", "file", "bbbb")])
    # b's central record points at a's local header: two names, one piece of data
    place.refused(place.one("overlap.zip", _patch_central(data, 1, 42, "<I", 0)), "'a' and 'b' overlap", "zip bomb")


def test_encrypted_zip_member(place):
    data = _patch_central(zip_bytes([("a", "file", "a")]), 0, 8, "<H", 0x1)
    place.refused(place.one("enc.zip", data), "'a'", "encrypted")


def test_a_failure_while_writing_leaves_nothing(place):
    data = bytearray(zip_bytes([("top/a", "file", "first member"), ("top/b", "file", "second member")]))
    crc = _patch_central(bytes(data), 1, 16, "<I", 0)      # b's data no longer matches its CRC
    place.refused(place.one("crc.zip", crc), "refused:", "CRC")


def test_broken_zip(place):
    place.refused(place.one("junk.zip", b"PK\x03\x04 not really"), "refused:", "unreadable zip")


# --- hostile and broken packages ------------------------------------------------------------------

def test_hostile_deb_members(place, decompressor):
    hostile = LIBGGML0 + [("./usr/lib/../../../evil", "file", "x")]
    place.refused(place.one("a.deb", deb_bytes(hostile)), "'./usr/lib/../../../evil'", "escapes")
    place.refused(place.one("b.deb", deb_bytes(LIBGGML0 + [("./usr/x", "symlink", "../../../etc")])),
                  "'usr/x'", "points outside")
    place.refused(place.one("c.deb", deb_bytes(LIBGGML0 + [("./dev/sda", "chr", "")])), "'./dev/sda'", "device")


def test_the_same_file_in_two_packages_is_refused(place):
    debs = [place.write("a.deb", deb_bytes(LIBGGML0)), place.write("b.deb", deb_bytes(LIBGGML0[:1] + LIBGGML0[4:5]))]
    (inp,) = classify([str(d) for d in debs])
    place.refused(inp, f"'{TRIPLET}/libggml.so.0.9.4'", "twice")


@pytest.mark.parametrize("data, expect", [
    (b"PK\x03\x04 a zip", "no ar header"),
    (ar_bytes([("control.tar.xz", b"x")]), "first member is not debian-binary"),
    (ar_bytes([("debian-binary", b"3.0\n")]), "format 2.x"),
    (ar_bytes([("debian-binary", b"2.0\n"), ("control.tar.xz", b"x")]), "no data.tar member"),
    (ar_bytes([("debian-binary", b"2.0\n"), ("data.tar.lzma", b"x")]), "data.tar.lzma: unsupported compression"),
    (ar_bytes([("debian-binary", b"2.0\n"), ("data.tar.xz", b"x"), ("data.tar.gz", b"y")]),
     "more than one data.tar"),
    (ar_bytes([("debian-binary", b"2.0\n"), ("data.tar.xz", b"x" * 100)])[:-40], "'data.tar.xz' is truncated"),
    (b"!<arch>\n" + b"debian-binary   0           0     0     100644  4         XX2.0\n", "damaged ar member header"),
    (b"!<arch>\n" + b"debian-binary   0           0     0     100644  -4        `\n2.0\n", "bad size field"),
    (ar_bytes([("debian-binary", b"2.0\n"), ("data.tar.xz", b"not xz")]), "unreadable"),
])
def test_broken_debs(place, decompressor, data, expect):
    inp = place.one("broken_1_amd64.deb", data)
    text = place.refused(inp, expect)
    assert inp.files[0].name in text.split(": refused:")[0], text      # where: the package at fault
    assert "fix: it is damaged or unsafe" in text


def test_a_refusal_names_the_package_at_fault(place, decompressor):
    good = place.write("libggml0_0.27.0-1_amd64.deb", deb_bytes(LIBGGML0))
    bad = place.write("cut_1_amd64.deb", ar_bytes([("debian-binary", b"2.0\n"), ("data.tar.xz", b"not xz")]))
    (inp,) = classify([str(good), str(bad)])
    text = place.refused(inp, "unreadable", "xz")
    assert text.startswith(f"{bad}: refused:"), text


def test_a_deb_size_bomb(place, decompressor):
    bomb = deb_bytes([("./", "dir", ""), ("./usr/zeros", "file", bytes(300_000))], "zst")
    place.refused(place.one("bomb.deb", bomb), "compression bomb", limits=SMALL)


def test_a_deb_unpacks_to_what_dpkg_deb_writes(place, tmp_path, decompressor):
    """The streamed unpack against dpkg-deb -x of the same package: the same files, bytes, modes and links."""
    if shutil.which("dpkg-deb") is None:
        pytest.fail("dpkg-deb is not installed (scripts/ci-setup.sh installs it)")
    deb = place.write("libggml0_0.27.0-1_amd64.deb", deb_bytes(LIBGGML0 + [
        ("./usr/lib/big", "file", os.urandom(3 << 20)), ("./usr/lib/hard", "hardlink", "./usr/lib/big")]))
    (inp,) = classify([str(deb)])
    root = unpack(inp, place.dest)
    ref = tmp_path / "dpkg"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(ref)], check=True)
    assert listing(root) == listing(ref)
    assert (root / "usr/lib/hard").stat().st_ino == (root / "usr/lib/big").stat().st_ino
    assert sorted(os.listdir(place.work)) == ["beside.txt", "input-0"]      # no spool left behind


def test_an_archives_members_are_named_by_the_archive(place):
    inp = place.one("llama-b7416-bin-ubuntu-x64.tar.gz", tar_bytes([("build/bin/llama-server", "file", "s")]))
    members: dict[str, str] = {}
    unpack(inp, place.dest, members=members)
    assert members == {"build/bin/llama-server": "llama-b7416-bin-ubuntu-x64.tar.gz"}

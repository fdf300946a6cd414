#!/usr/bin/env python3
"""Benchmark `assemble pin --earliest` over a long first-parent history.

By default it writes (once, with git fast-import) a synthetic llama.cpp-shaped history
of 10,000 first-parent commits: a tree of ~60 files, common/arg.cpp (~40 KB) changed
every 5th commit (2,000 versions; upstream changed it ~340 times in 10,500 commits),
ggml/CMakeLists.txt every 7th, a merge of a 2-commit side branch every 50th, and the
cuda-vulkan recipe's four features appearing at known points, override-tensor added,
removed and added back. Then it times the whole pin (resolve, check head, list
history, path-limited log, scan, re-check) in fresh processes' worth of state, and
prints the median.

    python3 scripts/bench-pin.py                        # synthetic, 10,000 commits
    python3 scripts/bench-pin.py --repo ~/src/llama.cpp --ref master   # a real clone

Recorded (2 cores shared with other jobs, git 2.39, Python 3.11; see docs/lab/2026-11-29-features.md):
    synthetic, 10,000 first-parent commits:             median 0.547 s (5 runs)
    ngxson/llama.cpp master, 10,586 first-parent commits: median 0.761 s (5 runs)
(writing the synthetic repository once takes about a minute; --keep DIR reuses it)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from builder.source import pin as P
from builder.source.gitobjects import GitRepo

FEATURES = ["device-select", "backend-dl", "override-tensor", "spec-draft-device"]
N = 10_000
AT = {"backend-dl": 1500, "list-devices": 2500, "device": 2600, "ot-add": 4000, "ot-remove": 6000,
      "ot-readd": 7000, "spec-draft-device": 8000}
EXPECTED = AT["spec-draft-device"]
FILLER = "".join(f"    // option {i}: {'x' * 60}\n" for i in range(500))  # ~40 KB of arg.cpp


def arg_cpp(i: int) -> str:
    flags = []
    if i >= AT["list-devices"]:
        flags.append('{"--list-devices"},')
    if i >= AT["device"]:
        flags.append('{"-dev", "--device"},')
    if AT["ot-add"] <= i < AT["ot-remove"] or i >= AT["ot-readd"]:
        flags.append('{"-ot", "--override-tensor"},')
    if i >= AT["spec-draft-device"]:
        flags.append('{"--spec-draft-device", "-devd"},')
    return "// arg.cpp\n" + FILLER + "\n".join(flags) + f"\n// revision {i // 5}\n"


def cmake(i: int) -> str:
    dl = 'option(GGML_BACKEND_DL "dl" OFF)\n' if i >= AT["backend-dl"] else ""
    return "project(ggml)\n" + dl + f"# revision {i // 7}\n"


def blob(path: str, text: str) -> bytes:
    data = text.encode()
    return f"M 100644 inline {path}\n".encode() + b"data %d\n" % len(data) + data + b"\n"


def write_history(repo: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    subprocess.run(["git", "--git-dir", str(repo), "symbolic-ref", "HEAD", "refs/heads/main"], check=True)
    proc = subprocess.Popen(["git", "--git-dir", str(repo), "fast-import", "--quiet"], stdin=subprocess.PIPE)
    out = proc.stdin
    mark = main_mark = 0          # main_mark: the last commit on main (set at the end of each pass)
    last = {"arg": None, "cmake": None}
    for i in range(N):
        files = []
        if i == 0:
            for d in range(12):
                for f in range(5):
                    files.append(blob(f"src/dir{d}/file{f}.cpp", f"// {d}/{f}\n"))
        files.append(blob(f"src/dir{i % 12}/file{i % 5}.cpp", f"// touched at {i}\n"))
        if last["arg"] != arg_cpp(i) or i % 5 == 0:
            last["arg"] = text = arg_cpp(i)
            files.append(blob("common/arg.cpp", text))
        if last["cmake"] != cmake(i):
            last["cmake"] = text = cmake(i)
            files.append(blob("ggml/CMakeLists.txt", text))
        merge = b""
        if i and i % 50 == 0:
            for k in range(2):
                mark += 1
                side = f"side{i}"
                out.write(f"commit refs/heads/{side}\nmark :{mark}\n"
                          f"committer B <b@example.org> {1_600_000_000 + i * 60 + k} +0000\n".encode())
                out.write(b"data 4\nside\n")
                if k == 0:
                    out.write(f"from :{main_mark}\n".encode())
                out.write(blob(f"side/{i}.txt", f"side {k}\n"))
                out.write(b"\n")
            merge = f"merge :{mark}\n".encode()
            files.append(blob(f"side/{i}.txt", "side 1\n"))
        mark += 1
        msg = f"main {i}".encode()
        out.write(f"commit refs/heads/main\nmark :{mark}\n"
                  f"committer A <a@example.org> {1_600_000_000 + i * 60} +0000\n".encode())
        out.write(b"data %d\n%s\n" % (len(msg), msg))
        if i:
            out.write(f"from :{main_mark}\n".encode())
        out.write(merge)
        out.write(b"".join(files) + b"\n")
        main_mark = mark
    out.close()
    if proc.wait() != 0:
        raise SystemExit("git fast-import failed")
    subprocess.run(["git", "--git-dir", str(repo), "gc", "--quiet", "--aggressive"], check=True)


def time_pin(repo: Path, ref: str, features: list[str]) -> tuple[float, P.PinResult]:
    start = time.perf_counter()
    with GitRepo(repo) as r:  # a fresh reader each run: no warm object caches
        result = P.pin(r, ref, features, earliest=True)
    return time.perf_counter() - start, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", help="benchmark this repository instead of the synthetic one")
    ap.add_argument("--ref", default="HEAD")
    ap.add_argument("--features", default=",".join(FEATURES))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", metavar="DIR", help="write/reuse the synthetic repository here")
    args = ap.parse_args()
    features = [f for f in args.features.split(",") if f]
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(args.repo) if args.repo else Path(args.keep or tmp) / "synthetic.git"
        if not args.repo and not repo.exists():
            t0 = time.perf_counter()
            write_history(repo)
            print(f"wrote {N} first-parent commits in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        times = []
        for _ in range(args.runs):
            seconds, result = time_pin(repo, args.ref, features)
            times.append(seconds)
        e = result.earliest
        if not args.repo:
            assert e.position == EXPECTED and e.history == N, (e.position, e.history)
            assert e.deciding == ("spec-draft-device",)
        print(f"history: {e.history} first-parent commits; earliest {e.commit.sha[:12]} at position "
              f"{e.position}, decided by {', '.join(e.deciding) or '(none)'}; {e.checked} commits examined")
        print(f"runs: {', '.join(f'{t:.3f}' for t in times)} s")
        print(f"median: {statistics.median(times):.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

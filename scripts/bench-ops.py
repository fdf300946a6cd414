#!/usr/bin/env python3
"""What each op of verify --ops costs on each device: test-backend-ops from a runtime's tests/, one op at a time.

    python3 scripts/bench-ops.py RUNTIME --device CUDA0 --device Vulkan0 [--ops LIST] [--cap 15]
                                 [--jobs N] [--processes N] [--env K=V]... [--out results.json]

For every device and every op (default: the cases verify --ops alone runs, builder.check.ops.DEFAULT_SELECTION;
--ops LIST or --all-cases: every case), runs the same command verify --ops runs (builder.check.ops.run_device:
`test-backend-ops test -b DEVICE -o OP -j J --output sql`, or, where the device is sharded, the program's list
of the cases first and then S such processes at once, each with its share of them (-p, builder/check/opshares);
an empty environment but --env, a scratch folder), stopped after --cap seconds (the list included). Prints and keeps per op: seconds, cases run, cases
failed, cases not supported, whether the cap stopped it (then the cases counted are those it had finished: a
rate, not a total). J (threads, --jobs) and S (processes, --processes) are verify's own choice per device
(builder.check.ops.parallelism) unless given, each on its own. The sums per device are what
`verify --ops LIST` would take for the ops that finished; docs/lab/ quotes a run's numbers with the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from builder.check.ops import (DEFAULT_SELECTION, Parallelism, Selection, backend_of, parallelism,  # noqa: E402
                               parse_op_list, program, run_device)
from builder.runtime.layout import LIB_DIR, TESTS_DIR, module_backend  # noqa: E402


def own_module_view(runtime: Path, device: str, folder: Path) -> Path:
    """An experiment, not what verify runs: a runtime-shaped folder whose tests/ holds a copy of the runtime's
    test-backend-ops and links to only the device's own backend module and the CPU variants, lib/ a link to
    the runtime's. test-backend-ops loads every module beside it (ggml_backend_load_all), so in a cuda-vulkan
    runtime each Vulkan process also loads the CUDA backend and starts the CUDA driver; the copy finds its
    modules beside itself (the executable's real folder) and its libraries through $ORIGIN/../lib."""
    backend = backend_of(device)
    view = folder / f"view-{backend}"
    tests = view / TESTS_DIR
    tests.mkdir(parents=True)
    (view / LIB_DIR).symlink_to(Path(runtime).resolve() / LIB_DIR)
    shutil.copy2(program(runtime), program(view))
    for entry in sorted((Path(runtime) / TESTS_DIR).iterdir()):
        if module_backend(entry.name) in (backend, "cpu"):
            (tests / entry.name).symlink_to(entry.resolve())
    return view


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runtime", type=Path)
    ap.add_argument("--device", action="append", required=True, help="a device as --list-devices names it")
    ap.add_argument("--ops", help="every case of these ops (default: the cases verify --ops alone runs)")
    ap.add_argument("--all-cases", action="store_true", help="every case of the default op list")
    ap.add_argument("--cap", type=float, default=15.0, help="seconds one op may run on one device")
    ap.add_argument("--jobs", type=int, default=None, help="test-backend-ops -j (default: verify's choice)")
    ap.add_argument("--processes", type=int, default=None,
                    help="test-backend-ops processes at once, each with its run of the cases (default: verify's choice)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds of runs of like cases, where a device runs as several processes; at most, as a short "
                    "list gets fewer (ops.rounds_for) (default: verify's choice)")
    ap.add_argument("--env", action="append", default=[], help="K=V for the program's environment")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--together", action="store_true",
                    help="run the whole list as one run per device, as verify --ops does, not op by op")
    ap.add_argument("--own-module", action="store_true",
                    help="an experiment: run test-backend-ops from a view of the runtime holding only the device's own "
                    "backend module and the CPU variants (own_module_view), not every module the runtime carries")
    ap.add_argument("--keep", type=Path, help="a folder to leave each run's raw output in (DEVICE-OP/shard-K.out: "
                    "every case with its test_time, a timeline; list-0.out: the program's list)")
    args = ap.parse_args(argv)
    env = dict(kv.split("=", 1) for kv in args.env)
    rows = []
    views = tempfile.TemporaryDirectory(prefix="bench-ops-views-")
    for device in args.device:
        runtime = own_module_view(args.runtime, device, Path(views.name)) if args.own_module else args.runtime
        chosen = parallelism(device)
        par = Parallelism(args.jobs or chosen.threads, args.processes or chosen.processes,
                          chosen.rounds if args.rounds is None else args.rounds)
        selection = (Selection(parse_op_list(args.ops)) if args.ops else
                     Selection(DEFAULT_SELECTION.ops) if args.all_cases else DEFAULT_SELECTION)
        ops = selection.ops
        for op in ([",".join(ops)] if args.together else ops):
            keep = None
            if args.keep:
                keep = args.keep / f"{device}-{'all' if args.together else op}"
                keep.mkdir(parents=True, exist_ok=True)
            r = run_device(runtime, device, tuple(op.split(",")), env, timeout=args.cap, parallel=par, keep=keep,
                           params=selection.params)
            row = {"device": device, "op": op, "cases_selected": selection.cases, "jobs": par.threads, "processes": par.processes, "rounds": par.rounds,
                   "schedule": "queue" if par.processes > 1 else "one",
                   "modules": "own" if args.own_module else "all",
                   "seconds": round(r.seconds, 2),
                   "cases": len(r.ran), "failed": len(r.failed), "unsupported": r.unsupported,
                   "capped": r.timed_out,
                   "returncode": r.returncode, "error": r.error or "", "stderr_tail": r.stderr_tail[-300:]}
            rows.append(row)
            shown = f"{len(ops)} ops" if args.together else op[:15]     # the whole list does not fit a column
            print(f"{device:9} {shown:15} -j{par.threads:<3} x{par.processes:<3} r{par.rounds:<2} {row['seconds']:7.1f}s "
                  f"{row['cases']:6} cases "
                  f"{row['failed']:3} failed {row['unsupported']:5} unsupported"
                  + ("  CAPPED" if row["capped"] else "") + (f"  rc={r.returncode}" if r.returncode else ""),
                  flush=True)
    finished = {}
    for device in args.device:
        done = [r for r in rows if r["device"] == device and not r["capped"] and r["returncode"] == 0]
        finished[device] = {"ops": [r["op"] for r in done], "seconds": round(sum(r["seconds"] for r in done), 1),
                            "capped": [r["op"] for r in rows if r["device"] == device and r["capped"]]}
        print(f"{device}: {len(done)} ops finished in {finished[device]['seconds']}s; capped: "
              f"{', '.join(finished[device]['capped']) or 'none'}")
    views.cleanup()
    if args.out:
        args.out.write_text(json.dumps({"host": platform.node(), "cap_s": args.cap, "env": env, "rows": rows,
                                        "finished": finished}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

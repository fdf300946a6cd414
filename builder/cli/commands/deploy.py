"""assemble deploy: a runtime into service on this host (env file + serve script + systemd unit), gated
on a real first request, with rollback; --status, --rollback, --retire; --root for an image's tree."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from builder import ui
from builder.cli.args import Subparsers
from builder.errors import AssembleError

if TYPE_CHECKING:
    from builder.deploy.switch import Outcome

EPILOG = """examples:
  assemble deploy runtime-cpu --name chat --model /srv/models/qwen3-8b-q4.gguf --port 8080
  assemble deploy runtime-cuda-vulkan --name chat --model /srv/models/m.gguf --env LLAMA_ARG_CTX_SIZE=16384
  assemble deploy runtime-cpu --name chat --model /srv/models/m.gguf --dry-run
  assemble deploy runtime-cpu --name chat --model /srv/models/m.gguf --secret api-key=/etc/assemble/chat.key
  assemble deploy runtime-cpu --name chat --model /img/srv/models/m.gguf --root /img
  assemble deploy --status chat --json
  assemble deploy --rollback chat
  assemble deploy --retire chat --keep 2
host tree: /opt/assemble/NAME/{current -> releases/ID, releases/ID/{runtime/,env,serve,release.json}, trash/,
  state/}, /etc/systemd/system/assemble-NAME.service, /etc/sysusers.d/assemble-NAME.conf
refuses before anything is stopped: a runtime failing verify --static (exit 1, verify's lines), a missing or
  non-GGUF model, a file deploy did not write at a path it writes, a bad name, port or --env (exit 2)
exit status: 0 in service and gated, 1 a gate, preflight or port wait failed (after rolling back; the line
  names the step), 2 bad input"""


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    from builder.deploy.defaults import DEFAULT_KEEP, DEFAULT_PORT, DEFAULT_PREFLIGHT, GATE_TIMEOUT, PORT_TIMEOUT, PREFLIGHTS

    p = sub.add_parser("deploy", parents=[common], help="put a runtime in service as a gated, hardened systemd unit",
                       description="Copy a verified runtime into /opt/assemble/NAME/releases/, write its env file, "
                       "serve script and a hardened systemd unit, switch `current` to it, restart the unit and gate "
                       "it on /health, /v1/models and a real completion; when the gate fails, switch back and "
                       "restart the previous release. The previous release moves to trash/, never deleted.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runtime", nargs="?", metavar="RUNTIME", help="the runtime folder (runtime-<recipe>/) to deploy")
    p.add_argument("--name", metavar="NAME", help="the deploy's name: /opt/assemble/NAME, assemble-NAME.service")
    p.add_argument("--model", metavar="FILE", help="the GGUF model the server loads")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="N", help=f"the port it serves (default {DEFAULT_PORT})")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting for the env file (e.g. LLAMA_ARG_CTX_SIZE=16384); repeatable")
    p.add_argument("--secret", action="append", default=[], metavar="NAME=FILE",
                   help="a secret for the server, handed to it by systemd as a credential (LoadCredential=), never "
                        "written by deploy: api-key=FILE (llama-server's keys, one a line; the gate sends the first)")
    p.add_argument("--root", metavar="DIR", help="write the tree into this image or chroot root; start nothing")
    p.add_argument("--dry-run", action="store_true", help="print every file and command; write and run nothing")
    p.add_argument("--preflight", choices=PREFLIGHTS, default=DEFAULT_PREFLIGHT,
                   help="before switching, serve the new release on a free port with a tiny random model "
                        "(default), the real model, or none")
    p.add_argument("--gate-timeout", type=float, default=GATE_TIMEOUT, metavar="S",
                   help=f"seconds for the server to pass its gate (default {GATE_TIMEOUT:.0f})")
    p.add_argument("--port-timeout", type=float, default=PORT_TIMEOUT, metavar="S",
                   help=f"seconds to wait for the port to be released (default {PORT_TIMEOUT:.0f})")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--status", metavar="NAME", help="what is in service under NAME, the unit's state, the last gate")
    what.add_argument("--rollback", metavar="NAME", help="put the newest good release in trash/ back into service")
    what.add_argument("--retire", metavar="NAME", help="delete trash/ releases beyond the newest --keep (frees "
                      "their runtime files no other release shares: identical files are stored once)")
    p.add_argument("--keep", type=int, default=None, metavar="N",
                   help=f"with --retire: how many trash/ releases to keep (default {DEFAULT_KEEP})")
    p.set_defaults(func=run)


def _refuse_extra(args: argparse.Namespace, command: str, allowed: set[str]) -> None:
    """An option that means nothing for this form is refused, never ignored."""
    given = {"runtime": args.runtime, "--name": args.name, "--model": args.model, "--root": args.root,
             "--env": args.env or None, "--secret": args.secret or None, "--keep": args.keep,
             "--dry-run": args.dry_run or None}
    extra = [k for k, v in given.items() if v is not None and k not in allowed]
    if extra:
        raise AssembleError(f"{command} takes no {extra[0]}", where=extra[0], fix="see `assemble deploy --help`")


def run(args: argparse.Namespace) -> int:
    from builder.deploy.service import Systemctl
    from builder.deploy.switch import DeployRequest, Timeouts, deploy, rollback

    timeouts = Timeouts(gate=args.gate_timeout, port=args.port_timeout)
    if args.status:
        _refuse_extra(args, "--status", {"--root"})
        from builder.deploy.service import Recorder
        from builder.deploy.status import render, status
        from builder.deploy.switch import check_root
        root = check_root(args.root)
        s = status(args.status, Systemctl() if args.root is None else Recorder(), root)
        print(json.dumps(s.as_dict(), indent=2) if args.json else render(s))
        return 0
    if args.rollback:
        _refuse_extra(args, "--rollback", set())
        out = rollback(args.rollback, Systemctl(), timeouts)
        return _report(out, args.json)
    if args.retire:
        _refuse_extra(args, "--retire", {"--keep", "--root"})
        from builder.deploy.defaults import DEFAULT_KEEP
        from builder.deploy.retire import retire
        from builder.deploy.switch import check_root
        deleted, kept = retire(args.retire, DEFAULT_KEEP if args.keep is None else args.keep, check_root(args.root))
        if args.json:
            print(json.dumps({"deleted": list(deleted), "kept": list(kept)}, indent=2))
        else:
            for name in deleted:
                print(f"deleted trash/{name}")
            ui.info(f"{len(deleted)} deleted, {len(kept)} kept in trash/")
        return 0
    _refuse_extra(args, "deploy", {"runtime", "--name", "--model", "--root", "--env", "--secret", "--dry-run"})
    for flag, value in (("RUNTIME", args.runtime), ("--name", args.name), ("--model", args.model)):
        if not value:
            raise AssembleError(f"deploy needs {flag}", where=flag, fix="write `assemble deploy RUNTIME --name NAME "
                                "--model FILE` (or --status/--rollback/--retire NAME)")
    req = DeployRequest(runtime=args.runtime, name=args.name, model=args.model, port=args.port, env=tuple(args.env),
                        root=args.root, dry_run=args.dry_run, preflight=args.preflight, timeouts=timeouts,
                        secrets=tuple(args.secret))
    return _report(deploy(req, Systemctl()), args.json, dry_run=args.dry_run)


def _report(out: Outcome, as_json: bool, dry_run: bool = False) -> int:
    if as_json:
        print(json.dumps(out.as_dict(), indent=2))
        return 0
    if dry_run:
        print(f"# assemble deploy --dry-run: release {out.release} (nothing written, nothing run)")
        for path in out.files:
            print(f"# would write: {path}")
        for path, text in out.texts:
            print(f"\n# ---- {path}\n{text}", end="")
        print()
        for command in out.commands:
            print(f"# would run: {command}")
        return 0
    if out.unchanged:
        ui.info("already in service and running: nothing written, nothing restarted")
    if out.gate is not None:
        ui.info(out.gate.line())
    for name in out.trashed:
        ui.info(f"previous release moved to trash/{name}")
    for command in out.commands:
        ui.info(f"on the host, run: {command}")
    print(out.release)
    return 0

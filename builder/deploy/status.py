"""--status NAME: what is in service, what the unit says, the last gate and what is in trash. Reads only."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from builder.deploy.layout import RECORD, HostTree
from builder.deploy.service import ServiceManager, UnitState
from builder.errors import AssembleError


@dataclass(frozen=True)
class Status:
    name: str
    base: str
    current: str | None                  # release id
    identity: str | None                 # the runtime's identity (manifest)
    recipe: str | None
    backends: tuple[str, ...]
    model: str | None
    port: int | None
    unit: str
    state: UnitState
    last_gate: dict[str, Any] | None     # state/gate.json
    switch_in_progress: dict[str, Any] | None  # state/switch.json: a switch that was interrupted
    trash: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def status(name: str, service: ServiceManager, root: Path = Path("/")) -> Status:
    tree = HostTree(root, name)
    if not tree.ledger.exists():
        raise AssembleError(f"nothing is deployed under the name {name}", where=str(tree.base),
                            fix="deploy first: assemble deploy RUNTIME --name NAME --model FILE")
    rid = tree.current_id()
    record = _json(tree.release(rid) / RECORD) if rid else None
    runtime = (record or {}).get("runtime", {})
    trash = tuple(sorted(p.name for p in tree.trash.iterdir())) if tree.trash.is_dir() else ()
    return Status(name, str(tree.host_path(tree.base)), rid, runtime.get("identity"), runtime.get("recipe"),
                  tuple(runtime.get("backends", ())), (record or {}).get("model", {}).get("path"),
                  (record or {}).get("port"), tree.unit_name, service.state(tree.unit_name),
                  _json(tree.gate_record), _json(tree.switch_record), trash)


def render(s: Status) -> str:
    gate = s.last_gate or {}
    result = gate.get("result") or {}
    devices = result.get("devices") or {}
    verdict = ("passed" if result.get("passed") else f"FAILED at {result.get('step')}") if result else "none yet"
    lines = [
        f"deploy {s.name}  ({s.base})",
        f"  current   {s.current or '(none)'}",
        f"  runtime   {s.identity or '?'} (recipe {s.recipe or '?'}, backends {', '.join(s.backends) or '?'})",
        f"  model     {s.model or '?'}  port {s.port or '?'}",
        f"  unit      {s.unit}: {s.state.active} ({s.state.sub}), main pid {s.state.main_pid or '-'}"
        + (f", {s.state.enabled}" if s.state.enabled else ""),
        f"  last gate {verdict}" + (f" at {gate.get('time')} for {gate.get('release')} ({gate.get('what')}): "
                                    f"{result.get('detail')}" if result else ""),
    ]
    for label, key in (("devices", "listed"), ("backends", "backends"), ("buffers", "model_buffers")):
        for i, item in enumerate(devices.get(key, ())):
            lines.append(f"  {label if i == 0 else '':9} {item}")
    if s.switch_in_progress:
        lines.append(f"  INTERRUPTED switch from {s.switch_in_progress.get('from')} to "
                     f"{s.switch_in_progress.get('to')}: `current` is {s.current}; deploy again or --rollback")
    lines.append(f"  trash     {len(s.trash)} release(s)" + "".join(f"\n            {t}" for t in s.trash))
    return "\n".join(lines)

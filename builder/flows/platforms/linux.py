"""The Linux platform of `assemble repair`: prebuilt llama.cpp (build folders, release archives,
Debian packages) into a verified runtime, with the same layout and guarantees as `build`.

    plan:  inputs -> unpack -> discover -> one ggml base (refuse a mismatch before copying) -> bundle plan
    place: copy, RPATHs, licences -> manifest;  verify: build's checks (flows.repair swaps it in)

The first input gives the executables, the ggml base and its libraries; each later one adds the
backend modules the first lacks (upstream's CUDA archive + its Vulkan archive: one process) and
may hold nothing else (Debian's libggml0-backend-vulkan). Every file of an input that is llama.cpp's
and not carried is listed as left out, with why, in --dry-run, the log and the manifest.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import ui
from builder.check import codefacts, verify as checks
from builder.check.static import hip_archs
from builder.check.report import Report
from builder.config.targets import GfxTarget
from builder.errors import USAGE, AssembleError
from builder.flows.platforms import repaired_manifest, unpack_input
from builder.prebuilt import identity, origins, ownlibs
from builder.prebuilt.discover import WITHOUT, Found, LeftOut, cpu_level_files, discover
from builder.prebuilt.inputs import Input, classify, deb_owners
from builder.prebuilt.loader import LoaderFacts, loader_facts
from builder.prebuilt.request import RepairRequest
from builder.runtime.elf import folder_need
from builder.runtime import gpuruntime, licenses, manifest
from builder.runtime.bundle import BundlePlan, Refusals, plan_bundle
from builder.runtime.layout import BIN_DIR, OwnFile, module_backend
from builder.runtime.place import BundleResult, place_bundle

@dataclass(frozen=True)
class _Hip:
    targets: tuple[GfxTarget, ...]


@dataclass(frozen=True)
class BundleRules:
    """What the bundler reads of a recipe, for inputs that have none: the shipped policy as it is,
    and the cards whose AMD data (rocBLAS, hipBLASLt) to keep (all of them without --hip-target)."""
    hip: _Hip | None = None
    bundle_always: tuple[str, ...] = ()
    bundle_never: tuple[str, ...] = ()
    path: str = "assemble repair"


# What repair says when the bundler cannot close its inputs: the fault is in what it was given (exit 2).
REFUSALS = Refusals(
    unresolved="give the folder that holds them with --lib-path DIR (e.g. the lib folder of NVIDIA's cuBLAS "
               "wheel, or upstream's cudart archive unpacked), or the .deb that ships them as another input",
    conflict="give each library once: two inputs or --lib-path folders hold different copies of it",
    code=USAGE)


@dataclass(frozen=True)
class Part:
    """One input, unpacked and read."""
    input: Input
    found: Found
    base: identity.BaseIdentity | None       # None: a later input of backend modules only
    build: str | None
    unpacked: origins.Unpacked               # how its files are named in the manifest and messages

    def shown(self, path: Path) -> str:
        return origins.origin([self.unpacked], path)

    def describe(self) -> str:
        return self.base.describe() if self.base else "backend modules only (no ggml base of its own)"

    def own_base(self) -> identity.BaseIdentity:
        """The base of an input that carries one: the first always does (_read refuses it otherwise)."""
        assert self.base is not None, "the first input has a ggml base"
        return self.base


@dataclass(frozen=True)
class Plan:
    parts: tuple[Part, ...]
    own: tuple[OwnFile, ...]
    contributed: dict[str, Any]                           # input given -> backends taken from it
    left_out: tuple[tuple[str, str], ...]       # (file as the user knows it, why), every input's
    loader: LoaderFacts | None
    bundle: BundlePlan

    @property
    def inputs(self) -> tuple[origins.Unpacked, ...]:
        return tuple(p.unpacked for p in self.parts)


def _build_tag(inp: Input, root: Path) -> str | None:
    """What the input says about the upstream build: its name (llama-b7416-...), a build folder's
    generated build-info, Debian's nightly-tag.txt."""
    if inp.build:
        return inp.build
    info = root / "common" / "build-info.cpp"
    if info.is_file():
        text = info.read_text(errors="replace")
        m = re.search(r'LLAMA_BUILD_NUMBER\s*=\s*(\d+)', text)
        c = re.search(r'LLAMA_COMMIT\s*=\s*"([0-9a-f]{7,40})"', text)
        if m and int(m.group(1)) > 0:
            return f"b{m.group(1)}"
        if c:
            return c.group(1)
    for tag in sorted(root.glob("usr/share/doc/*/nightly-tag.txt")):
        text = tag.read_text(errors="replace").strip()
        if re.fullmatch(r"[A-Za-z0-9._+-]{1,64}", text):
            return text
    return None


def _read(inp: Input, root: Path, unpacked: origins.Unpacked, index: int, req: RepairRequest) -> Part:
    found = discover(root, req.targets if index == 0 else (), req.without, executables_required=index == 0,
                     shown=lambda path: origins.origin([unpacked], path))
    if found.base is None and index == 0:
        raise AssembleError("no ggml base library (libggml-base.so*) among what its executables need",
                            where=inp.given, fix="give the input that holds libggml-base (the packages or archive "
                                                  "with the libraries, not only the executables)")
    build = _build_tag(inp, root)
    base = identity.base_identity(found.base.source, build) if found.base else None
    return Part(inp, found, base, build, unpacked)


def _merge(parts: list[Part]) -> tuple[list[OwnFile], dict[str, Any], list[tuple[Part, LeftOut]]]:
    """The first input's files, plus the backends each later one adds; refusals before any copy. A
    later input without a base of its own is proved by its modules' imports alone."""
    first = parts[0]
    assert first.found.base is not None, "the first input has a ggml base (_read refuses it otherwise)"
    for other in parts[1:]:
        why = identity.same_base(first.own_base(), other.base) if other.base else _declared_base_differs(first, other)
        if why:
            versus = (f" ({first.shown(first.found.base.source)}: {first.own_base().describe()}; "
                      f"{other.shown(other.found.base.source)}: {other.base.describe()})"
                      if other.base and other.found.base else "")
            raise AssembleError(f"{first.input.given} and {other.input.given} carry different ggml bases: "
                                f"{why}{versus}",
                                where=other.input.given,
                                fix="merge inputs of one build (the same upstream build number, or the same "
                                    "package version); backends of two ggml versions cannot share a process")
    files = [*first.found.executables, *first.found.libraries]
    provided: set[str] = set()
    for lib in first.found.libraries:
        if lib.source.name.startswith(("libggml-base.so", "libggml.so")):
            provided |= identity.exported(lib.source)
    modules: dict[str, OwnFile] = {}
    contributed: dict[str, list[str]] = {}
    skipped: list[tuple[Part, LeftOut]] = []
    first_backends = {module_backend(x.source.name) for x in first.found.modules}
    for part in parts:
        for m in part.found.modules:
            backend = module_backend(m.source.name)
            assert backend is not None           # found.modules are the files module_backend names
            if m.dest in modules or (part is not first and backend in first_backends):
                # the first input's own modules win; a later one adds what it lacks
                skipped.append((part, LeftOut(m.source, f"{first.input.given} gives the {backend} backend")))
                continue
            lacking = identity.missing_imports(m.source, provided)
            if lacking:
                raise AssembleError(f"{m.source.name} from {part.input.given} was built against another ggml base: "
                                    f"it needs {', '.join(lacking[:4])}{' ...' if len(lacking) > 4 else ''}, which "
                                    f"{first.found.base.source.name} of {first.input.given} does not export",
                                    where=str(m.source), fix="take the module from the same build as the base")
            modules[m.dest] = m
            contributed.setdefault(part.input.given, [])
            if backend not in contributed[part.input.given]:
                contributed[part.input.given].append(backend)
    # test-backend-ops from the first input that has one and a ggml base proved the same as the first's
    tests = next((part.found.tests for part in parts if part.found.tests and part.base), ())
    for part in parts:
        if part.found.tests and part.found.tests != tests:
            skipped += [(part, LeftOut(t.source, "another input's test-backend-ops is carried"))
                        for t in part.found.tests]
    return files + list(modules.values()) + list(tests), contributed, skipped


def _upstream_version(debian: str) -> str:
    """1:0.7.0+dfsg-2 -> 0.7.0: the upstream part of a Debian version."""
    return re.split(r"[+~-]", debian.split(":", 1)[-1], maxsplit=1)[0]


def _declared_base_differs(first: Part, other: Part) -> str | None:
    """A later input of modules only has no base to compare: what it declares is compared instead --
    the build tag of its name, or the version of the ggml package each module came from (Debian
    versions libggml0-backend-* as ggml itself: 0.27.0-1 is ggml 0.27.0). Its modules' imports are
    checked against the first base afterwards either way."""
    if first.build and other.build and first.build != other.build:
        return f"their build tags differ ({first.build} vs {other.build})"
    if other.input.kind != "debs" or not first.own_base().version:
        return None
    owners = deb_owners(other.input, other.found.root)
    for m in other.found.modules:
        owner = owners.get(str(m.source.resolve()))
        if owner and owner.version and _upstream_version(owner.version) != first.own_base().version:
            return (f"{m.source.name} is of ggml {_upstream_version(owner.version)} (package {owner.name} "
                    f"{owner.version}), the first input's base is ggml {first.own_base().version}")
    return None


def _without_known(req: RepairRequest, parts: list[Part]) -> None:
    """A --without name that matches nothing is a typo: refused rather than ignored."""
    known = {n for p in parts for n in p.found.names} | set(cpu_level_files())
    for name in req.without:
        if name not in known:
            raise AssembleError(f"no executable or backend module named {name} in the inputs",
                                where=f"{WITHOUT} {name}",
                                fix=f"name a file, e.g. {WITHOUT} libggml-cpu-x64.so or {WITHOUT} llama-server")


def _left_out(parts: list[Part], skipped: list[tuple[Part, LeftOut]]) -> tuple[tuple[str, str], ...]:
    rows = [(part.shown(x.path), x.reason) for part in parts for x in part.found.left_out]
    rows += [(part.shown(x.path), x.reason) for part, x in skipped]
    return tuple(rows)


def plan(req: RepairRequest, work: Path) -> Plan:
    """What to carry; a refusal names the user's files, never the folders they were unpacked into."""
    seen: list[origins.Unpacked] = []
    try:
        return _plan(req, work, seen)
    except AssembleError as exc:
        raise origins.renamed(seen, exc) from None


def _plan(req: RepairRequest, work: Path, seen: list[origins.Unpacked]) -> Plan:
    parts = []
    for i, inp in enumerate(classify(req.inputs)):
        root, unpacked = unpack_input(inp, work, i)
        seen.append(unpacked)
        parts.append(_read(inp, root, unpacked, i, req))
    _without_known(req, parts)
    own, contributed, skipped = _merge(parts)
    ggml = parts[0].found.ggml
    installed = tuple(dict.fromkeys("/" + m.source.parent.relative_to(p.found.root).as_posix()
                                    for p in parts for m in p.found.modules))
    loader = loader_facts(ggml.source, installed) if ggml else None
    # Vendor libraries shipped inside an input (Debian's ROCm packages given with the llama.cpp ones)
    # are found in its library folders, after --lib-path.
    extra = [d for p in parts for d in sorted({f.source.parent for f in p.found.libraries})]
    extra += [d for p in parts for d in sorted(p.found.root.glob("usr/lib/*-linux-gnu")) if d.is_dir()]
    extra += [d for p in parts if p.input.kind == "debs" for d in _library_folders(p.found.root)]
    rules = BundleRules(hip=_Hip(req.hip_targets) if req.hip_targets else None)
    search = list(req.lib_paths) + list(dict.fromkeys(extra))
    sources = ownlibs.Sources(tuple(seen), req.lib_paths)
    ownlibs.check_needs(_carried(parts, own), parts[0].found.libraries, parts[0].input.given, sources, search)
    bundle = plan_bundle(own, search_dirs=search, recipe=rules, prune_archs=bool(req.hip_targets), refusals=REFUSALS)
    by_dest = {o.dest: o.source for o in own}
    ownlibs.check_vendor(bundle, sources, lambda dest: origins.origin(seen, by_dest[dest]) if dest in by_dest else dest)
    return Plan(tuple(parts), tuple(own), contributed, _left_out(parts, skipped), loader, bundle)


def _carried(parts: list[Part], own: list[OwnFile]) -> list[ownlibs.Carried]:
    """Each file to carry with the index of the input it came from (0: the base input)."""
    index: dict[Path, int] = {}
    for i, part in enumerate(parts):
        f = part.found
        for x in (*f.executables, *f.libraries, *f.modules, *f.tests):
            index.setdefault(x.source, i)
    return [ownlibs.Carried(o, index.get(o.source, 0)) for o in own]


def _worth_a_warning(why: str) -> bool:
    """Left out on the user's word or for damage: said as a warning; the rest (a test program, a library
    nothing needs) is information."""
    return why == WITHOUT or any(w in why for w in ("damaged", "truncated", "cut inside", "leaving the input"))


def _library_folders(root: Path) -> list[Path]:
    """Every folder of unpacked packages that holds a shared library (libblas3 puts libblas.so.3 in
    usr/lib/<triplet>/blas/, where only update-alternatives would point a host)."""
    found = {p.parent for p in root.rglob("*.so*") if re.search(r"\.so(\.\d+)*\Z", p.name)
             and (p.is_file() or p.is_symlink())}
    return sorted(d for d in found if not d.is_symlink())


def show(p: Plan, req: RepairRequest) -> None:
    """--dry-run: what was found, what would be carried, what is left to the host and why."""
    accepted = req.accept_loader_risk
    for part in p.parts:
        f = part.found
        print(f"input {part.input.given} ({part.input.kind}): {part.describe()}")
        print(f"  executables  {', '.join(x.source.name for x in f.executables) or '(none)'}")
        print(f"  modules      {', '.join(x.source.name for x in f.modules) or '(none)'}")
        print(f"  libraries    {', '.join(x.source.name for x in f.libraries) or '(none)'}")
        if p.contributed.get(part.input.given):
            print(f"  contributes  {', '.join(p.contributed[part.input.given])}")
    print("would carry")
    for o in p.bundle.own:
        print(f"  {o.dest:<44} {'test' if o.kind == 'test' else 'ours'}, from {origins.origin(p.inputs, o.source)}")
    for v in p.bundle.vendor:
        print(f"  {v.dest:<44} vendor, from {origins.origin(p.inputs, v.source)}")
    for d in p.bundle.data:
        print(f"  {d.dest + '/':<44} data, from {origins.origin(p.inputs, d.source)}")
    print("left to the host")
    for s in p.bundle.system:
        print(f"  {s.soname:<44} {s.reason}")
    if p.left_out:
        print("left out")
        for path, why in p.left_out:
            print(f"  {path}  ({why})")
    if p.loader and p.loader.backend_dirs:
        print(f"loader: {p.loader.library} also searches {', '.join(p.loader.backend_dirs)} (compiled in) before "
              "the executable's folder: a module installed there on a host is loaded first; verify reports it")
    if p.loader and p.loader.reads_cwd:
        print(f"loader: {p.loader.library} also searches the working directory (it imports "
              f"{p.loader.reads_cwd[0]}): a module planted where llama-server starts runs in it; "
              + (f"accepted: {accepted}" if accepted else "verify fails until --accept-loader-risk REASON"))


def _manifest(req: RepairRequest, p: Plan, result: BundleResult, staged: Path) -> manifest.Manifest:
    first = p.parts[0]
    backends = tuple(dict.fromkeys(b for o in p.own if o.kind == "module" and (b := module_backend(o.source.name))))
    backends = tuple(sorted(backends, key=lambda b: (b != "cpu", b)))
    inputs = tuple(manifest.InputRecord(x.input.given, x.input.kind, x.input.sha256,
                                        x.base.version if x.base else None, x.build,
                                        x.describe(), tuple(p.contributed.get(x.input.given, ())))
                   for x in p.parts)
    return repaired_manifest(
        req, inputs, first=first.input.given, version=_llama_version(first), build=first.build, backends=backends,
        executables=tuple(o.source.name for o in p.own if o.kind == "executable"),
        gpu_targets=_gpu_targets(staged, req),
        files=result.files, symlinks=result.symlinks, system_libs=result.system_libs,
        glibc_min=result.glibc_min, glibcxx_min=result.glibcxx_min, size_by_role=dict(result.size_by_role),
        # built elsewhere: no build host vouches for a floor, so none is promised; verify says what it needs
        glibc_floor=manifest.GlibcFloor(None, None, need.file if (need := folder_need(staged)) else None),
        gpu_runtimes=gpuruntime.describe(staged, [f.path for f in result.files], {}),
        left_out=tuple(manifest.LeftOutRecord(path, why) for path, why in p.left_out),
        loader=manifest.LoaderRecord(p.loader.backend_dirs, req.accept_loader_risk) if p.loader else None,
        licenses=result.licenses)


_LIBLLAMA = "libllama.so."
_FILE_VERSION = re.compile(r"\.so\.(\d+\.\d+(?:\.\d+)*)\Z")


def _llama_version(part: Part) -> str | None:
    """llama.cpp's own version, as its files say: libllama's file name (Debian's libllama.so.0.7.0;
    upstream's libllama.so.0.0.<build>), else the version of the package that holds it (libllama0
    1:0.7.0+dfsg-2 -> 0.7.0). Never ggml's: libggml-base.so.0.27.0 is ggml 0.27.0, not llama.cpp."""
    lib = next((f.source for f in part.found.libraries if f.source.name.startswith(_LIBLLAMA)), None)
    if lib is None:
        return None
    if m := _FILE_VERSION.search(lib.name):
        return m.group(1)
    if part.input.kind == "debs":
        owner = deb_owners(part.input, part.found.root).get(str(lib.resolve()))
        if owner is not None and owner.version:
            return _upstream_version(owner.version)
    return None


def _gpu_targets(staged: Path, req: RepairRequest) -> manifest.GpuTargets:
    """The GPU code the carried modules hold, read as verify reads it (a prebuilt has no recipe to say
    what it was built for): bin/libggml-hip.so's gfx archs (its offload bundles), and the SASS and PTX
    of bin/libggml-cuda*.so as CUDA_ARCHITECTURES entries ("90" both, "90-real" SASS, "90-virtual" PTX).
    --hip-target narrows the HIP ones to the cards asked for, as it prunes ROCm's data to them: the
    runtime serves those, and its module carries code for more (verify checks each stated one has code).
    A module whose code cannot be read records none: verify's code checks name it."""
    folder = staged / BIN_DIR
    hip_module = folder / "libggml-hip.so"
    hip = tuple(sorted(hip_archs(hip_module)[0])) if hip_module.is_file() else ()
    if hip and req.hip_targets:
        hip = tuple(dict.fromkeys(str(t) for t in req.hip_targets))
    code = codefacts.cuda_code(sorted(folder.glob("libggml-cuda*.so")))
    cuda = codefacts.carried_cuda(*code) if code is not None else set()
    return manifest.GpuTargets(cuda=tuple(sorted(cuda)), hip=hip)


def _licensed(p: Plan, result: BundleResult, staged: Path) -> BundleResult:
    """licenses/: the LICENSE upstream put beside the executables (or the source tree a build folder
    names), and for .deb inputs each package's copyright file, as for the vendor libraries."""
    own = None
    for part in p.parts:
        if part.input.kind == "debs":
            continue
        folders = []
        for exe in part.found.executables:
            here = exe.source.parent
            folders += [here, *[d for d in here.parents if d.is_relative_to(part.found.root)]]
        own = licenses.input_license(dict.fromkeys(folders + [part.found.root]), (), part.input.given)
        if own is not None:
            own = dataclasses.replace(own, source=origins.texts_origin(p.inputs, own.texts))
            break
    known = {path: owner for part in p.parts if part.input.kind == "debs"
             for path, owner in deb_owners(part.input, part.found.root).items()}
    return licenses.add_licenses(result, staged, own, known=known)


def _named(p: Plan, result: BundleResult) -> BundleResult:
    """The manifest's origins in the user's words (the input and the path inside it), so that the same
    inputs give the same manifest; read after licensing, which reads the files where they lie."""
    files = tuple(dataclasses.replace(f, origin=origins.origin(p.inputs, f.origin)) for f in result.files)
    records = tuple(dataclasses.replace(r, source=origins.named(p.inputs, r.source) or r.source)
                    for r in result.licenses)
    return dataclasses.replace(result, files=files, licenses=records)


def place(p: Plan, req: RepairRequest, staged: Path) -> manifest.Manifest:
    """Copy the bundle, set its RPATHs, add the licence texts; the manifest names the user's files."""
    ui.step(f"repair into {staged.name}")
    for path, why in p.left_out:
        (ui.warn if _worth_a_warning(why) else ui.info)(f"left out {path} ({why})")
    try:
        result = _named(p, _licensed(p, place_bundle(p.bundle, staged), staged))
    except AssembleError as exc:
        raise origins.renamed(p.inputs, exc) from None
    return _manifest(req, p, result, staged)


def verify(staged: Path, req: RepairRequest) -> Report:
    return checks.verify_runtime(staged, extra_env=dict(req.check_env), static=req.verify_static,
                                 hip_targets=tuple(str(t) for t in req.hip_targets))

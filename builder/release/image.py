"""`assemble image`: a container image around a built runtime (containers/runtime.Containerfile)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from builder import ui
from builder.errors import AssembleError
from builder.paths import cache_dir, scratch
from builder.proc import run_logged
from builder.toolchain.container import Engine, containerfile, find_engine
from builder.toolchain.detect import version_tuple

RUNTIME_CONTAINERFILE = "runtime"
# glibc of the default base, to refuse a runtime that needs newer.
RUNTIME_BASE = "ubuntu:24.04"
RUNTIME_BASE_GLIBC = "2.39"


@dataclass(frozen=True)
class ImagePlan:
    engine: Engine
    runtime: Path
    tag: str
    argv: tuple[str, ...]          # the engine's command; its last word is the build context
    left_out: tuple[str, ...] = ()   # top-level folders of the runtime the image does not get (tests/)


def plan_image(runtime: Path, *, engine: Engine | None = None, tag: str | None = None,
               base: str | None = None, with_tests: bool = False) -> ImagePlan:
    """`engine build` for containers/runtime.Containerfile with the runtime folder as its context; its
    tests/ (test-backend-ops) is left out, as package leaves it out, unless with_tests."""
    runtime = Path(runtime).resolve()
    where = str(runtime)
    server = runtime / "bin" / "llama-server"
    if not (server.is_file() and os.access(server, os.X_OK)):
        raise AssembleError("no executable bin/llama-server (the image's entrypoint)", where=where,
                            fix="pass a runtime folder made by `assemble build` whose recipe targets llama-server")
    from builder.runtime.layout import TESTS_DIR, runtime_dir_name   # here: the CLI names RUNTIME_BASE in its help
    from builder.runtime.manifest import Manifest         # without loading the manifest's dataclasses
    manifest = Manifest.load(runtime)        # ManifestInvalid: one line, exit 1
    recipe = manifest.recipe.name
    sha = manifest.llama_cpp.sha or "local"
    need = manifest.glibc_min
    if base is None and need and version_tuple(need) > version_tuple(RUNTIME_BASE_GLIBC):
        raise AssembleError(f"the runtime needs glibc {need}; {RUNTIME_BASE} has {RUNTIME_BASE_GLIBC}", where=where,
                            fix="build the runtime in a container unit (older glibc), or pass --base with a newer image")
    engine = engine or find_engine()
    tag = tag or f"llama-{recipe}:{sha[:12]}"
    vulkan = "vulkan" in manifest.recipe.backends     # also with GGML_BACKEND_DL off (no module file)
    argv = [engine.path, "build", "-f", str(containerfile(RUNTIME_CONTAINERFILE)), "-t", tag,
            "--build-arg", f"VULKAN={'1' if vulkan else '0'}"]
    if base:
        argv += ["--build-arg", f"BASE={base}"]
    for key, value in (("org.opencontainers.image.title", runtime_dir_name(recipe)),
                       ("org.opencontainers.image.revision", sha), ("org.assemble.recipe", recipe)):
        argv += ["--label", f"{key}={value}"]
    argv.append(str(runtime))
    left_out = (TESTS_DIR,) if not with_tests and os.path.isdir(runtime / TESTS_DIR) else ()
    return ImagePlan(engine=engine, runtime=runtime, tag=tag, argv=tuple(argv), left_out=left_out)


def build_image(plan: ImagePlan, log: Path | None = None) -> str:
    log = log or cache_dir() / "containers" / f"image-{plan.runtime.name}.log"
    ui.step(f"image {plan.tag} from {plan.runtime} ({plan.engine.kind})"
            + (f", without {', '.join(d + '/' for d in plan.left_out)}" if plan.left_out else ""))
    with _context(plan) as context:
        run_logged([*plan.argv[:-1], str(context)], log, f"image {plan.tag}", fix=f"read {log}")
    return plan.tag


@contextmanager
def _context(plan: ImagePlan) -> Iterator[Path]:
    """The build context: the runtime folder itself, or, when folders are left out, a scratch copy of
    the rest made of hard links (a copy where the cache is on another filesystem). The engine reads
    every file of a context, and a .dockerignore is read from different places by docker's two builders
    and podman, and could only be written into the runtime, which is never touched."""
    if not plan.left_out:
        yield plan.runtime
        return
    with scratch("image-") as root:
        context = root / plan.runtime.name
        try:
            shutil.copytree(plan.runtime, context, symlinks=True, copy_function=_link_or_copy,
                            ignore=lambda folder, names: plan.left_out if Path(folder) == plan.runtime else ())
        except OSError as exc:
            raise AssembleError(f"cannot stage the image's build context: {exc}", where=str(root),
                                fix="free space in the cache folder (ASSEMBLE_CACHE), or pass --with-tests") from None
        yield context


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)

"""A planted ggml backend module, for proving the loader does not pick up strangers' code.

build_planted_module() compiles, with the system C compiler, a shared object that looks
like a ggml backend module to ggml_backend_load_best(): it is named libggml-cpu-*.so and
exports ggml_backend_score (a score above any real CPU variant) and ggml_backend_init.
Its constructor runs at dlopen() time, before ggml asks anything, and writes the marker
file: the marker exists if and only if something loaded the module.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

_SOURCE = r"""
#include <stdio.h>

#define MARKER %(marker)s

/* Runs as soon as the module is dlopen()ed: the proof that it was loaded. */
__attribute__((constructor)) static void planted_module_loaded(void) {
    FILE * f = fopen(MARKER, "w");
    if (f) {
        fputs("planted ggml backend module was loaded\n", f);
        fclose(f);
    }
}

/* What ggml's loader looks up: a score higher than any real CPU variant's, so a loader
   that finds this file would choose it, and an init that offers no backend. */
__attribute__((visibility("default"))) int ggml_backend_score(void) {
    return 1 << 30;
}

__attribute__((visibility("default"))) void * ggml_backend_init(void) {
    return (void *) 0;
}
"""


def build_planted_module(dest_dir: Path, marker: Path, name: str = "libggml-cpu-planted.so") -> Path:
    """Compile the planted module into dest_dir/name; loading it writes `marker`."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH to build the planted module")
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / name
    # json.dumps yields a valid C string literal for any path (quotes and backslashes escaped).
    source = _SOURCE % {"marker": json.dumps(str(Path(marker).resolve()), ensure_ascii=False)}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "planted.c"
        src.write_text(source)
        proc = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(src)],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling the planted module failed:\n{proc.stderr}")
    return out

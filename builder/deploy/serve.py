"""The serve script: what the unit starts (and an operator can run by hand), one per release.

It finds its release from its own path (readlink -f "$0": the unit starts it as current/serve), sources
the release's env file when LLAMA_ARG_MODEL is unset (started by hand, without systemd), refuses to start
(exit 1, one line on stderr) when the runtime, the model or a device a backend needs is missing, and
then execs the release's own llama-server, so systemd's MainPID is the server itself.
"""

from __future__ import annotations

from builder.deploy.layout import ENV, RUNTIME

# What each backend needs to find on the host, as shell globs (any one of them will do), and why.
# Vulkan: a render node (AMD, Intel), NVIDIA's control node (its Vulkan driver uses /dev/nvidia*), or
# Mesa's lavapipe, a CPU driver with no device node at all: its ICD file is what proves it is there.
DEVICES = {
    "cuda": (("/dev/nvidiactl",), "the NVIDIA driver's control node (is the nvidia kernel module loaded?)"),
    "hip": (("/dev/kfd",), "AMD's compute driver node (is the amdgpu kernel module loaded?)"),
    "vulkan": (("/dev/dri/renderD*", "/dev/nvidiactl", "/usr/share/vulkan/icd.d/lvp_icd*.json"),
               "a GPU render node, NVIDIA's driver, or Mesa's lavapipe ICD"),
}


def render_serve(backends: tuple[str, ...]) -> str:
    checks = []
    for backend in backends:
        if backend not in DEVICES:
            continue
        globs, what = DEVICES[backend]
        checks.append(f'has_any {" ".join(globs)} || refuse "no {backend} device: none of {" ".join(globs)} '
                      f'exists ({what})"')
    devices = "\n".join(checks) or "# a CPU runtime needs no device node"
    return f"""#!/bin/bash
# Written by `assemble deploy`: starts this release's llama-server with the settings in its env file.
# By hand: {ENV} is read from beside this script when LLAMA_ARG_MODEL is unset.
set -u
here=$(dirname -- "$(readlink -f -- "$0")")
refuse() {{ echo "assemble serve: $*" >&2; exit 1; }}
has_any() {{ local p; for p in "$@"; do compgen -G "$p" > /dev/null && return 0; done; return 1; }}
if [ -z "${{LLAMA_ARG_MODEL:-}}" ]; then
    [ -r "$here/{ENV}" ] || refuse "LLAMA_ARG_MODEL is unset and $here/{ENV} cannot be read"
    set -a; . "$here/{ENV}"; set +a
fi
server="$here/{RUNTIME}/bin/llama-server"
[ -f "$server" ] && [ -x "$server" ] || refuse "the runtime is missing: $server is not an executable file"
[ -n "${{LLAMA_ARG_MODEL:-}}" ] || refuse "LLAMA_ARG_MODEL is empty: no model to serve"
[ -f "$LLAMA_ARG_MODEL" ] && [ -r "$LLAMA_ARG_MODEL" ] || refuse "the model is missing or unreadable: $LLAMA_ARG_MODEL"
magic=""; IFS= read -r -n 4 magic < "$LLAMA_ARG_MODEL" || true
[ "$magic" = GGUF ] || refuse "the model is not a GGUF file: $LLAMA_ARG_MODEL"
{devices}
exec "$server" "$@"
"""

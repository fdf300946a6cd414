"""Names users and tools key on, declared once: upstream's build number and the GPU toolkit line.

llama.cpp tags every master commit it releases `bNNNN` (llama-bNNNN-bin-ubuntu-vulkan-x64.tar.gz);
people, scripts and package managers key on that number, and on the toolkit a GPU build carries
(upstream's llama-bNNNN-bin-ubuntu-cuda-12.8-x64.tar.gz and -cuda-13.4-; Ollama keeps cuda_v12 and
cuda_v13 side by side). `assemble pin` maps the pinned sha to the
nearest such tag at or before it: "b7416" when the tag is the commit itself, "b7416+3" three
commits after it (honest: it is not b7416's code). Archive names, the matrix and the manifest
all read these grammars from here.
"""

from __future__ import annotations

import re

# b7416, or b7416+3 (three commits after the tag)
BUILD_RE = re.compile(r"b\d{1,7}(\+\d{1,7})?")
# the tag pattern `git describe --match` takes, and the exact tag grammar
TAG_GLOB = "b[0-9]*"
TAG_RE = re.compile(r"b\d{1,7}")
# The Linux x86-64 archives upstream's release workflow publishes (pinned tree 0c1e57098,
# .github/workflows/release.yml, jobs ubuntu-cpu, ubuntu-vulkan, ubuntu-cuda, ubuntu-rocm,
# ubuntu-24-openvino, ubuntu-sycl): `tar -czf ... --transform "s,^\.,llama-<tag>," -C build/bin .`
# with LICENSE copied in, a flat folder; the CUDA build's cudart, cuBLAS and cuBLASLt come apart,
# in cudart-llama-<tag>-bin-ubuntu-cuda-<version>-x64.tar.gz. Older releases used .zip.
UPSTREAM_LINUX_ARCHIVE = re.compile(
    r"(?:cudart-)?llama-b\d{1,7}-bin-ubuntu-(?:(?:vulkan|cuda-\d+\.\d+|rocm-\d+\.\d+|openvino-[\d.]+|"
    r"sycl-fp(?:16|32))-)?x64\.tar\.gz"
    r"|llama-b\d{1,7}-bin-ubuntu-(?:vulkan-)?x64\.zip")
# a build tag inside a file name: llama-b7416-bin-ubuntu-x64.tar.gz
_IN_NAME = re.compile(r"(?:^|[-_.])(b\d{1,7})(?=[-_.]|$)")
# major.minor, or "*" where a matrix cannot know it yet (the runner's toolkit decides)
_TOOLKIT_VERSION = re.compile(r"\d{1,3}\.\d{1,3}|\*")


def build_from_describe(tag: str, distance: int) -> str | None:
    """What pin records for the nearest tag and how many commits the pin is past it."""
    if not TAG_RE.fullmatch(tag) or distance < 0:
        return None
    return tag if distance == 0 else f"{tag}+{distance}"


def build_in_name(name: str) -> str | None:
    """b7416 from llama-b7416-bin-ubuntu-x64.tar.gz: a `b` and digits between separators."""
    m = _IN_NAME.search(name)
    return m.group(1) if m else None


def toolkit_line(cuda: str | None = None, rocm: str | None = None) -> str | None:
    """The GPU toolkits a runtime carries, as a name part: cuda12.8, rocm6.4, rocm6.4-cuda12.8.

    Versions are major.minor (the runtime libraries' own version; a patch level does not change
    which driver or card runs it). None when the runtime carries no GPU toolkit (cpu, vulkan)."""
    parts = []
    for label, version in (("rocm", rocm), ("cuda", cuda)):
        if version:
            m = _TOOLKIT_VERSION.match(version)
            if m:
                parts.append(f"{label}{m.group(0)}")
    return "-".join(parts) or None

"""The env file and the deploy name: grammars refused in one line, each setting with its reason, the
KV-cache arithmetic from the GGUF header, and a file bash reads back to exactly the values written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builder.check.tinymodel import write_tiny_llama
from builder.deploy.envfile import ENV_POLICY, parse_env, refused, render_env
from builder.deploy.layout import HostTree, check_name
from builder.deploy.model import read_model
from builder.errors import AssembleError


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf")


@pytest.mark.parametrize("name", ["chat", "a", "llm-7b", "a" * 22])
def test_good_names(name):
    assert check_name(name) == name
    assert len(HostTree(Path("/"), name).user) <= 31     # systemd-sysusers' limit for a user name


@pytest.mark.parametrize("name", ["", "Chat", "7b", "-x", "a_b", "a" * 23, "a/b", "a\nb", "a b"])
def test_bad_names_are_refused(name):
    with pytest.raises(AssembleError) as e:
        check_name(name)
    assert e.value.where == "--name" and "\n" not in e.value.line()


@pytest.mark.parametrize("item, words", [
    ("lower=1", "upper-case variable name"), ("NOEQUALS", "KEY=VALUE"), ("1A=2", "KEY=VALUE"),
    ("LLAMA_ARG_MODEL=/x.gguf", "set by --model"), ("LLAMA_ARG_PORT=1", "set by --port"),
    ("A=it's", "would read differently"), ("A=a\\b", "would read differently"), ("A=a\nb", "would read differently"),
])
def test_bad_env_items_are_refused(item, words):
    with pytest.raises(AssembleError) as e:
        parse_env([item])
    assert words in e.value.what and e.value.where == "--env"


# One name each rule of the policy table must refuse, and what its reason must say.
POLICY_CASES = {"LLAMA_ARG_MODEL": "--model", "LLAMA_ARG_PORT": "--port", "LD_PRELOAD": "dynamic loader",
                "LD_LIBRARY_PATH": "dynamic loader", "LD_AUDIT": "dynamic loader", "GLIBC_TUNABLES": "dynamic loader",
                "GCONV_PATH": "iconv", "GGML_BACKEND_PATH": "backend module", "PATH": "programs",
                "BASH_ENV": "bash runs", "ENV": "shell runs", "BASH_FUNC_X": "bash functions",
                "SHELLOPTS": "bash", "BASHOPTS": "bash", "IFS": "splits", "LLAMA_API_KEY": "every user can read",
                "LLAMA_ARG_API_KEY": "every user can read", "LLAMA_ARG_API_KEY_FILE": "--secret"}


@pytest.mark.parametrize("key", list(POLICY_CASES))
def test_the_env_policy_refuses_with_its_reason(key):
    with pytest.raises(AssembleError) as e:
        parse_env([f"{key}=/opt/x"])
    line = e.value.line()
    assert f"--env {key} is refused: it " in line and POLICY_CASES[key] in line and "fix: " in line
    assert "\n" not in line and e.value.code == 2


def test_the_policy_is_one_table_every_rule_used_and_ordinary_settings_pass():
    assert {refused(k) for k in POLICY_CASES} == set(ENV_POLICY)       # each rule is met by a case above
    for ok in ("LLAMA_ARG_CTX_SIZE", "LLAMA_ARG_N_PARALLEL", "GGML_CUDA_NO_PINNED", "HIP_VISIBLE_DEVICES",
               "XPATH", "MY_LD_FLAG", "ENVIRONMENT", "LLAMA_ARG_ALIAS"):
        assert refused(ok) is None and parse_env([f"{ok}=1"]) == ((ok, "1"),)


def test_model_refusals(tmp_path):
    for path, words in ((tmp_path / "none.gguf", "does not exist"), (tmp_path, "not a regular file")):
        with pytest.raises(AssembleError) as e:
            read_model(path)
        assert words in e.value.what
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGML" + b"\0" * 64)
    with pytest.raises(AssembleError) as e:
        read_model(fake)
    assert "not a GGUF file" in e.value.what and e.value.where == str(fake)


def test_kv_cache_arithmetic_from_the_header(tiny):
    m = read_model(tiny)
    # the tiny llama: 2 layers, 4 KV heads of 64/4 = 16 dims each for K and V, f16: 2*4*(16+16)*2 bytes
    assert (m.architecture, m.n_layer, m.n_ctx_train, m.kv_bytes_per_token) == ("llama", 2, 4096, 512)
    text = render_env(m, str(tiny), 8080, ("cpu",)).render()
    assert "512 bytes a token, 2.0 MiB at 4096" in text
    assert "LLAMA_ARG_CTX_SIZE='4096'" in text


def test_every_setting_has_its_reason_and_gpu_guards(tiny):
    env = render_env(read_model(tiny), str(tiny), 9000, ("cpu", "cuda", "vulkan"),
                     (("LLAMA_ARG_CTX_SIZE", "8192"), ("GGML_VK_VISIBLE_DEVICES", "0")))
    lines = env.render().splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith("#"):
            assert lines[i - 1].startswith("# "), f"{line} has no comment"
    values = env.as_dict()
    assert values["GGML_CUDA_NO_PINNED"] == "1" and values["LLAMA_ARG_N_GPU_LAYERS"] == "999"
    assert values["LLAMA_ARG_CTX_SIZE"] == "8192" and values["LLAMA_ARG_PORT"] == "9000"
    text = env.render()
    assert "108 GiB" in text and "set by --env (default '4096'" in text
    cpu = render_env(read_model(tiny), str(tiny), 9000, ("cpu",)).as_dict()
    assert "GGML_CUDA_NO_PINNED" not in cpu and "LLAMA_ARG_N_GPU_LAYERS" not in cpu


def test_bash_reads_back_exactly_the_values(tiny, tmp_path):
    odd = "a b $HOME `id` \"q\" ;|&*?~ é"
    env = render_env(read_model(tiny), str(tiny), 8080, ("cpu",), (("ODD", odd), ("EMPTY", "")))
    (tmp_path / "env").write_text(env.render())
    proc = subprocess.run(["bash", "-c", 'set -a; . ./env; set +a; for k in "$@"; do printf "%s=%s\\0" "$k" "${!k}"; done',
                           "bash", *env.as_dict()], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                          check=True)
    read = dict(item.split("=", 1) for item in proc.stdout.decode().split("\0") if item)
    assert read == env.as_dict()
    assert read["ODD"] == odd

"""The one grammar of each GPU target kind, and every place that reads one uses it."""

from __future__ import annotations

import pytest

from builder.config.targets import CudaArch, GfxTarget, gfx_tokens
from builder.errors import AssembleError
from tests.support.common import assemble, one_error_line


@pytest.mark.parametrize("text, number, suffix, kind", [
    ("90", 90, "", ""), ("90a", 90, "a", ""), ("120f", 120, "f", ""), ("75-virtual", 75, "", "virtual"),
    ("86-real", 86, "", "real"), ("121a-real", 121, "a", "real"),
])
def test_cuda_forms(text, number, suffix, kind):
    a = CudaArch.parse(text)
    assert (a.number, a.suffix, a.kind, str(a), a.base) == (number, suffix, kind, text, str(number))


@pytest.mark.parametrize("text", ["native", "sm_90", "9", "1200", "90b", "90-fake", "", " ", "090", "all"])
def test_cuda_refusals_name_the_valid_forms(text):
    with pytest.raises(AssembleError) as err:
        CudaArch.parse(text, where="--cuda-arch")
    assert err.value.code == 2 and '"120f"' in err.value.fix and "native" in err.value.fix


def test_cuda_lists_refuse_empty_entries():
    assert CudaArch.parse_list("90,120", "--cuda-arch") == (CudaArch(90), CudaArch(120))
    for text in ("90,,", ",90", "90, ", ""):
        with pytest.raises(AssembleError, match="empty entry"):
            CudaArch.parse_list(text, "--cuda-arch")


def test_what_nvcc_lists():
    text = "compute_75\ncompute_90\ncompute_90a\ncompute_120\ncompute_120f\nsm_120\n"
    assert [str(a) for a in CudaArch.from_nvcc(text)] == ["75", "90", "90a", "120", "120f"]


@pytest.mark.parametrize("text, arch, features", [
    ("gfx1100", "gfx1100", ()), ("gfx90a", "gfx90a", ()), ("gfx942", "gfx942", ()), ("gfx803", "gfx803", ()),
    ("gfx90a:xnack-", "gfx90a", ("xnack-",)), ("gfx942:sramecc+:xnack-", "gfx942", ("sramecc+", "xnack-")),
    ("gfx11-generic", "gfx11-generic", ()), ("gfx9-4-generic", "gfx9-4-generic", ()),
])
def test_gfx_forms(text, arch, features):
    t = GfxTarget.parse(text)
    assert (t.arch, t.features, str(t)) == (arch, features, text)
    assert t.generic == arch.endswith("-generic")


@pytest.mark.parametrize("text", ["1100", "navi31", "gfx", "gfx11", "gfx1100:xnack", "gfx1100:foo+",
                                  "gfx90a:xnack-:xnack+", "GFX1100", "gfx1100 ", "sm_90"])
def test_gfx_refusals_name_the_valid_forms(text):
    if text == "gfx1100 ":     # surrounding blanks are a typing accident, not another target
        assert str(GfxTarget.parse(text)) == "gfx1100"
        return
    with pytest.raises(AssembleError) as err:
        GfxTarget.parse(text, where="--hip-target")
    assert err.value.code == 2 and "gfx90a:xnack-" in err.value.fix


def test_gfx_tokens_in_data_file_names():
    assert gfx_tokens("Kernels.so-000-gfx1100.hsaco") == {"gfx1100"}
    assert gfx_tokens("gfx90a/TensileLibrary_gfx90a.co") == {"gfx90a"}
    assert gfx_tokens("extop_gfx9-4-generic.co") == set()
    assert gfx_tokens("TensileLibrary_Type_HH_fallback.dat") == set()


def test_recipe_cli_matrix_and_verify_accept_and_refuse_the_same_values(tmp_path):
    """The value the ROCm rules themselves recommend (gfx90a:xnack-) is accepted everywhere; a bad one
    is refused everywhere, in one line naming the forms."""
    recipe = tmp_path / "r.toml"
    text = (REPO_RECIPE.read_text().replace('targets = ["gfx1100"]', 'targets = ["gfx90a:xnack-"]'))
    assert 'targets = ["gfx90a:xnack-"]' in text
    recipe.write_text(text)
    shown = assemble("show", str(recipe), "--json")
    assert shown.returncode == 0 and '"gfx90a:xnack-"' in shown.stdout, shown.stderr
    assert assemble("show", "rocm", "--hip-target", "gfx90a:xnack-").returncode == 0
    assert assemble("matrix", "--recipe", "rocm", "--hip-targets", "gfx90a:xnack-,gfx1100").returncode == 0
    for argv in (["show", "rocm", "--hip-target", "gfx90a:nope"], ["matrix", "--hip-targets", "gfx90a:nope"],
                 ["verify", str(tmp_path), "--hip-target", "gfx90a:nope"]):
        one_error_line(assemble(*argv), 2, ["'gfx90a:nope' is not a gfx target"])


from tests.support.common import REPO  # noqa: E402
REPO_RECIPE = REPO / "recipes" / "rocm.toml"


def test_a_plain_blackwell_arch_is_asked_for_as_ggml_builds_it():
    """ggml's CMake rewrites every plain 12X to 12Xa; the plan asks for 12Xa itself, so what the manifest
    states is the code the module carries (verify's manifest facts read it back from the module)."""
    from builder.config.options import CliOptions, resolve
    from builder.config.recipe import load_recipe
    assert [str(CudaArch.parse(t).as_ggml_builds()) for t in ("120", "121-real", "120-virtual", "120a", "120f",
                                                               "90", "89-real")] == \
        ["120a", "121a-real", "120a-virtual", "120a", "120f", "90", "89-real"]
    cfg = resolve(load_recipe("cuda"), CliOptions(cuda_archs=(CudaArch.parse("90"), CudaArch.parse("120"),
                                                              CudaArch.parse("120a"))), env={})
    (unit,) = cfg.units
    assert [str(a) for a in unit.cuda_archs] == ["90", "120a"]
    assert unit.value("CMAKE_CUDA_ARCHITECTURES") == "90;120a"

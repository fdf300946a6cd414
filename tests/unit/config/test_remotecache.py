"""config.remotecache and build.cachestats: one URL, each launcher's words, never a password shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.build.cachestats import from_sccache, read_stats_log
from builder.config import remotecache as rc
from builder.config.options import CliOptions, resolve
from builder.config.recipe import load_recipe
from builder.errors import AssembleError
from tests.support.common import assemble, one_error_line


def test_redacted_hides_only_the_password():
    assert rc.redacted("redis://:s3cret@cache:6379/2") == "redis://:***@cache:6379/2"
    assert rc.redacted("redis://user:s3cret@cache") == "redis://user:***@cache"
    assert rc.redacted("redis://cache:6379") == "redis://cache:6379"
    assert rc.redacted("http://cache.internal/ccache") == "http://cache.internal/ccache"


@pytest.mark.parametrize("url, launcher, env", [
    ("redis://h:6379", "ccache", {"CCACHE_REMOTE_STORAGE": "redis://h:6379", "CCACHE_BASEDIR": "/c"}),
    ("http://h/x", "ccache", {"CCACHE_REMOTE_STORAGE": "http://h/x", "CCACHE_BASEDIR": "/c"}),
    (None, "ccache", {"CCACHE_BASEDIR": "/c"}),
    ("redis://h:6379", "sccache", {"SCCACHE_REDIS_ENDPOINT": "redis://h:6379", "SCCACHE_BASEDIRS": "/c"}),
    ("s3://bucket/llama/ci", "sccache", {"SCCACHE_BUCKET": "bucket", "SCCACHE_S3_KEY_PREFIX": "llama/ci",
                                        "SCCACHE_BASEDIRS": "/c"}),
    ("gs://b", "sccache", {"SCCACHE_GCS_BUCKET": "b", "SCCACHE_BASEDIRS": "/c"}),
    ("gha", "sccache", {"SCCACHE_GHA_ENABLED": "true", "SCCACHE_BASEDIRS": "/c"}),
])
def test_each_launcher_is_told_in_its_own_words(url, launcher, env):
    if url:
        rc.check(url, launcher, "test")
    assert rc.launcher_env(url, launcher, Path("/c")) == env


@pytest.mark.parametrize("url, launcher, words", [
    ("s3://bucket", "ccache", "ccache cannot use"), ("http://h/x", "sccache", "sccache cannot use"),
    ("redis://h", "", "needs a compiler launcher"),
])
def test_a_url_the_launcher_cannot_use_is_refused(url, launcher, words):
    with pytest.raises(AssembleError, match=words):
        rc.check(url, launcher, "unit main")


def test_the_setting_resolves_once_and_is_shown_redacted():
    r = load_recipe("cpu")
    assert resolve(r, env={}).remote_cache.value is None
    c = resolve(r, env={rc.ENV: "redis://:pw@env-host"})
    assert (c.remote_cache.value, c.remote_cache.origin) == ("redis://:pw@env-host", rc.ENV)
    c = resolve(r, CliOptions(remote_cache="redis://cli-host"), env={rc.ENV: "redis://env-host"})
    assert (c.remote_cache.value, c.remote_cache.origin) == ("redis://cli-host", "--remote-cache")
    assert resolve(r, env={rc.ENV: "redis://:pw@h"}).as_dict()["remote_cache"]["value"] == "redis://:***@h"
    with pytest.raises(AssembleError, match="not a compile cache URL"):
        resolve(r, CliOptions(remote_cache="ftp://h"), env={})


@pytest.mark.parametrize("url", ["redis://:pw@cache:notaport", "redis://cache:6379/abc", "redis+unix:/r.sock?db=x"])
def test_a_redis_url_whose_port_or_database_is_not_a_number_is_refused_when_read(url):
    """Read when the option is, not when a container unit's relay opens mid-build (it raised there)."""
    with pytest.raises(AssembleError, match="port or database is not a number") as err:
        resolve(load_recipe("cpu"), CliOptions(remote_cache=url), env={})
    assert "pw" not in err.value.what
    assert rc.redis_db("redis://cache:6379/3") == 3 and rc.redis_db("redis+unix:/r.sock?db=2") == 2
    assert rc.redis_db("redis://cache") == 0


def test_cli_refuses_a_bad_url_in_one_line_and_show_never_prints_the_password():
    one_error_line(assemble("build", "--recipe", "cpu", "--remote-cache", "ftp://:pw@h", "--out", "/nonexistent/x"),
                   2, ["not a compile cache URL", "--remote-cache"])
    shown = assemble("show", "cpu", "--remote-cache", "redis://:hunter2@cache:6379", "--json")
    assert shown.returncode == 0, shown.stderr
    assert "hunter2" not in shown.stdout + shown.stderr and "redis://:***@cache:6379" in shown.stdout


def test_stats_log_counts_this_builds_compiles(tmp_path):
    log = tmp_path / "ccache-stats.log"
    log.write_text("# a.c\ncache_miss\ndirect_cache_miss\nlocal_storage_write\n"
                   "# b.c\ndirect_cache_hit\nremote_storage_hit\nremote_storage_read_hit\n"
                   "# c.c\npreprocessed_cache_hit\nlocal_storage_hit\n")
    s = read_stats_log(log, "redis://:pw@h")
    assert (s.compiles, s.hits, s.remote_hits, s.misses, s.remote) == (3, 2, 1, 1, "redis://:***@h")
    assert s.line() == "ccache: 3 compiles, 2 hits (66.7%), 1 from the remote cache, 1 compiled"
    assert read_stats_log(tmp_path / "none.log", None) is None


def test_sccache_counters_of_a_server_that_served_one_build():
    shown = {"stats": {"compile_requests": 5, "cache_hits": {"counts": {"C/C++": 3, "CUDA": 1}},
                       "cache_misses": {"counts": {"C/C++": 1}}, "cache_errors": {"counts": {}}},
             "cache_location": "redis, name: redis://127.0.0.1:6390, prefix: /", "version": "0.16.0"}
    s = from_sccache(shown, "redis://:pw@127.0.0.1:6390")
    assert (s.launcher, s.compiles, s.hits, s.remote_hits, s.misses) == ("sccache", 5, 4, 4, 1)
    assert s.remote == "redis://:***@127.0.0.1:6390"
    local = from_sccache(shown, None)
    assert (local.hits, local.remote_hits) == (4, 0)


@pytest.mark.parametrize("url, relayed", [("redis://cache:6379", True), ("http://cache/ccache", False),
                                          ("s3://bucket/prefix", False)])
def test_a_container_unit_is_told_whether_the_cache_reaches_it(url, relayed, capsys, monkeypatch):
    from builder import pipeline
    from builder.build.plan import plan_unit
    from builder.toolchain import survey
    monkeypatch.setattr(rc, "check", lambda *a: pytest.fail("a container unit's launcher is the image's"))
    config = resolve(load_recipe("cuda128-vulkan"), CliOptions(remote_cache=url, launcher="ccache"), env={})
    unit = config.units[0]
    image = survey.image(config, unit, None, probe=False)
    plan = plan_unit(config, unit, image, Path("/src"), "0" * 40)
    assert plan.in_container
    pipeline._check_remote_cache(config, [plan], {unit.name: image}, adopted=set())
    err = capsys.readouterr().err
    assert ("unix-socket relay" in err) == relayed
    assert ("uses its local ccache" in err) == (not relayed)


@pytest.mark.parametrize("version, warned", [("3.28.3", True), ("4.0.0", False), ("4.4.5", False), ("unknown", False)])
def test_a_cmake_that_writes_unity_sources_with_absolute_paths_is_named(version, warned, capsys, monkeypatch):
    """CMake < 4.0 ignores CMAKE_UNITY_BUILD_RELOCATABLE: libllama's unity sources then name this
    machine's paths and miss on every other runner (found with docker and Debian 12's CMake 3.25)."""
    from builder import pipeline
    from builder.build.plan import plan_unit
    from builder.toolchain.detect import Tool, Toolchain
    monkeypatch.setattr(rc, "check", lambda *a: None)
    config = resolve(load_recipe("cpu"), CliOptions(remote_cache="redis://cache:6379", launcher="ccache"), env={})
    unit = config.units[0]
    host = Toolchain("host", cmake=Tool("cmake", "/usr/bin/cmake", version), ninja=Tool("ninja", "/usr/bin/ninja", "1.12"),
                     cc=Tool("cc", "/usr/bin/cc", "gcc"), cxx=Tool("c++", "/usr/bin/c++", "g++"))
    plan = plan_unit(config, unit, host, Path("/src"), "0" * 40)
    pipeline._check_remote_cache(config, [plan], {unit.name: host}, adopted=set())
    err = capsys.readouterr().err
    assert ("unity sources" in err and f"cmake {version} (/usr/bin/cmake)" in err) == warned, err

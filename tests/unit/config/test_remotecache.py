"""config.remotecache and build.cachestats: one URL read once, each launcher's words, never a secret shown.

Whether the launchers really log in with what they are told is tests/unit/units/test_remote_auth.py
(real ccache and sccache against a password-protected redis-server)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from builder.units.cachestats import from_sccache, read_stats_log
from builder.config import remotecache as rc
from builder.config.options import CliOptions, resolve
from builder.config.recipe import load_recipe
from builder.errors import AssembleError
from tests.support.common import assemble, one_error_line


def parsed(url: str) -> rc.RemoteCache:
    return rc.parse(url, "--remote-cache")


# --- reading: every credential form, into one typed value -------------------------------------------

@pytest.mark.parametrize("url, fields", [
    ("redis://cache:6379", dict(host="cache", port=6379, user=None, password=None, db=0)),
    ("redis://pw@cache", dict(host="cache", port=None, user=None, password="pw", db=0)),     # ccache: a password
    ("redis://:pw@cache/2", dict(user=None, password="pw", db=2)),                            # redis-py, sccache
    ("redis://alice:p%40ss%3Aw%2Frd@cache:7000/3", dict(user="alice", password="p@ss:w/rd", port=7000, db=3)),
    ("redis://alice:pa:ss@cache", dict(user="alice", password="pa:ss")),                       # ':' after the first
    ("redis://:p@ss@cache", dict(password="p@ss", host="cache")),                              # the last '@' ends it
    ("redis://cache?password=p%26w&db=4", dict(password="p&w", db=4)),                         # redis-py's query
    ("REDIS://[::1]:6390/1", dict(host="::1", port=6390, db=1)),
    ("redis+unix:/run/redis.sock", dict(path="/run/redis.sock", password=None, db=0)),
    ("redis+unix:///run/redis.sock?db=2", dict(path="/run/redis.sock", db=2)),
    ("redis+unix:/run/redis.sock?password=pw&db=1", dict(path="/run/redis.sock", password="pw", db=1)),
    ("redis+unix:/r.sock?pass=pw&user=bob", dict(user="bob", password="pw")),                   # the redis crate's
    ("redis+unix://pw@localhost/r.sock", dict(path="/r.sock", user=None, password="pw")),       # ccache's
    ("redis+unix://bob:pw@localhost/r.sock?db=5", dict(user="bob", password="pw", db=5)),
    ("redis+unix://bob:pw@/r.sock", dict(user="bob", password="pw", path="/r.sock")),
    ("http://user:pw@cache:8080/ccache", dict(host="cache", port=8080, path="/ccache", user="user", password="pw")),
    ("s3://bucket/llama/ci/", dict(host="bucket", path="llama/ci")),
    ("gs://bucket", dict(host="bucket", path="")),
    ("gha", dict(scheme="gha")),
])
def test_every_credential_form_is_read_once(url, fields):
    cache = parsed(url)
    assert {k: getattr(cache, k) for k in fields} == fields
    assert cache.password is None or cache.password not in repr(cache)


# --- telling: each launcher in the form it reads ----------------------------------------------------

@pytest.mark.parametrize("url, launcher, env", [
    ("redis://h:6379", "ccache", {"CCACHE_REMOTE_STORAGE": "redis://h:6379"}),
    ("redis://:pw@h:6379/2", "ccache", {"CCACHE_REMOTE_STORAGE": "redis://pw@h:6379/2"}),       # not `:pw@`
    ("redis://pw@h", "ccache", {"CCACHE_REMOTE_STORAGE": "redis://pw@h"}),
    ("redis://a%20b:p%7Cw@h", "ccache", {"CCACHE_REMOTE_STORAGE": "redis://a%20b:p%7Cw@h"}),
    ("redis://:p%3Aw@h", "ccache", {"CCACHE_REMOTE_STORAGE": "redis://default:p%3Aw@h"}),       # ':' splits
    ("redis://h?password=p%2Fw&db=3", "ccache", {"CCACHE_REMOTE_STORAGE": "redis://p%2Fw@h/3"}),
    ("redis://[::1]:7/1", "ccache", {"CCACHE_REMOTE_STORAGE": "redis://[::1]:7/1"}),
    ("redis+unix:/r.sock", "ccache", {"CCACHE_REMOTE_STORAGE": "redis+unix:/r.sock"}),
    ("redis+unix:/r.sock?password=pw&db=2", "ccache",
     {"CCACHE_REMOTE_STORAGE": "redis+unix://pw@localhost/r.sock?db=2"}),
    ("http://u:p%40w@h/x", "ccache", {"CCACHE_REMOTE_STORAGE": "http://u:p%40w@h/x"}),
    ("redis://h:6379", "sccache", {"SCCACHE_REDIS_ENDPOINT": "redis://h:6379"}),
    ("redis://:p%40w@h:6379/2", "sccache", {"SCCACHE_REDIS_ENDPOINT": "redis://h:6379",
                                            "SCCACHE_REDIS_PASSWORD": "p@w", "SCCACHE_REDIS_DB": "2"}),
    ("redis://pw@h", "sccache", {"SCCACHE_REDIS_ENDPOINT": "redis://h", "SCCACHE_REDIS_PASSWORD": "pw"}),
    ("redis://u:pw@[::1]", "sccache", {"SCCACHE_REDIS_ENDPOINT": "redis://[::1]", "SCCACHE_REDIS_USERNAME": "u",
                                       "SCCACHE_REDIS_PASSWORD": "pw"}),
    ("redis+unix:/r.sock?db=4", "sccache", {"SCCACHE_REDIS_ENDPOINT": "redis+unix://localhost/r.sock",
                                            "SCCACHE_REDIS_DB": "4"}),
    ("s3://bucket/llama/ci", "sccache", {"SCCACHE_BUCKET": "bucket", "SCCACHE_S3_KEY_PREFIX": "llama/ci"}),
    ("gs://b", "sccache", {"SCCACHE_GCS_BUCKET": "b"}),
    ("gha", "sccache", {"SCCACHE_GHA_ENABLED": "true"}),
])
def test_each_launcher_is_told_in_its_own_words(url, launcher, env):
    cache = parsed(url)
    rc.check(cache, launcher, "test")
    base = {"ccache": "CCACHE_BASEDIR", "sccache": "SCCACHE_BASEDIRS"}[launcher]
    assert rc.launcher_env(cache, launcher, Path("/c")) == {base: "/c", **env}
    assert rc.launcher_env(None, launcher, Path("/c")) == {base: "/c"}


@pytest.mark.parametrize("url, launcher, words", [
    ("s3://bucket", "ccache", "ccache cannot use"), ("http://h/x", "sccache", "sccache cannot use"),
    ("redis://h", "", "needs a compiler launcher"),
])
def test_a_url_the_launcher_cannot_use_is_refused(url, launcher, words):
    with pytest.raises(AssembleError, match=words):
        rc.check(parsed(url), launcher, "unit main")


def test_the_setting_resolves_once_and_is_shown_redacted():
    r = load_recipe("cpu")
    assert resolve(r, env={}).remote_cache.value is None
    c = resolve(r, env={rc.ENV: "redis://:pw@env-host"})
    assert (c.remote_cache.value, c.remote_cache.origin) == (parsed("redis://:pw@env-host"), rc.ENV)
    c = resolve(r, CliOptions(remote_cache="redis://cli-host"), env={rc.ENV: "redis://env-host"})
    assert (c.remote_cache.value.host, c.remote_cache.origin) == ("cli-host", "--remote-cache")
    assert resolve(r, env={rc.ENV: "redis://:pw@h"}).as_dict()["remote_cache"]["value"] == "redis://:***@h"
    with pytest.raises(AssembleError, match="not a compile cache URL"):
        resolve(r, CliOptions(remote_cache="ftp://h"), env={})


# --- malformed: one line when the option is read ----------------------------------------------------

MALFORMED = [
    ("redis://:pw@[::1:6379/0", "no closing ']'"),
    ("redis://[::1]x", "other than :PORT"),
    ("redis://[nothex]:1", "not an IPv6 address"),
    ("redis://::1:6379", "IPv6 address goes in brackets"),
    ("redis://:pw@cache:notaport", "port is not a number"),
    ("redis://cache:0", "port is not a number"),
    ("redis://cache:70000", "port is not a number"),
    ("redis://cache:", "port is not a number"),
    ("redis://cache:6379/abc", "database (the path) is not a number"),
    ("redis://cache/1/2", "database (the path) is not a number"),
    ("redis+unix:/r.sock?db=x", "database (?db=) is not a number"),
    ("redis://cache/1?db=2", "database twice"),
    ("redis://:pw@cache?password=pw", "password twice"),
    ("redis://cache?timeout=5", "query parameter other than"),
    ("redis://cache?password", "not name=value"),
    ("redis://", "names no host"),
    ("redis://:pw@", "names no host"),
    ("redis://:pw@:6379", "names no host"),
    ("redis://ca che", "space"),
    ("redis://ca_che!", "not a host name"),
    ("redis://alice:@cache", "user name with no password"),
    ("redis://cache?user=alice", "user name with no password"),
    ("redis://:pa/ss@cache", "an '@' after the host"),
    ("redis://:pa?ss@cache", "an '@' after the host"),
    ("redis://:pa#ss@cache", "'#'"),
    ("redis:cache", "starts with redis://"),
    ("redis+unix:run/redis.sock", "absolute path"),
    ("redis+unix://cache/run/redis.sock", "no host but localhost"),
    ("http://pw@cache/x", "USER:PASSWORD"),
    ("http://cache/x?y=1", "takes no query"),
    ("s3://KEY:SECRET@bucket", "credentials in the URL"),
    ("s3://bucket:9000", "a bucket has no port"),
    ("s3://", "names no bucket"),
    ("ftp://cache", "not a compile cache URL"),
    ("cache.internal:6379", "not a compile cache URL"),
]


@pytest.mark.parametrize("url, words", MALFORMED)
def test_a_malformed_url_is_refused_in_one_line_when_read(url, words):
    with pytest.raises(AssembleError, match=None) as err:
        resolve(load_recipe("cpu"), CliOptions(remote_cache=url), env={})
    assert words in err.value.what and err.value.where == "--remote-cache"


@pytest.mark.parametrize("url, words", MALFORMED[:6] + MALFORMED[20:23] + [("redis://pw@h:6379/db", "not a number")])
def test_the_cli_refuses_a_malformed_url_with_exit_2(url, words):
    """Through the real CLI, from the option and from the environment: exit 2, one line, no traceback."""
    one_error_line(assemble("show", "cpu", "--remote-cache", url), 2, [words, "--remote-cache"])
    one_error_line(assemble("show", "cpu", env={rc.ENV: url}), 2, [words, rc.ENV])


# --- redaction: one function, every form, every output ----------------------------------------------

# (URL, the pieces of its secret): each piece must appear in no output
SECRETS = [
    ("redis://Sq7Zx9@cache:6379", ["Sq7Zx9"]),                                  # ccache's PASSWORD@
    ("redis://:Sq7Zx9@cache", ["Sq7Zx9"]),
    ("redis://alice:Sq7Zx9@cache/2", ["Sq7Zx9"]),
    ("redis://alice:Sq7%2FZx9%40Wv4%3AKj2@cache", ["Sq7", "Zx9", "Wv4", "Kj2"]),   # percent-encoded '/', '@', ':'
    ("redis://Sq7%3AZx9@cache", ["Sq7", "Zx9"]),
    ("redis://cache?password=Sq7Zx9&db=2", ["Sq7Zx9"]),
    ("redis+unix:/r.sock?password=Sq7Zx9", ["Sq7Zx9"]),
    ("redis+unix:///r.sock?db=1&pass=Sq7Zx9&user=bob", ["Sq7Zx9"]),
    ("redis+unix://bob:Sq7Zx9@localhost/r.sock", ["Sq7Zx9"]),
    ("http://user:Sq7Zx9@cache/ccache", ["Sq7Zx9"]),
    # refused (each one line), never echoed:
    ("redis://:Sq7/Zx9@Wv4@cache", ["Sq7", "Zx9", "Wv4"]),                      # unencoded '/' and '@'
    ("redis://:Sq7?Zx9@cache", ["Sq7", "Zx9"]),
    ("redis://:Sq7#Zx9@cache", ["Sq7", "Zx9"]),
    ("redis://:Sq7Zx9@[::1:6379/0", ["Sq7Zx9"]),                                # urlsplit raised here
    ("redis://:Sq7Zx9@cache:notaport", ["Sq7Zx9"]),
    ("redis://cache?password=Sq7&Zx9", ["Sq7", "Zx9"]),                         # an unencoded '&'
    ("redis+unix:///r.sock?password=Sq7@Zx9", ["Sq7", "Zx9"]),
    ("s3://AKIDEXAMPLE:Sq7Zx9@bucket/prefix", ["Sq7Zx9"]),                      # S3 KEY:SECRET@
    ("ftp://:Sq7Zx9@cache", ["Sq7Zx9"]),
    ("redis+unix:/tmp/s#password=Sq7Zx9", ["Sq7Zx9"]),                          # a fragment
    ("redis://cache#Sq7Zx9", ["Sq7Zx9"]),
    ("redis://cache:6379/0?db=1#pass=Sq7Zx9", ["Sq7Zx9"]),
    ("redis://alice:Sq7#Zx9", ["Sq7", "Zx9"]),                                  # '#' in a password, no '@host'
    ("redis://alice:Sq7Zx9", ["Sq7Zx9"]),                                       # the '@host' forgotten
    ("Sq7Zx9@cache:6379", ["Sq7Zx9"]),
]


def _clean(text: str, pieces: list[str]) -> None:
    for piece in pieces:
        assert piece not in text, f"{piece!r} shown in: {text[:2000]}"


@pytest.mark.parametrize("url, pieces", SECRETS)
def test_redacted_hides_every_form_of_secret(url, pieces):
    shown = rc.redacted(url)
    _clean(shown, pieces)
    assert "***" in shown


def test_redacted_keeps_what_is_no_secret():
    assert rc.redacted("redis://:s3cret@cache:6379/2") == "redis://:***@cache:6379/2"
    assert rc.redacted("redis://user:s3cret@cache") == "redis://user:***@cache"
    assert rc.redacted("redis://s3cret@cache") == "redis://***@cache"
    assert rc.redacted("redis+unix:/r.sock?password=x&db=2") == "redis+unix:/r.sock?password=***&db=2"
    assert rc.redacted("redis://cache:6379") == "redis://cache:6379"
    assert rc.redacted("http://cache.internal/ccache") == "http://cache.internal/ccache"


@pytest.mark.parametrize("url, pieces", SECRETS)
def test_no_output_shows_a_secret(url, pieces, tmp_path, capsys):
    """The real CLI (show, show --json, a refusal) and the writers of the build's log
    line, its cache record and the manifest's config, for every form."""
    outputs = []
    for args in (["show", "cpu", "--remote-cache", url], ["show", "cpu", "--json", "--remote-cache", url],
                 ["build", "--recipe", "cpu", "--remote-cache", url + "#", "--out", str(tmp_path / "out")]):
        done = assemble(*args)
        outputs.append(done.stdout + done.stderr)
    try:
        cache = parsed(url)
    except AssembleError as e:
        outputs.append(str(e))
        one_error_line(assemble("show", "cpu", "--remote-cache", url), 2, ["--remote-cache"])
    else:
        assert "***" in outputs[0] and "***" in outputs[1]
        outputs.append(repr(cache))
        outputs += _what_a_build_writes(cache, url, tmp_path, capsys)
    assert not (tmp_path / "out").exists()
    for text in outputs:
        _clean(text, pieces)


def _what_a_build_writes(cache: rc.RemoteCache, url: str, tmp_path: Path, capsys) -> list[str]:
    """The build's log line and cache record (run._record_cache_stats), the manifest's config and
    units[].cache (pipeline), the pipeline's lines, sccache's record: as a build writes them."""
    from builder.flows import build as build_flow
    from builder.units import cachestats, run
    from builder.units.plan import plan_unit
    from builder.toolchain.detect import Tool, Toolchain
    config = resolve(load_recipe("cpu"), CliOptions(remote_cache=url, launcher="ccache"), env={})
    host = Toolchain("host", cmake=Tool("cmake", "/usr/bin/cmake", "4.0.0"),
                     ninja=Tool("ninja", "/usr/bin/ninja", "1.12"),
                     cc=Tool("cc", "/usr/bin/cc", "gcc"), cxx=Tool("c++", "/usr/bin/c++", "g++"))
    unit = config.units[0]
    plan = plan_unit(config, unit, host, tmp_path / "src", "0" * 40)
    plan = dataclasses.replace(plan, build_dir=tmp_path / "build", launcher="ccache")
    plan.build_dir.mkdir()
    (plan.build_dir / cachestats.STATS_LOG).write_text("# a.c\ndirect_cache_hit\nremote_storage_hit\n")
    if cache.scheme in rc.SCHEMES["ccache"]:
        build_flow._check_remote_cache(config, [plan], {unit.name: host}, adopted=set())
    run._record_cache_stats(plan, None)
    manifest_parts = json.dumps({"config": config.as_dict(), "cache": build_flow._cache_stats(plan.build_dir)})
    assert (cache.password is None) or "***" in manifest_parts
    sccache = from_sccache({"stats": {"cache_hits": {"counts": {"C": 1}}}}, cache).as_dict()
    return [capsys.readouterr().err, (plan.build_dir / run.LOG).read_text(), manifest_parts, json.dumps(sccache),
            str(config.remote_cache.value)]


# --- what a build's cache did ------------------------------------------------------------------------

def test_stats_log_counts_this_builds_compiles(tmp_path):
    log = tmp_path / "ccache-stats.log"
    log.write_text("# a.c\ncache_miss\ndirect_cache_miss\nlocal_storage_write\n"
                   "# b.c\ndirect_cache_hit\nremote_storage_hit\nremote_storage_read_hit\n"
                   "# c.c\npreprocessed_cache_hit\nlocal_storage_hit\n")
    s = read_stats_log(log, parsed("redis://:pw@h"))
    assert (s.compiles, s.hits, s.remote_hits, s.misses, s.remote) == (3, 2, 1, 1, "redis://:***@h")
    assert s.line() == "ccache: 3 compiles, 2 hits (66.7%), 1 from the remote cache, 1 compiled"
    assert read_stats_log(tmp_path / "none.log", None) is None


def test_sccache_counters_of_a_server_that_served_one_build():
    shown = {"stats": {"compile_requests": 5, "cache_hits": {"counts": {"C/C++": 3, "CUDA": 1}},
                       "cache_misses": {"counts": {"C/C++": 1}}, "cache_errors": {"counts": {}}},
             "cache_location": "redis, name: redis://127.0.0.1:6390, prefix: /", "version": "0.16.0"}
    s = from_sccache(shown, parsed("redis://:pw@127.0.0.1:6390"))
    assert (s.launcher, s.compiles, s.hits, s.remote_hits, s.misses) == ("sccache", 5, 4, 4, 1)
    assert s.remote == "redis://:***@127.0.0.1:6390"
    local = from_sccache(shown, None)
    assert (local.hits, local.remote_hits) == (4, 0)


@pytest.mark.parametrize("url, relayed", [("redis://cache:6379", True), ("redis+unix:/r.sock?password=pw", True),
                                          ("http://cache/ccache", False), ("s3://bucket/prefix", False)])
def test_a_container_unit_is_told_whether_the_cache_reaches_it(url, relayed, capsys, monkeypatch):
    from builder.flows import build as build_flow
    from builder.units.plan import plan_unit
    from builder.toolchain import survey
    monkeypatch.setattr(rc, "check", lambda *a: pytest.fail("a container unit's launcher is the image's"))
    config = resolve(load_recipe("cuda128-vulkan"), CliOptions(remote_cache=url, launcher="ccache"), env={})
    unit = config.units[0]
    image = survey.image(config, unit, None, probe=False)
    plan = plan_unit(config, unit, image, Path("/src"), "0" * 40)
    assert plan.in_container
    build_flow._check_remote_cache(config, [plan], {unit.name: image}, adopted=set())
    err = capsys.readouterr().err
    assert ("unix-socket relay" in err) == relayed
    assert ("uses its local ccache" in err) == (not relayed)


@pytest.mark.parametrize("version, warned", [("3.28.3", True), ("4.0.0", False), ("4.4.5", False), ("unknown", False)])
def test_a_cmake_that_writes_unity_sources_with_absolute_paths_is_named(version, warned, capsys, monkeypatch):
    """CMake < 4.0 ignores CMAKE_UNITY_BUILD_RELOCATABLE: libllama's unity sources then name this
    machine's paths and miss on every other runner (found with docker and Debian 12's CMake 3.25)."""
    from builder.flows import build as build_flow
    from builder.units.plan import plan_unit
    from builder.toolchain.detect import Tool, Toolchain
    monkeypatch.setattr(rc, "check", lambda *a: None)
    config = resolve(load_recipe("cpu"), CliOptions(remote_cache="redis://cache:6379", launcher="ccache"), env={})
    unit = config.units[0]
    host = Toolchain("host", cmake=Tool("cmake", "/usr/bin/cmake", version), ninja=Tool("ninja", "/usr/bin/ninja", "1.12"),
                     cc=Tool("cc", "/usr/bin/cc", "gcc"), cxx=Tool("c++", "/usr/bin/c++", "g++"))
    plan = plan_unit(config, unit, host, Path("/src"), "0" * 40)
    build_flow._check_remote_cache(config, [plan], {unit.name: host}, adopted=set())
    err = capsys.readouterr().err
    assert ("unity sources" in err and f"cmake {version} (/usr/bin/cmake)" in err) == warned, err


def test_a_read_only_cache_is_told_to_ccache_as_its_read_only_attribute_and_refused_to_sccache():
    """A tag build reads the shared cache and writes nothing: ASSEMBLE_REMOTE_CACHE_READ_ONLY=true (or 1)
    becomes ccache's `|read-only` (after the URL, whose own '|' is encoded); sccache is refused in that
    mode; anything but true/false/1/0/empty is one line."""
    recipe = load_recipe("cpu")
    for value, expect in (("true", True), ("1", True), ("false", False), ("0", False), ("", False), (" TRUE ", True)):
        cfg = resolve(recipe, CliOptions(remote_cache="redis://pw@cache:6379/2"), env={rc.READ_ONLY_ENV: value})
        cache = cfg.remote_cache.value
        assert cache.read_only is expect, value
        assert rc.ccache_url(cache) == "redis://pw@cache:6379/2" + ("|read-only" if expect else "")
    cache = dataclasses.replace(rc.parse("redis+unix:/run/a|b.sock", "t"), read_only=True)
    assert rc.ccache_url(cache) == "redis+unix:/run/a%7Cb.sock|read-only"
    assert str(cache).endswith(" (read-only)")
    rc.check(cache, "ccache", "t")
    with pytest.raises(AssembleError, match="read-only and sccache is not told so"):
        rc.check(dataclasses.replace(rc.parse("redis://pw@cache", "t"), read_only=True), "sccache", "t")
    with pytest.raises(AssembleError, match="'yes' is not true or false"):
        resolve(recipe, CliOptions(remote_cache="redis://pw@cache"), env={rc.READ_ONLY_ENV: "yes"})
    # no cache, no reading of the flag: a build without a remote cache is untouched by it
    assert resolve(recipe, CliOptions(), env={rc.READ_ONLY_ENV: "yes"}).remote_cache.value is None

"""Builds: cached by content, compile errors trimmed to the compiler's message with its line, compilers run
without secrets; CUDA sources (the seed and every CUDA test kernel) compile with nvcc where it exists."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kevolve.judge import build as builder
from kevolve.task import load_task

HERE = Path(__file__).resolve().parent.parent          # tests/
CUDA_KERNELS = sorted((HERE / "kernels" / "cuda").glob("*.cu"))

GOOD_CPP = """#include <cstdint>
extern "C" int forward(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = 2 * x[i];
    return 0;
}
"""
BAD_CPP = """#include <cstdint>
extern "C" int forward(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = 2 * x[i];
    return missing_name;
}
"""


def _nvcc_missing() -> bool:
    return not Path(builder.cuda_home(), "bin", "nvcc").exists() and shutil.which("nvcc") is None


needs_nvcc = pytest.mark.skipif(_nvcc_missing(), reason="nvcc not found")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A fresh, empty build cache for one test."""
    root = tmp_path / "cache"
    monkeypatch.setenv("KEVOLVE_CACHE", str(root))
    return root / "build"


def test_build_is_cached_by_content(cache):
    first = builder.build(GOOD_CPP, "cpu")
    assert first.ok and not first.cached, first.error
    assert Path(first.lib_path).is_file() and Path(first.lib_path).is_relative_to(cache)
    start = time.perf_counter()
    second = builder.build(GOOD_CPP, "cpu")
    elapsed = time.perf_counter() - start
    assert second.ok and second.cached
    assert (second.key, second.lib_path) == (first.key, first.lib_path)
    assert elapsed < 0.5 and elapsed < first.seconds       # no compiler ran
    assert [p.name for p in cache.iterdir()] == [first.key]   # no temporary folder left behind


def test_different_source_or_target_gives_a_different_key(cache):
    a = builder.build(GOOD_CPP, "cpu")
    b = builder.build(GOOD_CPP.replace("2 * x[i]", "3 * x[i]"), "cpu")
    assert a.ok and b.ok
    assert a.key != b.key and a.lib_path != b.lib_path
    assert builder._key(GOOD_CPP, "cpu", "c", "native") != builder._key(GOOD_CPP, "cuda", "c", "90a")
    assert builder._key(GOOD_CPP, "cuda", "c", "90a") != builder._key(GOOD_CPP, "cuda", "c", "100a")


def test_cache_is_shared_across_processes(cache):
    """A build done by another process (same KEVOLVE_CACHE) is found, not redone."""
    first = builder.build(GOOD_CPP, "cpu")
    code = ("from kevolve.judge import build; b = build.build(open(0).read(), 'cpu'); "
            "print(b.ok, b.cached, b.lib_path)")
    out = subprocess.run([sys.executable, "-c", code], input=GOOD_CPP, capture_output=True, text=True,
                         env={**os.environ}, check=True).stdout.split()
    assert out == ["True", "True", first.lib_path]


def test_compile_error_is_trimmed_and_names_the_line(cache):
    result = builder.build(BAD_CPP, "cpu")
    assert not result.ok and result.lib_path is None
    assert re.search(r"kernel\.cpp:4:\d+: error: .*missing_name", result.error), result.error
    assert str(cache) not in result.error and "/tmp" not in result.error and result.key not in result.error
    assert len(result.error) <= builder.MAX_ERROR_CHARS + 20
    again = builder.build(BAD_CPP, "cpu")   # failures are not cached (a broken toolchain must not stick)
    assert not again.ok and not again.cached and again.error == result.error


def test_long_error_log_keeps_the_errors():
    log = "\n".join([f"note: filler line {i} " + "x" * 80 for i in range(200)]
                    + ["kernel.cu(12): error: identifier \"foo\" is undefined"]
                    + [f"note: more filler {i}" for i in range(100)])
    text = builder.trim_errors(log)
    assert len(text) <= builder.MAX_ERROR_CHARS + 20
    assert 'kernel.cu(12): error: identifier "foo" is undefined' in text


def test_trim_errors_removes_the_work_directory():
    work = Path("/tmp/kevolve-xyz/0123abcd.tmp")
    text = builder.trim_errors(f"{work}/kernel.cpp:3:1: error: boom\nIn file included from {work}:\n", work)
    assert str(work) not in text and "kernel.cpp:3:1: error: boom" in text


def test_unknown_target_is_refused(cache):
    with pytest.raises(ValueError, match="target"):
        builder.build(GOOD_CPP, "tpu")


def test_compiler_runs_without_secrets(cache, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    seen = []
    real_run = subprocess.run

    def spy(cmd, *args, **kwargs):
        seen.append((cmd, kwargs.get("env")))
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(builder.subprocess, "run", spy)
    result = builder.build(GOOD_CPP.replace("2 * x[i]", "5 * x[i]"), "cpu")
    assert result.ok, result.error
    compiles = [(cmd, env) for cmd, env in seen if "-shared" in cmd]
    assert compiles, seen
    for cmd, env in compiles:
        assert env is not None, f"{cmd[0]} inherited the whole environment"
        assert "OPENAI_API_KEY" not in env and "HF_TOKEN" not in env
        assert "sk-test-secret" not in env.values() and "PATH" in env


# ---------------------------------------------------------------------- CUDA (nvcc runs here; no GPU needed)
@needs_nvcc
def test_cuda_seed_builds(cache):
    seed = load_task("layernorm_fwd").seed_path("cuda")
    result = builder.build(seed.read_text(), "cuda")
    assert result.ok, result.error
    assert Path(result.lib_path).stat().st_size > 0
    again = builder.build(seed.read_text(), "cuda")
    assert again.cached and again.lib_path == result.lib_path


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in CUDA_KERNELS if not p.name.startswith("rkb_")],
                         ids=lambda p: p.name)
def test_cuda_test_kernel_builds(cache, path):
    result = builder.build(path.read_text(), "cuda")
    assert result.ok, result.error


@needs_nvcc
@pytest.mark.slow
def test_cuda_compile_error_names_the_line(cache):
    bad = "#include <cuda_runtime.h>\n__global__ void k(float* o) {\n    o[0] = missing_name;\n}\n"
    result = builder.build(bad, "cuda")
    assert not result.ok
    assert re.search(r"kernel\.cu\(3\): error: identifier \"missing_name\" is undefined", result.error), result.error
    assert "/tmp" not in result.error and str(cache) not in result.error


@needs_nvcc
@pytest.mark.slow
def test_torch_extension_builds(cache, monkeypatch):
    """The robust-kbench format (abi torch) builds with torch.utils.cpp_extension: one file, ~1-3 min here."""
    home = builder.cuda_home()
    if not (Path(home) / "include" / "cuda_runtime.h").exists():    # see test_cuda_home_behind_a_wrapper_script
        monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda")
    src = (HERE / "kernels" / "cuda" / "rkb_layernorm_fwd.cu").read_text()
    result = builder.build(src, "cuda", abi="torch")
    assert result.ok, result.error
    assert result.module_name == f"kevolve_{result.key}"
    assert Path(result.lib_path).is_file()


def test_cuda_home_behind_a_wrapper_script(tmp_path, monkeypatch):
    real = Path("/usr/local/cuda/bin/nvcc")
    if not (real.exists() and Path("/usr/local/cuda/include/cuda_runtime.h").exists()):
        pytest.skip("needs a CUDA toolkit at /usr/local/cuda to check against")
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    assert (Path(builder.cuda_home()) / "include" / "cuda_runtime.h").exists(), builder.cuda_home()


# ---------------------------------------------------------------------- bounds (issue 37: 192 MiB of initialised data)
def _table_kernel(mib: float) -> str:
    """GOOD_CPP with an initialised table of `mib` MiB that the kernel reads (so it is kept)."""
    floats = int(mib * (1 << 18))
    return GOOD_CPP.replace("extern", f"static float table[{floats}] = {{1.f}};\nextern").replace(
        "2 * x[i]", "2 * x[i] * table[i % 2]")


def test_a_library_over_the_cap_is_refused_naming_its_size(cache, monkeypatch):
    monkeypatch.setenv("KEVOLVE_MAX_LIBRARY_MB", "1")
    assert builder.build(_table_kernel(0.25), "cpu").ok             # under the cap: built as before
    result = builder.build(_table_kernel(1.5), "cpu")
    assert not result.ok and result.lib_path is None
    assert re.search(r"the built library is 1\.5 MiB, over the cap of 1 MiB on a kernel's library", result.error), \
        result.error
    assert not (cache / result.key).exists()                         # not kept
    monkeypatch.setenv("KEVOLVE_MAX_LIBRARY_MB", "32")
    found = builder.build(_table_kernel(1.5), "cpu")                 # the cap decides, not a memory of it
    assert found.ok, found.error
    monkeypatch.setenv("KEVOLVE_MAX_LIBRARY_MB", "1")
    again = builder.build(_table_kernel(1.5), "cpu")                 # cached under a larger cap: refused now
    assert not again.ok and "over the cap of 1 MiB" in again.error, again.error


def test_a_compiler_writing_past_twice_the_cap_is_stopped(cache, monkeypatch):
    """The 192 MiB library of issue 37 is never written: every file the compiler writes is bounded at twice the
    cap (here 2 MiB: a 3 MiB table stops the assembler)."""
    monkeypatch.setenv("KEVOLVE_MAX_LIBRARY_MB", "1")
    result = builder.build(_table_kernel(3), "cpu")
    assert not result.ok
    assert result.error.startswith("the compiler wrote a file over 2 MiB (twice the cap of 1 MiB"), result.error
    assert list(cache.iterdir()) == []                               # nothing left behind


def test_a_source_over_the_cap_is_not_compiled(cache, monkeypatch):
    seen = []
    monkeypatch.setattr(builder.subprocess, "run", lambda *a, **k: seen.append(a))
    result = builder.build(GOOD_CPP + "//" + "x" * builder.MAX_SOURCE_BYTES, "cpu")
    assert not result.ok and "over the cap of 1024 KiB on a kernel's source" in result.error, result.error
    assert not seen                                                  # no compiler ran


def test_install_refuses_a_library_over_the_cap(cache, monkeypatch):
    monkeypatch.setenv("KEVOLVE_MAX_LIBRARY_MB", "1")
    with pytest.raises(ValueError, match=r"over the cap of 1 MiB"):
        builder.install("0" * 24, bytes(2 << 20))
    assert not (cache / ("0" * 24)).exists()


def _entry(root: Path, name: str, size: int, used: float) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "kernel.so").write_bytes(bytes(size))
    os.utime(d, (used, used))
    return d


def _key(c: str) -> str:
    return c * 24


def test_eviction_removes_the_least_recently_used_first(tmp_path):
    now = 1_000_000.0
    for c, used in (("a", now - 500), ("b", now - 100), ("c", now - 300), ("d", now - 200)):
        _entry(tmp_path, _key(c), 1000, used)
    _entry(tmp_path, _key("e") + ".tmp123", 5000, now - 400)        # an abandoned build: gone past the grace
    _entry(tmp_path, _key("f") + ".tmp456", 5000, now - 5)          # one in progress: kept
    removed = builder.evict(tmp_path, 2500, grace_s=50, now=now)
    assert removed == [_key("a"), _key("c")]                         # oldest first, until two entries (2000 B) fit
    assert sorted(p.name for p in tmp_path.iterdir()) == [_key("b"), _key("d"), _key("f") + ".tmp456"]


def test_eviction_keeps_what_was_used_within_the_grace(tmp_path):
    now = 1_000_000.0
    for c, used in (("a", now - 500), ("b", now - 10), ("c", now - 5)):
        _entry(tmp_path, _key(c), 1000, used)
    assert builder.evict(tmp_path, 0, grace_s=60, now=now) == [_key("a")]   # over the bound; b and c are recent
    assert sorted(p.name for p in tmp_path.iterdir()) == [_key("b"), _key("c")]


def test_eviction_touches_nothing_but_cache_entries(tmp_path):
    """Pointed at the wrong folder (a development version once passed the repository's root), eviction removes
    nothing that is not named as an entry: no source tree is lost to a cache bound."""
    now = 1_000_000.0
    for name in ("kevolve", "tests", ".git", "abc.def", _key("g")[:-1], _key("h") + "x"):
        _entry(tmp_path, name, 1000, now - 10_000)
    assert builder.evict(tmp_path, 0, grace_s=0, now=now) == []
    assert len(list(tmp_path.iterdir())) == 6


def test_the_cache_stays_bounded_and_keeps_what_is_used(cache, monkeypatch):
    """Builds past the bound evict the least recently used library; a cache hit counts as a use."""
    monkeypatch.setattr(builder, "GRACE_S", 0.0)
    first = builder.build(GOOD_CPP, "cpu")
    size = sum(f.stat().st_size for f in Path(first.lib_path).parent.rglob("*") if f.is_file())
    monkeypatch.setenv("KEVOLVE_CACHE_MAX_GB", str(2.5 * size / (1 << 30)))      # room for two
    keys = [first.key]
    for k in (3, 4):
        time.sleep(0.02)                                             # distinct modification times
        keys.append(builder.build(GOOD_CPP.replace("2 * x[i]", f"{k} * x[i]"), "cpu").key)
    assert sorted(p.name for p in cache.iterdir()) == sorted(keys[1:])     # the first was the least recently used
    time.sleep(0.02)
    assert builder.build(GOOD_CPP.replace("2 * x[i]", "3 * x[i]"), "cpu").cached   # keys[1] used again
    time.sleep(0.02)
    keys.append(builder.build(GOOD_CPP.replace("2 * x[i]", "5 * x[i]"), "cpu").key)
    assert sorted(p.name for p in cache.iterdir()) == sorted([keys[1], keys[3]])   # keys[2] went, not keys[1]
    total = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    assert total <= builder.max_cache_bytes()

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

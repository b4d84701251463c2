"""`judge.worker.l2`: the loaded CUDA runtime is found without loading one, its absence is a reason and not an error,
and (on a GPU) a raised persisting-L2 set-aside is read back and reset to zero."""
from __future__ import annotations

import pytest

from kevolve.judge.worker import l2

MAPS = """\
7f0000000000-7f0000001000 r--p 00000000 08:01 1234   /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000001000-7f0000002000 r-xp 00001000 08:01 99     /opt/venv/nvidia/cu13/lib/libcudart.so.13
7f0000002000-7f0000003000 r--p 00002000 08:01 99     /opt/venv/nvidia/cu13/lib/libcudart.so.13
7f0000003000-7f0000004000 r--p 00000000 08:01 98     /usr/local/cuda/lib64/libcudart.so.13.0.96
7f0000004000-7f0000005000 r--p 00000000 08:01 97     /usr/local/cuda/lib64/libcudart_static_helper.so
7f0000005000-7f0000006000 rw-p 00000000 00:00 0
7f0000006000-7f0000007000 r--p 00000000 08:01 96     /tmp/not libcudart.so.13 (deleted)
"""


def test_maps_are_parsed_for_runtimes_only(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(MAPS)
    assert l2.loaded_cudarts(str(maps)) == ["/opt/venv/nvidia/cu13/lib/libcudart.so.13",
                                            "/usr/local/cuda/lib64/libcudart.so.13.0.96"]


def test_unreadable_maps_give_no_runtime(tmp_path):
    assert l2.loaded_cudarts(str(tmp_path / "absent")) == []


def test_absent_runtime_is_a_reason_not_an_error(tmp_path):
    found = l2.find_cudart([str(tmp_path / "libcudart.so.13"), "libcudart.so.0.does-not-exist"])
    assert isinstance(found, str) and "no CUDA runtime" in found
    assert l2.reset_persisting_l2(lib=found) == found
    assert l2.persisting_l2_limit(lib=found) is None


def test_looking_loads_nothing():
    """RTLD_NOLOAD: a runtime that exists on disk but is not loaded is not found, and looking does not load it."""
    import subprocess
    import sys
    from pathlib import Path
    from kevolve.judge import build
    path = Path(build.cuda_home(), "lib64", "libcudart.so")
    if not path.exists():
        pytest.skip("no CUDA toolkit runtime on disk")
    code = ("from kevolve.judge.worker import l2; r = l2.find_cudart([%r]); "
            "print(isinstance(r, str), l2.loaded_cudarts())" % str(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True", "[]"], out.stdout + out.stderr


def test_cudart_does_not_cache_a_reason(monkeypatch):
    monkeypatch.setattr(l2, "_found", [])
    monkeypatch.setattr(l2, "find_cudart", lambda candidates=None: "none here")
    assert l2.cudart() == "none here"
    sentinel = object()
    monkeypatch.setattr(l2, "find_cudart", lambda candidates=None: sentinel)
    assert l2.cudart() is sentinel and l2.cudart() is sentinel


def test_torchs_runtime_is_found_once_torch_is_imported():
    torch = pytest.importorskip("torch")
    if torch.version.cuda is None:
        pytest.skip("a CPU-only torch loads no CUDA runtime")
    found = l2.find_cudart()
    assert not isinstance(found, str), found
    assert hasattr(found, "cudaDeviceGetLimit")


def test_a_cuda_error_is_raised_with_its_name():
    torch = pytest.importorskip("torch")
    if torch.version.cuda is None or torch.cuda.is_available():
        pytest.skip("needs a CUDA torch on a machine without a usable GPU")
    found = l2.find_cudart()
    with pytest.raises(l2.L2Error, match=r"cudaError\w+ \(\d+\)"):
        l2.persisting_l2_limit(lib=found)


def _gpu():
    import torch
    return pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@_gpu()
def test_reset_takes_a_raised_set_aside_back_to_zero():
    import torch
    torch.cuda.init()
    dev = torch.cuda.current_device()
    if torch.cuda.get_device_properties(dev).L2_cache_size == 0:
        pytest.skip("no L2")
    lib = l2.cudart()
    assert not isinstance(lib, str), lib
    if l2.reset_persisting_l2() is not None:
        pytest.skip("the device has no persisting L2")
    assert l2.persisting_l2_limit() == 0
    assert lib.cudaDeviceSetLimit(l2.LIMIT_PERSISTING_L2_CACHE_SIZE, 4 << 20) == 0    # what a kernel would do
    raised = l2.persisting_l2_limit()
    assert raised > 0, raised
    x = torch.ones(1 << 20, device="cuda")
    assert float(x.sum()) == float(1 << 20)                    # the context still computes in between
    assert l2.reset_persisting_l2() is None
    assert l2.persisting_l2_limit() == 0
    assert l2.persisting_l2_limit(device=dev) == 0
    assert int(lib.cudaGetLastError()) == 0                    # no error left for the kernel's first check
    torch.cuda.synchronize()

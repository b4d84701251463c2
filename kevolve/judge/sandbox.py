"""What a candidate's process may see of ours: an environment with no secrets, and limits.

`clean_env()` builds a child environment from an allow-list of variables the toolchains and torch need;
any name that looks like a credential (KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL, AUTH) is dropped even if
allowed. Compilers and worker processes are started with it, so an API key set for the LLM clients never
reaches a compiler, a candidate, its logs or the store.
Not guaranteed: isolation — that is `judge.worker.confine` (Landlock, seccomp, capabilities, rlimits, applied by
the worker itself before the kernel loads) behind the static rules (`judge.static.rules`) and the symbol check
(`judge.static.symbols`).
"""
from __future__ import annotations

import os
import re

ALLOWED = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TERM", "SHELL",
           "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH",
           "PYTHONPATH", "PYTHONHASHSEED", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS",
           "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "CC", "CXX", "XDG_CACHE_HOME",
           "KEVOLVE_CACHE", "KEVOLVE_CUDA_ARCH", "KEVOLVE_PIDNS", "KEVOLVE_LLC_BYTES", "NCCL_NVLS_ENABLE",
           "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}
ALLOWED_PREFIXES = ("TORCH_", "TORCHINDUCTOR_", "TRITON_", "NVIDIA_", "CUDA_")
SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a compiler or a worker: allowed, non-secret variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if (k in ALLOWED or k.startswith(ALLOWED_PREFIXES)) and not SECRET.search(k)}
    for k, v in (extra or {}).items():
        if SECRET.search(k):
            raise ValueError(f"refusing to pass {k} to a candidate's process: it looks like a secret")
        env[k] = v
    return env

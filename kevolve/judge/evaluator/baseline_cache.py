"""torch.compile's caches for the baselines, kept by the evaluator's node and handed to each worker as a copy.

Each worker compiles the torch.compile baselines in a private cache directory (a kernel must not reach a
shared one), so every fresh worker paid torch.compile in full: 27-33 s of a 36-42 s CPU judgement of
`tests/kernels/tasks/layernorm_one`, 45-90 s of a bench judgement on the H200. Now the node keeps a master copy
of Inductor's and Triton's caches (under the build cache's folder, per torch version); when a judgement is about
to compile baselines, its worker's private directories get a copy of it (`seed`; judgements that reuse recent
baseline times, and spare workers, copy nothing: the precompiled ATen header alone is 150 MB), and what the
worker's `prepare` added is copied back (`harvest`) *before the worker loads the kernel* (the harness's order:
seed, prepare, harvest, seal, load), so nothing a kernel could write ever reaches the master. Later workers
then find the compiled graphs in their copy. Files are published with an atomic rename, so evaluators sharing
a node never see half a file; locks and links are not copied. The harness uses it only for a worker that
Landlock confines (without Landlock a kernel could write into the master directly, as into anything its user
can write, and so run code in every later worker before its seal); `KEVOLVE_BASELINE_CACHE=0` turns it off
(every worker compiles from nothing, as before).

Cached entries name absolute paths under the worker that compiled them (Triton's and Inductor's GPU entries do:
on the H200 a second worker's torch.compile failed with `PermissionError: '/tmp/kevolve-worker-60_isccv'`, another
worker's directory, which Landlock keeps out of reach). So `harvest` writes each file with its worker's tmp path
replaced by a placeholder of the same length, and `seed` puts the new worker's path in its place: worker
directories are `mkdtemp` names under one TMPDIR, all of one length, so pickled and binary entries keep their
offsets and string lengths (a file whose placeholder length does not match is not copied: torch compiles it).
Should torch.compile still fail in a seeded worker, the harness calls `disable` (the master is dropped and the
node stops using it, a file saying why) and judges again in a fresh, unseeded worker.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from kevolve.judge.build import tree_bytes
from kevolve.judge.options import baseline_cache_bytes, baseline_cache_on


def parts() -> tuple[str, ...]:
    """Under a worker's tmp: its TORCHINDUCTOR_CACHE_DIR, its TRITON_CACHE_DIR, and what Inductor keeps under
    TMPDIR (the precompiled ATen headers of its C++ kernels: most of a CPU compile when they are missing)."""
    import getpass
    return ("inductor", "triton", f"torchinductor_{getpass.getuser()}")


REWRITE_MAX = 64 << 20                 # bigger files (the CPU target's precompiled header) are copied as they are
DISABLED = ".disabled"                 # beside the master: this node stopped using it, and why


def enabled(configured: str | None = None) -> bool:
    if not baseline_cache_on():
        return False
    root = master(configured)
    return not root.with_name(root.name + DISABLED).exists()


def disable(reason: str, configured: str | None = None) -> None:
    """Stops this node using the master copy (torch.compile failed in a worker seeded from it): the master is
    dropped and a file beside it says why; delete that file to use the cache again."""
    root = master(configured)
    root.parent.mkdir(parents=True, exist_ok=True)
    root.with_name(root.name + DISABLED).write_text(reason + "\n")
    _drop(root)


def placeholder(worker_tmp: str) -> bytes:
    """What stands for a worker's tmp path in the master: as long as the path, and no path of its own."""
    path = os.fsencode(worker_tmp)
    return b"/" + b"%" * (len(path) - 1)


def master(configured: str | None = None) -> Path:
    import torch
    from kevolve.judge.build import cache_root
    return cache_root(configured).parent / "baselines" / f"torch-{torch.__version__}"


def seed(worker_tmp: str, configured: str | None = None) -> None:
    """Fills a worker's private cache directories with the master's files (before its `prepare`; the worker's
    tmp is the evaluator's to write, and torch.compile reads its cache when it compiles)."""
    if not enabled(configured):
        return
    root = master(configured)
    for part in parts():
        src = root / part
        if src.is_dir():
            _copy_new(src, Path(worker_tmp) / part, placeholder(worker_tmp), os.fsencode(worker_tmp))


def harvest(worker_tmp: str, configured: str | None = None) -> int:
    """Copies what the worker's compiles added to its private caches into the master; returns the file count.
    Call it only between `prepare` and the kernel's `load`. Every compiling worker copies the whole master,
    so a master grown past KEVOLVE_BASELINE_CACHE_GB (default 2) is dropped here and grows again from
    what is compiled next (moved aside first: a worker copying from it meanwhile just gets fewer files, which
    torch.compile then compiles)."""
    if not enabled(configured):
        return 0
    root = master(configured)
    path = os.fsencode(worker_tmp)
    copied = sum(_copy_new(Path(worker_tmp) / part, root / part, path, placeholder(worker_tmp))
                 for part in parts() if (Path(worker_tmp) / part).is_dir())
    cap = baseline_cache_bytes()
    if copied and tree_bytes(root) > cap:
        _drop(root)
    return copied


def _drop(root: Path) -> None:
    """Removes the master, moved aside first: a worker copying from it meanwhile just gets fewer files."""
    aside = root.with_name(f".{root.name}.dropped-{os.getpid()}")
    try:
        os.replace(root, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)




def _copy_new(src: Path, dst: Path, old: bytes = b"", new: bytes = b"") -> int:
    """Every regular file under `src` that `dst` lacks, each written to a temporary name and renamed, with
    `old` replaced by `new` (of the same length) in files up to REWRITE_MAX bytes. A file holding a placeholder
    of another length (a worker path of another length) is left out."""
    copied = 0
    for dirpath, _, files in os.walk(src, followlinks=False):
        rel = Path(dirpath).relative_to(src)
        for name in files:
            s, d = Path(dirpath) / name, dst / rel / name
            if name.endswith(".lock") or s.is_symlink() or not s.is_file() or d.exists():
                continue
            d.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=d.parent)
            try:
                with os.fdopen(fd, "wb") as out, open(s, "rb") as inp:
                    if old and s.stat().st_size <= REWRITE_MAX:
                        data = inp.read().replace(old, new)
                        if old.startswith(b"/%") and b"/%%%%%%%%" in data:      # seeding, and a worker path of
                            raise OSError("a placeholder of another length")    # another length stood there
                        out.write(data)
                    else:
                        shutil.copyfileobj(inp, out)
                shutil.copymode(s, tmp)
                os.replace(tmp, d)
                copied += 1
            except OSError:
                Path(tmp).unlink(missing_ok=True)
    return copied

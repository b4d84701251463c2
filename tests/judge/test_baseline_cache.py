"""torch.compile's caches kept by the node and copied into each worker (kevolve/judge/evaluator/baseline_cache.py): a
later worker finds what an earlier one compiled, and nothing a kernel writes reaches the master copy."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from kevolve.judge.evaluator import baseline_cache
from kevolve.judge import build as builder
from kevolve.judge.evaluator.harness import judge
from kevolve.judge.options import Options
from kevolve.task import load_task

HERE = Path(__file__).resolve().parent.parent          # tests/
TINY = HERE / "kernels" / "tasks" / "layernorm_tiny"
COMPILED = Options(target="cpu", shapes="small", baselines=("eager", "compile"), reps=5, budget_s=0.02, timeout=60)

pytestmark = pytest.mark.usefixtures("private_build_cache")   # tests/conftest.py: this module's own master too

LIBC = (HERE / "adversarial" / "cpu" / "_libc.h").read_text()   # any libc function, past the rules and the symbols


def planting(source: str) -> str:
    """The tiny task's seed, which also writes a file into its worker's private Inductor cache on its first call
    (the worker's working directory is its private tmp; Landlock lets it write there; since issue 49 the kernel's
    worker compiles nothing and holds no copy of the cache, so it makes the directory itself): if that ever reached
    the master, a later worker would load it as a compiled baseline."""
    marker = "extern \"C\" int forward("
    head, tail = source.split(marker, 1)
    body_start = tail.index("{") + 1
    plant = ('\n    if (!planted) { planted = 1;'
             ' ((int (*)(const char*, unsigned))libc_fn("mkdir"))("inductor", 0700);'
             ' ((int (*)(const char*, unsigned))libc_fn("mkdir"))("inductor/fxgraph", 0700);'
             ' void* f = ((void* (*)(const char*, const char*))libc_fn("fopen"))("inductor/fxgraph/planted", "w");'
             ' if (f) { ((int (*)(const char*, void*))libc_fn("fputs"))("import os\\n", f);'
             ' ((int (*)(void*))libc_fn("fclose"))(f); } printf("PLANTED=%d\\n", f != nullptr); fflush(stdout); }\n')
    return LIBC + "\nstatic int planted = 0;\n" + head + marker + tail[:body_start] + plant + tail[body_start:]


def test_new_regular_files_are_copied_but_not_locks_links_or_what_is_there(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "fxgraph" / "ab").mkdir(parents=True)
    (src / "fxgraph" / "ab" / "entry").write_text("new")
    (src / "locks").mkdir()
    (src / "locks" / "x.lock").write_text("")
    (src / "kept").write_text("from the worker")
    os.symlink("/etc/passwd", src / "link")
    dst.mkdir()
    (dst / "kept").write_text("the master's")
    assert baseline_cache._copy_new(src, dst) == 1
    assert (dst / "fxgraph" / "ab" / "entry").read_text() == "new"
    assert (dst / "kept").read_text() == "the master's" and not (dst / "locks").exists() and not (dst / "link").exists()
    assert [p.name for p in (dst / "fxgraph" / "ab").iterdir()] == ["entry"]      # no temporary left behind


@pytest.mark.slow
def test_a_later_worker_finds_the_compiled_baselines_and_a_kernel_adds_nothing(monkeypatch):
    from kevolve.judge.evaluator import precompile
    monkeypatch.setattr(precompile, "needed", lambda *a: [])     # one worker compiles (the helper: below)
    task = load_task(TINY)
    harvested = []
    real = baseline_cache.harvest
    monkeypatch.setattr(baseline_cache, "harvest", lambda tmp, configured=None: harvested.append(real(tmp, configured))
                        or harvested[-1])
    built = builder.build(planting((TINY / "seeds" / "cpu.cpp").read_text()), "cpu")
    assert built.ok, built.error
    first = judge(task, built.lib_path, COMPILED)
    assert first.correct, first.failure
    assert "PLANTED=1" in first.log                     # the kernel did write into its worker's cache copy
    timed = [m for m in first.measurements if m.kernel is not None]
    assert timed and all(m.compile is not None for m in timed), [m.failure for m in first.measurements]
    master = baseline_cache.master()
    assert harvested[0] > 0 and any((master / "inductor" / "fxgraph").iterdir())
    second = judge(task, built.lib_path, COMPILED)      # a fresh worker, seeded from the master
    assert second.correct, second.failure
    assert all(m.compile is not None for m in second.measurements if m.kernel is not None)
    assert harvested[1] == 0                            # it compiled nothing new: every graph came from the copy
    planted = list(master.rglob("planted"))
    assert planted == [], planted                       # written after the harvest, in a worker's own copy only


def test_it_can_be_turned_off(monkeypatch, tmp_path):
    monkeypatch.setenv("KEVOLVE_BASELINE_CACHE", "0")
    (tmp_path / "inductor").mkdir()
    (tmp_path / "inductor" / "entry").write_text("x")
    assert baseline_cache.harvest(str(tmp_path)) == 0
    baseline_cache.seed(str(tmp_path / "w"))
    assert not (tmp_path / "w").exists()


def test_a_master_past_its_size_cap_is_dropped_and_grows_again(monkeypatch, tmp_path):
    worker = tmp_path / "worker"
    (worker / "inductor").mkdir(parents=True)
    (worker / "inductor" / "a").write_bytes(b"x" * 4096)
    monkeypatch.setenv("KEVOLVE_CACHE", str(tmp_path / "node"))            # a master of this test's own
    monkeypatch.setenv("KEVOLVE_BASELINE_CACHE_GB", str(8192 / (1 << 30)))   # 8 KiB
    assert baseline_cache.harvest(str(worker)) == 1
    assert (baseline_cache.master() / "inductor" / "a").exists()           # under the cap: kept
    (worker / "inductor" / "b").write_bytes(b"x" * 8192)
    assert baseline_cache.harvest(str(worker)) == 1
    assert not baseline_cache.master().exists()                            # past it: dropped
    (worker / "inductor" / "b").unlink()
    assert baseline_cache.harvest(str(worker)) == 1 and (baseline_cache.master() / "inductor" / "a").exists()


def test_a_workers_own_path_in_an_entry_becomes_the_next_workers(monkeypatch, tmp_path):
    """Triton's and Inductor's GPU entries name paths under the worker that compiled them; a second worker given
    them as they are fails (Landlock keeps it out of the first one's directory). Harvest writes a placeholder of the
    same length, seed the new worker's path; an entry from a worker path of another length is not seeded."""
    monkeypatch.setenv("KEVOLVE_CACHE", str(tmp_path / "node"))
    first, second = tmp_path / "kevolve-worker-aaaaaaaa", tmp_path / "kevolve-worker-bbbbbbbb"
    entry = b"\x80\x04pickled\x00" + os.fsencode(first) + b"/triton/ab/kernel.cubin\x00tail"
    (first / "triton" / "ab").mkdir(parents=True)
    (first / "triton" / "ab" / "meta").write_bytes(entry)
    assert baseline_cache.harvest(str(first)) == 1
    kept = (baseline_cache.master() / "triton" / "ab" / "meta").read_bytes()
    assert os.fsencode(first) not in kept and len(kept) == len(entry)
    baseline_cache.seed(str(second))
    assert (second / "triton" / "ab" / "meta").read_bytes() == entry.replace(os.fsencode(first), os.fsencode(second))
    longer = tmp_path / "kevolve-worker-cccccccc-longer"
    baseline_cache.seed(str(longer))
    assert not (longer / "triton" / "ab" / "meta").exists()


@pytest.mark.slow
def test_a_compile_that_fails_in_a_seeded_worker_turns_the_cache_off_and_is_judged_again(monkeypatch, tmp_path):
    """A seeded copy that breaks torch.compile (here: the worker's Inductor cache directory turned into a file, so
    nothing compiled can be written) must not cost a kernel its compile baseline: the harness turns the cache off on
    this node, and judges again in a fresh, unseeded worker."""
    import shutil
    monkeypatch.setenv("KEVOLVE_CACHE", str(tmp_path / "node"))            # a node of its own: it turns it off
    task = load_task(TINY)
    built = builder.build((TINY / "seeds" / "cpu.cpp").read_text(), "cpu")
    assert built.ok, built.error
    seeded = []

    def breaking_seed(tmp, configured=None):
        seeded.append(tmp)
        shutil.rmtree(Path(tmp) / "inductor", ignore_errors=True)
        (Path(tmp) / "inductor").write_text("not a directory")

    monkeypatch.setattr(baseline_cache, "seed", breaking_seed)
    from kevolve.judge.evaluator import precompile
    monkeypatch.setattr(precompile, "needed", lambda *a: [])     # one worker, seeded once
    ev = judge(task, built.lib_path, COMPILED)
    assert ev.correct, ev.failure
    assert len(seeded) == 1 and "judged twice: torch.compile failed in a worker seeded" in ev.log
    timed = [m for m in ev.measurements if m.kernel is not None]
    assert timed and all(m.compile is not None for m in timed), [m.failure for m in ev.measurements]
    assert not baseline_cache.enabled()
    why = baseline_cache.master().with_name(baseline_cache.master().name + baseline_cache.DISABLED).read_text()
    assert "torch.compile failed" in why


@pytest.mark.slow
def test_a_cold_node_compiles_with_a_second_worker_once(monkeypatch):
    """The first judgement of a shape set on a node splits torch.compile's baselines with a helper worker
    (`judge.evaluator.precompile`): the verdict and its compiled baselines are the same, the helper's half reaches the
    master before the judging worker compiles it, and once the node is marked no later judgement starts a helper."""
    from kevolve.judge.evaluator import precompile
    task = load_task(TINY)
    started, joined = [], []
    real_init, real_join = precompile.Precompiler.__init__, precompile.Precompiler.join

    def init(self, *a, **k):
        started.append(list(a[4]))
        real_init(self, *a, **k)

    def join(self):
        real_join(self)
        joined.append((self.error, self.worker.proc.poll() is not None))
    monkeypatch.setattr(precompile.Precompiler, "__init__", init)
    monkeypatch.setattr(precompile.Precompiler, "join", join)
    built = builder.build((TINY / "seeds" / "cpu.cpp").read_text(), "cpu")
    first = judge(task, built.lib_path, COMPILED)
    assert first.correct, first.failure
    timed = [m for m in first.measurements if m.kernel is not None]
    assert len(timed) == 6 and all(m.compile is not None for m in timed)
    assert len(started) == 1 and len(started[0]) == 3          # the later half of the six timed configurations
    assert joined == [(None, True)]                             # it compiled them, and it has ended
    assert precompile.needed(task, COMPILED, list(range(6))) == []   # the node is marked
    second = judge(task, built.lib_path, COMPILED)
    assert second.correct and len(started) == 1


def test_a_helper_that_dies_costs_nothing_but_its_time(monkeypatch):
    """A helper whose worker dies (here: its init is refused) leaves the judging worker to compile everything."""
    from kevolve.judge.evaluator import precompile
    task = load_task(TINY)
    monkeypatch.setattr(precompile.Precompiler, "_run", lambda self, args, plan: setattr(self, "error", "died"))
    precompile._marker(task, COMPILED).unlink(missing_ok=True)          # a node that has not compiled the set
    assert precompile.needed(task, COMPILED, list(range(6)))
    built = builder.build((TINY / "seeds" / "cpu.cpp").read_text(), "cpu")
    ev = judge(task, built.lib_path, COMPILED)
    assert ev.correct, ev.failure
    assert all(m.compile is not None for m in ev.measurements if m.kernel is not None)

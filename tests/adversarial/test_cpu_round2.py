"""Hostile CPU kernels, round two: attacks written after reading the judge as an attacker would, none of them in
`test_cpu.py`. Each is rejected for its own reason by the layer meant to catch it (or, for the two that the judge
used to accept, by the fix made for it), and the evaluator that judged it (one `Reuse`, as a search keeps) judges
an honest kernel correctly afterwards.

- `__builtin_` spellings of libc (`__builtin_fork`, `__builtin_execl`, `__builtin__exit`, ...) compile to calls of
  the functions themselves; the static rules used to miss them (only the symbol check saw `fork`). Fixed in
  `vocabulary.forbidden`; both layers are tested on their own.
- Reading the evaluator's command pipe (`getchar`, `fread(stdin)`): no rule names them; the symbol check does.
- Forging a protocol reply with no forbidden import: `stdout->_fileno = 3` (the worker's protocol pipe) and a
  `printf`. The static rules now name `stdin` and a FILE's insides (`_fileno`, `_IO_*`; printing stays allowed);
  past them (or `((int*)stdout)[28]`) (built directly), the nonce check (`process.WorkerProcess.call`) stops it.
- A symlink planted in the output exchange (`cpu/exchange_symlink.cpp`): `/proc/self/cwd/...` resolves into the
  worker's own TMPDIR when the worker exports, and into the *evaluator's* cwd when the evaluator reads — which made
  the unconfined evaluator create (or extend with NULs) a file of the kernel's choosing. Fixed in `exchange.read`.
- Computing a timing round's later outputs ahead (`cpu/ahead_of_calls.cpp`, inside every rule): all input sets were
  filled and all outputs poisoned before a CPU round's first call, so one call could write every later call's
  output and the median call did nothing. Fixed in `session._cpu_round` (and the warm-up): each set is filled and
  its outputs poisoned just before its own calls.
- Memorising the correctness calls' inputs (they came from fixed seeds, so predictable): wrong on anything else.
  Judged correct when nothing was timed, and on every configuration only checked. Fixed in `reuse.input_salt`: the
  correctness inputs start at a salt each evaluator draws at random; with the salt fixed (to reproduce a
  verdict), the timed calls' fresh inputs still reject it.
"""
from __future__ import annotations

import dataclasses
import os
import re
import stat

import pytest

from kevolve.judge import build as builder
from kevolve.judge import exchange
from kevolve.judge.static import rules
from kevolve.judge.evaluator.harness import judge
from kevolve.judge.evaluator.process import WorkerDied

# the first round's harness: its task, options, honest kernel, fixtures (one Reuse per module), honest_next
from test_cpu import BODY, FAST, HERE, SIG, TINY, honest_next, kernel  # noqa: E402,F401  (fixtures: conftest.py)

# timed, but cheaply: no baselines, 2 rounds of 10 calls, one init per shape
# the timing layer alone: the configurations a judgement draws from the domain (a layer of their own,
# tests/adversarial/test_domain_attacks.py) catch some of these kernels first, at correctness
TIMED = dataclasses.replace(FAST, time_kernel=True, baselines=(), reps=20, time_inits="first", domain="off")


def with_libc(name: str) -> str:
    """A probe of `cpu/` with `_libc.h` inlined (libc by address arithmetic: past the rules' include list)."""
    return (HERE / "cpu" / name).read_text().replace('#include "_libc.h"', (HERE / "cpu" / "_libc.h").read_text())


pytestmark = pytest.mark.usefixtures("private_build_cache")   # tests/conftest.py


# ------------------------------------------------------------------ layer 1: rules on preprocessed tokens
BUILTINS = [
    ("builtin-fork", "if (N < 0) __builtin_fork();", "process", r"`fork` \(process"),
    ("builtin-execl", "if (N < 0) __builtin_execl(\"/bin/sh\", \"sh\", (char*)0);", "process", r"`execl` \(process"),
    ("builtin-execve", "if (N < 0) __builtin_execve(\"/bin/sh\", (char* const*)0, (char* const*)0);", "process",
     r"`execve` \(process"),
    ("builtin-underscore-exit", "if (N < 0) __builtin__exit(0);", "process-exit", r"`_exit` \(process-exit"),
    ("builtin-exit", "if (N < 0) __builtin_exit(0);", "process-exit", r"`exit` \(process-exit"),
    ("builtin-abort", "if (N < 0) __builtin_abort();", "process-exit", r"`abort` \(process-exit"),
]
STATIC = [(name, kernel(before=code), rule) for name, code, rule, _ in BUILTINS] + [
    ("builtin-address-taken", kernel(before="auto f = &__builtin_fork; (void)f;"), "process"),
    ("repoints-stdout", "#include <cstdio>\n" + kernel(before="if (N < 0) stdout->_fileno = 3;"), "file"),
    ("stdout-by-its-glibc-name", "#include <cstdio>\n" + kernel(before="if (N < 0) ((int*)&_IO_2_1_stdout_)[28] = 3;"),
     "file"),
    ("reads-stdin", "#include <cstdio>\n" + kernel(before="if (N < 0) { char c; fread(&c, 1, 1, stdin); }"), "file"),
]


@pytest.mark.parametrize("name, source, rule", STATIC, ids=[s[0] for s in STATIC])
def test_static_layer_rejects(name, source, rule):
    verdict = rules.check(source, "cpu")
    assert not verdict.ok, f"{name} passes the static rules"
    assert rule in {v.rule for v in verdict.violations}, verdict.reason


def test_static_layer_still_accepts_harmless_builtins():
    source = kernel(before="float v = __builtin_sqrtf(4.0f); __builtin_prefetch(x); "
                           "if (__builtin_expect(__builtin_isnan(v), 0)) __builtin_trap(); "
                           "float* o = (float*)__builtin_assume_aligned(out, 4); (void)o; "
                           "__builtin_memset(workspace, 0, 0); (void)__builtin_popcountll(7);")
    verdict = rules.check(source, "cpu")
    assert verdict.ok, verdict.reason


# ------------------------------------------------------------------ layer 2: the library's imports
IMPORTS = [(name, kernel(before=code), reason) for name, code, _, reason in BUILTINS] + [
    ("reads-the-command-pipe", "#include <cstdio>\n" + kernel(before="if (N < 0) { int c = getchar(); (void)c; }"),
     r"`getc`.*`stdin`"),
    ("freads-stdin", "#include <cstdio>\n" + kernel(before="if (N < 0) { char c; fread(&c, 1, 1, stdin); }"),
     r"`fread`|`stdin`"),
]


@pytest.mark.parametrize("name, source, reason", IMPORTS, ids=[s[0] for s in IMPORTS])
def test_symbol_layer_rejects_before_load(name, source, reason, tiny, reuse):
    built = builder.build(source, "cpu")                # no static rules: this layer stands alone
    assert built.ok, built.error
    ev = judge(tiny, built.lib_path, FAST, reuse=reuse)
    assert not ev.correct and ev.stage == "symbols", (ev.stage, ev.failure)
    assert re.search(reason, ev.failure), ev.failure
    honest_next(tiny, reuse)


# ------------------------------------------------------------------ layer 3: the running worker
# Past the rules (built directly: they now name `_fileno`) and inside the symbol list: fd 3 is the
# worker's protocol pipe (`worker.main`: os.dup(1) before fd 1 is pointed at stderr). The reply it forges cannot
# carry the request's nonce.
FORGED_REPLY = "#include <cstdio>\n" + kernel(before=r'''
    const int saved = stdout->_fileno;
    fflush(stdout);
    stdout->_fileno = 3;
    printf("{\"rc\": 0, \"outputs\": {}, \"overruns\": [], \"nonce\": \"00000000000000000000000000000000\"}\n");
    fflush(stdout);
    stdout->_fileno = saved;''')


def test_a_reply_forged_on_the_protocol_pipe_is_a_protocol_failure(tiny, reuse):
    assert "file" in {v.rule for v in rules.check(FORGED_REPLY, "cpu").violations}   # the rules see it now
    built = builder.build(FORGED_REPLY, "cpu")
    assert built.ok, built.error
    ev = judge(tiny, built.lib_path, FAST, reuse=reuse)
    assert not ev.correct and ev.stage == "correctness", (ev.stage, ev.failure)
    assert re.search(r"^B=2,N=4096/random/s0: protocol: something other than the harness wrote to its protocol "
                     r"pipe during check", ev.failure), ev.failure
    honest_next(tiny, reuse)


def test_a_symlink_planted_in_the_exchange_reaches_nothing_outside(tiny, reuse, tmp_path, monkeypatch):
    """`cpu/exchange_symlink.cpp` finds its exchange folder in its worker's memory and plants, where the next two
    calls' outputs will be exported, symlinks to `/proc/self/cwd/kevolve-escape-probe.bin`. Before the fix the
    evaluator's shared `torch.from_file` followed it into its own cwd and created a 32 KiB file there (verdict:
    the zeros it read were outside tolerance). Now the evaluator refuses a symlink (O_NOFOLLOW): a protocol failure
    naming the file, and nothing is created outside the worker's confinement. (The file names carry the calls'
    input variants, which a random salt now hides from the kernel: the salt is fixed at 0 here, as
    `KEVOLVE_INPUT_SALT` does, so that the attack lands and the defence is what is tested.)"""
    from kevolve.judge.evaluator.reuse import SALT_ENV
    monkeypatch.chdir(tmp_path)                         # the evaluator's cwd: where the escape would land
    monkeypatch.setattr(reuse.references, "salt", 0)    # the file names it plants: the inputs' variants 1 and 2
    monkeypatch.setenv(SALT_ENV, "0")
    built = builder.build(with_libc("exchange_symlink.cpp"), "cpu")
    assert built.ok, built.error
    ev = judge(tiny, built.lib_path, FAST)              # its own References: the salt read now
    got = dict(re.findall(r"PROBE (\w+)=(\S+)", ev.log))
    assert got.get("found") == "0" and got.get("planted") == "2", got     # the attack was carried out
    assert not (tmp_path / "kevolve-escape-probe.bin").exists(), "the evaluator wrote where the kernel pointed it"
    assert not ev.correct and ev.stage == "correctness", (ev.stage, ev.failure)
    assert re.search(r"^B=2,N=4096/random/s0: protocol: the worker's exchange file 0\.1\.out\.bin cannot be opened "
                     r"as a plain file", ev.failure), ev.failure
    honest_next(tiny, reuse)


def test_exchange_read_takes_only_a_regular_file_of_the_right_size(tmp_path):
    """The evaluator's side of the file exchange on its own: a regular file of the expected size is read (and
    unlinked); a symlink (even to a valid file), a FIFO (without blocking), a file of another size are protocol
    failures, and what they point to is left as it was."""
    import torch
    good = tmp_path / "good.bin"
    good.write_bytes(torch.arange(4, dtype=torch.float32).numpy().tobytes())
    assert torch.equal(exchange.read(str(good), torch.float32, (2, 2), "cpu", tmp_path),
                       torch.arange(4, dtype=torch.float32).reshape(2, 2))
    assert not good.exists()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"hello\n")
    link = tmp_path / "link.bin"
    link.symlink_to(victim)
    with pytest.raises(WorkerDied, match="cannot be opened as a plain file"):
        exchange.read(str(link), torch.float32, (64,), "cpu", tmp_path)
    assert victim.read_bytes() == b"hello\n"            # not extended to 256 bytes, as the shared mapping did
    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)
    with pytest.raises(WorkerDied, match="not a regular file"):
        exchange.read(str(fifo), torch.float32, (4,), "cpu", tmp_path)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * 12)
    with pytest.raises(WorkerDied, match="not a regular file of 16 bytes"):
        exchange.read(str(short), torch.float32, (4,), "cpu", tmp_path)


def test_exchange_touches_no_file_outside_the_judgements_folder(tmp_path):
    """The worker's reply names its output files, and the evaluator reads and unlinks them unconfined: a path in
    another folder (a user's file, another judgement's exchange folder) or by a name `export` never writes is a
    protocol failure for `read` and left alone by `discard`, even when it has exactly the expected size."""
    import torch
    folder, elsewhere = tmp_path / "kevolve-mine", tmp_path / "kevolve-theirs"
    folder.mkdir()
    elsewhere.mkdir()
    data = torch.arange(4, dtype=torch.float32).numpy().tobytes()
    victims = [elsewhere / "0.1.out.bin", folder / "notes.txt", tmp_path / "0.1.out.bin"]
    for v in victims:
        v.write_bytes(data)
    sneaky = str(folder) + "/../" + "kevolve-theirs/0.1.out.bin"
    for path in [*map(str, victims), sneaky]:
        with pytest.raises(WorkerDied, match="outside its folder"):
            exchange.read(path, torch.float32, (4,), "cpu", folder)
        with pytest.raises(WorkerDied, match="outside its folder"):
            exchange.read(path, torch.float32, (4,), "cpu")          # no folder: no file is read at all
    exchange.discard({"out": sneaky, "x": str(victims[0]), "y": str(victims[1])}, folder)
    assert all(v.read_bytes() == data for v in victims)
    mine = folder / "0.1.out.bin"
    mine.write_bytes(data)
    exchange.discard({"out": str(mine)}, folder)
    assert not mine.exists()


def test_outputs_computed_ahead_of_their_calls_are_poisoned_first(tiny_one_per_shape):
    """`cpu/ahead_of_calls.cpp` (inside every rule) computes, on a timed call, the outputs of every other call it
    has seen the buffers of and finds unwritten, and returns at once from a call whose output is already written
    (printing `PROBE ahead=<count>`). Before the fix a CPU round filled every input set and poisoned every output
    first, so one call in ten did ten calls' work and the median call none (judged correct, the median forged).
    Now each set is filled and its outputs poisoned just before its own calls: no call ever finds its output
    written, and it is judged correct on its real time."""
    source = (HERE / "cpu" / "ahead_of_calls.cpp").read_text()
    assert rules.check(source, "cpu").ok
    built = builder.build(source, "cpu")
    assert built.ok, built.error
    ev = judge(tiny_one_per_shape, built.lib_path, TIMED)
    timed = [m for m in ev.measurements if m.kernel is not None]
    assert ev.correct and len(timed) == 3 and all(m.checked_calls > 0 for m in timed), (ev.failure, ev.measurements)
    assert not re.findall(r"PROBE ahead=(\d+)", ev.log), "a timed call found its output computed ahead"


def memorising(task, variants) -> str:
    """A kernel right only on the inputs drawn from `variants` of every configuration (it knows the bits of x[0]
    of each), writing zeros on any other input."""
    import torch
    keys = sorted({int(task.make_inputs(c, "cpu", v)["x"].reshape(-1).view(torch.int32)[0])
                   for c in task.configs("small") for v in variants})
    return "#include <cstring>\n" + kernel(
        prelude="static const int32_t KNOWN[] = {" + ", ".join(map(str, keys)) + "};",
        before="""
    int32_t first; std::memcpy(&first, x, 4);
    bool known = false;
    for (int32_t k : KNOWN) known |= k == first;
    if (!known) { for (int64_t i = 0; i < B * N; ++i) out[i] = 0.0f; return 0; }""")


def test_a_kernel_that_memorises_the_fixed_correctness_inputs_fails_its_first_call(tiny, reuse):
    """Before this release the correctness calls' inputs were variants 0, 1, 2 of each configuration, so a kernel
    could recognise them (here by the bits of x[0]) and be right on them alone: judged correct untimed, and on any
    configuration that is only checked. Now they are variants salt, salt + 1, salt + 2, the salt drawn at random
    per evaluator (`reuse.input_salt`): the same kernel fails its first call, and the verdict names its inputs."""
    built = builder.build(memorising(tiny, (0, 1, 2)), "cpu")
    assert built.ok, built.error
    ev = judge(tiny, built.lib_path, FAST, reuse=reuse)
    assert not ev.correct and ev.stage == "correctness", (ev.stage, ev.failure)
    salt = reuse.references.salt
    assert re.search(r"^B=2,N=4096/random/s0: output out: 8[0-9]{3} of 8192 elements outside tolerance .*\(first "
                     rf"call, inputs {salt} of salt {salt}\)$", ev.failure), ev.failure
    honest_next(tiny, reuse)


def test_a_kernel_that_knows_the_correctness_inputs_fails_the_timed_calls(tiny, monkeypatch):
    """With the salt fixed (`KEVOLVE_INPUT_SALT`, to reproduce a verdict) a kernel that knows it can pass the
    listed configurations' correctness calls; a configuration drawn from the domain rejects it there, and without
    them the timed calls' fresh inputs, drawn after it loaded, still reject it at the first warm-up call."""
    from kevolve.judge.evaluator import reuse
    monkeypatch.setenv(reuse.SALT_ENV, "12345")
    salt = reuse.input_salt()
    built = builder.build(memorising(tiny, (salt, salt + 1, salt + 2)), "cpu")
    assert built.ok, built.error
    untimed = judge(tiny, built.lib_path, dataclasses.replace(FAST, domain="off"))
    assert untimed.correct, untimed.failure
    drawn = judge(tiny, built.lib_path, FAST)      # the domain's drawn configurations: inputs it cannot know
    assert not drawn.correct and drawn.failure.startswith("drawn:"), drawn.failure
    ev = judge(tiny, built.lib_path, TIMED)
    assert not ev.correct and ev.stage == "timing", (ev.stage, ev.failure)
    assert re.search(r"^B=2,N=4096/random/s0: output out: 8[0-9]{3} of 8192 elements outside tolerance .*\(warm-up, "
                     r"call 1 of \d+\)$", ev.failure), ev.failure


def test_honest_kernels_are_accepted_timed(tiny):
    """The honest kernel and the task's seed, timed the cheap way the tests above are: the fixes leave them be."""
    for source in [kernel(), (TINY / "seeds" / "cpu.cpp").read_text()]:
        built = builder.build(source, "cpu")
        assert built.ok, built.error
        ev = judge(tiny, built.lib_path, TIMED)
        assert ev.correct, ev.failure

"""The worker's poisoning in one batch (`buffers.poison_all`, `overruns_all`): what every call's buffers hold
before it runs, and how a write outside them is found."""
import torch

from kevolve.judge.worker import buffers as B
from kevolve.judge.worker import serve as W
from kevolve.task import load_task


def buffers(n: int, config: int = 0) -> tuple[W.Worker, list[dict]]:
    w = W.Worker()
    w.task, w.device, w.target = load_task("layernorm_fwd"), "cpu", "cpu"
    sizes = w.task.configs("small")[config].size_dict
    return w, [w._allocate(sizes, edge="misaligned" if i == 1 else "") for i in range(n)]


def test_outputs_nan_and_workspace_fresh_random_bytes_every_time():
    _, bufs = buffers(3)
    B.poison_all(bufs)
    first = [b["workspace"].clone() for b in bufs]
    for b in bufs:
        assert all(bool(torch.isnan(t).all()) for t in b["outputs"].values())
        assert b["workspace"].numel() > B.POISON_BLOCK                       # tiled, not drawn byte by byte
        assert int((b["workspace"] == 0).sum()) < b["workspace"].numel() // 64
    B.poison_all(bufs)
    assert not any(torch.equal(a, b["workspace"]) for a, b in zip(first, bufs))   # never the same twice


def test_a_write_into_any_guard_is_found_in_its_buffer_alone():
    w, bufs = buffers(4)
    B.poison_all(bufs)
    assert B.overruns_all(bufs) == [[], [], [], []]
    out = w.task.outputs[0].name
    bufs[2]["guards"][out][1].view(torch.uint8)[3] ^= 0x01                  # the first element past the end
    bufs[1]["guards"]["workspace"][0][-1] ^= 0xFF                            # one byte before the start
    found = B.overruns_all(bufs)
    assert found[0] == found[3] == []
    assert found[2] == [f"{out} (past its end)"] and found[1] == ["workspace (before its start)"]
    B.poison_all(bufs)                                                      # re-armed: clean again
    assert B.overruns_all(bufs) == [[], [], [], []]



def _protection(address: int) -> str:
    """This process's protection of `address` (/proc/self/maps: 'rw-s', '---s', ...), or '' where unmapped."""
    for line in open("/proc/self/maps"):
        span, perms = line.split()[:2]
        lo, hi = (int(a, 16) for a in span.split("-"))
        if lo <= address < hi:
            return perms
    return ""


def test_edge_buffers_on_the_cpu_end_against_a_page_that_faults():
    """The third call's inputs and outputs (`allocate(edge="misaligned")`) on the CPU each end where a PROT_NONE page
    begins, or, where the size is a multiple of 16 bytes, one element (a guard) short of it; no base is 16-byte aligned.
    So a read past an input's end, or a write past an output's end put back before the call returns, faults."""
    import mmap
    task = load_task("layernorm_fwd")
    for cfg in task.configs("small")[:4]:
        buf = B.allocate(task, "cpu", cfg.size_dict, edge="misaligned")
        assert buf["layout"] == "edge" and set(buf["outputs"]) == {s.name for s in task.outputs}
        for name, t in {**buf["inputs"], **buf["outputs"]}.items():
            item = t.element_size()
            end = t.data_ptr() + t.numel() * item
            page = end if end % mmap.PAGESIZE == 0 else end + item      # the guard element, then the page
            assert page % mmap.PAGESIZE == 0 and t.data_ptr() % B.VECTOR_ALIGN != 0, (cfg.id, name)
            assert _protection(page).startswith("---") and _protection(end - 1).startswith("rw"), (cfg.id, name)
        B.poison_all([buf])
        assert B.overruns(buf) == []


def test_first_calls_buffers_on_the_cpu_start_aligned_and_end_near_a_page_that_faults():
    """The first two calls' inputs and outputs (`allocate(edge="aligned")`) start 16-byte aligned (a kernel's vector
    path runs) and end one element to 16 bytes before a PROT_NONE page, those bytes a guard zone: a write just past
    the end shows in the guards, a read of a vector past the 16-byte boundary after the end faults."""
    import mmap
    task = load_task("layernorm_fwd")
    for cfg in task.configs("small")[:4]:
        buf = B.allocate(task, "cpu", cfg.size_dict, edge="aligned")
        assert buf["layout"] == "aligned, page-ended"
        for name, t in {**buf["inputs"], **buf["outputs"]}.items():
            size = t.numel() * t.element_size()
            page = t.data_ptr() + (size // 16 + 1) * 16
            assert t.data_ptr() % 16 == 0 and page % mmap.PAGESIZE == 0, (cfg.id, name)
            assert _protection(page).startswith("---") and _protection(page - 1).startswith("rw"), (cfg.id, name)
            gap = buf["guards"][name][1]
            assert gap.numel() * gap.element_size() == page - t.data_ptr() - size >= t.element_size(), (cfg.id, name)
        B.poison_all([buf])
        assert B.overruns(buf) == []
        name = next(iter(buf["outputs"]))                                # a write just past the end: an overrun
        bits = buf["guards"][name][1].view(-1).view(torch.uint8)
        bits[0] = bits[0] ^ 1
        assert B.overruns(buf) == [f"{name} (past its end)"]


def test_on_the_cpu_an_edge_buffer_that_cannot_be_mapped_fails_the_call(monkeypatch):
    """The GPU falls back to skewed buffers where the driver refuses page-ended ones; the CPU never does (a kernel
    that used up the address space in an earlier call must not earn buffers that let it write past an end)."""
    import pytest

    def refused(*args):
        raise OSError(12, "Cannot allocate memory")
    monkeypatch.setattr(B, "page_ended", refused)
    monkeypatch.setattr(B, "_NO_UNMAPPED_END", [])                          # what a fallback would set
    task = load_task("layernorm_fwd")
    with pytest.raises(OSError, match="Cannot allocate memory"):
        B.allocate(task, "cpu", task.configs("small")[0].size_dict, edge="misaligned")
    assert B._NO_UNMAPPED_END == []
    assert B.allocate(task, "cpu", task.configs("small")[0].size_dict)["layout"] == "aligned"

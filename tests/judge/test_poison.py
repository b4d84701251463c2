"""The worker's poisoning in one batch (`buffers.poison_all`, `overruns_all`): what every call's buffers hold
before it runs, and how a write outside them is found."""
import torch

from kevolve.judge import buffers as B
from kevolve.judge import worker as W
from kevolve.task import load_task


def buffers(n: int, config: int = 0) -> tuple[W.Worker, list[dict]]:
    w = W.Worker()
    w.task, w.device, w.target = load_task("layernorm_fwd"), "cpu", "cpu"
    sizes = w.task.configs("small")[config].size_dict
    return w, [w._allocate(sizes, edge=i == 1) for i in range(n)]


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


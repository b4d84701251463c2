"""The CPU exchange's packs (`exchange.Packer`): a round's small tensors in one file, read back exactly, and a
worker's handles into it held to the same rules as a file of its own — in the judgement's folder, not a symlink,
inside the pack, aligned, and no byte read twice."""
from __future__ import annotations

import os

import pytest
import torch

from kevolve.judge import exchange
from kevolve.judge.evaluator.process import WorkerDied


def packed(tmp_path, tensors: dict) -> dict:
    packer = exchange.Packer(tmp_path, "0.t1")
    handles = packer.add(tensors, "0.t1.kernel.0")
    packer.close()
    return handles


def read(tmp_path, handle, t):
    return exchange.read(handle, t.dtype, tuple(t.shape), "cpu", tmp_path)


def test_a_pack_gives_back_every_tensor_exactly_whatever_its_dtype(tmp_path):
    tensors = {"x": torch.randn(3, 7), "target": torch.arange(5, dtype=torch.int64), "one": torch.randn(()),
               "h": torch.randn(11, dtype=torch.float64), "big": torch.randn(exchange.PACK_MAX // 4 + 1)}
    handles = packed(tmp_path, tensors)
    assert isinstance(handles["big"], str)                         # over PACK_MAX: a file of its own
    assert {h["pack"] for n, h in handles.items() if n != "big"} == {str(tmp_path / "0.t1.pack.bin")}
    try:
        for name, t in tensors.items():
            assert torch.equal(read(tmp_path, handles[name], t), t)
        assert not (tmp_path / "0.t1.pack.bin").exists()            # read whole once, then unlinked
    finally:
        exchange.forget_packs(tmp_path)


@pytest.mark.parametrize("forged", ["read twice", "overlapping", "past the end", "misaligned", "negative"])
def test_a_forged_handle_into_a_pack_is_a_protocol_failure(tmp_path, forged):
    a, b = torch.randn(16), torch.randn(16)
    handles = packed(tmp_path, {"a": a, "b": b})
    pack = handles["a"]["pack"]
    bad = {"read twice": handles["a"], "overlapping": {"pack": pack, "offset": handles["a"]["offset"] + 4},
           "past the end": {"pack": pack, "offset": handles["b"]["offset"] + 8},
           "misaligned": {"pack": pack, "offset": handles["b"]["offset"] + 2},
           "negative": {"pack": pack, "offset": -4}}[forged]
    try:
        assert torch.equal(read(tmp_path, handles["a"], a), a)
        with pytest.raises(WorkerDied, match="protocol"):
            read(tmp_path, bad, b)
    finally:
        exchange.forget_packs(tmp_path)


def test_a_pack_outside_the_folder_or_behind_a_symlink_is_never_read(tmp_path):
    a = torch.randn(4)
    elsewhere = tmp_path / "user"
    elsewhere.mkdir()
    folder = tmp_path / "exchange"
    folder.mkdir()
    handles = packed(elsewhere, {"a": a})
    try:
        with pytest.raises(WorkerDied, match="protocol"):
            read(folder, handles["a"], a)
        assert (elsewhere / "0.t1.pack.bin").exists()               # untouched
        os.symlink(elsewhere / "0.t1.pack.bin", folder / "0.t2.pack.bin")
        with pytest.raises(WorkerDied, match="protocol"):
            read(folder, {"pack": str(folder / "0.t2.pack.bin"), "offset": 0}, a)
        assert (elsewhere / "0.t1.pack.bin").exists()
    finally:
        exchange.forget_packs(folder)


def test_a_rounds_unread_packs_are_removed_when_it_is_verified(tmp_path):
    packed(tmp_path, {"a": torch.randn(4)})
    exchange.forget_packs(tmp_path)
    assert not list(tmp_path.iterdir())

"""The worker's protocol (`judge.protocol`): typed commands and replies, one encoding, and a decoding of the
worker's replies that accepts nothing but the reply the command expects — the worker is untrusted."""
from __future__ import annotations

import json

import pytest

from kevolve.judge import protocol


def test_every_command_round_trips():
    commands = [protocol.Init(task_dir="t", lib="l.so", abi="c", target="cpu", module=None, exchange="/x",
                              also=("b.so",)),
                protocol.SetConfigs("small"), protocol.IpcProbe(), protocol.SetExchange(True),
                protocol.Prepare(0, ("eager",)), protocol.Seal(None), protocol.Load(), protocol.LoadOther("b", None),
                protocol.Check(1, 2, True), protocol.Release(), protocol.Trivial(200),
                protocol.TimeSetup(0, ("eager",), 7, 10, 100),
                protocol.TimeRound((1, 2), ("kernel",)), protocol.TimeUpload(), protocol.TimeEnd(),
                protocol.Describe(0, 3), protocol.LoadDevice({"nodes": [], "buffers": []}), protocol.Exit()]
    assert {type(c) for c in commands} == set(protocol.COMMANDS.values())
    for c in commands:
        assert protocol.decode_command(protocol.encode(c, "n")) == (c, "n")


def test_a_reply_must_carry_the_nonce_and_the_declared_types():
    check = protocol.Check(0, 1, False)
    good = {"rc": 0, "before": {}, "input_handles": {}, "outputs": {}, "seconds": 0.5, "overruns": [],
            "layout": "aligned", "pointers": {}}
    assert protocol.decode_reply(json.dumps({**good, "nonce": "n"}), check, "n") == protocol.Checked(**good)
    bad = [{**good, "nonce": "m"}, {**good}, {**good, "rc": "0", "nonce": "n"}, {**good, "rc": True, "nonce": "n"},
           {**good, "overruns": {}, "nonce": "n"}, {"nonce": "n"}]
    for reply in bad:
        with pytest.raises(protocol.ProtocolError):
            protocol.decode_reply(json.dumps(reply), check, "n")
    for line in ("not json", "[]", '"x"', "1e999999"):
        with pytest.raises(protocol.ProtocolError):
            protocol.decode_reply(line, check, "n")


def test_an_error_reply_is_failed_and_typed():
    reply = protocol.decode_reply(json.dumps({"error": "E: boom", "nonce": "n"}), protocol.Load(), "n")
    assert reply == protocol.Failed("E: boom")
    with pytest.raises(protocol.ProtocolError):
        protocol.decode_reply(json.dumps({"error": ["x"], "nonce": "n"}), protocol.Load(), "n")


def test_the_worker_refuses_unknown_commands_and_fields_naming_the_nonce():
    with pytest.raises(protocol.ProtocolError) as e:
        protocol.decode_command(json.dumps({"cmd": "eval", "nonce": "q"}))
    assert e.value.nonce == "q"
    with pytest.raises(protocol.ProtocolError):
        protocol.decode_command(json.dumps({"cmd": "set_exchange", "ipc": True, "extra": 1, "nonce": "q"}))


def test_which_commands_let_the_kernel_run():
    assert protocol.Load().loads_kernel and protocol.LoadOther("b").loads_kernel
    assert not protocol.Init(task_dir="t", lib="l", abi="c", target="cpu", module=None, exchange="/x",
                             load=False).loads_kernel
    assert not protocol.Seal().loads_kernel and not protocol.Check(0, 0, False).loads_kernel

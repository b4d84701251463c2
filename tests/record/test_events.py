"""Typed events of the run's record (kevolve.record.events): written from a frozen dataclass, read back equal; the
older mapping form still accepted; secrets redacted either way; the read model apart from the writes."""
from __future__ import annotations

import dataclasses

import pytest

from kevolve.record import events
from kevolve.record.events import EVENTS, Champion, Confirm, Finish, MutationFailed, TrackerFailed
from kevolve.record.read import Reader
from kevolve.record.store import Store


@pytest.fixture
def store(tmp_path):
    with Store.create(tmp_path, {"task": "t"}) as s:
        yield s


def test_a_typed_event_reads_back_equal(store):
    written = [Champion(id="c1", fitness=1.5), Confirm(id="c1", correct=True, seconds=2.0, evaluation="{}"),
               MutationFailed(reason="no kernel", arm="optimize/m", reward=0.0), Finish(data={"best": {"id": "c1"}})]
    for e in written:
        store.log_event(e)
    for e in written:
        assert store.events_of(type(e)) == [e]
    assert [k for _, k, _ in store.events()] == ["champion", "confirm", "mutation_failed", "finish"]
    assert store.events("finish")[0][2] == {"best": {"id": "c1"}}           # an open event is stored flat


def test_only_typed_events_are_written(store):
    with pytest.raises(TypeError, match="kevolve.record.events"):
        store.log_event("champion")                                       # type: ignore[arg-type]
    assert store.events() == []


def test_secrets_are_redacted_in_typed_events(store):
    store.log_event(Finish(data={"llm": {"api_key": "sk-secret-value"}}))
    assert store.events("finish")[0][2]["llm"]["api_key"] == "***"


def test_every_kind_is_a_frozen_dataclass_with_its_own_kind():
    assert len(EVENTS) == len({cls.KIND for cls in EVENTS.values()})
    for kind, cls in EVENTS.items():
        assert cls.KIND == kind and dataclasses.is_dataclass(cls)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(cls(), dataclasses.fields(cls)[0].name, None)
    assert events.payload_of(TrackerFailed(tracker="wandb", method="start", error="x")) == \
        {"tracker": "wandb", "method": "start", "error": "x"}


def test_the_read_model_reads_a_read_only_store(tmp_path):
    with Store.create(tmp_path, {"task": "t"}) as s:
        s.log_event(Champion(id="c3", fitness=3.0))
    with Store.open(tmp_path, readonly=True) as r:
        assert isinstance(r, Reader) and r.events_of(Champion)[0].id == "c3"

"""What a resumed run continues with (kevolve/search/resumed.py): the run's recorded settings, budget and all, but
for what the resume command line gives (said); a setting that would judge differently refused; the wall time the
earlier parts left, a run with none left refused; and what it says it continues from."""
from __future__ import annotations

import time

import pytest

from kevolve.config import ConfigError, from_hydra
from kevolve.messages import Candidate
from kevolve.record import events
from kevolve.record.store import Store
from kevolve.search import resumed

TASK = "layernorm_fwd"


def recorded_config() -> dict:
    from omegaconf import OmegaConf
    cfg = from_hydra({"task": {"name": TASK}, "search": {"candidates": 14, "wall_time_s": 150, "seed": 3},
                      "resources": {"target": "cpu"}})
    return OmegaConf.to_container(OmegaConf.structured(cfg))


def resume_cfg(run_dir, **search):
    """What `python -m kevolve resume=RUN_DIR …` composes: the schema's defaults, and what the command gives."""
    return from_hydra({"resume": str(run_dir), "search": search})


def test_the_recorded_settings_come_back_and_only_what_is_given_changes(tmp_path):
    cfg, changed = resumed.merge(resume_cfg(tmp_path), recorded_config(), [f"resume={tmp_path}"])
    assert (cfg.task.name, cfg.search.candidates, cfg.search.wall_time_s, cfg.search.seed) == (TASK, 14, 150, 3)
    assert cfg.resources.target == "cpu" and cfg.resume == str(tmp_path) and changed == []
    cfg, changed = resumed.merge(resume_cfg(tmp_path, wall_time_s=300), recorded_config(),
                                 [f"resume={tmp_path}", "search.wall_time_s=300"])
    assert (cfg.search.candidates, cfg.search.wall_time_s) == (14, 300)
    assert changed == ["search.wall_time_s: 150.0 → 300.0"]


def test_a_group_choice_gives_its_whole_subtree(tmp_path):
    now = from_hydra({"resume": str(tmp_path), "llm": {"provider": "local", "base_url": "http://h:1/v1",
                                                         "models": [{"name": "m"}]}})
    cfg, changed = resumed.merge(now, recorded_config(), [f"resume={tmp_path}", "llm=local",
                                                          "llm.base_url=http://h:1/v1"])
    assert cfg.llm.provider == "local" and cfg.search.candidates == 14
    assert "llm.provider: 'none' → 'local'" in changed


@pytest.mark.parametrize("given,key", [("task.name=layernorm_bwd", "task.name"),
                                       ("resources.target=cuda", "resources.target"),
                                       ("search.mode=best_of_n", "search.mode")])
def test_a_setting_that_would_judge_differently_is_refused(tmp_path, given, key):
    key_, _, value = given.partition("=")
    section, field = key_.split(".")
    now = from_hydra({"resume": str(tmp_path), section: {field: value}})
    with pytest.raises(ConfigError, match=rf"config field '{key}': the run in .* was searched with"):
        resumed.merge(now, recorded_config(), [f"resume={tmp_path}", given])


def test_from_python_the_config_is_taken_whole_and_each_difference_said(tmp_path):
    now = from_hydra({"task": {"name": TASK}, "resources": {"target": "cpu"}, "resume": str(tmp_path),
                      "search": {"candidates": 20, "wall_time_s": 150, "seed": 3}})
    cfg, changed = resumed.merge(now, recorded_config(), None)
    assert cfg.search.candidates == 20 and changed == ["search.candidates: 14 → 20"]


def _store(path, parts) -> Store:
    """A store whose run was searched in `parts`: (start, end, finished?) in seconds from now-1000."""
    t0 = time.time() - 1000
    store = Store.create(path, {"task": TASK, "config": recorded_config()})
    store.set_meta({"started": t0 + parts[0][0]})
    for i, (start, end, finished) in enumerate(parts):
        if i:
            store._conn.execute("INSERT INTO events (time, kind, payload) VALUES (?, 'resume', '{}')", (t0 + start,))
        c = Candidate.new(f"int k{i};", operator="seed")
        store.add_candidate(c)
        store._conn.execute("UPDATE candidates SET updated = ? WHERE id = ?", (t0 + end, c.id))
        if finished:
            store._conn.execute("INSERT INTO events (time, kind, payload) VALUES (?, 'finish', ?)",
                                (t0 + end + 30, f'{{"search_seconds": {end - start - 5}}}'))
        store._conn.commit()
    return store


def test_the_earlier_parts_seconds_count_a_killed_part_to_its_last_record(tmp_path):
    store = _store(tmp_path, [(0, 100, True), (200, 240, False)])     # finished (95 s searched), then killed
    assert resumed.searched_before(store) == pytest.approx(95 + 40, abs=1)
    store.close()


def test_a_resume_says_what_it_continues_from_and_the_wall_time_left(tmp_path):
    _store(tmp_path, [(0, 100, False)]).close()
    cfg, lines, before = resumed.settings(resume_cfg(tmp_path), tmp_path, [f"resume={tmp_path}"])
    assert before == pytest.approx(100, abs=1) and cfg.search.wall_time_s == 150
    assert lines[0].startswith(f"resuming {tmp_path}: {TASK}, started ")
    assert "1 candidates (0 judged, 0 correct, 1 unfinished: verified again)" in lines[0]
    assert lines[1] == "budget (the run's, over its parts): 14 candidates (13 left), wall time 150 s (50 s left), " \
                       "no dollar limit"
    assert lines[2] == "settings: the run's own (none changed on this command line)"


def test_a_run_with_no_wall_time_left_is_refused_saying_how_to_give_more(tmp_path):
    _store(tmp_path, [(0, 160, False)]).close()
    with pytest.raises(ConfigError, match=r"has searched 160 s of its 150 s; give it more with "
                                          r"search.wall_time_s=460"):
        resumed.settings(resume_cfg(tmp_path), tmp_path, [f"resume={tmp_path}"])
    cfg, _, _ = resumed.settings(resume_cfg(tmp_path, wall_time_s=460), tmp_path,
                                 [f"resume={tmp_path}", "search.wall_time_s=460"])
    assert cfg.search.wall_time_s == 460


def test_an_event_the_resume_writes_keeps_what_it_said(tmp_path):
    with Store.create(tmp_path, {"task": TASK}) as store:
        store.log_event(events.Resume(run_dir="x", said=("a", "b"), command=("resume=x",)))
        (e,) = store.events_of(events.Resume)
    assert e.said == ["a", "b"] or e.said == ("a", "b")


def test_a_key_with_dots_comes_back_whole(tmp_path):
    """A price table's model names hold dots (gpt-5.1): restored as one key, not split into levels."""
    recorded = recorded_config()
    recorded["llm"]["prices"] = {"gpt-5.1": {"input": 1.0, "output": 2.0}}
    cfg, changed = resumed.merge(resume_cfg(tmp_path), recorded, [f"resume={tmp_path}"])
    assert cfg.llm.prices["gpt-5.1"].output == 2.0 and changed == []

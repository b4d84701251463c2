"""Reads what W&B wrote offline, from its own files: the `.wandb` transaction log of each offline run (LevelDB log
format: 32 KiB blocks of CRC-framed chunks, each record a `wandb_internal_pb2.Record`) and the table JSON files
under the run's `files/`. A test helper, not part of kevolve (wandb 0.31 ships no reader of its own)."""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb

BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path):
    raw = path.read_bytes()
    assert raw[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, pending = 7, b""
    while pos + 7 <= len(raw):
        left = BLOCK - pos % BLOCK
        if left < 7:                       # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk, pos = raw[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == FULL:
            pending = b""
            yield _parse(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield _parse(pending + chunk)
            pending = b""


def _parse(raw: bytes) -> pb.Record:
    r = pb.Record()
    r.ParseFromString(raw)
    return r


@dataclass
class OfflineRun:
    dir: Path
    run_id: str = ""
    group: str = ""
    config: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    artifacts: list = field(default_factory=list)        # pb.ArtifactRecord
    files: list[str] = field(default_factory=list)

    def table(self, key: str) -> dict:
        """The last table logged under `key`: {columns, data}."""
        paths = sorted((self.dir / "files" / "media" / "table").glob(f"{key}_*.table.json"),
                       key=lambda p: int(p.name[len(key) + 1:].split("_")[0]))
        assert paths, f"no table {key!r} in {self.dir}"
        return json.loads(paths[-1].read_text())


def read(run_dir: Path) -> OfflineRun:
    """One offline run directory (`offline-run-<time>-<id>`)."""
    (log,) = run_dir.glob("run-*.wandb")
    out = OfflineRun(run_dir)
    for r in records(log):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out.run_id, out.group = r.run.run_id, r.run.run_group
            out.config.update({u.key: json.loads(u.value_json) for u in r.run.config.update})
        elif kind == "config":
            out.config.update({u.key: json.loads(u.value_json) for u in r.config.update})
        elif kind == "history":
            out.history.append({"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item})
        elif kind == "artifact":
            out.artifacts.append(r.artifact)
        elif kind == "files":
            out.files += [f.path for f in r.files.files]
    return out


def offline_runs(wandb_dir: Path) -> list[OfflineRun]:
    return [read(d) for d in sorted((wandb_dir / "wandb").glob("offline-run-*"))]

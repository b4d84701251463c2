"""`llm.concurrency` as one limit for a whole run: the requests in flight to one endpoint, counted over every thread
and every process of the run on its machine.

A search holds its provider in two processes (the Mutator and the Verifier actors, on the driver's node), each
with its own clients; a per-process semaphore would let twice the configured requests reach a rate-limited service
or a local server sized for them. `Slots(n, key)` are n lock files in the temporary directory, under a name
derived from `key` (the run directory and the endpoint): a request holds one with `fcntl.flock`, exclusively.

Guarantees: at most n holders at once among all users of the same key on this machine (threads of one process
included: each holder opens its own file description); a slot held by a process that dies is free at once (the
kernel drops its locks); within a process at most n threads wait for a slot, polling it every `POLL_S`, so a
slot another process frees is taken within that time. `Slots(n)` without a key is a plain thread semaphore.
Not guaranteed: a limit across machines (both actors are placed on the driver's node) or fairness between
waiters. The lock files are empty and hold nothing of the run.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

POLL_S = 0.1


class Slots:
    def __init__(self, n: int, key: Optional[str] = None):
        self.n = n
        self._local = threading.BoundedSemaphore(n)
        self._held = threading.local()
        self.folder: Optional[Path] = None
        if key is not None:
            digest = hashlib.sha256(key.encode()).hexdigest()[:16]
            self.folder = Path(tempfile.gettempdir()) / f"kevolve-llm-slots-{os.getuid()}" / digest
            self.folder.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"Slots({self.n}, shared={self.folder is not None})"

    def __enter__(self) -> "Slots":
        self._local.acquire()
        if self.folder is not None:
            try:
                self._held.fd = self._take()
            except BaseException:
                self._local.release()
                raise
        return self

    def __exit__(self, *exc) -> None:
        if self.folder is not None:
            os.close(self._held.fd)          # closing the description drops its lock
        self._local.release()

    def _take(self) -> int:
        start = threading.get_ident() % self.n
        while True:
            for k in range(self.n):
                fd = os.open(self.folder / str((start + k) % self.n), os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    os.close(fd)
                except BaseException:
                    os.close(fd)
                    raise
            time.sleep(POLL_S)

"""The shared-memory transport between the ranks of one node (``intra_node="shm"``).

Each rank of a node owns an *outbox*: a file in ``/dev/shm`` that every rank of its node maps.  In a
phase of a call, a rank copies the bytes it sends to each node-mate into its outbox at an offset that
every rank derives from the routing plan (all ranks hold the same plan), then raises its ``posted``
counter; the receiver waits for that counter and copies its bytes out.  A rank writes its outbox
for call ``n`` only after every node-mate has finished call ``n - 1`` (its ``progress`` counter), so
nobody reads bytes that are being overwritten.  The counters live in a small header file per rank.

Files never outlive their setup: a rank unlinks its files as soon as every node-mate has mapped them
(the mappings stay valid), so a crash leaves nothing in ``/dev/shm`` (only a rank killed within that
setup window could).  When a call needs a larger outbox, the node's ranks remap together (rare: the
capacity at least doubles).

Every wait polls with a growing sleep and gives up after ``timeout_s`` with :class:`DistributedError`
(a dead or absent node-mate fails the job instead of hanging).  The flags rely on stores becoming
visible in program order (x86's memory model); the bytes are plain memory copies.
"""

from __future__ import annotations

import mmap
import os
import time
import weakref

import numpy as np
import torch

from torchhpc.ext.core.errors import DistributedError

from .plan import NPHASES

SHM_DIR = "/dev/shm"
PREFIX = "torchhpc-coll-"
_POSTED, _PROGRESS, _GEN, _OPENED = range(4)
_HEADER_BYTES = 64
_MIN_CAPACITY = 1 << 20


def shm_path(token: str, rank: int, kind: str) -> str:
    """The file of ``rank``'s header (``kind="h"``) or outbox generation (``kind="d<gen>"``)."""
    return os.path.join(SHM_DIR, f"{PREFIX}{token}-{rank}-{kind}")


def _create(path: str, nbytes: int) -> mmap.mmap:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, nbytes)
        return mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)


def _open(path: str) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _unlink_all(paths: set[str]) -> None:
    for p in list(paths):
        _unlink(p)
    paths.clear()


class NodeShm:
    """One rank's end of the shared-memory transport of its node (see the module docstring).

    Set-up is collective over the node: :meth:`create` on every rank of the node, then (after a
    group barrier) :meth:`attach`, then (after another) :meth:`seal`.

    Args:
        token: a name shared by the ranks of the process graph (unique per graph).
        rank: this rank (in the graph's group).
        local: the ranks of this rank's node, ascending.
        timeout_s: the longest any wait for a node-mate may take.
    """

    def __init__(self, token: str, rank: int, local: list[int], timeout_s: float):
        self.token, self.rank, self.local, self.timeout_s = token, rank, list(local), float(timeout_s)
        self._headers: dict[int, np.ndarray] = {}
        self._maps: list[mmap.mmap] = []
        self._out: dict[int, torch.Tensor] = {}  # rank -> its outbox bytes as mapped here
        self.capacity = {r: 0 for r in self.local}
        self.calls = 0
        self._regens = 0
        self._mine: set[str] = set()  # paths of this rank's files still on disk
        self._finalizer = weakref.finalize(self, _unlink_all, self._mine)

    # ------------------------------------------------------------------ set-up
    def create(self) -> None:
        path = shm_path(self.token, self.rank, "h")
        self._mine.add(path)
        self._map_header(self.rank, _create(path, _HEADER_BYTES))

    def attach(self) -> None:
        for r in self.local:
            if r != self.rank:
                self._map_header(r, _open(shm_path(self.token, r, "h")))

    def seal(self) -> None:
        _unlink_all(self._mine)

    def close(self) -> None:
        """Forget the mappings and remove any file of this rank still on disk."""
        _unlink_all(self._mine)
        self._out.clear()
        self._headers.clear()
        self._maps.clear()  # mappings close when the last view of them goes

    def _map_header(self, r: int, mm: mmap.mmap) -> None:
        self._maps.append(mm)
        self._headers[r] = np.frombuffer(mm, dtype=np.int64, count=_HEADER_BYTES // 8)

    # ------------------------------------------------------------------ waits
    def _wait(self, ready, what: str) -> None:
        if ready():
            return
        start = time.perf_counter()
        nap, polls = 0.0, 0
        while not ready():
            polls += 1
            if time.perf_counter() - start > self.timeout_s:
                raise DistributedError(f"rank {self.rank}: {what} within {self.timeout_s:g} s (shared-memory transport;"
                                       " a rank of this node died or stopped calling)")
            time.sleep(nap)
            if polls > 8:
                nap = min(1e-3, max(2e-5, 2 * nap))

    def _all_local(self, field: int, value: int) -> bool:
        return all(int(self._headers[r][field]) >= value for r in self.local)

    # ------------------------------------------------------------------ one call
    def begin(self, need: dict[int, int]) -> None:
        """Start a call whose outboxes need ``need[r]`` bytes (every rank of the node passes the same)."""
        grown = {r: max(_MIN_CAPACITY, int(need[r]), 2 * self.capacity[r]) for r in self.local
                 if need.get(r, 0) > self.capacity[r]}
        if grown:
            self._remap(grown)

    def _remap(self, grown: dict[int, int]) -> None:
        n = self.calls * NPHASES
        self._wait(lambda: self._all_local(_PROGRESS, n), "node-mates did not finish the previous call")
        self._regens += 1
        gen = self._regens
        if self.rank in grown:
            path = shm_path(self.token, self.rank, f"d{gen}")
            self._mine.add(path)
            mm = _create(path, grown[self.rank])
            self._maps.append(mm)
            self._out[self.rank] = torch.frombuffer(mm, dtype=torch.uint8)
            self._headers[self.rank][_GEN] = gen
        for r in grown:
            if r != self.rank:
                self._wait(lambda r=r: int(self._headers[r][_GEN]) >= gen, f"rank {r} did not create its outbox")
                mm = _open(shm_path(self.token, r, f"d{gen}"))
                self._maps.append(mm)
                self._out[r] = torch.frombuffer(mm, dtype=torch.uint8)
        self.capacity.update(grown)
        self._headers[self.rank][_OPENED] = gen
        self._wait(lambda: self._all_local(_OPENED, gen), "node-mates did not map the new outboxes")
        _unlink_all(self._mine)

    def send(self, phase: int, pieces: list[tuple[int, torch.Tensor]], first: bool) -> None:
        """Write ``(offset, bytes)`` pieces of this rank's outbox for ``phase`` and post them."""
        if first:  # nobody may still be reading the previous call's bytes
            n = self.calls * NPHASES
            self._wait(lambda: self._all_local(_PROGRESS, n), "node-mates did not finish the previous call")
        out = self._out.get(self.rank)
        for off, buf in pieces:
            out[off:off + buf.numel()].copy_(buf)
        self._headers[self.rank][_POSTED] = self.calls * NPHASES + phase + 1

    def recv(self, phase: int, peer: int, offset: int, nbytes: int) -> torch.Tensor:
        """The ``nbytes`` at ``offset`` of ``peer``'s outbox in ``phase`` of this call (a copy)."""
        want = self.calls * NPHASES + phase + 1
        self._wait(lambda: int(self._headers[peer][_POSTED]) >= want, f"no message from rank {peer}")
        return self._out[peer][offset:offset + nbytes].clone()

    def done(self, phase: int) -> None:
        """This rank has received everything of ``phase``; after the last phase the call is over."""
        self._headers[self.rank][_PROGRESS] = self.calls * NPHASES + phase + 1
        if phase == NPHASES - 1:
            self.calls += 1


def leftover_files(token: str) -> list[str]:
    """Files of the graph ``token`` still in ``/dev/shm`` (none once set-up is over)."""
    return sorted(f for f in os.listdir(SHM_DIR) if f.startswith(f"{PREFIX}{token}-"))


__all__ = ["NodeShm", "leftover_files", "shm_path"]

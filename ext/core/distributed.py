"""torch.distributed from the torchrun environment.

``torchrun --nproc-per-node N -m torchhpc.trainers.<job>`` sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; this
module turns them into an initialised default process group (gloo on CPU,
NCCL on CUDA) and tears it down again.  Without those variables a job runs as
a single process and no process group is created.

    with distributed() as ctx:          # DistContext(rank, world_size, local_rank, device, backend)
        ...
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .device import pick_device
from .errors import DistributedError
from .lazy import lazy_module

# imported at first use: a one-process CPU command that never starts a process group (``torchhpc align``)
# imports this module without loading torch
torch = lazy_module("torch")
dist = lazy_module("torch.distributed")


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None
    """``gloo``/``nccl`` when a process group is initialised; ``None`` for a single process."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def initialized(self) -> bool:
        return self.backend is not None

    # Collectives on plain Python values; each is the value itself in a single process.

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order (``[obj]`` in one process)."""
        if not self.initialized:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def mean(self, x: float, n: float = 1) -> float:
        """The mean of ``x`` over ranks, each weighted by its ``n`` samples."""
        if not self.initialized:
            return float(x)
        t = torch.tensor([x * n, float(n)], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return float(t[0] / t[1])

    def max(self, x: float) -> float:
        """The largest ``x`` over ranks."""
        if not self.initialized:
            return float(x)
        t = torch.tensor([x], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def all(self, flag: bool) -> bool:
        """Whether ``flag`` holds on every rank."""
        if not self.initialized:
            return bool(flag)
        t = torch.tensor([int(bool(flag))], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item())

    def average_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Replace each gradient of ``params`` by its mean over ranks (nothing in one process)."""
        if not self.initialized:
            return
        for p in params:
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= self.world_size

    def barrier(self) -> None:
        """Wait for every rank (a no-op in one process)."""
        if self.initialized:
            dist.barrier()


def launched_by_torchrun() -> bool:
    """True when the torchrun variables (``RANK`` and ``WORLD_SIZE``) are set."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def fail_on_every_rank(exc: BaseException, rank: int) -> None:
    """Stop this rank for an error that every rank finds alike (a bad config, a damaged checkpoint), so
    that the user reads it once.

    Rank 0 raises ``exc`` (its entry point prints the one line).  Under the torchhpc launcher
    (:data:`~torchhpc.ext.core.launch.LAUNCHER_ENV` set) every rank raises it: the launcher shows one
    line whichever rank exits first, and torchrun stops the others as soon as one exits, so a rank 0
    that is slower than its peers would otherwise never print it.  Under a bare torchrun the other ranks
    say nothing and exit with status 1 after :data:`PEER_EXIT_GRACE_S` seconds: torchrun stops every rank
    when the first one exits, so a peer exiting at once could stop rank 0 before it printed the line (seen
    in CI); rank 0 exits first, and torchrun then stops the waiting peers.

    Raises:
        BaseException: ``exc``; or ``SystemExit(1)`` on a rank other than 0 outside the launcher.
    """
    from .launch import LAUNCHER_ENV

    if rank == 0 or os.environ.get(LAUNCHER_ENV) == "1":
        raise exc
    time.sleep(PEER_EXIT_GRACE_S)
    raise SystemExit(1) from None


PEER_EXIT_GRACE_S = 10.0
"""How long a rank other than 0 waits, under a bare torchrun, before it exits for an error rank 0 reports."""


def torchrun_rank() -> tuple[int, int]:
    """``(RANK, WORLD_SIZE)`` from the torchrun environment, before any process group exists
    (``(0, 1)`` outside torchrun).

    Raises:
        DistributedError: the variables are set but are not integers.
    """
    if not launched_by_torchrun():
        return 0, 1
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except ValueError as exc:
        raise DistributedError(f"malformed torchrun environment: {exc}") from None


def init_distributed(
    device: str | torch.device | None = None, backend: str | None = None, timeout_s: float = 300.0, *,
    auto: str = "cuda",
) -> DistContext:
    """Initialise the default process group from the torchrun environment.

    Args:
        device: ``auto``, ``cpu`` or ``cuda``; with CUDA each process takes ``cuda:LOCAL_RANK``.
        backend: ``gloo`` or ``nccl``; default gloo on CPU, NCCL on CUDA.
        timeout_s: collective timeout: a peer that died makes the others fail after this
            long instead of hanging.
        auto: what ``auto`` means for the calling system (:func:`~torchhpc.ext.core.device.pick_device`):
            ``cuda`` (CUDA if present) or ``cpu`` (measured faster).

    Returns:
        The :class:`DistContext`; a single-process context when not launched by torchrun.

    Raises:
        DistributedError: a malformed torchrun environment or a backend that does not fit the device.
    """
    if not launched_by_torchrun():
        return DistContext(0, 1, 0, pick_device(device, auto=auto), None)
    rank, world = torchrun_rank()
    try:
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
    except ValueError as exc:
        raise DistributedError(f"malformed torchrun environment: {exc}") from None
    dev = pick_device(device, auto=auto)
    if dev.type == "cuda":
        dev = local_cuda_device(local_rank)
    backend = backend or ("nccl" if dev.type == "cuda" else "gloo")
    if backend == "nccl" and dev.type != "cuda":
        raise DistributedError("backend 'nccl' needs CUDA devices; use gloo on the CPU")
    if not dist.is_initialized():
        _bind_functional_collectives_before_init()
        kwargs = {"backend": backend, "timeout": datetime.timedelta(seconds=timeout_s)}
        if dev.type == "cuda":
            kwargs["device_id"] = dev
        dist.init_process_group(**kwargs)
    return DistContext(rank, world, local_rank, dev, backend)


def local_cuda_device(local_rank: int) -> torch.device:
    """This rank's GPU, ``cuda:LOCAL_RANK``, made the current device (so that NCCL and object collectives use
    it).  A machine with fewer GPUs than ranks is one clear error (two ranks on one GPU: NCCL refuses them).

    Raises:
        DistributedError: ``local_rank`` has no GPU of its own.
    """
    n = torch.cuda.device_count()
    if local_rank >= n:
        raise DistributedError(f"local rank {local_rank} has no GPU of its own: this machine has {n}; start at most "
                               f"{n} rank(s) per machine on CUDA (--nproc {n}), or run on the CPU")
    dev = torch.device("cuda", local_rank)
    torch.cuda.set_device(dev)
    return dev


def _bind_functional_collectives_before_init() -> None:
    """Import ``torch.distributed.nn`` while no process group exists.

    Its ``functional`` module binds ``group.WORLD`` as a default argument of ten collectives when it is
    first imported.  Imported after ``init_process_group`` (torchrec does so), that default holds the
    group for the life of the interpreter: ``destroy_process_group`` then leaves gloo's threads
    (``pt_gloo_runloop``, ``gloo_tcp_loop``) running, and interpreter exit races them ("terminate called
    without an active exception", SIGABRT).  Imported first, the default is ``None``.
    """
    import torch.distributed.nn  # noqa: F401


def teardown_distributed() -> None:
    """Destroy the default process group if there is one (safe to call twice)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def distributed(
    device: str | torch.device | None = None, backend: str | None = None, timeout_s: float = 300.0, *,
    auto: str = "cuda",
) -> Iterator[DistContext]:
    """Context manager: :func:`init_distributed` on entry, :func:`teardown_distributed` on exit.

    On the way out without an error every rank first meets the others at a barrier, so no rank tears its
    connections down while a peer still sends on them; after an error the group is destroyed at once.
    """
    ctx = init_distributed(device, backend, timeout_s, auto=auto)
    try:
        yield ctx
        if ctx.initialized and dist.is_initialized():  # the block may have torn the group down itself
            dist.barrier()
    finally:
        teardown_distributed()

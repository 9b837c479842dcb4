"""The gems pipeline engine: micro-batched pipelines over point-to-point isend/irecv, with the
GPipe baseline, MAST, MASTER and Hybrid schedules (see the package docstring).

Placement (``P`` stages, ``D`` data-parallel groups, world ``P * D``; group ``d`` holds
ranks ``d*P ... d*P + P - 1``, local position ``r``)::

    replica A (forward  -->)   stage:  0      1      2      3        rank r holds stage r
    replica B (forward <--)   stage:  3      2      1      0        rank r holds stage P-1-r
                               rank:   0      1      2      3

Each replica runs its micro-batches GPipe-style: every forward, then every backward.
A rank that holds two stages runs, of the replicas whose next action has its input, the one
whose action has more pipeline actions waiting on it (:func:`~.partition.actions_after`: work
another rank is about to need before work that ends a chain), then the one that has done fewer
actions, then A; otherwise it sleeps until an input arrives. So replica B fills replica A's
bubbles (the paper's MAST, §III).

One update (``K = 2`` replicas for MAST/MASTER, 1 for the baseline)::

    global batch N = batch_size * K * eta * D, cut into slices of batch_size:
    slice j = (d * eta + e) * K + k   -> group d, repetition e, replica k
    loss    = sum over all samples of cross_entropy / N      (so the summed gradient is the mean's)

Gradients are then summed over every copy of a stage — the pair ``{r, P-1-r}`` of
every group (MAST), or rank ``r`` of every group (baseline) — with one all-reduce
per rank per update, and each copy steps its own optimizer from identical weights
and identical gradients, so all copies stay equal and training equals single-process
training on the global batch.
"""

from __future__ import annotations

import copy
import queue
import resource
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from torchhpc.ext.core.errors import ConfigError, DistributedError

from .partition import SavedTensorMeter, actions_after, infer_shapes

FORWARD, BACKWARD = 0, 1


@dataclass
class Event:
    """What one rank did when (seconds from the start of the update)."""

    rank: int
    replica: int
    """0 = A, 1 = B, -1 = not a replica's action (all-reduce, optimizer)."""
    kind: str
    """``F``, ``B``, ``allreduce`` or ``optimizer``."""
    rep: int
    micro_batch: int
    start: float
    end: float


class StageCopy:
    """One replica's stage on this rank, with its neighbours' global ranks."""

    def __init__(self, replica: int, stage: int, module: nn.Module, P: int, base: int, r: int,
                 checkpoint: bool, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> None:
        self.replica, self.stage, self.module = replica, stage, module
        self.first, self.last = stage == 0, stage == P - 1
        step = 1 if replica == 0 else -1  # replica B flows from high ranks to low ranks
        self.prev_rank = base + r - step
        self.next_rank = base + r + step
        self.checkpoint = checkpoint
        self.in_shape, self.out_shape = in_shape, out_shape


class RecvWaiter:
    """Waits on one replica's receives, in the order that replica consumes them, on a helper thread.

    gloo's ``irecv`` work reports completion only once someone calls ``wait()`` on it, so polling
    ``is_completed()`` cannot tell which replica's input has arrived; a thread per replica blocks in
    ``wait()`` (which releases the GIL) and marks each key done, waking the scheduler.
    """

    def __init__(self, cond: threading.Condition) -> None:
        self.cond = cond
        self.done: set = set()
        self.error: BaseException | None = None
        self.pending: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def add(self, key, work) -> None:
        self.pending.put((key, work))

    def close(self) -> None:
        self.pending.put(None)

    def _run(self) -> None:
        while True:
            item = self.pending.get()
            if item is None:
                return
            key, work = item
            try:
                work.wait()
            except BaseException as exc:  # a dead peer: hand the error to the scheduler thread
                self.error = exc
            with self.cond:
                self.done.add(key)
                self.cond.notify_all()
            if self.error is not None:
                return


def _first_line(exc: BaseException) -> str:
    """A transport error in one line (gloo's run to many lines of C++ frames)."""
    text = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    return text[:200]


def _receive_error(rank: int, exc: BaseException, timeout_s: float) -> DistributedError:
    """A failed receive as one line: the transport's timeout (the peer hung) or its error (the peer died)."""
    line = _first_line(exc)
    if "timeout" in line.lower() or "timed out" in line.lower():
        return DistributedError(f"rank {rank}: no input from a neighbour for {timeout_s:.0f} s "
                                f"(a peer rank probably died or hung)")
    return DistributedError(f"rank {rank}: receiving from a neighbour failed (a peer rank probably died): {line}")


def _tag(rep: int, replica: int, kind: int, mb: int, K: int, M: int) -> int:
    return ((rep * K + replica) * 2 + kind) * M + mb


class PipelineEngine:
    """One rank's share of a pipelined model and its schedule.

    Args:
        blocks: the whole model's blocks, initialised identically on every rank (each rank keeps
            the stages it holds; replica B's stage is a copy, so it starts from the same weights).
        bounds: ``P`` half-open block ranges, one per stage (:mod:`.partition`).
        schedule: ``gpipe`` (baseline), ``mast`` or ``master``.
        sample_shape: one sample's shape ``(C, H, W)``.
        batch_size: samples each replica processes per repetition (the paper's BS).
        micro_batches: ``M``; ``batch_size`` must be a multiple of it.
        eta: repetitions per update with gradient accumulation (MASTER's η; 1 otherwise).
        groups: ``D`` data-parallel groups (Hybrid when > 1); world size must be ``P * D``.
        rank, world_size: this process in the default process group (1 process: no group needed).
        optimizer: ``params -> torch.optim.Optimizer``.
        checkpoint_stages: stages whose activations are recomputed in backward instead of stashed.
        timeout_s: how long a rank waits for a neighbour before failing.

    Raises:
        ConfigError: a batch not divisible into micro-batches, an unknown schedule.
        DistributedError: a world size that is not ``P * D``.
    """

    def __init__(self, blocks: Sequence[nn.Module], bounds: Sequence[tuple[int, int]], schedule: str,
                 sample_shape: Sequence[int], batch_size: int, micro_batches: int, *, eta: int = 1,
                 groups: int = 1, rank: int = 0, world_size: int = 1,
                 optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None,
                 checkpoint_stages: Sequence[int] = (), device: torch.device | str = "cpu",
                 timeout_s: float = 300.0) -> None:
        if schedule not in ("gpipe", "mast", "master"):
            raise ConfigError(f"pipeline.schedule = {schedule!r}: must be gpipe, mast or master")
        P, D = len(bounds), groups
        if P * D != world_size:
            raise DistributedError(f"world size {world_size} does not fit the config: {P} stages x {D} "
                                   f"data-parallel groups need {P * D} processes (torchrun --nproc-per-node {P * D})")
        if micro_batches < 1 or batch_size % micro_batches:
            raise ConfigError(f"train.batch_size = {batch_size} is not divisible into "
                              f"pipeline.micro_batches = {micro_batches}")
        if eta < 1:
            raise ConfigError(f"pipeline.eta = {eta}: must be >= 1")
        self.schedule, self.P, self.D, self.M, self.eta = schedule, P, D, micro_batches, eta
        self.K = 1 if schedule == "gpipe" else 2
        self.mirror = self.K == 2
        self.rank, self.world_size = rank, world_size
        self.d, self.r = divmod(rank, P)
        self.base = self.d * P
        self.batch_size = batch_size
        self.mb = batch_size // micro_batches
        self.global_batch = batch_size * self.K * eta * D
        self.device = torch.device(device)
        self.timeout_s = timeout_s
        self.distributed = world_size > 1
        if self.distributed and not dist.is_initialized():
            raise DistributedError(f"world size {world_size} needs an initialised process group (launch with torchrun)")
        self.sample_shape = tuple(sample_shape)
        shapes = infer_shapes(blocks, (self.mb, *self.sample_shape))
        self.copies: list[StageCopy] = []
        for k in range(self.K):
            s = self.r if k == 0 else P - 1 - self.r
            a, b = bounds[s]
            mods = list(blocks[a:b]) if k == 0 else [copy.deepcopy(m) for m in blocks[a:b]]
            module = nn.Sequential(*mods).to(self.device)
            in_shape = (self.mb, *self.sample_shape) if a == 0 else shapes[a - 1]
            self.copies.append(StageCopy(k, s, module, P, self.base, self.r, s in set(checkpoint_stages),
                                         in_shape, shapes[b - 1]))
        self.params = [p for c in self.copies for p in c.module.parameters()]
        make_opt = optimizer or (lambda ps: torch.optim.SGD(ps, lr=0.1))
        self.optimizer = make_opt(self.params)
        self._build_sync_groups()
        self.events: list[Event] = []
        self.peak_bytes = 0
        self._live = 0

    # ------------------------------------------------------------------ set-up

    def _build_sync_groups(self) -> None:
        """One all-reduce group per class of stage copies; every rank creates every group in the same order."""
        P, D = self.P, self.D
        classes = [sorted({q, P - 1 - q}) for q in range((P + 1) // 2)] if self.mirror else [[q] for q in range(P)]
        self.sync_group = None
        mine = None
        for cls in classes:
            ranks = sorted(d * P + q for d in range(D) for q in cls)
            group = dist.new_group(ranks) if len(ranks) > 1 else None
            if self.rank in ranks:
                self.sync_group, mine = group, ranks
        self.sync_ranks = mine or [self.rank]
        # the stages held here, in stage order, with every local copy of each
        self.sync_stages: list[tuple[int, list[nn.Module]]] = []
        for s in sorted({c.stage for c in self.copies}):
            self.sync_stages.append((s, [c.module for c in self.copies if c.stage == s]))

    def static_bytes(self) -> int:
        """Weights, gradients and optimizer state held on this rank."""
        n = sum(p.numel() * p.element_size() for p in self.params) * 2
        for st in self.optimizer.state.values():
            n += sum(v.numel() * v.element_size() for v in st.values() if torch.is_tensor(v) and v.dim() > 0)
        return n

    # ------------------------------------------------------------------ one update

    def _note_memory(self, delta: int) -> None:
        self._live += delta
        self.peak_bytes = max(self.peak_bytes, self._static + self._live)

    def run_schedule(self, data, step: int) -> torch.Tensor:
        """Forward and backward of every micro-batch of every replica and repetition held here.

        ``data.slice(step, j, n, images=...)`` gives slice ``j`` (see the module docstring).
        Returns this rank's summed loss contribution (a scalar; 0 where no last stage is held).
        """
        K, M, eta, mb = self.K, self.M, self.eta, self.mb
        t_origin = self._clock()
        self._t_origin = t_origin
        self.events = []
        self._static = self.static_bytes()
        self._live = 0
        self.peak_bytes = max(self.peak_bytes, self._static)
        dev = self.device
        queues = {k: deque((e, kind, m) for e in range(eta) for kind in (FORWARD, BACKWARD) for m in range(M))
                  for k in range(K)}
        inputs: dict[tuple[int, int], tuple[list[torch.Tensor] | None, list[torch.Tensor] | None]] = {}
        recvs: dict[tuple[int, int, int, int], tuple[object, torch.Tensor]] = {}
        posted: set[tuple[int, int]] = set()
        stash: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor, int]] = {}
        sends: list[object] = []
        loss_sum = torch.zeros((), device=dev)
        cond = threading.Condition()
        waiters = [RecvWaiter(cond) for _ in range(K)] if self.distributed else []

        def post(k: int, e: int) -> None:
            """Pre-post repetition e's receives of replica k (activations and gradients)."""
            c = self.copies[k]
            for m in range(M):
                if not c.first:
                    buf = torch.empty(c.in_shape, device=dev)
                    recvs[(k, e, FORWARD, m)] = (dist.irecv(buf, c.prev_rank, tag=_tag(e, k, FORWARD, m, K, M)), buf)
                    self._note_memory(buf.numel() * buf.element_size())
            for m in range(M):  # the waiter follows the replica's order: forwards, then backwards
                if not c.first:
                    waiters[k].add((k, e, FORWARD, m), recvs[(k, e, FORWARD, m)][0])
            for m in range(M):
                if not c.last:
                    buf = torch.empty(c.out_shape, device=dev)
                    recvs[(k, e, BACKWARD, m)] = (dist.irecv(buf, c.next_rank, tag=_tag(e, k, BACKWARD, m, K, M)),
                                                  buf)
                    self._note_memory(buf.numel() * buf.element_size())
                    waiters[k].add((k, e, BACKWARD, m), recvs[(k, e, BACKWARD, m)][0])
            posted.add((k, e))

        def slice_of(k: int, e: int):
            if (k, e) not in inputs:
                c = self.copies[k]
                j = (self.d * eta + e) * K + k
                x, y = data.slice(step, j, self.batch_size, images=c.first)
                xs = list(x.to(dev).split(mb)) if c.first else None
                ys = list(y.to(dev).split(mb)) if c.last else None
                inputs[(k, e)] = (xs, ys)
            return inputs[(k, e)]

        def ready(k: int) -> bool:
            e, kind, m = queues[k][0]
            if (k, e) not in posted and self.distributed:
                post(k, e)
            key = (k, e, kind, m)
            return key not in recvs or key in waiters[k].done

        def take(key) -> torch.Tensor:
            _, buf = recvs.pop(key)
            waiter = waiters[key[0]]
            deadline = time.perf_counter() + self.timeout_s
            with cond:
                while key not in waiter.done and waiter.error is None:
                    if time.perf_counter() > deadline:
                        raise DistributedError(f"rank {self.rank}: no input from a neighbour for "
                                               f"{self.timeout_s:.0f} s (a peer rank probably died or hung)")
                    cond.wait(timeout=1.0)
            if waiter.error is not None:
                raise _receive_error(self.rank, waiter.error, self.timeout_s) from None
            self._note_memory(-buf.numel() * buf.element_size())
            return buf

        def forward(c: StageCopy, x: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
            out = c.module(x)
            if c.last:
                return F.cross_entropy(out, y, reduction="sum") / self.global_batch
            return out

        try:
            self._loop(queues, ready, slice_of, take, forward, stash, sends, cond, waiters, loss_sum)
        finally:
            for w in waiters:
                w.close()
        for w in sends:
            w.wait()
        return loss_sum

    def _loop(self, queues, ready, slice_of, take, forward, stash, sends, cond, waiters, loss_sum) -> None:
        K, M, t_origin = self.K, self.M, self._t_origin
        while any(queues.values()):
            # run the first replica whose next action has its input; sleep until one has.
            # Among replicas with work left: the action with more actions waiting on it first (a
            # forward or backward another rank needs before one that ends a chain), then the replica
            # with fewer actions done, then A — the simulator's rule too
            order = sorted((k for k in range(K) if queues[k]),
                           key=lambda k: (-actions_after(queues[k][0][1] == FORWARD, self.copies[k].stage, self.P),
                                          -len(queues[k]), k))
            chosen = next((k for k in order if ready(k)), None)
            if chosen is None and len(order) == 1:
                chosen = order[0]  # nothing to overlap with: take() blocks on the one input
            deadline = time.perf_counter() + self.timeout_s
            while chosen is None:
                with cond:
                    chosen = next((k for k in order if ready(k)), None)
                    if chosen is None:
                        if any(w.error is not None for w in waiters):
                            bad = next(w.error for w in waiters if w.error is not None)
                            raise _receive_error(self.rank, bad, self.timeout_s) from None
                        if time.perf_counter() > deadline:
                            raise DistributedError(
                                f"rank {self.rank}: no input from a neighbour for {self.timeout_s:.0f} s "
                                f"(a peer rank probably died or hung)")
                        cond.wait(timeout=1.0)
            k = chosen
            c = self.copies[k]
            e, kind, m = queues[k].popleft()
            xs, ys = slice_of(k, e)
            # an event spans the compute only: the wait for its input (take) comes before t0
            if kind == FORWARD:
                if c.first:
                    x, xs[m] = xs[m], None  # the stash holds it from here on
                else:
                    x = take((k, e, FORWARD, m)).requires_grad_(True)
                t0 = self._clock()
                y = ys[m] if c.last else None
                meter = SavedTensorMeter(c.module.parameters())
                if c.checkpoint:
                    with torch.no_grad():
                        out = forward(c, x, y)
                    kept = x.numel() * x.element_size()
                else:
                    with meter.record():
                        out = forward(c, x, y)
                    meter.storages[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
                    kept = meter.nbytes
                if c.last:
                    loss_sum += out.detach()
                else:
                    sends.append(dist.isend(out.detach().contiguous(), c.next_rank,
                                            tag=_tag(e, k, FORWARD, m, K, M)))
                stash[(k, e, m)] = (x, out, kept)
                self._note_memory(kept)
            else:
                grad_out = None if c.last else take((k, e, BACKWARD, m))
                t0 = self._clock()
                x, out, kept = stash.pop((k, e, m))
                if c.checkpoint:
                    out = forward(c, x, ys[m] if c.last else None)
                if c.last:
                    out.backward()
                else:
                    out.backward(grad_out)
                if not c.first:
                    sends.append(dist.isend(x.grad, c.prev_rank, tag=_tag(e, k, BACKWARD, m, K, M)))
                self._note_memory(-kept)
                del out
            self.events.append(Event(self.rank, k, "F" if kind == FORWARD else "B", e, m,
                                     t0 - t_origin, self._clock() - t_origin))

    def sync_gradients(self) -> None:
        """Sum each stage's gradients over all its copies (local ones first, then one all-reduce)."""
        t0 = self._clock()
        flats = []
        for _, mods in self.sync_stages:
            per_copy = [torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                                   for p in mod.parameters()]) for mod in mods]
            flats.append(torch.stack(per_copy).sum(0) if len(per_copy) > 1 else per_copy[0])
        local_dups = any(len(mods) > 1 for _, mods in self.sync_stages)
        if self.sync_group is None and not local_dups:
            return
        flat = torch.cat(flats)
        if self.sync_group is not None:
            dist.all_reduce(flat, group=self.sync_group)
        offset = 0
        for _, mods in self.sync_stages:
            n = sum(p.numel() for p in mods[0].parameters())
            part = flat[offset:offset + n]
            for mod in mods:
                o = 0
                for p in mod.parameters():
                    g = part[o:o + p.numel()].view_as(p)
                    if p.grad is None:
                        p.grad = g.clone()
                    else:
                        p.grad.copy_(g)
                    o += p.numel()
            offset += n
        self.events.append(Event(self.rank, -1, "allreduce", 0, 0, t0 - self._t_origin,
                                 self._clock() - self._t_origin))

    def sync_buffers(self) -> None:
        """Average float buffers (BatchNorm running statistics) over every copy of each stage."""
        vecs, counts = [], []
        for _, mods in self.sync_stages:
            bufs = [[b for b in mod.buffers() if b.is_floating_point()] for mod in mods]
            if not bufs[0]:
                continue
            vecs.append(torch.stack([torch.cat([b.reshape(-1) for b in bl]) for bl in bufs]).sum(0))
            counts.append(len(mods))
        if not vecs:
            return
        flat = torch.cat([torch.cat(vecs), torch.tensor(counts, dtype=vecs[0].dtype, device=vecs[0].device)])
        if self.sync_group is not None:
            dist.all_reduce(flat, group=self.sync_group)
        total = flat[-len(counts):]
        offset, i = 0, 0
        for _, mods in self.sync_stages:
            bl0 = [b for b in mods[0].buffers() if b.is_floating_point()]
            if not bl0:
                continue
            n = sum(b.numel() for b in bl0)
            avg = flat[offset:offset + n] / total[i]
            for mod in mods:
                o = 0
                for b in (b for b in mod.buffers() if b.is_floating_point()):
                    b.copy_(avg[o:o + b.numel()].view_as(b))
                    o += b.numel()
            offset += n
            i += 1

    def optimizer_step(self) -> None:
        t0 = self._clock()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.events.append(Event(self.rank, -1, "optimizer", 0, 0, t0 - self._t_origin,
                                 self._clock() - self._t_origin))

    def _clock(self) -> float:
        """The time of an event's edge: on CUDA after the device has finished the work queued so far (each
        action timed to its kernels' end, not their launch: the events feed the timeline, the summary's
        update times and the simulator's calibration), a synchronize an edge; on the CPU the clock alone."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def global_loss(self, loss_sum: torch.Tensor) -> float:
        """The update's mean loss over the global batch (an all-reduce of each rank's share)."""
        t = loss_sum.detach().reshape(1).to(torch.float64)
        if self.distributed:
            dist.all_reduce(t)
        return float(t.item())

    def train_step(self, data, step: int) -> float:
        """One update: schedule, gradient sync, optimizer step; returns the global mean loss."""
        loss_sum = self.run_schedule(data, step)
        self.sync_gradients()
        self.optimizer_step()
        if any(b.is_floating_point() for b in self.params_buffers()):
            self.sync_buffers()
        return self.global_loss(loss_sum)

    # ------------------------------------------------------------------ state

    def params_buffers(self):
        return [b for c in self.copies for b in c.module.buffers()]

    def state_dict(self) -> dict:
        """The stages held here (``{replica: (stage, state_dict)}``) and the optimizer."""
        return {"copies": {c.replica: (c.stage, c.module.state_dict()) for c in self.copies},
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        for c in self.copies:
            stage, sd = state["copies"][c.replica]
            if stage != c.stage:
                raise DistributedError(f"checkpoint holds stage {stage} for replica {c.replica}, "
                                       f"this rank runs stage {c.stage} (same world size and config?)")
            c.module.load_state_dict(sd)
        self.optimizer.load_state_dict(state["optimizer"])

    def memory_report(self) -> dict:
        """This rank's peak memory: the tracked model memory and, for reference, the process peak RSS."""
        rep = {"rank": self.rank, "peak_model_bytes": int(self.peak_bytes), "static_bytes": int(self.static_bytes()),
               "max_rss_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}
        if self.device.type == "cuda":
            rep["cuda_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(self.device))
        return rep

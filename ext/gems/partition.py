"""Stage partitioning: profile each block once on a sample micro-batch, then split the
blocks into ``P`` contiguous stages so that the most expensive stage is as cheap as possible.

    blocks:   b0  b1  b2 | b3  b4 | b5  b6  b7  b8 | b9        (P = 4 stages)
    bounds:  [(0, 3),      (3, 5),  (5, 9),         (9, 10)]   half-open block ranges

The cost of a block is its measured forward + backward time (``balance_by="time"``),
the bytes it keeps for backward plus its parameters (``"memory"``), or the sum of both,
each normalised to its total (``"both"``).  The split minimises the maximum stage cost
exactly (dynamic programming over prefix sums, vectorised over the split point).
A manual ``balance`` (blocks per stage) overrides the search.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from torchhpc.ext.core.errors import ConfigError, InputError


@dataclass
class BlockProfile:
    """Per-block measurements on one micro-batch (arrays of shape ``(n_blocks,)``)."""

    micro_batch: int
    forward_s: np.ndarray
    backward_s: np.ndarray
    activation_bytes: np.ndarray
    """bytes autograd keeps for the block's backward (parameters excluded)."""
    output_bytes: np.ndarray
    """bytes of the block's output: the message sent when a stage ends after this block."""
    param_bytes: np.ndarray
    output_shapes: list[tuple[int, ...]] = field(default_factory=list)
    input_bytes: int = 0


class SavedTensorMeter:
    """Counts the distinct storages autograd saves for backward inside ``with meter.record():``.

    Parameters (and any storage in ``exclude``) are not counted: they are accounted once as weights.
    """

    def __init__(self, exclude: Sequence[torch.Tensor] = ()) -> None:
        self.exclude = {p.untyped_storage().data_ptr() for p in exclude}
        self.storages: dict[int, int] = {}

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in self.exclude and t.device.type != "meta":
            self.storages[ptr] = st.nbytes()
        return t

    @contextlib.contextmanager
    def record(self) -> Iterator[SavedTensorMeter]:
        self.storages = {}
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield self

    @property
    def nbytes(self) -> int:
        return int(sum(self.storages.values()))


def tensor_bytes(shape: Sequence[int], dtype: torch.dtype = torch.float32) -> int:
    return int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()


def infer_shapes(blocks: Sequence[nn.Module], input_shape: Sequence[int]) -> list[tuple[int, ...]]:
    """Each block's output shape for an input of ``input_shape`` (fake tensors: no compute, no memory), each
    block's input on the device of its weights (blocks already on a GPU take a GPU input)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    shapes = []
    with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
        x = torch.empty(tuple(input_shape))
        for b in blocks:
            device = next((t.device for t in itertools.chain(b.parameters(), b.buffers())), None)
            x = b(x if device is None else x.to(device))
            shapes.append(tuple(x.shape))
    return shapes


def profile_blocks(blocks: Sequence[nn.Module], sample: torch.Tensor, repeats: int = 3) -> BlockProfile:
    """Time each block's forward and backward on ``sample`` (one micro-batch) and measure its memory.

    The blocks run as one chain, as in training: a forward through all of them, then one backward,
    ``repeats + 1`` times (the first is a warm-up); the median time of each block counts. A block's
    backward runs from the moment the gradient of its output exists to the moment the gradient of its
    input does (tensor hooks; the last block's from the call, the first block's to the end). Timing
    each block alone on the same input instead keeps its data in cache and measured up to 40 % less
    than the blocks took inside a pipeline stage. Gradients the profiling leaves on parameters are cleared.
    """
    n = len(blocks)
    fwd, bwd = np.zeros((repeats + 1, n)), np.zeros((repeats + 1, n))
    params = [list(b.parameters()) for b in blocks]
    meters = [SavedTensorMeter(p) for p in params]
    sync = torch.cuda.synchronize if sample.device.type == "cuda" else (lambda: None)
    outs: list[torch.Tensor] = []
    for r in range(repeats + 1):
        h = sample.detach()
        outs = []
        for i, block in enumerate(blocks):
            sync()
            t0 = time.perf_counter()
            with meters[i].record():
                h = block(h)
            sync()
            fwd[r, i] = time.perf_counter() - t0
            outs.append(h)
        grad_at = np.zeros(n + 1)  # grad_at[i]: when the gradient of block i's input exists

        def stamp(i: int, at: np.ndarray = grad_at):
            def hook(g: torch.Tensor) -> None:
                sync()
                at[i] = time.perf_counter()
            return hook

        for i in range(1, n):
            outs[i - 1].register_hook(stamp(i))
        sync()
        grad_at[n] = time.perf_counter()
        outs[-1].backward(torch.ones_like(outs[-1]))
        sync()
        grad_at[0] = time.perf_counter()
        bwd[r] = grad_at[:n] - grad_at[1:]
        for ps in params:
            for p in ps:
                p.grad = None
    out_b = np.array([o.numel() * o.element_size() for o in outs], dtype=np.float64)
    par = np.array([sum(p.numel() * p.element_size() for p in ps) for ps in params], dtype=np.float64)
    act = np.array([m.nbytes for m in meters], dtype=np.float64)
    return BlockProfile(sample.shape[0], np.median(fwd[1:], axis=0), np.median(bwd[1:], axis=0), act, out_b, par,
                        [tuple(o.shape) for o in outs], sample.numel() * sample.element_size())


def block_costs(profile: BlockProfile, balance_by: str = "time") -> np.ndarray:
    """The per-block cost the partitioner balances (see the module docstring)."""
    t = profile.forward_s + profile.backward_s
    m = profile.activation_bytes + profile.param_bytes
    if balance_by == "time":
        return t
    if balance_by == "memory":
        return m
    if balance_by == "both":
        return t / max(t.sum(), 1e-30) + m / max(m.sum(), 1e-30)
    raise ConfigError(f"pipeline.balance_by = {balance_by!r}: must be time, memory or both")


def balanced_bounds(costs: Sequence[float], stages: int) -> list[tuple[int, int]]:
    """Split ``costs`` (one per block) into ``stages`` non-empty contiguous ranges minimising the largest sum.

    Raises:
        InputError: more stages than blocks, or no stage.
    """
    c = np.asarray(costs, dtype=np.float64)
    n = len(c)
    if stages < 1:
        raise InputError(f"stages = {stages}: need at least one pipeline stage")
    if stages > n:
        raise InputError(f"{stages} pipeline stages but the model has only {n} blocks (use at most {n} stages)")
    prefix = np.concatenate([[0.0], np.cumsum(c)])
    # seg[i, j] = cost of blocks [i, j) for i < j; +inf where empty or reversed
    seg = prefix[None, :] - prefix[:, None]
    seg[np.tril_indices(n + 1)] = np.inf
    best = seg[0].copy()  # one stage covering blocks [0, j)
    choice = np.zeros((stages, n + 1), dtype=np.int64)
    for p in range(1, stages):
        cand = np.maximum(best[:, None], seg)  # last stage = [i, j) after p stages end at i
        choice[p] = np.argmin(cand, axis=0)
        best = cand[choice[p], np.arange(n + 1)]
    bounds = []
    j = n
    for p in range(stages - 1, 0, -1):
        i = int(choice[p, j])
        bounds.append((i, j))
        j = i
    bounds.append((0, j))
    return bounds[::-1]


def bounds_from_balance(balance: Sequence[int], n_blocks: int) -> list[tuple[int, int]]:
    """Ranges from a manual ``balance`` (blocks per stage).

    Raises:
        ConfigError: an empty stage, or counts that do not add up to the model's blocks.
    """
    if any(b < 1 for b in balance):
        raise ConfigError(f"pipeline.balance = {list(balance)}: every stage needs at least one block")
    if sum(balance) != n_blocks:
        raise ConfigError(f"pipeline.balance = {list(balance)} covers {sum(balance)} blocks "
                          f"but the model has {n_blocks}")
    edges = np.concatenate([[0], np.cumsum(balance)])
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


@dataclass
class StageInfo:
    """One stage's share of the model and its memory (bytes) for one micro-batch."""

    stage: int
    blocks: tuple[int, int]
    forward_s: float
    backward_s: float
    param_bytes: int
    activation_bytes: int
    """kept for backward per micro-batch."""
    output_bytes: int
    """the activation message sent to the next stage per micro-batch."""

    def peak_bytes(self, micro_batches: int, optimizer_states: int = 1) -> int:
        """Weights + gradients + optimizer state + all micro-batches' activations stashed (GPipe)."""
        return self.param_bytes * (2 + optimizer_states) + self.activation_bytes * micro_batches


def stage_infos(profile: BlockProfile, bounds: Sequence[tuple[int, int]]) -> list[StageInfo]:
    """Sum the block profile over each stage."""
    out = []
    for s, (a, b) in enumerate(bounds):
        out.append(StageInfo(s, (a, b), float(profile.forward_s[a:b].sum()), float(profile.backward_s[a:b].sum()),
                             int(profile.param_bytes[a:b].sum()), int(profile.activation_bytes[a:b].sum()),
                             int(profile.output_bytes[b - 1])))
    return out


def stage_report(infos: Sequence[StageInfo], micro_batches: int, optimizer_states: int = 1) -> str:
    """A table of each stage's blocks, time and memory (MiB): parameters, activations per
    micro-batch, and the single-replica peak with all ``micro_batches`` stashed."""
    mib = 1 / 2**20
    lines = [f"{'stage':>5} {'blocks':>9} {'fwd ms':>8} {'bwd ms':>8} {'params MiB':>11} "
             f"{'act/mb MiB':>11} {'peak MiB':>9}"]
    for s in infos:
        lines.append(f"{s.stage:>5} {f'{s.blocks[0]}-{s.blocks[1] - 1}':>9} {s.forward_s * 1e3:>8.2f} "
                     f"{s.backward_s * 1e3:>8.2f} {s.param_bytes * mib:>11.2f} {s.activation_bytes * mib:>11.2f} "
                     f"{s.peak_bytes(micro_batches, optimizer_states) * mib:>9.2f}")
    return "\n".join(lines)


def actions_after(forward: bool, stage: int, stages: int) -> int:
    """How many pipeline actions wait, one after another, on this one: a forward of stage ``s`` leads
    to the forwards of stages ``s+1 .. P-1`` and then all ``P`` backwards; a backward of stage ``s``
    to the backwards of ``s-1 .. 0``.

    A rank holding two replicas' stages runs first, of the actions whose input has arrived, the one
    with the most actions behind it (critical-path list scheduling): work another rank is about to
    wait for goes before work that ends a chain. The runtime and the simulator share this rule.
    """
    return (stages - 1 - stage) + stages if forward else stage

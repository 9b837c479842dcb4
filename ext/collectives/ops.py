"""MPI-3 neighbourhood collectives on any ``torch.distributed`` group: the process graph and the calls.

    graph = ProcessGraph(sources=[1, 3], destinations=[2, 3], ranks_per_node=2)  # on every rank
    received = neighbor_alltoallv([to_2, to_3], graph)          # [from_1, from_3]
    work = neighbor_alltoallv([to_2, to_3], graph, async_op=True); received = work.wait()
    gathered = neighbor_allgather(x, graph)                     # x sent to every destination
    exchange = PersistentNeighborAlltoallv([(4, 3), (2, 3)], torch.float32, graph)  # sizes fixed once
    received = exchange([to_2, to_3])                           # no size exchange per call

Messages: one tensor per out-edge, shape ``(n_i, *F)``, all of the same dtype and trailing shape
``F`` on every rank of the call (``n_i`` may differ per edge and be 0).  Received tensors come back
in the order of ``sources``, with the shape their senders gave.  Every algorithm moves the raw bytes
of the messages, so all algorithms give byte-identical results.

Each call first all-gathers a few integers per rank (dtype, ``F``, rows per edge): every rank then
knows every message's size, checks the call (a mismatch is the same :class:`InputError` on every
rank, not a hang) and derives the same routing plan (cached per size pattern).

Messages between ranks of one node go through shared-memory outboxes (:mod:`.shm`) when the graph's
``intra_node`` transport is ``shm`` (the default on CPU where a node's ranks share a host), else
through the process group like the inter-node ones; every algorithm uses the same transport.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from torchhpc.ext.core.errors import ConfigError, DistributedError, InputError

from .config import INTRA_NODE_CHOICES, INTRA_NODE_DEFAULT, SHM_TIMEOUT_S
from .plan import ALGORITHMS, NPHASES, CostModel, Plan, build_plan, choose_algorithm

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
           torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]
_MAX_FEAT = 4
# per-rank status codes of the call check
_OK, _COUNT, _DTYPE, _FEAT, _NDIM, _DEVICE = range(6)
_STATUS_TEXT = {
    _COUNT: "passed {got} tensors for {want} destinations",
    _DTYPE: "passed tensors of different dtypes",
    _FEAT: "passed tensors whose trailing shapes differ",
    _NDIM: f"passed a tensor with more than {_MAX_FEAT} trailing dimensions",
    _DEVICE: "passed a tensor on a device other than the graph's",
}


@dataclass
class EmulatedNetwork:
    """A deliberately slow path between "nodes" on one machine.

    A rank's inter-node messages of a phase are paced like a link of ``bytes_per_s``: all but the last
    ``tail_bytes`` of each are posted at once, the tails only when ``inter_node_bytes_out / bytes_per_s``
    has passed since the phase began, so no peer holds the whole message earlier than a process whose
    injection bandwidth is ``bytes_per_s`` could have pushed it into the network (the per-process
    injection limit the paper's LAW-H balances), while the transfer itself overlaps that time as on a
    real link.  Receiving is not limited (RDMA lands in memory without the process), nor are intra-node
    messages, which are never held back.  The bytes themselves travel over gloo/NCCL.
    """

    bytes_per_s: float
    tail_bytes: int = 4096

    def __post_init__(self):
        if not self.bytes_per_s > 0:
            raise ConfigError(f"emulated injection bandwidth must be > 0, got {self.bytes_per_s}")
        if self.tail_bytes < 1:
            raise ConfigError(f"emulated tail must be >= 1 byte, got {self.tail_bytes}")

    def cut(self, nbytes: int) -> int:
        """Where a paced message of ``nbytes`` splits: ``[0, cut)`` goes at once, ``[cut, nbytes)`` after the pacing."""
        return max(0, nbytes - self.tail_bytes)


class ProcessGraph:
    """A distributed process graph, like ``MPI_Dist_graph_create_adjacent``; collective over ``group``.

    Args:
        sources: the ranks (in ``group``) this rank receives from, in the order results come back.
        destinations: the ranks this rank sends to, in the order messages are passed.
        group: the ``torch.distributed`` group (default: the world).
        ranks_per_node: consecutive blocks of this many ranks form a node; ``None``: from the
            launcher (torchrun's ``GROUP_RANK``) or else the host name.
        capacity: this rank's relative injection capacity (LAW-H), default 1.
        algo: ``auto`` (cost model), ``direct``, ``lag-h`` or ``law-h``; a call may override it.
        emulate: slow the inter-node path down (:class:`EmulatedNetwork`); ``None`` for real runs.
        cost_model: the model ``auto`` consults.
        device: where received tensors live (default: the current CUDA device under NCCL, else the CPU).
        min_split_bytes: LAW-H cuts a large message into pieces of at least this many bytes.
        intra_node: transport of messages between ranks of one node, for every algorithm: ``shm``
            (shared-memory outboxes, :mod:`~torchhpc.ext.collectives.shm`), ``group`` (the process
            group's send/recv) or ``auto`` (``shm`` on CPU where all ranks of a node share a host name).
            ``intra_node_transport`` says what runs.
        shm_timeout_s: the longest a rank waits for a node-mate in the shared-memory transport.

    Raises:
        InputError: on every rank, when the neighbour lists disagree (A lists B as a destination
            but B does not list A as a source, or the other way), a rank is out of range or listed
            twice.
        ConfigError: on every rank, for ``intra_node="shm"`` with CUDA tensors or a node spanning hosts.
        DistributedError: a node-mate died or stopped calling (after ``shm_timeout_s``).
    """

    def __init__(self, sources: Sequence[int], destinations: Sequence[int], group=None, *,
                 ranks_per_node: int | None = None, capacity: float = 1.0, algo: str = "auto",
                 emulate: EmulatedNetwork | None = None, cost_model: CostModel | None = None,
                 device: torch.device | str | None = None, min_split_bytes: int = 64 << 10,
                 intra_node: str = INTRA_NODE_DEFAULT, shm_timeout_s: float = SHM_TIMEOUT_S):
        if not dist.is_initialized():
            raise DistributedError("ProcessGraph needs an initialised torch.distributed process group")
        if algo != "auto" and algo not in ALGORITHMS:
            raise ConfigError(f"algo must be auto or one of {', '.join(ALGORITHMS)}; got {algo!r}")
        if intra_node not in INTRA_NODE_CHOICES:
            raise ConfigError(f"intra_node must be one of {', '.join(INTRA_NODE_CHOICES)}; got {intra_node!r}")
        if not shm_timeout_s > 0:
            raise ConfigError(f"shm_timeout_s must be > 0, got {shm_timeout_s}")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.sources = [int(s) for s in sources]
        self.destinations = [int(d) for d in destinations]
        self.algo = algo
        self.emulate = emulate
        if cost_model is None:  # under emulation, auto should know how slow the emulated path is
            cost_model = (CostModel(beta_rank=emulate.bytes_per_s, beta_node=1e15) if emulate is not None
                          else CostModel())
        self.cost_model = cost_model
        if min_split_bytes < 1:
            raise ConfigError(f"min_split_bytes must be >= 1, got {min_split_bytes}")
        self.min_split_bytes = int(min_split_bytes)
        backend = dist.get_backend(group)
        self.device = torch.device(device) if device is not None else (
            torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu"))
        # the one collective of creation: every rank learns every rank's lists and placement
        launcher_node = os.environ.get("GROUP_RANK")
        mine = {"sources": self.sources, "destinations": self.destinations, "capacity": float(capacity),
                "host": socket.gethostname(), "launcher_node": launcher_node, "token": uuid.uuid4().hex[:16]}
        everyone: list = [None] * self.size
        dist.all_gather_object(everyone, mine, group=group)
        _check_graph(everyone, self.size)
        self.src = np.array([r for r, m in enumerate(everyone) for _ in m["destinations"]], dtype=np.int64)
        self.dst = np.array([d for m in everyone for d in m["destinations"]], dtype=np.int64)
        self.capacity = np.array([m["capacity"] for m in everyone], dtype=np.float64)
        self.node = _nodes(everyone, ranks_per_node)
        self.max_out_degree = max(1, max(len(m["destinations"]) for m in everyone))
        # edge ids of this rank's out- and in-edges, in the user's order
        first_out = int(sum(len(m["destinations"]) for m in everyone[: self.rank]))
        self.out_edges = np.arange(first_out, first_out + len(self.destinations))
        key = {(int(s), int(d)): e for e, (s, d) in enumerate(zip(self.src, self.dst, strict=True))}
        self.in_edges = np.array([key[(s, self.rank)] for s in self.sources], dtype=np.int64)
        self._plans: dict[tuple, Plan] = {}
        self.phase_log: list | None = None  # set to a list to record (algo, [seconds per phase]) per call
        self._globals = [dist.get_global_rank(group, r) if group is not None else r for r in range(self.size)]
        self._pending = None  # the asynchronous call in flight, if any
        self._shm = None
        self.intra_node_transport = backend
        self._setup_shm(everyone, intra_node, float(shm_timeout_s))

    def _setup_shm(self, everyone: list[dict], intra_node: str, timeout_s: float) -> None:
        """Decide the intra-node transport (the same on every rank) and set up the shared-memory outboxes."""
        from .shm import NodeShm

        if intra_node == "group":
            return
        nodes = {}
        for r, m in enumerate(everyone):
            nodes.setdefault(int(self.node[r]), set()).add(m["host"])
        split = sorted(n for n, hosts in nodes.items() if len(hosts) > 1)
        if intra_node == "shm" and (self.device.type != "cpu" or split):
            why = f"node {split[0]} spans hosts" if split else f"tensors live on {self.device.type}"
            raise ConfigError(f"intra_node=shm needs every node on one host and CPU tensors, but {why}")
        if self.device.type != "cpu" or split:
            return  # auto: the process group's own transport
        local = [r for r in range(self.size) if self.node[r] == self.node[self.rank]]
        mine = NodeShm(everyone[0]["token"], self.rank, local, timeout_s) if len(local) > 1 else None
        error = ""
        try:
            if mine is not None:
                mine.create()
        except OSError as exc:
            error = f"rank {self.rank}: cannot create its shared-memory segment ({exc})"
        dist.barrier(group=self.group)
        try:
            if mine is not None and not error:
                mine.attach()
        except OSError as exc:
            error = f"rank {self.rank}: cannot map its node-mates' shared-memory segments ({exc})"
        errors: list = [None] * self.size
        dist.all_gather_object(errors, error, group=self.group)
        if mine is not None:
            mine.seal()  # every node-mate has mapped the files: they can go
        first = next((e for e in errors if e), None)
        if first:
            if mine is not None:
                mine.close()
            if intra_node == "shm":
                raise DistributedError(first)
            return
        self._shm = mine  # None on a node of one rank: it has no node-mates
        self.intra_node_transport = "shm"

    def close(self) -> None:
        """Release the shared-memory outboxes (also done when the graph is garbage-collected)."""
        if self._shm is not None:
            self._shm.close()
            self._shm = None

    @property
    def nnodes(self) -> int:
        return int(self.node.max()) + 1

    def plan(self, nbytes: np.ndarray, algo: str | None = None) -> Plan:
        """The routing plan for per-edge byte counts ``nbytes`` (cached)."""
        algo = algo or self.algo
        if algo == "auto":
            auto_key = ("auto", nbytes.tobytes())
            if auto_key not in self._plans:
                self._plans[auto_key] = choose_algorithm(self.src, self.dst, nbytes, self.node, self.cost_model)
            algo = self._plans[auto_key]
        key = (algo, nbytes.tobytes())
        if key not in self._plans:
            if len(self._plans) > 64:
                self._plans.clear()
            self._plans[key] = build_plan(self.src, self.dst, nbytes, self.node, algo, self.capacity,
                                          self.min_split_bytes)
        return self._plans[key]


def _check_graph(everyone: list[dict], size: int) -> None:
    """Raise the same InputError on every rank when the adjacency lists do not describe one graph."""
    for r, m in enumerate(everyone):
        for name in ("sources", "destinations"):
            bad = [x for x in m[name] if not 0 <= x < size]
            if bad:
                raise InputError(f"process graph: rank {r} lists {name[:-1]} {bad[0]}, outside 0..{size - 1}")
            if len(set(m[name])) != len(m[name]):
                dup = next(x for x in m[name] if m[name].count(x) > 1)
                raise InputError(f"process graph: rank {r} lists {name[:-1]} {dup} twice")
    out = {(r, d) for r, m in enumerate(everyone) for d in m["destinations"]}
    inc = {(s, r) for r, m in enumerate(everyone) for s in m["sources"]}
    for s, d in sorted(out - inc):
        raise InputError(f"process graph: rank {s} sends to rank {d}, but rank {d} does not list {s} as a source")
    for s, d in sorted(inc - out):
        raise InputError(f"process graph: rank {d} expects rank {s}, but rank {s} does not list {d} as a destination")


def _nodes(everyone: list[dict], ranks_per_node: int | None) -> np.ndarray:
    size = len(everyone)
    if ranks_per_node is not None:
        if ranks_per_node < 1:
            raise ConfigError(f"ranks_per_node must be >= 1, got {ranks_per_node}")
        return np.arange(size, dtype=np.int64) // ranks_per_node
    keys = [m["launcher_node"] if m["launcher_node"] is not None else m["host"] for m in everyone]
    ids = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    return np.array([ids[k] for k in keys], dtype=np.int64)


# ----------------------------------------------------------------------------- the calls


def _describe(tensors: Sequence[torch.Tensor], graph: ProcessGraph) -> tuple[int, torch.Tensor]:
    """This rank's line of the call check: ``[status, n_tensors, dtype, ndim_F, F..., rows per edge...]``."""
    width = 4 + _MAX_FEAT + graph.max_out_degree
    row = torch.zeros(width, dtype=torch.int64)
    row[1] = min(len(tensors), graph.max_out_degree)
    status = _OK
    if len(tensors) != len(graph.destinations):
        row[1] = len(tensors)
        status = _COUNT
    elif tensors:
        t0 = tensors[0]
        feat = tuple(t0.shape[1:])
        if any(t.dtype != t0.dtype for t in tensors):
            status = _DTYPE
        elif any(tuple(t.shape[1:]) != feat or t.dim() == 0 for t in tensors):
            status = _FEAT
        elif len(feat) > _MAX_FEAT:
            status = _NDIM
        elif any(t.device.type != graph.device.type for t in tensors):
            status = _DEVICE
        else:
            row[2] = _DTYPES.index(t0.dtype) if t0.dtype in _DTYPES else -1
            row[3] = len(feat)
            row[4:4 + len(feat)] = torch.tensor(feat, dtype=torch.int64)
            row[4 + _MAX_FEAT:4 + _MAX_FEAT + len(tensors)] = torch.tensor([t.shape[0] for t in tensors])
    row[0] = status
    return width, row


def _agree(tensors: Sequence[torch.Tensor], graph: ProcessGraph):
    """All-gather every rank's call line; raise the same InputError everywhere on a mismatch."""
    width, row = _describe(tensors, graph)
    if graph.size > 1:
        parts = [torch.zeros(width, dtype=torch.int64, device=graph.device) for _ in range(graph.size)]
        dist.all_gather(parts, row.to(graph.device), group=graph.group)
        table = torch.stack(parts).cpu().numpy()
    else:
        table = row[None].numpy()
    for r in range(graph.size):
        if table[r, 0] != _OK:
            want = int(np.sum(graph.src == r))
            why = _STATUS_TEXT[int(table[r, 0])].format(got=int(table[r, 1]), want=want)
            raise InputError(f"neighbor_alltoallv: rank {r} {why}")
    # ranks with no out-edges say nothing about dtype/shape: compare the ones that sent something
    senders = [r for r in range(graph.size) if table[r, 1] > 0]
    if not senders:
        return None, (), np.zeros(0, np.int64)
    ref = senders[0]
    for r in senders[1:]:
        if table[r, 2] != table[ref, 2]:
            raise InputError(f"neighbor_alltoallv: dtype mismatch: rank {ref} sends {_DTYPES[table[ref, 2]]}, "
                             f"rank {r} sends {_DTYPES[table[r, 2]]}")
        if not np.array_equal(table[r, 3:4 + _MAX_FEAT], table[ref, 3:4 + _MAX_FEAT]):
            raise InputError(f"neighbor_alltoallv: trailing shape mismatch between rank {ref} and rank {r}")
    if table[ref, 2] < 0:
        raise InputError("neighbor_alltoallv: unsupported dtype")
    dtype = _DTYPES[int(table[ref, 2])]
    feat = tuple(int(x) for x in table[ref, 4:4 + int(table[ref, 3])])
    rows = np.concatenate([table[r, 4 + _MAX_FEAT:4 + _MAX_FEAT + int(table[r, 1])] for r in range(graph.size)])
    return dtype, feat, rows.astype(np.int64)


class NeighborWork:
    """The handle of an asynchronous call: the first phase is in flight; :meth:`wait` completes the
    remaining phases and returns the received tensors (in the order of ``sources``)."""

    def __init__(self, steps, graph: ProcessGraph | None = None):
        self._steps = steps
        self._result = None
        next(self._steps)  # post phase 0
        if graph is not None:
            graph._pending = self

    def wait(self) -> list[torch.Tensor]:
        if self._result is None:
            for out in self._steps:
                self._result = out
        return self._result

    def is_completed(self) -> bool:
        return self._result is not None


def neighbor_alltoallv(send: Sequence[torch.Tensor], graph: ProcessGraph, *, algo: str | None = None,
                       async_op: bool = False):
    """``MPI_Neighbor_alltoallv``: send ``send[i]`` to ``graph.destinations[i]``, receive one tensor from
    each of ``graph.sources``.

    Args:
        send: one tensor ``(n_i, *F)`` per destination; the same dtype and ``F`` on every rank.
        graph: the :class:`ProcessGraph` (collective: every rank of its group calls).
        algo: override the graph's algorithm: ``auto``, ``direct``, ``lag-h`` or ``law-h``.
        async_op: return a :class:`NeighborWork` instead of the tensors.

    Returns:
        ``[tensor from sources[j]]``, each ``(m_j, *F)``; a :class:`NeighborWork` with ``async_op``.

    Raises:
        InputError: on every rank, when any rank passes the wrong number of tensors, or the ranks'
            dtypes or trailing shapes differ.
    """
    dtype, feat, rows = _agree(send, graph)
    if dtype is None:  # no rank sends anything
        empty = [torch.empty((0,), device=graph.device) for _ in graph.sources]
        return _Done(empty) if async_op else empty
    itemsize = torch.empty((), dtype=dtype).element_size()
    row_bytes = itemsize * int(np.prod(feat, dtype=np.int64)) if feat else itemsize
    plan = graph.plan(rows * row_bytes, algo)
    _finish_pending(graph)
    steps = _execute(send, graph, plan, dtype, feat, rows)
    if async_op:
        return NeighborWork(steps, graph)
    *_, out = steps  # run every phase; the last step yields the received tensors
    return out


class PersistentNeighborAlltoallv:
    """A persistent ``Neighbor_alltoallv`` (like MPI-4's ``MPI_Neighbor_alltoallv_init``): the message
    shapes are fixed once, checked with one collective, and the routing plan is made once; each
    call then only moves the messages (no size exchange).

    Args:
        send_shapes: one shape ``(n_i, *F)`` per destination, as the later ``send`` tensors will have.
        dtype: their dtype.
        graph: the :class:`ProcessGraph` (collective over its group).
        algo: ``auto``, ``direct``, ``lag-h`` or ``law-h`` (default: the graph's).

    Raises:
        InputError: on every rank, as :func:`neighbor_alltoallv`, at creation.  Later calls check
        the tensors against the fixed shapes on the calling rank only (it raises before communicating,
        and its peers then fail with the graph's timeout), as a persistent MPI request would.
    """

    def __init__(self, send_shapes: Sequence[Sequence[int]], dtype: torch.dtype, graph: ProcessGraph,
                 algo: str | None = None):
        like = [torch.empty((), dtype=dtype, device=graph.device).expand(*shape) for shape in send_shapes]
        self.graph = graph
        self.shapes = [tuple(int(x) for x in shape) for shape in send_shapes]
        self.dtype = dtype
        self.info = _agree(like, graph)
        dtype_all, feat, rows = self.info
        self.plan = None
        if dtype_all is not None:
            itemsize = torch.empty((), dtype=dtype_all).element_size()
            row_bytes = itemsize * int(np.prod(feat, dtype=np.int64)) if feat else itemsize
            self.plan = graph.plan(rows * row_bytes, algo)

    def __call__(self, send: Sequence[torch.Tensor], async_op: bool = False):
        """Send ``send`` (shapes and dtype as fixed at creation); returns the received tensors (or a work)."""
        if len(send) != len(self.shapes) or any(tuple(t.shape) != s or t.dtype != self.dtype
                                                for t, s in zip(send, self.shapes, strict=False)):
            raise InputError(f"persistent neighbor_alltoallv on rank {self.graph.rank}: tensors differ from the "
                             f"shapes/dtype fixed at creation ({self.shapes}, {self.dtype})")
        dtype, feat, rows = self.info
        if self.plan is None:
            empty = [torch.empty((0,), device=self.graph.device) for _ in self.graph.sources]
            return _Done(empty) if async_op else empty
        _finish_pending(self.graph)
        steps = _execute(send, self.graph, self.plan, dtype, feat, rows)
        if async_op:
            return NeighborWork(steps, self.graph)
        *_, out = steps
        return out


def _finish_pending(graph: ProcessGraph) -> None:
    """Complete the graph's asynchronous call still in flight before the next call starts (the
    shared-memory outboxes hold one call at a time)."""
    work, graph._pending = graph._pending, None
    if work is not None and not work.is_completed():
        work.wait()


class _Done(NeighborWork):
    def __init__(self, result):
        self._result = result


def neighbor_allgather(tensor: torch.Tensor, graph: ProcessGraph, *, algo: str | None = None,
                       async_op: bool = False):
    """``MPI_Neighbor_allgather``: send ``tensor`` ``(n, *F)`` to every destination; returns one tensor
    per source (their ``n`` may differ)."""
    return neighbor_alltoallv([tensor] * len(graph.destinations), graph, algo=algo, async_op=async_op)


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8, device=t.device)


_BULK_TAG, _TAIL_TAG = 0, 1


def _p2p(op, buf: torch.Tensor, graph: ProcessGraph, peer: int, paced: EmulatedNetwork | None) -> list:
    """The point-to-point ops moving ``buf`` to/from ``peer``; a paced (emulated inter-node) message is two:
    its bulk and its tail (last in the list), which the sender posts after its injection time."""
    g = graph._globals[peer]
    if paced is None:
        return [dist.P2POp(op, buf, g, group=graph.group)]
    cut = paced.cut(buf.numel())
    bulk = [dist.P2POp(op, buf[:cut], g, group=graph.group, tag=_BULK_TAG)] if cut else []
    return bulk + [dist.P2POp(op, buf[cut:], g, group=graph.group, tag=_TAIL_TAG)]


def _shm_layout(plan: Plan, rank: int, same_node) -> tuple[dict[tuple[int, int], int], int]:
    """Where ``rank`` puts, in its shared-memory outbox, its bytes for each node-mate in each phase:
    ``({(phase, peer): offset}, total bytes)`` (phases in order, peers ascending; empty messages skipped)."""
    key = ("shm", rank)
    if key not in plan._rank_cache:
        offsets, total = {}, 0
        for p, (sends, _) in enumerate(plan.rank_schedule(rank)):
            for peer, ids in sends.items():
                n = int(plan.nbytes[ids].sum())
                if n and same_node(rank, peer):
                    offsets[(p, peer)] = total
                    total += n
        plan._rank_cache[key] = (offsets, total)
    return plan._rank_cache[key]


def _execute(send, graph: ProcessGraph, plan: Plan, dtype, feat, rows):
    """Walk the plan's phases for this rank; yields after posting phase 0, then the result at the end."""
    me = graph.rank
    itemsize = torch.empty((), dtype=dtype).element_size()
    mine = {int(e): _as_bytes(t) for e, t in zip(graph.out_edges, send, strict=True)}
    held: dict[int, torch.Tensor] = {}  # piece id -> its bytes, for the pieces this rank holds now
    for k in np.nonzero(plan.route[:, 0] == me)[0]:
        e, off = int(plan.edge[k]), int(plan.offset[k])
        held[int(k)] = mine[e][off:off + int(plan.nbytes[k])]
    nbytes = plan.nbytes
    schedule = plan.rank_schedule(me)
    node = plan.node
    emulate = graph.emulate
    shm = graph._shm

    def same_node(a, b):
        return node[a] == node[b]

    if shm is not None:  # node-mates' messages go through the shared-memory outboxes
        layouts = {r: _shm_layout(plan, r, same_node) for r in shm.local}
        shm.begin({r: layouts[r][1] for r in shm.local})
    first_write = True
    posted = None
    spent = [0.0] * NPHASES
    for p in range(NPHASES):
        t0 = time.perf_counter()
        sends, recvs = schedule[p]
        ops, inbox, shm_in, tails = [], [], [], []
        for peer, ids in recvs.items():
            total = int(nbytes[ids].sum())
            if total == 0:
                inbox.append((None, ids))
                continue
            if shm is not None and node[peer] == node[me]:
                shm_in.append((peer, ids, total))
                continue
            buf = torch.empty(total, dtype=torch.uint8, device=graph.device)
            paced = emulate if node[peer] != node[me] else None
            *now, last = _p2p(dist.irecv, buf, graph, peer, paced)
            # a paced message's tail is received in the batch its sender sends it in: NCCL ignores tags and runs
            # each batch as one group, so a first batch waiting for tails that come in the second never ends
            ops += now
            (tails if paced is not None else ops).append(last)
            inbox.append((buf, ids))
        inter, shm_out = 0, []
        for peer, ids in sends.items():
            parts = [held.pop(int(e)) for e in ids]
            if int(nbytes[ids].sum()) == 0:
                continue
            if shm is not None and node[peer] == node[me]:
                off = layouts[me][0][(p, peer)]
                for part in parts:
                    shm_out.append((off, part))
                    off += part.numel()
                continue
            buf = torch.cat(parts) if len(parts) > 1 else parts[0]
            paced = emulate if node[peer] != node[me] else None
            *now, tail = _p2p(dist.isend, buf, graph, peer, paced)
            ops += now
            (tails if paced is not None else ops).append(tail)
            if node[peer] != node[me]:
                inter += buf.numel()
        if shm_out:  # node-mates can go on while the process group's messages travel
            shm.send(p, shm_out, first_write)
            first_write = False
        works = dist.batch_isend_irecv(ops) if ops else []
        if tails:  # the emulated injection time of this rank, overlapping the transfer of the bulk
            time.sleep(max(0.0, t0 + inter / emulate.bytes_per_s - time.perf_counter()))
            works = list(works) + list(dist.batch_isend_irecv(tails))
        posted = (works, inbox)
        if p == 0:
            yield None
        for peer, ids, total in shm_in:
            posted[1].append((shm.recv(p, peer, layouts[peer][0][(p, me)], total), ids))
        if shm is not None:
            shm.done(p)
        for w in posted[0]:
            w.wait()
        for buf, ids in posted[1]:
            offsets = np.r_[0, np.cumsum(nbytes[ids])]
            for k, e in enumerate(ids):
                held[int(e)] = (buf[offsets[k]:offsets[k + 1]] if buf is not None
                                else torch.empty(0, dtype=torch.uint8, device=graph.device))
        spent[p] = time.perf_counter() - t0
    if graph.phase_log is not None:
        graph.phase_log.append((plan.algo, spent))
    out = []
    for e in graph.in_edges:
        ids = plan.pieces_of(int(e))
        parts = [held.pop(int(k)) for k in ids]
        if sum(t.numel() for t in parts) == 0:
            out.append(torch.empty((int(rows[e]), *feat), dtype=dtype, device=graph.device))
            continue
        if len(parts) > 1:
            raw = torch.cat(parts)
        else:  # a message to itself is the caller's own tensor: give back a copy
            raw = parts[0].clone() if plan.route[ids[0], 0] == me else parts[0]
        if raw.storage_offset() % itemsize:  # after a piece of odd length in the same buffer
            raw = raw.clone()
        out.append(raw.view(dtype).reshape(int(rows[e]), *feat))
    yield out


__all__ = ["EmulatedNetwork", "NeighborWork", "PersistentNeighborAlltoallv", "ProcessGraph", "neighbor_allgather",
           "neighbor_alltoallv"]

"""Every Triton kernel of the suite, launched through its own launcher, compiled for the H200 (sm_90).

    python tests/triton_kernels/sm90_cases.py OUT.json      (TRITON_INTERPRET must be unset)

Each case calls a launcher with CPU tensors whose sizes hit the specialisations that only bite compiled:
dimensions equal to 1 (Triton makes such an int a constexpr), multiples of 16 (divisibility hints),
odd sizes, both dtypes and every constexpr branch.  Nothing runs: under
:func:`harness.sm90.compiling_for_h200` a launch compiles to PTX and cubin and returns.  The JSON holds,
per case, either the error or each compiled kernel's signature, its constants, the offset types of the
addresses taken from its pointer arguments, whether its PTX has FP64 tensor-core MMAs and what a program
holds on an SM (registers, spills, threads, shared memory: ``ptxas -v``);
``tests/triton_kernels/test_sm90.py`` asserts on it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # before any kernel module is imported
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from harness.sm90 import compiling_for_h200  # noqa: E402


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def foresight_cases():
    from torchhpc.triton_kernels.foresight import lorenzo_quantize_triton

    for shape in [(1, 1, 37), (1, 6, 37), (5, 6, 37), (16, 16, 16), (3, 1, 1)]:
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(shape, generator=_g(1), dtype=dtype)
            yield f"foresight lorenzo {shape} {dtype}", lambda x=x: lorenzo_quantize_triton(x, 1e-3)
    yield from foresight_block_cases()


def foresight_block_cases():
    """The block codec's three kernels on fields with dimensions of 1, a 16-multiple and odd sizes, alone and
    as a batch of all of them, through the payload views they get in use (each region of the payload
    16-byte aligned); scan and pack both fused (Lorenzo) and packing given residuals (interpolation)."""
    from torchhpc.ext.foresight.blocks import Layout
    from torchhpc.triton_kernels.foresight import (
        block_pack_triton,
        block_scan_triton,
        block_table,
        block_unpack_triton,
    )

    shapes = [(1, 1, 37), (1, 6, 37), (16, 16, 16), (3, 1, 1), (5, 6, 37)]
    for dtype in (torch.float32, torch.float64):
        for batch in [[shape] for shape in shapes] + [shapes]:
            xs = [torch.randn(shape, generator=_g(1), dtype=dtype) for shape in batch]
            flat = torch.cat([x.reshape(-1) for x in xs])
            table = block_table(batch, [1e-3] * len(batch), "cpu")
            nb = table.blocks
            lay = Layout(nb, 7 * nb, 2, 3, flat.element_size())
            buf = torch.zeros(lay.starts[-1], dtype=torch.uint8)
            ends = torch.stack([torch.arange(1, nb + 1) * 7, torch.full((nb,), 2), torch.full((nb,), 3)])
            r = torch.zeros(flat.numel(), dtype=torch.int64)
            vflag = torch.zeros(flat.numel(), dtype=torch.bool)
            name = f"{len(batch)} fields" if len(batch) > 1 else str(batch[0])
            for fused in (True, False):
                given = (None, None) if fused else (r, vflag)
                tag = "fused" if fused else "given"
                yield (f"foresight blocks scan {tag} {name} {dtype}",
                       lambda flat=flat, table=table, given=given: block_scan_triton(flat, table, *given))
                yield (f"foresight blocks pack {tag} {name} {dtype}",
                       lambda flat=flat, table=table, lay=lay, buf=buf, ends=ends, given=given:
                       block_pack_triton(flat, table, ends, lay.views(buf, flat.dtype), *given))
            yield (f"foresight blocks unpack {name} {dtype}",
                   lambda flat=flat, lay=lay, buf=buf, ends=ends:
                   block_unpack_triton(lay.views(buf, flat.dtype)[0], ends[0], lay.views(buf, flat.dtype)[1],
                                       flat.numel()))


def segalign_cases():
    from torchhpc.triton_kernels.segalign import xdrop_extend_triton

    table = torch.randint(-100, 100, (11, 11), generator=_g(2), dtype=torch.int32)
    for H in (1, 16, 37):
        for n in (1, 16, 1000):
            t = torch.randint(0, 4, (n,), generator=_g(2), dtype=torch.uint8)
            first = torch.randint(0, n, (H,), generator=_g(3))
            for direction in (1, -1):
                yield (f"segalign xdrop H={H} n={n} dir={direction}",
                       lambda t=t, first=first, direction=direction:
                       xdrop_extend_triton(t, t, first, first, direction, table, 910))
    # the one-launch filter: 1, 16 and 37 diagonals over 1, 16 and 1000 cells, the same compiled kernel
    from torchhpc.triton_kernels.segalign import diagonal_scan_triton

    for D in (1, 16, 37):
        for n in (1, 16, 1000):
            t = torch.randint(0, 4, (n,), generator=_g(2), dtype=torch.uint8)
            ends = torch.randint(0, n, (2 * D,), generator=_g(4))
            start = torch.arange(D) * 2
            yield (f"segalign diagonal D={D} n={n}",
                   lambda t=t, ends=ends, start=start: diagonal_scan_triton(t, t, ends, ends, start, start + 2, table, 910))
    # the gapped stage's Y-drop sweep: 1 and 37 extensions over 1 and 1000 bases, without walls, with walls and
    # with overflow rows (each a constexpr branch), and once with the int64 walls of a target past 2^31 bases
    from torchhpc.triton_kernels.segalign import ydrop_sweep_triton

    scores = torch.randint(-100, 100, (16,), generator=_g(5), dtype=torch.int32)
    for B in (1, 37):
        for n in (1, 1000):
            t = torch.randint(0, 4, (n,), generator=_g(2), dtype=torch.uint8)
            first = torch.randint(0, n, (B,), generator=_g(3))
            dirs = torch.where(torch.arange(B) % 2 == 0, 1, -1)
            lo = torch.randint(-1, n, (n, 1), generator=_g(6), dtype=torch.int32)
            rows = torch.full((n,), -1, dtype=torch.int32)
            rows[: min(n, 3)] = torch.arange(min(n, 3), dtype=torch.int32)
            over = torch.randint(-1, n, (3, 4), generator=_g(7), dtype=torch.int32)
            wide = (lo.long(), lo.long(), rows, over.long(), over.long())  # a target of 2^31 bases or more
            for name, walls in (("none", None), ("walls", (lo, lo, None, lo, lo)), ("rows", (lo, lo, rows, over, over)),
                                *((("wide", wide),) if B == 37 and n == 1000 else ())):
                yield (f"segalign ydrop B={B} n={n} walls={name}",
                       lambda t=t, first=first, dirs=dirs, walls=walls:
                       ydrop_sweep_triton(t, t, first, first, dirs, scores, -100, 400, 30, 9430, walls))


def kraken_cases():
    from torchhpc.triton_kernels import kraken as K

    N, B = 50, 7
    lengths = torch.tensor([0, 3, 1, 5, 2, 0, 4])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    nnz = int(offsets[-1])
    idx = torch.randint(0, N, (nnz,), generator=_g(5))
    seg = torch.repeat_interleave(torch.arange(B), lengths)
    # every size class (1: a constexpr, 16: divisible, 37: neither) and dtype with the plain branches, and
    # every constexpr branch (mean, per-sample weights, atomic rows) on one of them
    plain = [(D, dtype, False, False) for D, dtype in ((1, torch.float32), (16, torch.float32),
                                                      (37, torch.float32), (37, torch.float64))]
    branches = [(37, torch.float32, mean, psw) for mean in (False, True) for psw in (False, True)]
    for D, dtype, mean, weighted in plain + branches:
        w = torch.randn(N, D, generator=_g(4), dtype=dtype)
        p = torch.rand(nnz, generator=_g(6), dtype=dtype) if weighted else None
        go = torch.randn(B, D, generator=_g(7), dtype=dtype)
        tag = f"D={D} {dtype} mean={mean} psw={weighted}"
        yield f"kraken bag_forward {tag}", lambda w=w, m=mean, p=p: K.bag_forward(w, idx, offsets, m, p)
        for num_rows in (None, N):
            yield f"kraken bag_backward_rows rows={num_rows} {tag}", \
                lambda go=go, m=mean, p=p, r=num_rows: K.bag_backward_rows(go, idx, seg, offsets, m, p, r)
        yield f"kraken bag_backward_psw {tag}", \
            lambda go=go, w=w, m=mean, dt=dtype: K.bag_backward_psw(go, w, idx, seg, offsets, m, dt)
    rows = torch.tensor([1, 4, 9])
    for D, dtype in ((1, torch.float32), (37, torch.float32), (37, torch.float64)):
        w = torch.randn(N, D, generator=_g(4), dtype=dtype)
        grads = torch.randn(3, D, generator=_g(8), dtype=dtype)
        for kind in (K.OPT_SGD, K.OPT_ROWWISE_ADAGRAD, K.OPT_ROWWISE_ADAM, K.OPT_ADAM):
            m = torch.zeros(N, D, dtype=dtype)
            v = torch.zeros(N, D, dtype=dtype) if kind == K.OPT_ADAM else torch.zeros(N, dtype=dtype)
            yield f"kraken sparse_row_update kind={kind} D={D} {dtype}", \
                lambda kind=kind, w=w, grads=grads, m=m, v=v: \
                K.sparse_row_update(kind, w.clone(), rows, grads, m, v, 0.1, step=3)
    # the table-batched kernels: fp32 stores, rows of -1 read zeros
    R = 40
    store_rows = torch.tensor([3, -1, 7, 3, 12, -1, 39, 0])
    bags = torch.tensor([0, 2, 2, 5, 8])
    for D in (1, 16, 37):
        w32, v32 = torch.randn(R, D, generator=_g(9)), torch.zeros(R)
        go = torch.randn(4, D, generator=_g(10))
        for mean in (False, True):
            yield f"kraken tbe_pool D={D} mean={mean}", lambda w=w32, m=mean: K.tbe_pool(w, store_rows, bags, m)
            yield f"kraken tbe_backward D={D} mean={mean}", \
                lambda go=go, w=w32, v=v32, m=mean: \
                K.tbe_backward_rowwise_adagrad(go, w.clone(), v.clone(), store_rows, bags, 0.1, 1e-8, m)


def ccsdt_cases():
    from torchhpc.ext.ccsdt.blocks import InCoreOperands
    from torchhpc.triton_kernels.ccsdt import (
        epilogue_partials,
        triples_energy_mma_partials,
        triples_energy_partials,
        virtual_tile_triples,
    )

    for o, v in ((1, 1), (3, 5), (4, 16)):
        f64 = {"dtype": torch.float64, "generator": _g(o * 100 + v)}
        t1, fock_ov = torch.randn(o, v, **f64), torch.randn(o, v, **f64)
        t2, ovov = torch.randn(o, o, v, v, **f64), torch.randn(o, v, o, v, **f64)
        ovvv, ovoo = torch.randn(o, v, v, v, **f64), torch.randn(o, v, o, o, **f64)
        mo_energy = torch.cat([-1 - torch.rand(o, **f64), 1 + torch.rand(v, **f64)])
        idx = torch.tensor([(i, j, k) for i in range(o) for j in range(i + 1) for k in range(j + 1)])
        wgt = torch.ones(idx.shape[0], dtype=torch.float64)
        for tile in (1, 8) if (o, v) == (3, 5) else (8,):  # each compile of this kernel takes ~6 s here
            yield f"ccsdt triples o={o} v={v} tile={tile}", \
                lambda a=(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, idx, wgt), tile=tile: \
                triples_energy_partials(*a, tile=tile)
        layouts = [torch.randn(idx.shape[0], v, v, v, **f64) for _ in range(3)]
        vt_idx, vt_w = virtual_tile_triples(v, 8)
        yield f"ccsdt epilogue o={o} v={v}", \
            lambda a=(*layouts, t1, t2, ovov, fock_ov, mo_energy[:o], mo_energy[o:], idx, wgt, vt_idx, vt_w): \
            epilogue_partials(*a, tile=8)
        if (o, v) == (3, 5):  # the triple blocks' layouts: views L[:, t] of one (nb, 3, v, v, v) buffer
            L = torch.randn(idx.shape[0], 3, v, v, v, **f64)
            yield f"ccsdt strided epilogue o={o} v={v}", \
                lambda a=(L[:, 0], L[:, 1], L[:, 2], t1, t2, ovov, fock_ov, mo_energy[:o], mo_energy[o:], idx, wgt,
                          vt_idx, vt_w): epilogue_partials(*a, tile=8)
        X = InCoreOperands(t1, t2, ovvv, ovoo, ovov, fock_ov)
        yield f"ccsdt mma o={o} v={v}", \
            lambda a=(X.TT, X.AT, X.BT, t1, t2, ovov, fock_ov, mo_energy, idx, wgt): triples_energy_mma_partials(*a)


def sched_cases():
    """The batched simulator's decision kernel, every backfilling mode, over 1 and 37 windows of 1, 16 and 37
    jobs, with the fewest processors a job asks for at 1 and 3 (all runtime values: one compile per mode)."""
    from torchhpc.triton_kernels.sched import MODES, schedule_windows_triton

    n = 200
    submit = torch.randint(0, 1000, (n,), generator=_g(8)).sort().values
    run, req, procs = (torch.randint(1, 60, (n,), generator=_g(9 + i)) for i in range(3))
    for B in (1, 37):
        for L in (1, 16, 37):
            zeros = torch.zeros(B, dtype=torch.int64)
            state = {"first": torch.arange(B) * 3, "now": zeros.clone(), "free": zeros + 64, "nxt": zeros + 1,
                     "qlen": zeros + 1, "qlo": zeros.clone(), "rcnt": zeros.clone(),
                     "done": torch.zeros(B, dtype=torch.bool), "queued": torch.zeros(B, L, dtype=torch.bool),
                     "start_time": torch.full((B, L), -1), "rjob": torch.zeros(B, L, dtype=torch.int64)}
            for mode in MODES:
                for min_procs in (1, 3):
                    yield (f"sched windows B={B} L={L} {mode} min_procs={min_procs}",
                           lambda state=state, mode=mode, min_procs=min_procs, zeros=zeros:
                           schedule_windows_triton(zeros, mode, min_procs, state, (submit, run, req, procs)))


CASES = [foresight_cases, segalign_cases, kraken_cases, ccsdt_cases, sched_cases]


def main(out: str) -> int:
    report = []
    usage: dict[str, dict] = {}  # ptxas -v once per distinct PTX
    with compiling_for_h200() as compiled:
        for family in CASES:
            for name, call in family():
                before = len(compiled)
                row = {"case": name, "error": None, "kernels": []}
                try:
                    call()
                except Exception as exc:  # noqa: BLE001 - the test reports which case failed and why
                    row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                for c in compiled[before:]:
                    row["kernels"].append({"kernel": c.kernel, "signature": c.signature,
                                           "constants": {k: repr(v) for k, v in c.constants.items()},
                                           "base_offsets": c.base_offsets(), "fp64_mma": c.fp64_mma(), "fused_fp": c.fused_fp(),
                                           "cubin_bytes": c.cubin_bytes,
                                           "resources": usage[c.ptx] if c.ptx in usage else usage.setdefault(c.ptx, c.resources())})
                report.append(row)
    Path(out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

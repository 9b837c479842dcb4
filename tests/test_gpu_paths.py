"""Each GPU path equals its CPU path on a CUDA device (``gpu``-marked: skipped without one).

The kernels' own compiled tests are in ``tests/triton_kernels`` (segalign's filter on a real pair,
ccsdt's fused kernel, kraken's table-batched step); these cover the paths built from them: foresight's
codec (a field compressed on the GPU is the CPU's block payload byte for byte, and either codec decodes on
either device to the same values, and the CPU's codec writes the same bytes on the GPU; nvCOMP's frames
decode on the host), pliner's graph engine on CUDA (autocast's dtypes, factory ops on the GPU), gems' event clock
and sched's batched simulator (its Triton and torch paths on CUDA make the compiled CPU path's decisions).
``make gpu-check`` runs them on a GPU machine.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("shape", [(40, 33, 17), (1, 50, 61), (777,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_foresight_codec_on_cuda_equals_the_cpu(shape, dtype):
    from torchhpc.ext.foresight.compressors import OursCompressor

    gen = torch.Generator().manual_seed(7)
    x = torch.randn(shape, generator=gen, dtype=torch.float64).cumsum(-1).to(dtype)
    x.view(-1)[5] = float("inf")  # one outlier
    comp = OursCompressor()
    on_gpu = comp.compress(x.cuda(), mode="abs", bound=1e-3)
    assert on_gpu.meta["codec"] == "blocks"  # auto: the device codec on CUDA
    on_cpu = comp.compress(x, mode="abs", bound=1e-3, codec="blocks")
    assert on_gpu.payload == on_cpu.payload  # one format, whichever device wrote it
    planes = comp.compress(x, mode="abs", bound=1e-3)  # the CPU's own codec
    assert planes.meta["codec"] == "planes"
    # the CPU codec on the GPU: the predictor's choice is integer arithmetic, so the same choice and bytes
    assert comp.compress(x.cuda(), mode="abs", bound=1e-3, codec="planes").payload == planes.payload
    ys = []
    for c in (on_gpu, planes):
        for device in ("cpu", "cuda"):
            y = comp.decompress(c, device)
            assert y.device.type == device and y.dtype == dtype and tuple(y.shape) == shape
            ys.append(y.cpu())
    assert all(torch.equal(y, ys[0]) for y in ys)  # both codecs, both devices: the same values
    assert float((ys[0].double() - x.double()).abs().nan_to_num(0.0).max()) <= 1e-3


@pytest.mark.parametrize("eb", [1e-3, 1e-2, 2.5e-3])
def test_foresight_kernels_round_as_the_cpu_on_ties(eb):
    """Values at exactly -e and +e (a tie of x / 2e + 1/2) and a float64 field on a decimal grid (values whose
    code decodes one ulp off the bound must be outliers): the GPU's Lorenzo blocks are the CPU's bytes, and
    every value decodes within e.  (Compiled with fused multiply-adds, -e got code -1 and hundreds of the grid's
    outliers were dropped.)"""
    from torchhpc.ext.foresight.blocks import blocks_decode, blocks_encode

    gen = torch.Generator().manual_seed(3)
    grid = (torch.randint(-5000, 5000, (2000,), generator=gen).double() / 1000).reshape(10, 200)
    ties = torch.tensor([-eb, eb, -3 * eb, 0.0, 5 * eb] * 40, dtype=torch.float64)
    for x in (grid, ties, ties.float()):
        cpu, meta = blocks_encode(x, eb, backend="torch", predictor="lorenzo")
        gpu, _ = blocks_encode(x.cuda(), eb, backend="triton", predictor="lorenzo")
        assert gpu == cpu
        y = blocks_decode(cpu, meta, tuple(x.shape), x.dtype, eb, "cpu")
        assert float((y.double() - x.double()).abs().max()) <= eb


def test_foresight_batch_on_cuda_equals_each_field_on_the_cpu():
    from torchhpc.ext.foresight.compressors import OursCompressor

    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(shape, generator=gen).cumsum(-1) for shape in [(7, 1, 40), (33,), (16, 16, 16), (2, 3, 5)]]
    comp = OursCompressor()
    on_gpu = comp.compress_many([x.cuda() for x in xs], mode="rel", bound=1e-3)
    for x, c in zip(xs, on_gpu, strict=True):
        alone = comp.compress(x, mode="rel", bound=1e-3, codec="blocks")
        assert c.payload == alone.payload and c.meta == alone.meta
        assert torch.equal(comp.decompress(c, "cuda").cpu(), comp.decompress(alone, "cpu"))


def test_foresight_nvcomp_frames_decode_on_the_host_to_the_host_stages_values():
    """entropy=nvcomp (where nvCOMP is installed): a batch of fields, one of them over several 64 KiB frames,
    each written as nvCOMP's zstd frames on the device; each decodes on the CPU, with zstandard alone, to
    the values of the host stage's file, and its header says which stage ran."""
    pytest.importorskip("nvidia.nvcomp", reason="nvCOMP not installed (pip install 'torchhpc[nvcomp]')")
    from torchhpc.ext.foresight.compressors import OursCompressor

    gen = torch.Generator().manual_seed(5)
    xs = [torch.randn(shape, generator=gen).cumsum(-1) for shape in [(64, 64, 64), (1, 9, 40), (777,)]]
    comp = OursCompressor()
    device = comp.compress_many([x.cuda() for x in xs], mode="rel", bound=1e-4, entropy="nvcomp")
    for x, c in zip(xs, device, strict=True):
        host = comp.compress(x, mode="rel", bound=1e-4, codec="blocks")
        assert c.meta["stages"][-1] == "nvcomp-zstd" and c.meta["chunk"] == 1 << 16 and "sum32" in c.meta
        assert torch.equal(comp.decompress(c, "cpu"), comp.decompress(host, "cpu"))
    one = comp.compress(xs[0].cuda(), mode="rel", bound=1e-4, entropy="nvcomp")
    assert torch.equal(comp.decompress(one, "cuda").cpu(), comp.decompress(device[0], "cpu"))


@pytest.mark.parametrize("backend", ["triton", "torch"])
@pytest.mark.parametrize("backfill", ["none", "rlscheduler", "easy"])
def test_sched_batched_simulator_on_cuda_equals_the_compiled_cpu_path(backfill, backend):
    from torchhpc.ext.sched.batched import BatchedClusterSimulator
    from torchhpc.ext.sched.lublin import generate_lublin

    trace = generate_lublin(600, seed=2).for_scheduling()
    starts, length = [0, 40, 90, 160, 333], 128
    cpu = BatchedClusterSimulator(trace, backfill)
    gpu = BatchedClusterSimulator(trace, backfill, device="cuda", backend=backend)
    assert BatchedClusterSimulator(trace, backfill, device="cuda").backend == "triton"  # the default on CUDA
    cpu.reset(starts, length)
    gpu.reset(starts, length)
    gen = torch.Generator().manual_seed(5)
    while not bool(cpu.done.all()):
        jobs = cpu.random_valid(gen)
        cpu.schedule(jobs)
        gpu.schedule(jobs.cuda())
        assert torch.equal(cpu.start_time, gpu.start_time.cpu())
        assert torch.equal(cpu.done, gpu.done.cpu())
        assert torch.equal(cpu.running, gpu.running.cpu())
    for name, values in cpu.metrics().items():
        np.testing.assert_allclose(np.asarray(gpu.metrics()[name].cpu()), np.asarray(values), rtol=1e-12)


class _CausalScores(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        t = x.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()  # a factory op in the captured graph
        return (self.lin(x) @ x.transpose(1, 2)).masked_fill(~mask, -1e4).softmax(-1)


def test_pliner_on_cuda_casts_back_to_cuda_autocast_dtypes_and_builds_tensors_there():
    """pliner's graph engine on a CUDA problem: the cast-back dtypes are CUDA autocast's (log_softmax stays
    float32 there, bf16 under the CPU's), so enhancing everything fixes the model; a mask built on the input's
    device is built on the GPU; a model built on the GPU runs the CPU reference."""
    from torchhpc.ext.pliner import GraphProgram, find, parse_precision

    torch.manual_seed(0)
    clf = torch.nn.Sequential(torch.nn.Linear(16, 10), torch.nn.LogSoftmax(-1)).eval()
    x = torch.randn(8, 16)
    prog = GraphProgram(clf, (x,), parse_precision("cuda+autocast-bf16"))
    dtypes = prog.plain_dtypes()
    soft = [n.name for n in prog.gm.graph.nodes if "log_softmax" in str(n.target)]
    assert soft and all(dtypes[n] == torch.float32 for n in soft)
    res = find(clf, x, problem="cuda+autocast-bf16")
    assert res.status in ("found", "no_divergence")
    assert res.error_all is None or res.error_all <= res.tol
    on_gpu = find(clf.cuda(), x, reference="fp32", problem="cuda+autocast-bf16")
    assert on_gpu.status == res.status and on_gpu.error_before == pytest.approx(res.error_before, rel=1e-9)
    causal = find(_CausalScores().eval(), torch.randn(2, 8, 16), problem="cuda+autocast-bf16", tol=1e-6)
    assert causal.engine == "graph" and causal.status != "not_fixable"


def test_gems_events_on_cuda_end_when_the_device_has_finished(monkeypatch):
    """On CUDA every edge of gems' events is read after a synchronize (two an action: its start and its end), so
    the timeline, the summary's update times and the simulator's calibration see kernels' time, not launches'."""
    from torchhpc.ext.gems.data import SyntheticImages
    from torchhpc.ext.gems.modules import build_blocks
    from torchhpc.ext.gems.runtime import PipelineEngine

    calls = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device) or real(device))
    blocks = build_blocks("resnet_v2", depth=11, width=4, in_shape=(3, 8, 8), num_classes=5)
    engine = PipelineEngine(blocks, [(0, len(blocks))], "mast", (3, 8, 8), 4, 2, device="cuda",
                            optimizer=lambda ps: torch.optim.SGD(ps, lr=0.05))
    calls.clear()
    engine.train_step(SyntheticImages((3, 8, 8), 5, seed=1), 0)
    assert len(calls) >= 1 + 2 * len(engine.events)  # the update's origin, then two edges an event


def test_collectives_halo_spmm_on_an_nccl_group(tmp_path):
    """HaloSpMM on an NCCL group (one rank here): its set-up's index work stays on the host, the local matrix
    and the row lists go to the graph's device, and the product is A @ X on the GPU (before, `cols.numpy()`
    and a CPU matrix met CUDA tensors)."""
    import torch.distributed as dist

    from torchhpc.ext.collectives.apps import HaloSpMM, block_bounds

    dist.init_process_group("nccl", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    try:
        gen = torch.Generator().manual_seed(4)
        a = torch.randn(30, 30, generator=gen, dtype=torch.float64).relu()
        x = torch.randn(30, 4, generator=gen, dtype=torch.float64)
        op = HaloSpMM(a.to_sparse(), block_bounds(30, 1))
        y = op(x.cuda())
        assert y.device.type == "cuda"
        torch.testing.assert_close(y.cpu(), a @ x, rtol=1e-12, atol=1e-12)
    finally:
        dist.destroy_process_group()

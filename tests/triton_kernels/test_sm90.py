"""Every Triton kernel compiles for the H200 (sm_90) through its own launcher, on this CPU machine.

One child process (``sm90_cases.py``, ``TRITON_INTERPRET`` unset) runs every launcher under a stand-in
driver whose target is sm_90, so each launch compiles to PTX and a cubin with the argument values and
specialisations it would get on the GPU.  These tests then check what only shows compiled:

* nothing fails to compile (an int argument equal to 1 becomes a constexpr: foresight's kernel failed
  on every 1-D and 2-D field);
* every address taken from a pointer argument is computed in 64 bits (an ``i32`` offset wraps at 2^31
  elements: ``bag * stride`` of a large batch, ``m * o * v * v`` of a large molecule), except into the
  fixed tables listed in :data:`BOUNDED`;
* sizes that change from call to call are runtime arguments, not specialisations, so a long run compiles
  each kernel once (segalign's hit count, foresight's shape, kraken's value count);
* scalars that must stay fp64 reach the kernel as fp64 (a Python float arrives as fp32);
* each program fits an SM (registers x threads, shared memory) and spills no more than its budget
  (``ptxas -v``: a spill is a local-memory round trip in the kernel's loop).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

HERE = Path(__file__).resolve().parent

#: bytes per thread a kernel may spill to local memory (the larger of ptxas's spill stores and loads, over all
#: its cases), where its registers do not suffice; every kernel not named spills nothing. Spilled values live
#: in local memory (L1, then L2): each is a memory round trip inside the kernel's hottest loop.
SPILL_BUDGET = {
    "_triples_energy_kernel": 140,  # 0 at tile 8 with o, v > 1 (a real run); 140 at o = v = 1, 68 at tile 1
    "_epilogue_kernel": 40,  # 504 at 4 warps, its default before
    "_triples_mma_kernel": 620,  # tile 8 at 8 warps; tile 16 spills ~19 kB (not the default)
    # the overflow-rows branch only (rare: a wall row past the preallocated ones): 20 bytes with int32 walls,
    # 36 with the int64 walls of a target of 2^31 bases or more
    "_ydrop_kernel": 36,
}
#: one Hopper SM (H100, H200): registers, and the shared memory one program may ask for
SM90_REGISTERS = 65536
SM90_SHARED_PER_BLOCK = 227 * 1024

#: pointer arguments that may be indexed with 32-bit offsets: tables of a fixed, small size
BOUNDED = {("_xdrop_extend_kernel", "table_ptr"): "the 11 x 11 substitution table",
           ("_diagonal_scan_kernel", "table_ptr"): "the 11 x 11 substitution table",
           ("_ydrop_kernel", "sc_ptr"): "the 16 nucleotide scores"}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("sm90") / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, str(HERE / "sm90_cases.py"), str(out)], capture_output=True, text=True,
                         env=env, timeout=900, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(out.read_text())


def _kernels(report: list[dict], prefix: str = "") -> list[tuple[str, dict]]:
    return [(row["case"], k) for row in report if row["case"].startswith(prefix) for k in row["kernels"]]


def test_every_launcher_compiles_for_sm90(report):
    """Every case of every kernel compiles to PTX and a cubin for sm_90; each system has cases."""
    failed = [(row["case"], row["error"]) for row in report if row["error"]]
    assert not failed, failed[:5]
    assert all(row["kernels"] and all(k["cubin_bytes"] > 0 for k in row["kernels"]) for row in report)
    names = {k["kernel"] for _, k in _kernels(report)}
    assert {"_lorenzo_quantize_kernel", "_xdrop_extend_kernel", "_bag_forward_kernel", "_bag_backward_rows_kernel",
            "_bag_backward_psw_kernel", "_sparse_row_update_kernel", "_tbe_pool_kernel",
            "_tbe_backward_rowwise_adagrad_kernel", "_triples_energy_kernel", "_epilogue_kernel",
            "_block_scan_kernel", "_block_pack_kernel", "_block_unpack_kernel", "_diagonal_scan_kernel",
            "_ydrop_kernel", "_check_jobs_kernel", "_schedule_windows_kernel"} <= names


def test_addresses_from_pointer_arguments_are_64_bit(report):
    """No kernel computes an address from one of its pointer arguments with a 32-bit offset, except into
    the fixed-size tables of BOUNDED."""
    narrow = sorted({(k["kernel"], arg) for _, k in _kernels(report) for arg, ty in k["base_offsets"]
                     if ty != "i64"} - set(BOUNDED))
    assert not narrow, narrow
    assert all(any(arg for arg, _ in k["base_offsets"]) for _, k in _kernels(report))  # the check saw addresses


def test_sizes_that_change_per_call_compile_once(report):
    """Sizes are runtime values, so one compiled variant serves every size: segalign compiles once per
    direction over hit counts 1, 16 and 37 and sequences of 1 to 1000 cells; foresight's kernels once per dtype
    over shapes with dimensions of 1, 3, 5, 6, 16 and 37 and batches of 1 and 5 fields (the block codec's
    unpacking once); ccsdt's epilogue and MMA kernel once each over o and v of 1, 3-5 and 16; the Y-drop sweep once per walls branch
    over 1 and 37 extensions of 1 and 1000 bases, and once with int64 walls; sched's decision kernel once per backfilling mode over 1 and 37
    windows of 1 to 37 jobs."""
    def variants(prefix):
        return {json.dumps([k["signature"], k["constants"]], sort_keys=True) for _, k in _kernels(report, prefix)}

    assert len(variants("segalign xdrop")) == 2  # DIRECTION = +1 and -1
    assert len(variants("segalign diagonal")) == 1  # 1 to 37 diagonals, 1 to 1000 cells
    # no walls, walls, overflow rows (1 or 37 extensions, 1-1000 bases), and int64 walls (a target past 2^31 bases)
    assert len(variants("segalign ydrop")) == 4
    assert len(variants("sched windows")) == 4  # the check, and one windows kernel per backfilling mode
    assert len(variants("foresight lorenzo")) == 2  # float32 and float64 input
    for kernel, count in (("scan fused", 2), ("scan given", 2), ("pack fused", 2), ("pack given", 2), ("unpack", 1)):
        assert len(variants(f"foresight blocks {kernel}")) == count
    for _, k in _kernels(report, "segalign"):
        if k["kernel"] == "_ydrop_kernel":
            assert all(k["signature"][n] == "i32" for n in ("n_t", "n_q", "n_ocols", "tb_cap", "d_cap"))
            continue
        count = "D" if k["kernel"] == "_diagonal_scan_kernel" else "H"
        assert (k["signature"][count], k["signature"]["nt"], k["signature"]["nq"]) == ("i32", "i32", "i32")
    for _, k in _kernels(report, "foresight"):
        sizes = {"_block_unpack_kernel": ("total", "NB"), "_block_scan_kernel": ("F", "NB"),
                 "_block_pack_kernel": ("F", "NB")}.get(k["kernel"], ("N0", "N1", "N2"))
        assert all(k["signature"][n] == "i32" for n in sizes)
    for kernel in ("ccsdt epilogue", "ccsdt mma"):
        compiled = {json.dumps([k["signature"], k["constants"]], sort_keys=True) for _, k in _kernels(report, kernel)}
        assert len(compiled) == 1, kernel  # o = 1, 3, 4 and v = 1, 5, 16: one compiled kernel
    backward = {json.dumps([k["signature"], k["constants"]], sort_keys=True) for _, k in _kernels(report)
                if k["kernel"] == "_bag_backward_rows_kernel"}
    assert all(json.loads(v)[0]["nnz"] == "i32" for v in backward)


def test_fp64_scalars_reach_the_kernel_as_fp64(report):
    """foresight's 1 / (2 e) is read as fp64 in the kernel (as a Python float it was an fp32 argument, and
    the codes could differ from the torch twin's by one near a rounding boundary)."""
    sigs = [k["signature"] for _, k in _kernels(report, "foresight")]
    assert sigs and all(s.get("inv2e_ptr", s.get("eb_ptr")) == "*fp64" for s in sigs if "x_ptr" in s)
    given = [s for s in sigs if "vflag_ptr" in s and s["r_ptr"] == "*i64"]  # the interpolation's residuals
    assert given and all(s["vflag_ptr"] == "*u8" for s in given)
    assert all(ty != "fp32" for s in sigs for ty in s.values())


def test_foresight_kernels_round_as_the_torch_twin(report):
    """foresight's codes and outlier flags are compared exactly with the CPU's (one format on both devices,
    every value within the bound), so its kernels compile without fused multiply-adds: contracted, ``x / 2e +
    1/2`` rounds once and a value at exactly -e gets code -1 instead of 0, and the decoder's ``q * 2e - x`` is
    checked unrounded, keeping values that decode one ulp off the bound.  Other kernels fuse (ccsdt's do)."""
    kernels = _kernels(report, "foresight")
    assert kernels and all(k["fused_fp"] == 0 for _, k in kernels), sorted({k["kernel"] for _, k in kernels
                                                                            if k["fused_fp"]})
    assert any(k["fused_fp"] > 0 for _, k in _kernels(report, "ccsdt"))  # the check sees fused ones


def test_ccsdt_mma_kernel_runs_on_the_fp64_tensor_cores(report):
    """The fused (T) kernel built on tl.dot compiles its FP64 dots to tensor-core MMAs (mma.sync ... .f64 in
    the PTX) at every size, where the CUDA-core kernel and the epilogue have none."""
    mma = _kernels(report, "ccsdt mma")
    assert len(mma) == 3 and all(k["fp64_mma"] for _, k in mma)
    assert not any(k["fp64_mma"] for _, k in _kernels(report, "ccsdt triples") + _kernels(report, "ccsdt epilogue"))


def test_every_program_fits_an_sm90_sm_and_spills_within_budget(report):
    """Every compiled kernel launches on an H100/H200 (its registers for all its threads and its shared memory
    fit one SM) and spills no more bytes per thread than SPILL_BUDGET allows (0 for kernels not named). The
    ccsdt kernels run at 8 warps: at 4 the CUDA-core kernel spilled 320 bytes and the epilogue 504."""
    kernels = _kernels(report)
    assert kernels and all("resources" in k for _, k in kernels)
    too_big = [(case, k["kernel"], k["resources"]) for case, k in kernels
               if k["resources"]["registers"] * k["resources"]["threads"] > SM90_REGISTERS
               or k["resources"]["shared_bytes"] > SM90_SHARED_PER_BLOCK]
    assert not too_big, too_big[:3]
    spills: dict[str, int] = {}
    for _, k in kernels:
        r = k["resources"]
        spills[k["kernel"]] = max(spills.get(k["kernel"], 0), r["spill_stores"], r["spill_loads"])
    over = {name: b for name, b in spills.items() if b > SPILL_BUDGET.get(name, 0)}
    assert not over, over
    # a budget that is no longer used is lowered, not kept as headroom
    assert all(spills.get(name, 0) == budget for name, budget in SPILL_BUDGET.items()), spills
    tile8 = [k["resources"] for case, k in kernels if case.startswith("ccsdt triples o=4 v=16 tile=8")]
    assert tile8 and all(r["spill_stores"] == r["spill_loads"] == 0 and r["threads"] == 256 for r in tile8)

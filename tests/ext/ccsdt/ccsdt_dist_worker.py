"""torchrun worker of the distributed (T) tests: the same inputs through every distributed entry.

    torchrun --standalone --nproc-per-node P ccsdt_dist_worker.py OUT.json WATER.npz

Rank 0 writes ``OUT.json``: for each case the energy every rank got and the run's summary —
``library`` (``triples_energy(..., group=)`` on the saved molecule), ``tight`` (the same with a
``max_memory`` that leaves a cache of three slices), ``owned`` (random inputs, each rank passing
only the integral slices it owns) and ``cli`` (``torchrun -m torchhpc.trainers.ccsdt --inputs ... --json``).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

import torch
import torch.distributed as dist

from torchhpc.ext.ccsdt import load_inputs, triples_energy
from torchhpc.ext.ccsdt.distributed import owner, triples_energy_distributed
from torchhpc.ext.ccsdt.reference import random_inputs
from torchhpc.ext.core.distributed import distributed
from torchhpc.trainers.ccsdt import main

#: a budget that holds three cached slices of water/cc-pVDZ (o=5, v=19) and one triple's buffers
TIGHT_MB = 0.75


def _all_energies(e: float) -> list[float]:
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, e)
    return out


def run(out_path: str, npz: str) -> None:
    cases = {}
    with distributed(device="cpu", timeout_s=60) as ctx:
        arrays = load_inputs(npz).arrays()
        details: dict = {}
        e = triples_energy(*arrays, group=dist.group.WORLD, details=details)
        cases["library"] = {"energies": _all_energies(e), "mode": details["mode"],
                            "hit_rate": details["stats"].hit_rate}
        r = triples_energy_distributed(*arrays, max_memory=TIGHT_MB)
        cases["tight"] = {"energies": _all_energies(r.energy), **r.summary(), "capacity": r.stats.capacity}
        t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy = random_inputs(7, 9, seed=4)
        mine = {x: ovvv[x] for x in range(7) if owner(x, ctx.world_size) == ctx.rank}
        r = triples_energy_distributed(t1, t2, mine, ovoo, ovov, fock_ov, mo_energy)
        cases["owned"] = {"energies": _all_energies(r.energy), **r.summary()}
        # last: the job finds the group initialised, uses it and tears it down (a second init of the default
        # group in one torchrun process can collide with the first one's keys in the agent's store)
        buf, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            rc = main(["--inputs", npz, "--json", "--threads", "1"])
        if rc != 0:
            raise SystemExit(f"rank {ctx.rank}: the CLI failed: {err.getvalue()}")
    if ctx.rank == 0:
        cases["cli"] = {"rc": rc, **json.loads(buf.getvalue())}
        with open(out_path, "w") as fh:
            json.dump(cases, fh)
    torch.set_num_threads(1)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])

"""torchrun worker of the exactness tests: trains each requested schedule and saves what it saw.

    torchrun --standalone --nproc-per-node W exact_worker.py OUT_DIR SPEC [SPEC ...]
    SPEC = name:model:schedule:P:D:M:eta:ckpt  e.g. mast_resnet:resnet:mast:2:1:2:1:0

Each rank writes OUT_DIR/<name>.rank<R>.pt with the loss trajectory, the gradients of
the first update and the final weights of every stage copy it holds.  ``hang`` as the
schedule makes rank 1 hang mid-run (alive, never sending again) with a timeout of HANG_TIMEOUT_S:
the failure test, where only that timeout can end the job.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from torchhpc.ext.core.distributed import distributed
from torchhpc.ext.gems.data import SyntheticImages
from torchhpc.ext.gems.modules import build_blocks
from torchhpc.ext.gems.partition import balanced_bounds
from torchhpc.ext.gems.runtime import PipelineEngine

SHAPE = (3, 8, 8)
STEPS = 3
BATCH = 4  # per replica and repetition
HANG_TIMEOUT_S = 5


def make_blocks(model: str):
    if model == "resnet":
        return build_blocks("resnet_v2", depth=11, width=4, in_shape=SHAPE, num_classes=5, norm="group", seed=0)
    return build_blocks("mlp", depth=3, width=16, in_shape=SHAPE, num_classes=5, seed=0)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)


def main() -> None:
    torch.set_num_threads(1)
    out_dir = sys.argv[1]
    timeout_s = HANG_TIMEOUT_S if any(":hang:" in spec for spec in sys.argv[2:]) else 60
    with distributed(device="cpu", timeout_s=timeout_s) as ctx:
        for spec in sys.argv[2:]:
            name, model, schedule, P, D, M, eta, ckpt = spec.split(":")
            P, D, M, eta = int(P), int(D), int(M), int(eta)
            hang = schedule == "hang"
            schedule = "mast" if hang else schedule
            blocks = make_blocks(model)
            bounds = balanced_bounds([1.0] * len(blocks), P)
            engine = PipelineEngine(blocks, bounds, schedule, SHAPE, BATCH, M, eta=eta, groups=D,
                                    rank=ctx.rank, world_size=ctx.world_size, optimizer=make_optimizer,
                                    checkpoint_stages=range(P) if ckpt == "1" else (), timeout_s=timeout_s)
            data = SyntheticImages(SHAPE, 5, seed=1)
            losses, grads0, orders = [], {}, []
            for step in range(STEPS):
                if hang and step == 1 and ctx.rank == 1:
                    time.sleep(3600)  # torchrun's agent sees nothing wrong: only rank 0's timeout ends the job
                loss_sum = engine.run_schedule(data, step)
                # the order this rank ran its actions in (inputs arriving late may change it)
                orders.append([(ev.replica, ev.kind, ev.rep, ev.micro_batch) for ev in engine.events
                               if ev.kind in ("F", "B")])
                engine.sync_gradients()
                if step == 0:
                    grads0 = {c.replica: (c.stage, [p.grad.clone() for p in c.module.parameters()])
                              for c in engine.copies}
                engine.optimizer_step()
                losses.append(engine.global_loss(loss_sum))
            torch.save({"losses": losses, "grads0": grads0, "global_batch": engine.global_batch,
                        "bounds": bounds, "memory": engine.memory_report(), "orders": orders,
                        "params": {c.replica: (c.stage, [p.detach().clone() for p in c.module.parameters()])
                                   for c in engine.copies}},
                       os.path.join(out_dir, f"{name}.rank{ctx.rank}.pt"))


if __name__ == "__main__":
    main()

"""torchrun worker of the dead-peer test: rank 1 joins the gloo group and dies; rank 0 must fail, not hang.

    torchrun --standalone --nproc-per-node 2 dead_peer_worker.py OUT_DIR WATER.npz TIMEOUT_S

Rank 0 writes ``OUT_DIR/rank0.ready`` once its process group is up (so rank 1 never dies while rank 0 is
still joining), then calls ``triples_energy_distributed(..., timeout_s=TIMEOUT_S)`` and writes one line to
``OUT_DIR/rank0.txt``: ``<ExceptionType>: <message>`` for the error it raised, or ``no error``; it exits 1.
Rank 1 joins, waits for ``rank0.ready`` and ends with ``os._exit(3)`` (no teardown: its sockets just close).

Rank 0 ignores SIGTERM: on one host torchrun's agent would stop it as soon as it saw rank 1 fail, before it
could notice the death itself; ignoring it stands for a peer on another node, whose agent saw nothing (the
agent still kills it 30 s later).  ``faulthandler`` ends a rank that hangs anyway, printing its stacks.
"""

from __future__ import annotations

import datetime
import faulthandler
import os
import signal
import sys
import time
from pathlib import Path

import torch.distributed as dist

HANG_S = 120  # a rank still running after this hangs: print every thread's stack and exit


def main(out_dir: str, npz: str, timeout_s: float) -> None:
    out = Path(out_dir)
    rank = int(os.environ["RANK"])
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    if rank == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        from torchhpc.ext.ccsdt import load_inputs
        from torchhpc.ext.ccsdt.distributed import triples_energy_distributed

        arrays = load_inputs(npz).arrays()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    if rank == 1:
        while not (out / "rank0.ready").exists():
            time.sleep(0.01)
        os._exit(3)
    (out / "rank0.ready").touch()
    try:
        triples_energy_distributed(*arrays, timeout_s=timeout_s)
        line = "no error"
    except Exception as exc:  # noqa: BLE001 - the test checks which one
        line = f"{type(exc).__name__}: {exc}"
    (out / "rank0.txt").write_text(line + "\n")
    print(line, file=sys.stderr, flush=True)
    os._exit(1)  # no teardown of a group whose peer is gone


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))

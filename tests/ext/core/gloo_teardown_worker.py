"""torchrun worker (``OUT_DIR``): join a gloo group, import torchrec inside it, leave it; write the threads left alive
to ``OUT_DIR/rank<r>.json``.

torchrec imports ``torch.distributed.nn.functional``, which binds the default group at import time; a
teardown that leaves gloo's threads running is what made ranks abort at exit ("terminate called without
an active exception").
"""

import json
import os
import sys

from torchhpc.ext.core.distributed import distributed

with distributed(device="cpu", timeout_s=60) as ctx:
    import torchrec  # noqa: F401

    rank = ctx.rank
threads = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as fh:
    json.dump({"rank": rank, "threads": threads}, fh)

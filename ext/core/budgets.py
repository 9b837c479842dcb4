"""What a GPU code path may ask of the host, declared beside the path: :class:`HostBudget`, and what a
block of code asked, :class:`HostWork` (counted by :func:`torchhpc.ext.core.hostsync.count_host_work`).

Plain records, without torch: a module declares its ``GPU_BUDGETS`` at import, and the modules of a
NumPy path (the CPU aligner) import without loading torch.
"""

from __future__ import annotations

import dataclasses
from collections import Counter


@dataclasses.dataclass
class HostWork:
    """What a block of code asked of the host: syncs by kind and kernel launches by op."""

    sync_ops: Counter = dataclasses.field(default_factory=Counter)
    launch_ops: Counter = dataclasses.field(default_factory=Counter)
    _inside_kernel: bool = dataclasses.field(default=False, repr=False)

    @property
    def syncs(self) -> int:
        return sum(self.sync_ops.values())

    @property
    def launches(self) -> int:
        return sum(self.launch_ops.values())

    def summary(self) -> str:
        """One line: the counts and the most frequent ops of each kind."""
        def top(c: Counter, n: int) -> str:
            return ", ".join(f"{k} x{v}" for k, v in c.most_common(n))
        return f"{self.syncs} syncs ({top(self.sync_ops, 99)}); {self.launches} launches ({top(self.launch_ops, 6)})"


@dataclasses.dataclass(frozen=True)
class HostBudget:
    """What a GPU code path may ask of the host per unit of work (a strand, a block, a field, a step).

    Declared beside the path (``GPU_BUDGETS`` in the system's module) and enforced by
    ``tests/test_gpu_budgets.py``, which runs the CUDA code path on CPU tensors under
    :func:`count_host_work` and divides by the units of work it did.
    """

    unit: str
    syncs: float
    launches: float
    why: str = ""
    fixed_syncs: int = 0
    """Syncs once per call, whatever the units (set-up, input checks)."""
    fixed_launches: int = 0

    def check(self, work: HostWork, units: float, what: str, calls: int = 1) -> None:
        """Raise ``AssertionError`` naming ``what`` when ``work`` (``calls`` calls doing ``units`` units of work
        in all) is over the budget."""
        syncs = self.syncs * units + self.fixed_syncs * calls
        launches = self.launches * units + self.fixed_launches * calls
        if work.syncs > syncs or work.launches > launches:
            raise AssertionError(f"{what}: {work.syncs} syncs and {work.launches} launches for {units:g} "
                                 f"{self.unit}(s), budget {syncs:g} and {launches:g}: {work.summary()}")


__all__ = ["HostBudget", "HostWork"]

"""gems: memory-aware pipeline model parallelism (GEMS, SC20) — MAST, MASTER and Hybrid.

A model is a list of blocks (an ``nn.Sequential`` or a ``list[nn.Module]``) split
into ``P`` contiguous pipeline stages.  The schedules:

* ``gpipe``  — the baseline: one replica, rank ``r`` holds stage ``r``; all
  micro-batch forwards, then all backwards (GPipe within a replica).
* ``mast``   — two replicas; rank ``r`` holds stage ``r`` of replica A and stage
  ``P-1-r`` of replica B, which runs in the opposite direction and fills A's idle
  time; the copies of a stage average gradients over the rank pair ``{r, P-1-r}``.
* ``master`` — the MAST pair run ``eta`` times per update on consecutive slices of
  the batch, gradients accumulating, one all-reduce per update.
* Hybrid    — any of the above replicated over ``D`` data-parallel groups
  (world size ``P * D``); the gradient all-reduce spans the groups.

Modules: :mod:`.modules` (ResNet-v2, MLP), :mod:`.partition` (profiling and stage
balancing), :mod:`.runtime` (the pipeline engine), :mod:`.reference` (plain
single-process training, the exactness reference), :mod:`.simulator` (discrete-event
model of the schedules, and its calibration on measured runs), :mod:`.training` (the
pieces of the training job: build, profile and split, the checks before any collective,
the newest intact checkpoint), :mod:`.commands` (the ``torchhpc gems`` commands: train
under torchrun or relaunch it, partition, simulate), :mod:`.config` (every option, as
dataclasses), :mod:`.data`, :mod:`.timeline`, :mod:`.demo` (the step of ``torchhpc demo``).
"""

from __future__ import annotations

SCHEDULES = ("gpipe", "mast", "master")

"""sched checkpoints: what one holds, reading one, and which one a job uses.

A checkpoint of a sched run (``runs/sched/<id>/checkpoints/ckpt-<epoch>.pt``, ``best-<epoch>.pt`` for the best
held-out score, ``ckpt-<epoch>.rank<r>.pt`` per rank under torchrun) is :class:`~torchhpc.ext.core.runs.Run`'s
``{"step": epoch, "state": ...}``, whose state holds the agent's weights (``agent``), the settings that shape
its observation (:data:`AGENT_SETTINGS`), and for resuming the optimisers, the torch and window-draw random
states, the best held-out score and the number of ranks.  A shipped policy (:mod:`torchhpc.ext.sched.zoo`)
holds only the actor's weights and the settings.

The newest intact one of a run folder is found with :func:`torchhpc.ext.core.runs.newest_intact`: damaged
newer ones are named in one warning line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from torchhpc.ext.core.config import ConfigError
from torchhpc.ext.core.distributed import DistContext
from torchhpc.ext.core.errors import InputError, warn
from torchhpc.ext.core.runs import Run, checkpoint_files, newest_intact

from .modules import SchedulingAgent
from .observation import empty_slot, feature_count

#: what a checkpoint records about the agent, with the value assumed when an older checkpoint lacks it
AGENT_SETTINGS = {"policy": "kernel", "queue_slots": 128, "time_scale": "linear", "prior": None, "context": False}


def agent_settings(state: Mapping[str, Any]) -> dict[str, Any]:
    """The policy and observation settings a checkpoint ``state`` was trained with (see :data:`AGENT_SETTINGS`)."""
    return {k: state.get(k, default) for k, default in AGENT_SETTINGS.items()}


def new_agent(policy: str, queue_slots: int, prior: str | None, context: bool, **_: Any) -> SchedulingAgent:
    """An untrained agent for the observation these settings shape (``(queue_slots, features)``)."""
    return SchedulingAgent(policy, queue_slots, feature_count(prior is not None, context), prior=prior is not None,
                           empty_slot=empty_slot(prior is not None, bool(context)))


def from_checkpoint(
    state: Mapping[str, Any], *, expect: Mapping[str, Any] | None = None, run_id: str | None = None,
    device: str | torch.device = "cpu",
) -> SchedulingAgent:
    """The agent a checkpoint ``state`` holds: built for its recorded settings, with its weights.

    Args:
        state: a checkpoint's state (``read_checkpoint(...)[1]``), with ``agent`` and the settings of
            :data:`AGENT_SETTINGS`.
        expect: settings the caller will use the agent with (resuming a run): each must equal the recorded one.
        run_id: names the run in the error.
        device: where the agent goes.

    Raises:
        ConfigError: a setting in ``expect`` differs from the checkpoint's, naming the option
            (``env.context``, ``ppo.policy``, ...) — instead of a state_dict shape mismatch.
        InputError: the weights do not fit the recorded settings.
    """
    saved = agent_settings(state)
    for k, now in (expect or {}).items():
        if saved[k] != now:
            section = "ppo" if k == "policy" else "env"
            was, now_ = (v if isinstance(v, str) else json.dumps(v) for v in (saved[k], now))
            raise ConfigError(f"run {run_id} was trained with {section}.{k}={was}; resume it with the same "
                              f"setting (not {now_}) or start a new run")
    agent = new_agent(**saved)
    try:
        agent.load_state_dict(state["agent"])
    except (RuntimeError, KeyError, TypeError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise InputError(f"checkpoint{f' of run {run_id}' if run_id else ''}: the agent weights do not fit "
                         f"its recorded settings ({first})") from None
    return agent.to(device)


def read_checkpoint(path: str | Path) -> tuple[int, dict[str, Any]]:
    """``(epoch, state)`` of one sched checkpoint file.

    Raises:
        InputError: naming the file and what is wrong with it: empty, not a checkpoint at all, truncated or
            damaged, a checkpoint of something else.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such checkpoint file")
    with open(p, "rb") as fh:
        head = fh.read(4)
    if not head:
        raise InputError(f"{p}: empty file, not a checkpoint")
    try:
        blob = torch.load(p, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's input, not our bug
        if head.startswith(b"PK"):  # torch's zip format: the file was cut short or overwritten
            raise InputError(f"{p}: checkpoint is truncated or damaged ({exc.__class__.__name__})") from None
        raise InputError(f"{p}: not a checkpoint (torch cannot read it: {exc.__class__.__name__})") from None
    if not isinstance(blob, dict) or "step" not in blob or not isinstance(blob.get("state"), dict):
        raise InputError(f"{p}: not a torchhpc checkpoint (expected keys 'step' and 'state')")
    if "agent" not in blob["state"]:
        raise InputError(f"{p}: not a sched checkpoint (no agent weights in it)")
    return int(blob["step"]), blob["state"]


def newest_checkpoint(folder: Path, name: str = "ckpt") -> tuple[int, dict[str, Any]] | None:
    """``(epoch, state)`` of the newest checkpoint ``name`` (``ckpt`` or ``best``) in ``folder`` that reads;
    damaged newer ones are named in one warning line; ``None`` when there is none.

    Raises:
        InputError: checkpoints exist but none of them reads.
    """
    found = newest_intact(checkpoint_files(folder, name), read_checkpoint, where=folder)
    return None if found is None else found[2]


def load_checkpoint(path: str | Path, which: str = "best") -> tuple[int, dict[str, Any], Path]:
    """``(epoch, state, run folder)`` of a run folder's checkpoint (``which``: ``best`` on the held-out
    windows, the last one when the run kept none; or ``last``) or of a checkpoint file.

    In a run folder a damaged newest checkpoint is reported (one warning line) and the newest intact one is used;
    a damaged ``best`` checkpoint falls back to the newest intact last one, also with a warning.

    Raises:
        InputError: no such folder or file, no checkpoint in the folder, or a file that is not a checkpoint.
    """
    ck = Path(path)
    if ck.is_dir():
        folder = ck / "checkpoints"
        loaded = None
        if which == "best":
            try:
                loaded = newest_checkpoint(folder, "best")
            except InputError as exc:
                warn(f"{exc}; using the newest intact last checkpoint instead")
        if loaded is None:  # no held-out selection in this run (or it is damaged): its last checkpoint
            loaded = newest_checkpoint(folder)
        if loaded is None:
            raise InputError(f"{ck}: no checkpoint in this folder (expected a sched run folder with "
                             f"checkpoints/ckpt-*.pt, or a checkpoint file)")
        return loaded[0], loaded[1], ck
    if ck.is_file():  # runs/sched/<id>/checkpoints/<file>: plots go to the run folder
        step, state = read_checkpoint(ck)
        return step, state, ck.parent.parent if ck.parent.name == "checkpoints" else ck.parent
    raise InputError(f"{ck}: no such run folder or checkpoint file")


def resume_point(run: Run, settings: Mapping[str, Any], n_envs: int, ctx: DistContext) -> tuple[int, dict] | None:
    """``(epoch, state)`` to resume ``run`` from on this rank: the newest epoch whose checkpoint reads on every
    rank (damaged newer ones are named in one warning line, by rank 0), after checking that the checkpoint fits
    this job; ``None`` when the run has no checkpoint yet. Reads only.

    Every rank reads its own checkpoints (its shard under torchrun) and the ranks exchange which epochs read.

    Raises:
        ConfigError: the checkpoint was trained with other agent settings, environments per rank or ranks.
        InputError: checkpoints exist but none reads on every rank.
    """
    world, rank = ctx.world_size, ctx.rank
    shard = rank if world > 1 else None
    files = dict(checkpoint_files(run.ckpt_dir, "ckpt", shard))  # epoch -> this rank's file
    states: dict[int, dict] = {}
    damaged: dict[int, str] = {}
    for epoch, f in files.items():
        try:
            states[epoch] = read_checkpoint(f)[1]
        except InputError as exc:
            damaged[epoch] = str(exc)
    other_layout = world > 1 and not states and bool(checkpoint_files(run.ckpt_dir, "ckpt", None))
    ranks = ctx.gather((sorted(states), damaged, other_layout))
    common = set.intersection(*(set(intact) for intact, _, _ in ranks))
    if not common:
        if any(layout for _, _, layout in ranks):
            raise ConfigError(f"run {run.run_id} was trained in one process; resume it with the same number of "
                              f"ranks (not {world}) or start a new run")
        if any(intact for intact, _, _ in ranks):
            raise ConfigError(f"run {run.run_id} was trained with another number of ranks; resume it with the "
                              f"same number (not {world}) or start a new run")

    def intact_on_every_rank(path: Path) -> dict:
        epoch = epoch_of[path]
        for _, bad, _ in ranks:
            if epoch in bad:
                raise InputError(bad[epoch])
        return states[epoch]

    # the epochs that read on every rank, and those damaged on some rank (an epoch merely missing on a rank,
    # written by some ranks only when the job stopped, is passed over without a word)
    epochs = common | {epoch for _, bad, _ in ranks for epoch in bad}
    epoch_of = {run.checkpoint_path(epoch, shard=shard): epoch for epoch in epochs}
    found = newest_intact([(e, p) for p, e in epoch_of.items()], intact_on_every_rank, where=run.ckpt_dir,
                          report=rank == 0)
    if found is None:
        return None
    epoch, _, state = found
    was = state.get("world_size", world)
    if was != world:
        raise ConfigError(f"run {run.run_id} was trained on {was} rank(s); resume it with the same number "
                          f"(not {world}) or start a new run")
    from_checkpoint(state, expect=settings, run_id=run.run_id)  # other agent settings: a one-line ConfigError
    if len(state["env_rng"]) != n_envs:
        raise ConfigError(f"run {run.run_id} was trained with {len(state['env_rng'])} environments per rank "
                          f"(ppo.num_envs, ppo.trajectories); resume it with the same settings (not {n_envs}) "
                          f"or start a new run")
    return epoch, state


__all__ = [
    "AGENT_SETTINGS", "agent_settings", "from_checkpoint", "load_checkpoint", "new_agent", "newest_checkpoint",
    "read_checkpoint", "resume_point",
]

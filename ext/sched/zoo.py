"""Pretrained policies shipped with the package: ``pretrained("lublin1-backfill")``, ``--checkpoint pretrained:NAME``.

Each shipped policy is two files of package data in ``ext/sched/pretrained/`` (``torchhpc/ext/sched/pretrained/``
once installed):

* ``NAME.pt`` — a checkpoint that :func:`~torchhpc.ext.sched.checkpoints.read_checkpoint` reads: the policy's (actor's)
  weights (a few KB) and the observation settings it was trained with, nothing else (no critic, no optimiser
  state: :func:`load_pretrained` gives it an untrained critic, which acting and evaluating never use);
* ``NAME.json`` — its card: the setting (trace, backfilling, objective), the full training config, the command
  that trained it, the run's training time, and its scores (``sched eval`` beside the heuristics, with the
  paired bootstrap interval of RL / the best heuristic), on its own trace and on traces it was not trained on.

:func:`export_policy` writes both from a run folder (it is how the shipped files were made; ``torchhpc sched
export``, :func:`torchhpc.ext.sched.commands.export_command`, scores the policy and calls it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.runs import atomic_torch_save, atomic_write_text

from .checkpoints import (
    AGENT_SETTINGS,
    agent_settings,
    from_checkpoint,
    load_checkpoint,
    new_agent,
    read_checkpoint,
)
from .evaluate import evaluate_heuristic, evaluate_policy, mean_ratio, summarise, windows_better

PREFIX = "pretrained:"
#: the folder of the shipped policies (package data)
PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"


def available(folder: Path | None = None) -> list[str]:
    """Names of the shipped policies (those with both a ``.pt`` and a ``.json`` file)."""
    d = folder or PRETRAINED_DIR
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.pt") if p.with_suffix(".json").is_file())


def _path(name: str, folder: Path | None = None) -> Path:
    names = available(folder)
    if name not in names:
        raise InputError(f"no pretrained sched policy {name!r} (shipped: {', '.join(names) or 'none'})")
    return (folder or PRETRAINED_DIR) / f"{name}.pt"


def card(name: str, folder: Path | None = None) -> dict[str, Any]:
    """The card of a shipped policy: setting, config, training command, scores (see the module docstring).

    Raises:
        InputError: no shipped policy of that name (the message lists those shipped).
    """
    return json.loads(_path(name, folder).with_suffix(".json").read_text())


def load_pretrained(name: str, folder: Path | None = None) -> tuple[int, dict[str, Any]]:
    """``(epoch, state)`` of a shipped policy, as :func:`~torchhpc.ext.sched.checkpoints.read_checkpoint` returns
    them."""
    step, state = read_checkpoint(_path(name, folder))
    return step, with_untrained_critic(state)


def with_untrained_critic(state: dict[str, Any]) -> dict[str, Any]:
    """A policy's state (actor weights only, as :func:`export_policy` writes it) completed with an untrained
    critic, so that :func:`~torchhpc.ext.sched.checkpoints.from_checkpoint` builds the agent."""
    full = new_agent(**agent_settings(state)).state_dict()  # the critic is not shipped: an untrained one
    state["agent"] = {k: state["agent"].get(k, v) for k, v in full.items()}
    return state


def pretrained(name: str, device: str | torch.device = "cpu"):
    """The shipped policy ``name`` as a :class:`~torchhpc.ext.sched.modules.SchedulingAgent` (eval mode).

    Its observation settings are ``agent_settings(load_pretrained(name)[1])``; :func:`card` gives the rest::

        from torchhpc.ext.sched import pretrained
        agent = pretrained("lublin1-backfill")

    Raises:
        InputError: no shipped policy of that name (the message lists those shipped).
    """
    _, state = load_pretrained(name)
    return from_checkpoint(state, device=device).eval()


def is_pretrained(spec: str) -> bool:
    """Whether a ``--checkpoint`` value names a shipped policy (``pretrained:NAME``)."""
    return str(spec).startswith(PREFIX)


def export_policy(run: str | Path, name: str, which: str = "best", folder: Path | None = None,
                  scores: dict[str, Any] | None = None, command: str | None = None,
                  notes: str | None = None) -> Path:
    """Write a run's policy as the shipped policy ``name``: ``NAME.pt`` (weights and settings only) and
    ``NAME.json`` (the card: config, command, training time, ``scores``).  Returns the ``.pt`` path."""
    import yaml

    step, state, run_dir = load_checkpoint(run, which)
    slim = {"agent": {k: v.detach().clone() for k, v in state["agent"].items() if k.startswith("actor.")}}
    slim |= {k: state[k] for k in AGENT_SETTINGS if k in state}
    d = folder or PRETRAINED_DIR
    d.mkdir(parents=True, exist_ok=True)
    out = d / f"{name}.pt"
    cfg_file = Path(run_dir) / "config.yaml"
    config = yaml.safe_load(cfg_file.read_text()) if cfg_file.is_file() else None
    summary_file = Path(run_dir) / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    info = {
        "name": name,
        "setting": None if config is None else {
            "trace": Path(config["trace"]["path"]).name if config["trace"].get("path") else "generated Lublin",
            "backfill": config["env"]["backfill"], "metric": config["env"]["metric"]},
        "checkpoint": {"run": Path(run_dir).name, "which": which, "epoch": step},
        "train_s": summary.get("train_seconds"),
        "command": command,
        "config": config,
        "scores": scores or {},
        "notes": notes,
    }
    # the card first, then the weights, each atomically: a failed export leaves no half-written file, and a
    # policy's .pt never stands beside another export's card
    atomic_write_text(out.with_suffix(".json"), json.dumps(info, indent=1) + "\n")
    atomic_torch_save({"step": step, "state": slim}, out)
    return out


def score(state: dict[str, Any], trace, starts, length: int, backfill: str, *, heuristics=("fcfs", "sjf", "f1"),
          sampled_seed: int | None = 1) -> dict[str, Any]:
    """A policy's scores on windows of a trace beside the heuristics: mean bsld of the greedy policy and of
    one sampled pass (the paper's protocol, ``sampled_seed``; None: skip it), each heuristic's, the best
    heuristic, and RL / best heuristic with its 95 % paired bootstrap interval and the windows won."""
    agent = from_checkpoint(state).eval()
    settings = agent_settings(state)
    heur = {h: evaluate_heuristic(trace, h, list(starts), length, backfill) for h in heuristics}
    means = {h: summarise(rows)["bsld"] for h, rows in heur.items()}
    best = min(means, key=means.get)
    out: dict[str, Any] = {"trace": trace.name, "procs": int(trace.procs_total), "backfill": backfill,
                           "starts": [int(x) for x in starts], "length": length, "heuristics": means,
                           "best_heuristic": best}
    passes = {"greedy": (True, 1)} | ({"sampled": (False, sampled_seed)} if sampled_seed is not None else {})
    for label, (greedy, seed) in passes.items():
        rows = evaluate_policy(agent, trace, list(starts), length, backfill, greedy=greedy, samples=1, seed=seed,
                               settings=settings)
        r, lo, hi = mean_ratio(rows, heur[best]) if len(starts) > 1 else (summarise(rows)["bsld"] / means[best],
                                                                           float("nan"), float("nan"))
        out[f"rl_{label}"] = {"bsld": summarise(rows)["bsld"], "ratio_to_best": [r, lo, hi],
                              "windows_won": list(windows_better(rows, heur[best]))}
    return out


__all__ = ["PREFIX", "PRETRAINED_DIR", "available", "card", "export_policy", "is_pretrained", "load_pretrained",
           "pretrained", "score"]

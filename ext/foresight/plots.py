"""The PNGs a sweep writes into its Cinema database (one per row and analysis); each returns its file name."""

from __future__ import annotations

from pathlib import Path

import torch

from torchhpc.ext.core.runs import _pyplot


def _save(fig, path: Path) -> str:
    plt = _pyplot()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def error_histogram_png(path: Path, counts: torch.Tensor, edges: torch.Tensor, title: str) -> str:
    """The distribution of ``x' - x`` (log counts)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 3.0), dpi=80)
    centres = 0.5 * (edges[1:] + edges[:-1])
    ax.bar(centres.numpy(), counts.clamp(min=0.5).numpy(), width=float(edges[1] - edges[0]), color="C0")
    ax.set_yscale("log")
    ax.set_xlabel("x' - x")
    ax.set_ylabel("values")
    ax.set_title(title, fontsize=8)
    return _save(fig, path)


def ratio_png(path: Path, chk: dict, tol: float, title: str, ylabel: str) -> str:
    """A spectrum ratio against k with the ``1 +- tol`` band and the ``k_max`` of the rule."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 3.0), dpi=80)
    ax.axhspan(1 - tol, 1 + tol, color="0.85", label=f"|ratio - 1| < {tol:g}")
    ax.plot(chk["k"].numpy(), chk["ratio"].numpy(), color="C0" if chk["pass"] else "C3", marker=".")
    ax.axvline(chk["k_max"], color="0.4", ls="--", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("k")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}: {'pass' if chk['pass'] else 'FAIL'}", fontsize=8)
    ax.legend(fontsize=7)
    return _save(fig, path)


def halo_png(path: Path, chk: dict, tol: float, title: str) -> str:
    """Halo counts per mass bin, original and decompressed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 3.0), dpi=80)
    m = chk["mass"].numpy()
    ax.step(m, chk["counts_orig"].clamp(min=0.5).numpy(), where="mid", label="original", color="0.3")
    ax.step(m, chk["counts_dec"].clamp(min=0.5).numpy(), where="mid", label="decompressed",
            color="C0" if chk["pass"] else "C3")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("halo mass (particles)")
    ax.set_ylabel("halos per bin")
    ax.set_title(f"{title}: {'pass' if chk['pass'] else 'FAIL'} (tol {tol:g})", fontsize=8)
    ax.legend(fontsize=7)
    return _save(fig, path)


def turbulence_png(path: Path, chk: dict, tol: float, title: str) -> str:
    """Energy-spectrum ratio and the velocity-gradient PDFs side by side."""
    plt = _pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(7.0, 3.0), dpi=80)
    a1.axhspan(1 - tol, 1 + tol, color="0.85")
    a1.plot(chk["k"].numpy(), chk["ratio"].numpy(), marker=".", color="C0" if chk["pass"] else "C3")
    a1.set_xscale("log")
    a1.set_xlabel("k")
    a1.set_ylabel("E_dec(k) / E_orig(k)")
    a2.semilogy(chk["pdf_centres"].numpy(), chk["pdf_orig"].clamp(min=1e-8).numpy(), color="0.3", label="original")
    a2.semilogy(chk["pdf_centres"].numpy(), chk["pdf_dec"].clamp(min=1e-8).numpy(), color="C0", ls="--",
                label="decompressed")
    a2.set_xlabel("du/dx / rms")
    a2.set_ylabel("PDF")
    a2.legend(fontsize=7)
    fig.suptitle(f"{title}: {'pass' if chk['pass'] else 'FAIL'}", fontsize=8)
    return _save(fig, path)

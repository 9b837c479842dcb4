"""The demo step, the image segmentation and the communication cost model."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.symnmf.config import SegmentOptions, SymnmfTour
from torchhpc.ext.symnmf.costmodel import iteration_cost, matmul_cost, strong_scaling
from torchhpc.ext.symnmf.distributed import block_bounds


def test_demo_step_checks_itself_against_formed_residual_and_spectral(tmp_path):
    """The demo's solvers report residuals equal to the densely formed ||A - HH^T|| and an ARI it checks."""
    import torch

    from torchhpc.ext.symnmf.demo import demo

    out = demo(SymnmfTour(algos=["hals"], max_iter=40, min_ari=0.5), SimpleNamespace(dir=tmp_path),
               torch.device("cpu"), 0)
    assert out["ok"] and out["hals"]["ok"]
    assert abs(out["spectral_clustering"]["ari"] - 0.757) < 0.01  # the anchor's published digits figure
    assert (tmp_path / "symnmf.png").is_file()


def test_segmentation_of_a_shipped_image_writes_the_picture(tmp_path, capsys):
    """sklearn's china.jpg at 24 px splits into k non-empty segments; `symnmf segment` writes the picture and
    the summary it prints; a bad image name is one error."""
    from torchhpc.ext.symnmf.commands import segment
    from torchhpc.ext.symnmf.segment import segment_image

    assert segment(SegmentOptions(image="china", k=3, size=24, max_iter=60, output=str(tmp_path), json=True)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pixels"] == out["shape"][0] * out["shape"][1] and sum(out["segment_sizes"]) == out["pixels"]
    assert sum(1 for s in out["segment_sizes"] if s > 0) >= 2
    assert (tmp_path / "segmentation.png").is_file() and out["picture"] == str(tmp_path / "segmentation.png")
    assert json.loads((tmp_path / "summary.json").read_text()) == out
    with pytest.raises(InputError, match="no_such_image"):
        segment_image(SegmentOptions(image="no_such_image", output=str(tmp_path)))


@pytest.mark.parametrize("n,k,pr,pc", [(1000, 8, 4, 1), (1000, 8, 2, 2), (997, 5, 3, 3)])
def test_model_words_equal_what_the_grid_operator_moves(n, k, pr, pc):
    """The modelled words of A @ H equal the rows the grid operator gathers, reduce-scatters and swaps
    (counted from its block boundaries; equal blocks up to rounding)."""
    p = pr * pc
    cb, rb = block_bounds(n, pc), block_bounds(n, pr)
    # rank (0, 0): gathers |C_0| - own piece, reduce-scatters |R_0| - own piece, swaps its piece
    gathered = (cb[1] - cb[0]) - block_bounds(cb[1] - cb[0], pr)[1]
    scattered = (rb[1] - rb[0]) - block_bounds(rb[1] - rb[0], pc)[1]
    swapped = block_bounds(rb[1] - rb[0], pc)[1] if (pr > 1 and pc > 1) else 0
    counted = k * (gathered + scattered + swapped)
    grid = "1d" if pc == 1 else "2d"
    modelled = matmul_cost(n, k, p, grid).words
    assert abs(modelled - counted) <= k * (pr + pc), (modelled, counted)


def test_model_efficiency_is_one_on_one_process_and_2d_moves_less_than_1d_at_scale():
    """Efficiency(1) = 1; at 4,096 processes 2D moves fewer words than 1D (sqrt p vs p factor)."""
    for algo in ("anls", "gn"):
        rows = strong_scaling(algo, 2 ** 16, 16, [1, 4096], "2d")
        assert rows[0]["efficiency"] == pytest.approx(1.0)
        assert iteration_cost(algo, 2 ** 16, 16, 4096, "2d").words < iteration_cost(algo, 2 ** 16, 16, 4096,
                                                                                     "1d").words

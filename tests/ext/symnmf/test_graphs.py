"""Graph readers, the kNN similarity (against scikit-learn), the SBM generator and the bad-input gate."""

from __future__ import annotations

import warnings

import networkx as nx
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.symnmf.graphs import (
    check_similarity,
    knn_similarity,
    normalize_similarity,
    read_graph,
    read_labels,
    stochastic_block_model,
)


def test_edge_list_reader_renumbers_symmetrises_and_skips_comments(tmp_path):
    """SNAP-style text: comments skipped, ids renumbered in order, u->v made symmetric, weights kept."""
    f = tmp_path / "g.txt"
    f.write_text("# SNAP header\n% another comment\n10 20\n20 30 2.5\n\n30 10\n")
    g = read_graph(f)
    assert list(g.node_ids) == [10, 20, 30]
    A = g.A.toarray()
    np.testing.assert_array_equal(A, A.T)
    assert A[1, 2] == 2.5 and A[0, 1] == 1.0 and A[0, 2] == 1.0


def test_matrix_market_and_gml_match_their_reference_libraries(tmp_path, shared_data):
    """.mtx equals scipy.io.mmread; football.gml has networkx's 115 nodes / 613 edges and 12 conferences."""
    M = sp.random(30, 30, density=0.2, random_state=1)
    M = (M + M.T).tocsr()
    scipy.io.mmwrite(str(tmp_path / "m.mtx"), M)
    np.testing.assert_allclose(read_graph(tmp_path / "m.mtx").A.toarray(), M.toarray())
    g = read_graph(shared_data / "graphs" / "football.gml")
    ref = nx.read_gml(str(shared_data / "graphs" / "football.gml"), label="id")
    assert g.n == ref.number_of_nodes() == 115
    assert g.A.nnz == 2 * ref.number_of_edges() == 2 * 613
    assert len(np.unique(g.labels)) == 12
    pb = read_graph(shared_data / "graphs" / "polbooks.gml")
    assert len(np.unique(pb.labels)) == 3


def test_labels_files_one_per_line_or_node_label_pairs(tmp_path, shared_data, capsys):
    """A one-column file is in node order; 'node label' pairs are matched by node id (email-Eu-core); a pair
    file that misses graph nodes or names nodes the graph lacks is read, with one warning line saying so."""
    ids = np.array([3, 7, 9])
    (tmp_path / "a.txt").write_text("1\n0\n1\n")
    np.testing.assert_array_equal(read_labels(tmp_path / "a.txt", ids), [1, 0, 1])
    capsys.readouterr()
    (tmp_path / "b.txt").write_text("9 4\n3 2\n99 1\n")
    np.testing.assert_array_equal(read_labels(tmp_path / "b.txt", ids), [2, -1, 4])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 labelled node(s) are not in the graph (e.g. 99)" in err
    assert "1 graph node(s) have no label" in err
    with pytest.raises(InputError, match="2 labels for a graph of 3"):
        (tmp_path / "c.txt").write_text("1\n2\n")
        read_labels(tmp_path / "c.txt", ids)
    g = read_graph(shared_data / "graphs" / "email-Eu-core.txt")
    lab = read_labels(shared_data / "graphs" / "email-Eu-core-department-labels.txt", g.node_ids)
    assert g.n == 1005 and (lab >= 0).all() and len(np.unique(lab)) == 42


def test_knn_similarity_equals_sklearn_spectral_affinity():
    """0.5 (C + C^T) of the 10-NN connectivity equals what SpectralClustering builds from kneighbors_graph."""
    from sklearn.neighbors import kneighbors_graph

    X = np.random.default_rng(0).normal(size=(200, 5))
    C = kneighbors_graph(X, n_neighbors=10, include_self=True)
    ref = 0.5 * (C + C.T)
    np.testing.assert_array_equal(knn_similarity(X, 10, block=64).toarray(), ref.toarray())


def test_sbm_has_the_planted_degree_and_mixing():
    """The SBM generator gives a symmetric 0/1 graph with about the asked mean degree and mixing."""
    g = stochastic_block_model(5000, 5, avg_degree=16, mixing=0.2, seed=1)
    A = g.A
    assert (A != A.T).nnz == 0 and set(np.unique(A.data)) == {1.0}
    deg = A.sum() / g.n
    r, c = A.nonzero()
    mixing = (g.labels[r] != g.labels[c]).mean()
    assert 15 < deg < 16.5
    assert abs(mixing - 0.2) < 0.02


@pytest.mark.parametrize("make,match", [
    (lambda: np.array([[0.0, 1.0], [2.0, 0.0]]), "not symmetric"),
    (lambda: np.array([[0.0, -1.0], [-1.0, 0.0]]), "negative"),
    (lambda: np.array([[0.0, np.nan], [np.nan, 0.0]]), "NaN"),
    (lambda: np.zeros((3, 3)), "empty graph"),
    (lambda: np.zeros((2, 3)), "square"),
])
def test_bad_similarity_is_one_clear_error(make, match):
    """Asymmetric, negative, NaN, empty and non-square inputs are InputErrors naming the problem."""
    with pytest.raises(InputError, match=match):
        check_similarity(make(), 1)


def test_k_larger_than_n_symmetrize_and_isolated_nodes():
    """k > n is an error; symmetrize warns and averages; isolated nodes are reported with a warning."""
    A = np.array([[0.0, 1.0, 0.0], [3.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    with pytest.raises(InputError, match="k = 4 is larger"):
        check_similarity(A + A.T, 4)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        S, isolated = check_similarity(A, 2, symmetrize=True)
    msgs = " ".join(str(x.message) for x in w)
    assert "(A + A^T) / 2" in msgs and "1 isolated node" in msgs
    assert S[0, 1] == S[1, 0] == 2.0 and list(isolated) == [False, False, True]
    N = normalize_similarity(S, "sym").toarray()
    np.testing.assert_allclose(N[0, 1], 2.0 / np.sqrt(2.0 * 2.0))
    assert (N[2] == 0).all()


def test_malformed_files_name_the_line(tmp_path):
    """A bad edge-list line, a negative weight and an empty file are errors naming file and line."""
    (tmp_path / "a.txt").write_text("1 2\n1 2 3 4\n")
    with pytest.raises(InputError, match=r"a.txt:2: expected"):
        read_graph(tmp_path / "a.txt")
    (tmp_path / "b.txt").write_text("1 2 -1\n")
    with pytest.raises(InputError, match=r"b.txt:1: negative weight"):
        read_graph(tmp_path / "b.txt")
    (tmp_path / "c.txt").write_text("# nothing\n")
    with pytest.raises(InputError, match="empty graph"):
        read_graph(tmp_path / "c.txt")
    with pytest.raises(InputError, match="no such graph file"):
        read_graph(tmp_path / "missing.txt")


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_gzipped_graphs_and_labels_and_any_line_ending_read_alike(tmp_path, eol):
    """SNAP's .txt.gz edge lists, .mtx.gz and .gml.gz, and labels with CRLF or CR-only line endings read as
    the plain files do."""
    import gzip

    text = eol.join(["# SNAP", "0 1", "1 2", "2 0", "3 4", ""])
    (tmp_path / "g.txt").write_text(text, newline="")
    (tmp_path / "g.txt.gz").write_bytes(gzip.compress(text.encode()))
    plain = read_graph(tmp_path / "g.txt")
    zipped = read_graph(tmp_path / "g.txt.gz")
    assert (plain.A != zipped.A).nnz == 0 and plain.A.nnz == 8 and list(zipped.node_ids) == [0, 1, 2, 3, 4]
    scipy.io.mmwrite(str(tmp_path / "m.mtx"), plain.A)
    (tmp_path / "m.mtx.gz").write_bytes(gzip.compress((tmp_path / "m.mtx").read_bytes()))
    assert (read_graph(tmp_path / "m.mtx.gz").A != plain.A).nnz == 0
    nx.write_gml(nx.path_graph(4), str(tmp_path / "p.gml.gz"))
    assert read_graph(tmp_path / "p.gml.gz").A.nnz == 6
    (tmp_path / "labels.txt").write_text(eol.join(["0", "0", "0", "1", "1", ""]), newline="")
    assert read_labels(tmp_path / "labels.txt", zipped.node_ids).tolist() == [0, 0, 0, 1, 1]

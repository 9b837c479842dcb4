"""Triton kernel for ccsdt: the fused closed-shell (T) energy, FP64, the triples never stored.

The formula (see :mod:`torchhpc.ext.ccsdt.reference`, eqs. (1)-(5))::

    w[i,j,k,a,b,c] = sum_f (ia|fb) t2[k,j,c,f] - sum_m (ia|jm) t2[m,k,b,c]          (1)
    v[i,j,k,a,b,c] = (ia|jb) t1[k,c] + t2[i,j,a,b] f[k,c]                            (2)
    W = P6 w,  V = P6 v   (the six simultaneous permutations of (i,a), (j,b), (k,c))   (3)
    D = e_i + e_j + e_k - e_a - e_b - e_c                                            (4)
    E(T) = 1/3 sum W r3(W + V/2) / D                                                  (5)

Work decomposition (the SC20 paper's design: one task per occupied x virtual tile, the
t3 tile stays on chip, only partial energies leave):

* one program per (occupied triple ``i >= j >= k``, virtual tile triple ``A >= B >= C``),
  flattened into a 1-D grid; ``TILE`` virtual indices per tile;
* for the tile's points ``(a, b, c)`` the program builds, for each of the six orderings
  ``P`` of ``(a, b, c)``, the value ``X_P = W_ijk[P(a,b,c)]`` (six rank-1-update loops
  over ``f`` and six over ``m`` per ordering, eqs. (1) and (3)) and ``V_P`` (eq. (2)); where
  two tiles are equal, the odd orderings are the even ones' tiles with two axes swapped
  (``tl.permute``), so such a tile triple computes three orderings, not six;
* with ``Y_P = X_P + V_P / 2``, eq. (5) summed over the six orderings of one point only
  needs ``sum_P X_P Y_P`` and the even/odd sums ``Xe, Xo, Ye, Yo`` (even orderings are the
  cyclic ones)::

        sum_P X_P r3(Y)_P = 3 sum_P X_P Y_P + Xe Ye - 2 Xe Yo + Xo Yo - 2 Xo Ye

  so the r3 "transposes" become register arithmetic; the result is divided by ``D``
  (the same for every ordering), masked, reduced to one scalar, weighted and stored.

Weights: ``E(T) = sum_programs w_occ * w_vir * e``, ``w_occ`` from
:func:`torchhpc.ext.ccsdt.ops.occupied_triples` (2 for distinct ``i > j > k``, 1 with two
equal) and ``w_vir = 1 / |stabiliser|`` of the tile triple (1, 1/2 or 1/6), because the six
orderings of a tile triple with two equal tiles cover every point twice. The orderings computed
over all tile triples number ``ntile^3 + 2 ntile`` (six times the tile triples, ``1.41 ntile^3`` at
8 tiles, before the equal tiles' were permuted).

Tile indices past ``nvir`` are clamped for the loads and masked out of the sum. Offsets
are int64 (``o v^3`` passes 2^31 for large systems).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: warps per program of each kernel, by default. Each program holds a TILE^3 block (512 points at tile 8)
#: of FP64 values and int64 addresses; at 4 warps the registers do not suffice and ptxas (12.8, sm_90a) moves
#: 320 bytes per thread of the CUDA-core kernel and 504 of the epilogue to local memory; at 8 warps, 0 and 40
#: (``tests/triton_kernels/test_sm90.py`` holds these budgets). The occupancy is the same either way (255
#: registers: two programs of 4 warps or one of 8 per SM). The MMA kernel spills least at 8 (368 bytes; 888
#: at 4, 1,056 at 16).
NUM_WARPS = {"triples": 8, "epilogue": 8, "mma": 8}

# ----------------------------------------------------------------------------- kernel


@triton.jit
def _w_offsets(p, q, r, x, y, z, NOCC, NVIR):
    # offsets of the four operands of w(p,q,r; x,y,z), eq. (1), at f = 0 / m = 0:
    #   (px|fy) = ovvv[p, x, f, y]   t2[r, q, z, f]   (px|qm) = ovoo[p, x, q, m]   t2[m, r, y, z]
    ovvv_off = ((p * NVIR + x) * NVIR) * NVIR + y  # + f * NVIR
    t2p_off = ((r * NOCC + q) * NVIR + z) * NVIR  # + f
    ovoo_off = ((p * NVIR + x) * NOCC + q) * NOCC  # + m
    t2h_off = (r * NVIR + y) * NVIR + z  # + m * NOCC * NVIR * NVIR
    return ovvv_off, t2p_off, ovoo_off, t2h_off


@triton.jit
def _connected_at(ovvv_ptr, ovoo_ptr, t2_ptr, i, j, k, x, y, z, NOCC, NVIR, TILE: tl.constexpr):
    # W_ijk[x, y, z] = sum over the six simultaneous permutations sigma of w(sigma(ijk); sigma(xyz)), eq. (3);
    # x, y, z are broadcastable index tensors, so the result is a (TILE, TILE, TILE) tile.
    v1, p1, h1, g1 = _w_offsets(i, j, k, x, y, z, NOCC, NVIR)
    v2, p2, h2, g2 = _w_offsets(i, k, j, x, z, y, NOCC, NVIR)
    v3, p3, h3, g3 = _w_offsets(j, i, k, y, x, z, NOCC, NVIR)
    v4, p4, h4, g4 = _w_offsets(j, k, i, y, z, x, NOCC, NVIR)
    v5, p5, h5, g5 = _w_offsets(k, i, j, z, x, y, NOCC, NVIR)
    v6, p6, h6, g6 = _w_offsets(k, j, i, z, y, x, NOCC, NVIR)
    acc = tl.zeros((TILE, TILE, TILE), dtype=tl.float64)
    # particle terms: rank-1 updates over the virtual f (the o^3 v^4 part)
    for f in range(0, NVIR):
        fv = tl.cast(f, tl.int64) * NVIR
        acc += tl.load(ovvv_ptr + v1 + fv) * tl.load(t2_ptr + p1 + f)
        acc += tl.load(ovvv_ptr + v2 + fv) * tl.load(t2_ptr + p2 + f)
        acc += tl.load(ovvv_ptr + v3 + fv) * tl.load(t2_ptr + p3 + f)
        acc += tl.load(ovvv_ptr + v4 + fv) * tl.load(t2_ptr + p4 + f)
        acc += tl.load(ovvv_ptr + v5 + fv) * tl.load(t2_ptr + p5 + f)
        acc += tl.load(ovvv_ptr + v6 + fv) * tl.load(t2_ptr + p6 + f)
    # hole terms: rank-1 updates over the occupied m (the o^4 v^3 part)
    for m in range(0, NOCC):
        mo = tl.cast(m, tl.int64) * NOCC * NVIR * NVIR  # 64-bit: m o v^2 passes 2^31 from o = 60, v = 800
        acc -= tl.load(ovoo_ptr + h1 + m) * tl.load(t2_ptr + g1 + mo)
        acc -= tl.load(ovoo_ptr + h2 + m) * tl.load(t2_ptr + g2 + mo)
        acc -= tl.load(ovoo_ptr + h3 + m) * tl.load(t2_ptr + g3 + mo)
        acc -= tl.load(ovoo_ptr + h4 + m) * tl.load(t2_ptr + g4 + mo)
        acc -= tl.load(ovoo_ptr + h5 + m) * tl.load(t2_ptr + g5 + mo)
        acc -= tl.load(ovoo_ptr + h6 + m) * tl.load(t2_ptr + g6 + mo)
    return acc


@triton.jit
def _v_term(ovov_ptr, t2_ptr, t1_ptr, fov_ptr, p, q, r, x, y, z, NOCC, NVIR):
    # v(p,q,r; x,y,z) = (px|qy) t1[r,z] + t2[p,q,x,y] f[r,z], eq. (2)
    g = tl.load(ovov_ptr + ((p * NVIR + x) * NOCC + q) * NVIR + y)
    s = tl.load(t2_ptr + ((p * NOCC + q) * NVIR + x) * NVIR + y)
    return g * tl.load(t1_ptr + r * NVIR + z) + s * tl.load(fov_ptr + r * NVIR + z)


@triton.jit
def _disconnected_at(ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, x, y, z, NOCC, NVIR):
    # V_ijk[x, y, z] = P6 v, eq. (3)
    acc = _v_term(ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, x, y, z, NOCC, NVIR)
    acc += _v_term(ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, k, j, x, z, y, NOCC, NVIR)
    acc += _v_term(ovov_ptr, t2_ptr, t1_ptr, fov_ptr, j, i, k, y, x, z, NOCC, NVIR)
    acc += _v_term(ovov_ptr, t2_ptr, t1_ptr, fov_ptr, j, k, i, y, z, x, NOCC, NVIR)
    acc += _v_term(ovov_ptr, t2_ptr, t1_ptr, fov_ptr, k, i, j, z, x, y, NOCC, NVIR)
    acc += _v_term(ovov_ptr, t2_ptr, t1_ptr, fov_ptr, k, j, i, z, y, x, NOCC, NVIR)
    return acc


@triton.jit
def _ordering(ovvv_ptr, ovoo_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, x, y, z,
              NOCC, NVIR, TILE: tl.constexpr):
    # X_P = W_ijk[P(abc)] and Y_P = X_P + V_P / 2 for one ordering P = (x, y, z) of (a, b, c)
    xw = _connected_at(ovvv_ptr, ovoo_ptr, t2_ptr, i, j, k, x, y, z, NOCC, NVIR, TILE)
    vw = _disconnected_at(ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, x, y, z, NOCC, NVIR)
    return xw, xw + 0.5 * vw


@triton.jit
def _program_tile(occ_ptr, occ_w_ptr, vt_ptr, vt_w_ptr, n_minor, NVIR, TILE: tl.constexpr,
                  TILE_MAJOR: tl.constexpr = False):
    # program id -> (occupied triple t = (i, j, k), virtual tile triple s = (A, B, C)), its weight
    # w_occ * w_vir, and the tile's virtual indices a, b, c (clamped for the loads) with the mask of those
    # inside nvir; programs run triple-major (n_minor = the tile triples) or tile-major (n_minor = the triples)
    pid = tl.program_id(0).to(tl.int64)
    if TILE_MAJOR:
        s = pid // n_minor
        t = pid % n_minor
    else:
        t = pid // n_minor
        s = pid % n_minor
    i = tl.load(occ_ptr + 3 * t)
    j = tl.load(occ_ptr + 3 * t + 1)
    k = tl.load(occ_ptr + 3 * t + 2)
    w = tl.load(occ_w_ptr + t) * tl.load(vt_w_ptr + s)
    A = tl.load(vt_ptr + 3 * s)
    B = tl.load(vt_ptr + 3 * s + 1)
    C = tl.load(vt_ptr + 3 * s + 2)
    lanes = tl.arange(0, TILE).to(tl.int64)
    ra, rb, rc = A * TILE + lanes, B * TILE + lanes, C * TILE + lanes
    mask = (ra < NVIR)[:, None, None] & (rb < NVIR)[None, :, None] & (rc < NVIR)[None, None, :]
    a = tl.minimum(ra, NVIR - 1)[:, None, None]
    b = tl.minimum(rb, NVIR - 1)[None, :, None]
    c = tl.minimum(rc, NVIR - 1)[None, None, :]
    return pid, t, i, j, k, w, A, B, C, a, b, c, mask


@triton.jit
def _add_ordering(sxy, xs, ys, x, y):
    # running sums over orderings of one parity: sum X_P Y_P, sum X_P, sum Y_P
    return sxy + x * y, xs + x, ys + y


@triton.jit
def _tile_energy(sxy, xe, ye, xo, yo, eocc_ptr, evir_ptr, i, j, k, a, b, c, mask):
    # eq. (5) over the six orderings of each point (even: cyclic), divided by D (eq. 4, symmetric in abc),
    # masked and reduced to one scalar
    e_ijk = tl.load(eocc_ptr + i) + tl.load(eocc_ptr + j) + tl.load(eocc_ptr + k)
    d = e_ijk - tl.load(evir_ptr + a) - tl.load(evir_ptr + b) - tl.load(evir_ptr + c)
    num = 3.0 * sxy + xe * ye - 2.0 * xe * yo + xo * yo - 2.0 * xo * ye
    contrib = tl.where(mask, num / d, 0.0)
    return tl.sum(tl.sum(tl.sum(contrib, axis=2), axis=1), axis=0)


@triton.jit
def _equal_tile_partner(x, y, A, B):
    # the odd ordering paired with an even one of a tile triple with two equal tiles: the even one's tiles
    # (X and Y, or X and V) with two axes swapped, A = B: a <-> b, else (B = C) b <-> c
    if A == B:
        xo = tl.permute(x, (1, 0, 2))
        yo = tl.permute(y, (1, 0, 2))
    else:
        xo = tl.permute(x, (0, 2, 1))
        yo = tl.permute(y, (0, 2, 1))
    return xo, yo


@triton.jit
def _ordering_pair_fma(ovvv_ptr, ovoo_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, A, B, C, x, y, z, u, v, w,
                       NOCC, NVIR, TILE: tl.constexpr):
    # (X, Y) of an even ordering (points x y z) and of an odd one (points u v w). With two equal tiles the
    # odd one is the even one's tile with two axes swapped (A = B: a <-> b; B = C: b <-> c), so only the
    # distinct tiles' triples compute all six orderings (the pairing of odd with even orderings does not
    # matter: each is visited once, and the energy is a symmetric sum over the six)
    xe, ye = _ordering(ovvv_ptr, ovoo_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, x, y, z, NOCC, NVIR, TILE)
    if (A == B) | (B == C):
        xo, yo = _equal_tile_partner(xe, ye, A, B)
    else:
        xo, yo = _ordering(ovvv_ptr, ovoo_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, u, v, w, NOCC, NVIR, TILE)
    return xe, ye, xo, yo


@triton.jit
def _add_pair(sxy, xe, ye, xo, yo, x1, y1, x2, y2):
    # the running sums over orderings after one more (even, odd) pair: sum X_P Y_P, and X, Y per parity
    return sxy + x1 * y1 + x2 * y2, xe + x1, ye + y1, xo + x2, yo + y2


@triton.jit
def _triples_energy_kernel(
    t1_ptr,  # (o, v)
    t2_ptr,  # (o, o, v, v)
    ovvv_ptr,  # (o, v, v, v)
    ovoo_ptr,  # (o, v, o, o)
    ovov_ptr,  # (o, v, o, v)
    fov_ptr,  # (o, v)
    eocc_ptr,  # (o,)
    evir_ptr,  # (v,)
    occ_ptr,  # (n_occ, 3) int64 occupied triples i >= j >= k
    occ_w_ptr,  # (n_occ,) float64
    vt_ptr,  # (n_vt, 3) int64 virtual tile triples A >= B >= C
    vt_w_ptr,  # (n_vt,) float64
    out_ptr,  # (n_occ * n_vt,) float64 partial energies
    n_vt,
    NOCC,
    NVIR,
    TILE: tl.constexpr,
):
    pid, t, i, j, k, w, A, B, C, a, b, c, mask = _program_tile(occ_ptr, occ_w_ptr, vt_ptr, vt_w_ptr, n_vt, NVIR, TILE)
    # the six orderings of (a, b, c), each even (cyclic) one paired with an odd one: abc-bac, bca-acb, cab-cba
    xe, ye, xo, yo = _ordering_pair_fma(ovvv_ptr, ovoo_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, A, B, C,
                                        a, b, c, b, a, c, NOCC, NVIR, TILE)
    sxy = xe * ye + xo * yo
    x1, y1, x2, y2 = _ordering_pair_fma(ovvv_ptr, ovoo_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, A, B, C,
                                        b, c, a, a, c, b, NOCC, NVIR, TILE)
    sxy, xe, ye, xo, yo = _add_pair(sxy, xe, ye, xo, yo, x1, y1, x2, y2)
    x1, y1, x2, y2 = _ordering_pair_fma(ovvv_ptr, ovoo_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, A, B, C,
                                        c, a, b, c, b, a, NOCC, NVIR, TILE)
    sxy, xe, ye, xo, yo = _add_pair(sxy, xe, ye, xo, yo, x1, y1, x2, y2)
    e = _tile_energy(sxy, xe, ye, xo, yo, eocc_ptr, evir_ptr, i, j, k, a, b, c, mask)
    # only the weighted partial energy leaves
    tl.store(out_ptr + pid, e * w)


@triton.jit
def _w_from_layouts(lc_ptr, lb_ptr, la_ptr, base, x, y, z, NVIR):
    # W_ijk[x, y, z] = La[x, (y z)] + Lc[z, (x y)] + Lb[y, (x z)] from the three GEMM layouts of one triple
    # (torchhpc.ext.ccsdt.blocks.InCoreOperands); base = the triple's offset n v^3 in each layout, int64
    w = tl.load(la_ptr + base + (x * NVIR + y) * NVIR + z)
    w += tl.load(lc_ptr + base + (z * NVIR + x) * NVIR + y)
    w += tl.load(lb_ptr + base + (y * NVIR + x) * NVIR + z)
    return w


@triton.jit
def _layout_ordering(lc_ptr, lb_ptr, la_ptr, base, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, x, y, z,
                     NOCC, NVIR):
    # X_P = W_ijk[P(abc)] read from the layouts and Y_P = X_P + V_P / 2 for one ordering P = (x, y, z)
    xw = _w_from_layouts(lc_ptr, lb_ptr, la_ptr, base, x, y, z, NVIR)
    vw = _disconnected_at(ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, x, y, z, NOCC, NVIR)
    return xw, xw + 0.5 * vw


@triton.jit(do_not_specialize=["n_vt", "NOCC", "NVIR", "lstride"])
def _epilogue_kernel(
    lc_ptr,  # (nb, v, v, v) Lc[c, (a b)] of each triple of the block
    lb_ptr,  # (nb, v, v, v) Lb[b, (a c)]
    la_ptr,  # (nb, v, v, v) La[a, (b c)]
    t1_ptr, t2_ptr, ovov_ptr, fov_ptr,  # (o, v), (o, o, v, v), (o, v, o, v), (o, v)
    eocc_ptr,  # (o,)
    evir_ptr,  # (v,)
    occ_ptr,  # (nb, 3) int64: the block's occupied triples
    occ_w_ptr,  # (nb,) float64
    vt_ptr,  # (n_vt, 3) int64 virtual tile triples A >= B >= C
    vt_w_ptr,  # (n_vt,) float64
    out_ptr,  # (nb * n_vt,) float64 partial energies
    n_vt,
    NOCC,
    NVIR,
    lstride,  # elements from one triple's layout to the next's (v^3 when each layout is contiguous)
    TILE: tl.constexpr,
):
    # The (T) epilogue of a block whose connected triples W are already in the three GEMM layouts (the
    # pair-blocked GEMMs of torchhpc.ext.ccsdt.pairs): per (triple, tile triple), the six orderings of the
    # tile are read from the layouts (18 TILE^3 loads, each element of a triple's layouts read once over
    # all its tile triples: 24 v^3 bytes per triple), V is rebuilt from the inputs, and eq. (5) is summed
    # with the even/odd identity of _triples_energy_kernel. Flops ~200 per point: memory-bound.
    pid, t, i, j, k, w, _, _, _, a, b, c, mask = _program_tile(occ_ptr, occ_w_ptr, vt_ptr, vt_w_ptr, n_vt, NVIR, TILE)
    base = t * lstride
    x, y = _layout_ordering(lc_ptr, lb_ptr, la_ptr, base, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, a, b, c,
                            NOCC, NVIR)
    sxy, xe, ye = x * y, x, y
    x, y = _layout_ordering(lc_ptr, lb_ptr, la_ptr, base, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, b, c, a,
                            NOCC, NVIR)
    sxy, xe, ye = _add_ordering(sxy, xe, ye, x, y)
    x, y = _layout_ordering(lc_ptr, lb_ptr, la_ptr, base, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, c, a, b,
                            NOCC, NVIR)
    sxy, xe, ye = _add_ordering(sxy, xe, ye, x, y)
    x, y = _layout_ordering(lc_ptr, lb_ptr, la_ptr, base, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, a, c, b,
                            NOCC, NVIR)
    sxy, xo, yo = sxy + x * y, x, y
    x, y = _layout_ordering(lc_ptr, lb_ptr, la_ptr, base, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, b, a, c,
                            NOCC, NVIR)
    sxy, xo, yo = _add_ordering(sxy, xo, yo, x, y)
    x, y = _layout_ordering(lc_ptr, lb_ptr, la_ptr, base, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, c, b, a,
                            NOCC, NVIR)
    sxy, xo, yo = _add_ordering(sxy, xo, yo, x, y)
    e = _tile_energy(sxy, xe, ye, xo, yo, eocc_ptr, evir_ptr, i, j, k, a, b, c, mask)
    tl.store(out_ptr + pid, e * w)


# ----------------------------------------------------------------------------- the fused kernel on FP64 MMA


@triton.jit
def _layout_t(tt_ptr, xa_ptr, xb_ptr, p, q, p2, q2, s, s2, r0, c0, c1, NOCC, NVIR,
              TILE: tl.constexpr, KB: tl.constexpr):
    # One GEMM layout of W (torchhpc.ext.ccsdt.blocks.InCoreOperands) on one block, transposed so that the
    # wide side is the MMA's M: L^T[(y z), x] = AT[s][:, (y z)]^T TT[p,q][x, :]^T + BT[s2][:, (y z)]^T TT[p2,q2][x, :]^T
    # for x in tile r0, y in tile c0, z in tile c1, contracted over K = v + o (the particle f stacked on the
    # hole m) in chunks of KB. Returns (TILE * TILE, TILE) float64 accumulated on the tensor cores.
    KTOT = NVIR + NOCC
    lanes = tl.arange(0, TILE).to(tl.int64)
    x = tl.minimum(r0 * TILE + lanes, NVIR - 1)
    n = tl.arange(0, TILE * TILE).to(tl.int64)
    yz = tl.minimum(c0 * TILE + n // TILE, NVIR - 1) * NVIR + tl.minimum(c1 * TILE + n % TILE, NVIR - 1)
    vv = tl.cast(NVIR, tl.int64) * NVIR
    t_rows = ((p * NOCC + q) * NVIR + x) * KTOT  # TT[p, q][x, 0]
    t2_rows = ((p2 * NOCC + q2) * NVIR + x) * KTOT
    acc = tl.zeros((TILE * TILE, TILE), dtype=tl.float64)
    for k0 in range(0, KTOT, KB):
        kk = k0 + tl.arange(0, KB).to(tl.int64)
        live = kk < KTOT
        a = tl.load(xa_ptr + (s * KTOT + kk)[None, :] * vv + yz[:, None], mask=live[None, :], other=0.0)
        t = tl.load(tt_ptr + t_rows[None, :] + kk[:, None], mask=live[:, None], other=0.0)
        acc = tl.dot(a, t, acc, out_dtype=tl.float64)
        b = tl.load(xb_ptr + (s2 * KTOT + kk)[None, :] * vv + yz[:, None], mask=live[None, :], other=0.0)
        t = tl.load(tt_ptr + t2_rows[None, :] + kk[:, None], mask=live[:, None], other=0.0)
        acc = tl.dot(b, t, acc, out_dtype=tl.float64)
    return acc


@triton.jit
def _w_block(tt_ptr, at_ptr, bt_ptr, i, j, k, X0, X1, X2, NOCC, NVIR, TILE: tl.constexpr, KB: tl.constexpr):
    # W_ijk[x, y, z] on the block x in tile X0, y in X1, z in X2 (indices past nvir clamped), from its three
    # GEMM layouts W = La[x, (y z)] + Lc[z, (x y)] + Lb[y, (x z)] (eqs. 1 and 3), each a pair of FP64 dots
    la = _layout_t(tt_ptr, at_ptr, bt_ptr, i, k, i, j, j, k, X0, X1, X2, NOCC, NVIR, TILE, KB)
    w = tl.permute(tl.reshape(la, (TILE, TILE, TILE)), (2, 0, 1))  # [y, z, x] -> [x, y, z]
    lc = _layout_t(tt_ptr, at_ptr, bt_ptr, k, j, k, i, i, j, X2, X0, X1, NOCC, NVIR, TILE, KB)
    w += tl.reshape(lc, (TILE, TILE, TILE))  # [x, y, z] already
    lb = _layout_t(tt_ptr, at_ptr, bt_ptr, j, k, j, i, i, k, X1, X0, X2, NOCC, NVIR, TILE, KB)
    w += tl.permute(tl.reshape(lb, (TILE, TILE, TILE)), (0, 2, 1))  # [x, z, y] -> [x, y, z]
    return w


@triton.jit
def _ordering_mma(tt_ptr, at_ptr, bt_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, T0, T1, T2, x, y, z,
                  D0: tl.constexpr, D1: tl.constexpr, D2: tl.constexpr, NOCC, NVIR,
                  TILE: tl.constexpr, KB: tl.constexpr):
    # X_P = W_ijk[P(abc)] and V_P for one ordering P of the tile triple: W on the block of tiles (T0, T1, T2)
    # by MMA, read back to [a, b, c] order by the permutation (D0, D1, D2); V gathered at (x, y, z) = P(a, b, c)
    w = _w_block(tt_ptr, at_ptr, bt_ptr, i, j, k, T0, T1, T2, NOCC, NVIR, TILE, KB)
    return tl.permute(w, (D0, D1, D2)), _disconnected_at(ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, x, y, z,
                                                         NOCC, NVIR)


@triton.jit
def _ordering_pair(tt_ptr, at_ptr, bt_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, A, B, C, T0, T1, T2,
                   x, y, z, D0: tl.constexpr, D1: tl.constexpr, D2: tl.constexpr,
                   U0, U1, U2, u, v, w, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr,
                   NOCC, NVIR, TILE: tl.constexpr, KB: tl.constexpr):
    # An even ordering (block T, permutation D, points x y z) and an odd one. With two equal tiles the odd
    # one is the even one's tile with two axes swapped (A = B: a <-> b; B = C: b <-> c), on the same block,
    # so it costs no MMA (the doubled work of the tile triples with equal tiles); with three distinct tiles
    # it is the block U read back by E at points (u, v, w). Which odd ordering pairs with which even one
    # does not matter: each of the six is visited once, and the energy is a symmetric sum over them.
    xe, ve = _ordering_mma(tt_ptr, at_ptr, bt_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, T0, T1, T2,
                           x, y, z, D0, D1, D2, NOCC, NVIR, TILE, KB)
    if (A == B) | (B == C):
        xo, vo = _equal_tile_partner(xe, ve, A, B)
    else:
        xo, vo = _ordering_mma(tt_ptr, at_ptr, bt_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, U0, U1, U2,
                               u, v, w, E0, E1, E2, NOCC, NVIR, TILE, KB)
    return xe, xe + 0.5 * ve, xo, xo + 0.5 * vo


@triton.jit(do_not_specialize=["n_occ", "out_stride", "NOCC", "NVIR"])
def _triples_mma_kernel(
    tt_ptr,  # (o, o, v, v + o) TT of InCoreOperands
    at_ptr,  # (o, v + o, v^2) AT
    bt_ptr,  # (o, v + o, v^2) BT
    t1_ptr, t2_ptr, ovov_ptr, fov_ptr,  # (o, v), (o, o, v, v), (o, v, o, v), (o, v)
    eocc_ptr,  # (o,)
    evir_ptr,  # (v,)
    occ_ptr,  # (n_occ, 3) int64 occupied triples i >= j >= k
    occ_w_ptr,  # (n_occ,) float64
    vt_ptr,  # (n_vt, 3) int64 virtual tile triples A >= B >= C
    vt_w_ptr,  # (n_vt,) float64
    out_ptr,  # (n_vt, out_stride) float64 partial energies, tile triple major (this chunk's columns)
    n_occ,
    out_stride,
    NOCC,
    NVIR,
    TILE: tl.constexpr,
    KB: tl.constexpr,
):
    # The fused (T) on the FP64 tensor cores: one program per (virtual tile triple, occupied triple), the
    # occupied triple fastest so that neighbouring programs share the tile's columns of AT/BT and rows of TT
    # in L2. Per ordering of the tile triple, W on one TILE^3 block is three GEMM layouts, each two FP64
    # dots of (TILE^2 x KB) by (KB x TILE) over K = v + o; a block costs 6 TILE^3 (v + o) multiply-adds and
    # loads 6 (TILE^2 + TILE) (v + o) float64: TILE^2 / (4 (TILE + 1)) flops per byte loaded (3.8 at TILE 16,
    # 1.8 at 8), served from L2 where the working set fits. Tile triples with two or three equal
    # tiles compute 3 blocks, not 6: the computed blocks are ntile^3 + 2 ntile, the flops counted by
    # triples_flops plus O(1/ntile^2). The six orderings then meet as in _triples_energy_kernel.
    pid, t, i, j, k, wgt, A, B, C, a, b, c, mask = _program_tile(occ_ptr, occ_w_ptr, vt_ptr, vt_w_ptr, n_occ, NVIR,
                                                                 TILE, True)
    # even abc (block A B C) with odd bac (block B A C, read back by swapping a <-> b)
    xe, ye, xo, yo = _ordering_pair(tt_ptr, at_ptr, bt_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, A, B, C,
                                    A, B, C, a, b, c, 0, 1, 2, B, A, C, b, a, c, 1, 0, 2, NOCC, NVIR, TILE, KB)
    sxy = xe * ye + xo * yo
    # even bca (W[b, c, a] on block B C A) with odd acb (W[a, c, b] on block A C B)
    x1, y1, x2, y2 = _ordering_pair(tt_ptr, at_ptr, bt_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, A, B, C,
                                    B, C, A, b, c, a, 2, 0, 1, A, C, B, a, c, b, 0, 2, 1, NOCC, NVIR, TILE, KB)
    sxy, xe, ye, xo, yo = _add_pair(sxy, xe, ye, xo, yo, x1, y1, x2, y2)
    # even cab (W[c, a, b] on block C A B) with odd cba (W[c, b, a] on block C B A)
    x1, y1, x2, y2 = _ordering_pair(tt_ptr, at_ptr, bt_ptr, ovov_ptr, t2_ptr, t1_ptr, fov_ptr, i, j, k, A, B, C,
                                    C, A, B, c, a, b, 1, 2, 0, C, B, A, c, b, a, 2, 1, 0, NOCC, NVIR, TILE, KB)
    sxy, xe, ye, xo, yo = _add_pair(sxy, xe, ye, xo, yo, x1, y1, x2, y2)
    e = _tile_energy(sxy, xe, ye, xo, yo, eocc_ptr, evir_ptr, i, j, k, a, b, c, mask)
    tl.store(out_ptr + (pid // n_occ) * out_stride + t, e * wgt)


# ----------------------------------------------------------------------------- launcher


def virtual_tile_triples(nvir: int, tile: int, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Tile triples ``A >= B >= C`` over ``ceil(nvir / tile)`` tiles and their weights ``1/|stabiliser|``.

    Returns ``idx (n, 3)`` int64 and ``weight (n,)`` float64 (1, 1/2 or 1/6).
    """
    nt = triton.cdiv(nvir, tile)
    rows, weights = [], []
    for A in range(nt):
        for B in range(A + 1):
            for C in range(B + 1):
                rows.append((A, B, C))
                weights.append(1.0 / 6.0 if A == B == C else 0.5 if (A == B or B == C) else 1.0)
    return (torch.tensor(rows, dtype=torch.int64, device=device).reshape(-1, 3),
            torch.tensor(weights, dtype=torch.float64, device=device))


#: most programs in one launch (CUDA's grid x dimension); the launchers split the occupied triples beyond it
MAX_PROGRAMS = 2**31 - 1


def _check_inputs(t1: torch.Tensor, tensors: dict[str, torch.Tensor], occ_idx: torch.Tensor) -> None:
    for name, x in tensors.items():
        if x.dtype != torch.float64:
            raise ValueError(f"{name} must be float64 (the kernel is FP64 throughout), got {x.dtype}")
        if x.device != t1.device:
            raise ValueError(f"{name} is on {x.device}, t1 on {t1.device}")
    if occ_idx.dtype != torch.int64 or occ_idx.dim() != 2 or occ_idx.shape[1] != 3 or occ_idx.device != t1.device:
        raise ValueError(f"occ_idx must be an (n, 3) int64 tensor on {t1.device}")


def _partials_setup(t1, mo_energy, occ_idx, occ_weight, tile: int):
    """What both fused launchers share: the tile triples, the output (one float64 per program) and the
    contiguous per-call arguments ``(e_occ, e_vir, occ_idx, occ_weight)``."""
    o, v = t1.shape
    vt_idx, vt_w = virtual_tile_triples(v, tile, t1.device)
    out = torch.empty(occ_idx.shape[0] * vt_idx.shape[0], dtype=torch.float64, device=t1.device)
    mo_energy = mo_energy.contiguous()
    return (vt_idx, vt_w, out, mo_energy[:o].contiguous(), mo_energy[o:].contiguous(), occ_idx.contiguous(),
            occ_weight.contiguous())


def _occupied_chunks(n_occ: int, n_vt: int) -> list[tuple[int, int]]:
    """``(start, count)`` runs of occupied triples whose programs (``count * n_vt``) fit one launch."""
    per = max(1, MAX_PROGRAMS // max(n_vt, 1))
    return [(s, min(per, n_occ - s)) for s in range(0, n_occ, per)]


def triples_energy_partials(
    t1: torch.Tensor, t2: torch.Tensor, ovvv: torch.Tensor, ovoo: torch.Tensor, ovov: torch.Tensor,
    fock_ov: torch.Tensor, mo_energy: torch.Tensor, occ_idx: torch.Tensor, occ_weight: torch.Tensor,
    tile: int = 8, num_warps: int | None = None,
) -> torch.Tensor:
    """Weighted partial (T) energies, one per (occupied triple, virtual tile triple); their sum is E(T).

    Shapes as in :func:`torchhpc.ext.ccsdt.triples_energy`; ``occ_idx (n, 3)`` int64 and
    ``occ_weight (n,)`` from :func:`torchhpc.ext.ccsdt.ops.occupied_triples`. All float64,
    on one device (CUDA, or the CPU under ``TRITON_INTERPRET=1``).

    Returns:
        ``(n * n_tile_triples,)`` float64.
    """
    if tile < 1 or tile & (tile - 1) or tile > 32:
        raise ValueError(f"tile must be a power of two <= 32, got {tile}")
    o, v = t1.shape
    _check_inputs(t1, {"t1": t1, "t2": t2, "ovvv": ovvv, "ovoo": ovoo, "ovov": ovov, "fock_ov": fock_ov,
                       "mo_energy": mo_energy, "occ_weight": occ_weight}, occ_idx)
    vt_idx, vt_w, out, e_occ, e_vir, occ_idx, occ_weight = _partials_setup(t1, mo_energy, occ_idx, occ_weight, tile)
    if out.numel() == 0:
        return out
    n_occ, n_vt = occ_idx.shape[0], vt_idx.shape[0]
    args = (t1.contiguous(), t2.contiguous(), ovvv.contiguous(), ovoo.contiguous(), ovov.contiguous(),
            fock_ov.contiguous(), e_occ, e_vir)
    for s, n in _occupied_chunks(n_occ, n_vt):  # triple-major: a chunk's partials are one run of out
        _triples_energy_kernel[(n * n_vt,)](
            *args, occ_idx[s:s + n], occ_weight[s:s + n], vt_idx, vt_w, out[s * n_vt:(s + n) * n_vt],
            n_vt, o, v, TILE=tile, num_warps=num_warps or NUM_WARPS["triples"],
        )
    return out


def epilogue_partials(
    lc: torch.Tensor, lb: torch.Tensor, la: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, ovov: torch.Tensor,
    fock_ov: torch.Tensor, e_occ: torch.Tensor, e_vir: torch.Tensor, occ_idx: torch.Tensor,
    occ_weight: torch.Tensor, vt_idx: torch.Tensor, vt_weight: torch.Tensor, tile: int = 8, num_warps: int | None = None,
) -> torch.Tensor:
    """Weighted partial (T) energies of one block from its GEMM layouts: one per (triple, tile triple).

    ``lc, lb, la`` are ``(nb, v, v, v)`` float64 whose ``(v, v, v)`` blocks are contiguous, one stride apart
    between triples, the same for the three: contiguous tensors (:mod:`torchhpc.ext.ccsdt.pairs` writes
    them) or the three views ``L[:, t]`` of an ``(nb, 3, v, v, v)`` buffer (the triple blocks of
    :func:`torchhpc.ext.ccsdt.blocks.block_energy`). ``occ_idx (nb, 3)``/``occ_weight`` the block's rows of
    :func:`torchhpc.ext.ccsdt.ops.occupied_triples`, ``vt_idx``/``vt_weight`` from
    :func:`virtual_tile_triples` with the same ``tile``; no host sync.

    Returns:
        ``(nb * n_tile_triples,)`` float64; their sum is the block's energy.
    """
    nb, v = lc.shape[0], lc.shape[1]
    stride = lc.stride(0) if nb > 1 else v**3
    for name, x in (("lc", lc), ("lb", lb), ("la", la)):
        if (x.dtype != torch.float64 or tuple(x.shape) != (nb, v, v, v) or tuple(x.stride()[1:]) != (v * v, v, 1)
                or (nb > 1 and x.stride(0) != stride) or stride < v**3):
            raise ValueError(f"{name} must be a float64 ({nb}, {v}, {v}, {v}) tensor of contiguous (v, v, v) "
                             "blocks, one stride apart, the same for lc, lb and la")
    out = torch.empty(nb * vt_idx.shape[0], dtype=torch.float64, device=lc.device)
    if out.numel() == 0:
        return out
    _epilogue_kernel[(out.numel(),)](
        lc, lb, la, t1, t2, ovov, fock_ov, e_occ, e_vir, occ_idx, occ_weight, vt_idx, vt_weight, out,
        vt_idx.shape[0], t1.shape[0], v, stride, TILE=tile, num_warps=num_warps or NUM_WARPS["epilogue"],
    )
    return out


def triples_energy_mma_partials(
    tt: torch.Tensor, at: torch.Tensor, bt: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, ovov: torch.Tensor,
    fock_ov: torch.Tensor, mo_energy: torch.Tensor, occ_idx: torch.Tensor, occ_weight: torch.Tensor,
    tile: int = 8, kb: int = 16, num_warps: int | None = None, num_stages: int = 1,
) -> torch.Tensor:
    """Weighted partial (T) energies from the fused kernel on FP64 MMA, one per (tile triple, occupied triple).

    ``tt (o, o, v, v + o)``, ``at``/``bt (o, v + o, v^2)`` are the GEMM operands of
    :class:`torchhpc.ext.ccsdt.blocks.InCoreOperands` (``TT``, ``AT``, ``BT``); the rest as in
    :func:`triples_energy_partials`. All float64 and contiguous on one device; no host sync.

    Returns:
        ``(n_tile_triples * n,)`` float64, tile triple major; their sum is E(T).
    """
    if tile < 1 or tile & (tile - 1) or tile > 32:
        raise ValueError(f"tile must be a power of two <= 32, got {tile}")
    if kb < 16 or kb & (kb - 1):
        raise ValueError(f"kb must be a power of two >= 16 (the FP64 MMA's K), got {kb}")
    o, v = t1.shape
    shapes = {"tt": (tt, (o, o, v, v + o)), "at": (at, (o, v + o, v * v)), "bt": (bt, (o, v + o, v * v))}
    for name, (x, shape) in shapes.items():
        if x.dtype != torch.float64 or not x.is_contiguous() or tuple(x.shape) != shape:
            raise ValueError(f"{name} must be a contiguous float64 {shape} tensor, got {x.dtype} {tuple(x.shape)}")
    _check_inputs(t1, {"tt": tt, "at": at, "bt": bt, "t1": t1, "t2": t2, "ovov": ovov, "fock_ov": fock_ov,
                       "mo_energy": mo_energy, "occ_weight": occ_weight}, occ_idx)
    vt_idx, vt_w, out, e_occ, e_vir, occ_idx, occ_weight = _partials_setup(t1, mo_energy, occ_idx, occ_weight, tile)
    if out.numel() == 0:
        return out
    n_occ, n_vt = occ_idx.shape[0], vt_idx.shape[0]
    args = (tt, at, bt, t1.contiguous(), t2.contiguous(), ovov.contiguous(), fock_ov.contiguous(), e_occ, e_vir)
    for s, n in _occupied_chunks(n_occ, n_vt):  # a chunk writes its columns of the (n_vt, n_occ) partials
        _triples_mma_kernel[(n * n_vt,)](
            *args, occ_idx[s:s + n], occ_weight[s:s + n], vt_idx, vt_w, out[s:], n, n_occ, o, v,
            TILE=tile, KB=kb, num_warps=num_warps or NUM_WARPS["mma"], num_stages=num_stages,
        )
    return out

"""Exact ``max_u f(u)`` of C-UCB's ``lambda_t`` by branch and bound (no full enumeration).

Problem (``cucb_lambda``): over all ``A**C`` policies ``u``,

    f(u) = R_u / D_u - c / sqrt(T_u),   R_u = sum_x sum_r[x, u(x)], D_u, T_u likewise.

Method. Contexts are split in two halves ``P`` and ``Q``; the joint actions of each half are
items ``i`` (``N_P = A**|P|``) and ``j`` (``N_Q``) with summed statistics ``(R, D, T)``, and a
policy is a pair ``(i, j)``. Items of each half are sorted by ``T`` (descending) and cut into
blocks of ``B ~ sqrt(N)`` consecutive items, so a block holds items of similar ``T``.

1. Incumbent: the previous maximiser ``u_prev`` evaluated at the new statistics; the pruning
   threshold is ``lb = max(f(u_prev), 1e-9)`` (nothing at or below the clip can change lambda).
2. Certificate per block pair ``(I, J)`` (Dinkelbach's linearisation, Management Science 1967).
   Since ``D >= 0`` and ``T_i + T_j <= Tmax_I + Tmax_J``, with
   ``theta_IJ = lb + c / sqrt(Tmax_I + Tmax_J)``::

       f(i, j) > lb  =>  (R_i - theta_IJ D_i) + (R_j - theta_IJ D_j) > 0
                     =>  M_I(theta_IJ) + M_J(theta_IJ) > 0,
       M_I(theta) = max_{i in I} (R_i - theta D_i).

   The middle expression is separable in ``i`` and ``j``, so the only slack of the certificate
   is the spread of ``T`` inside the two blocks. A pair that fails it holds no policy better
   than ``lb`` and is skipped. ``M_I`` is evaluated exactly at a few reference pairs per
   block and bounded in between by the chord (``M_I`` is convex in ``theta``), so this stage
   costs ``O(N log nb)``.
3. Second certificate for each pair that survived stage 1, with the exact ``T_i`` of every item
   of one block: for ``i`` in ``I``, ``theta_iJ = lb + c / sqrt(T_i + Tmax_J) >= theta_IJ`` and
   ``M_J(theta_iJ) <= M_J(theta_IJ) - (theta_iJ - theta_IJ) min_{j in J} D_j``, so

       f(i, j) > lb  =>  max_i [R_i - theta_iJ D_i - (theta_iJ - theta_IJ) Dmin_J]
                         + M_J(theta_IJ) > 0,

   and the same with the roles of the halves swapped; a pair must pass both.
4. The pairs left are evaluated exactly, ``chunk_exact`` pairs (``chunk_exact B_P B_Q``
   policies) per iteration of a ``lax.while_loop``.

Stages 3 and 4 loop over compacted lists of pairs (static shapes; ``lax.while_loop``); under
``vmap`` a loop runs as many iterations as the seed that needs most. The result equals full
enumeration (``cucb_lambda.best_policy_bruteforce``) whenever the maximum is above ``1e-9``, up
to float rounding in the certificates; tests/jax/test_cucb.py checks it against full enumeration on
random statistics (with near-optimal incumbents) and at every decision of a real C-UCB run.

Sorting uses one int32 sort of packed keys per half: ``argsort`` is ~3x slower on XLA:CPU.

Measured (2026-11-29, shared 2-core CPU under heavy load from other jobs, float32, |X| = 4,
environment E1, 64 seeds vmapped, states after 3,000 decisions of real C-UCB runs, c2 = 0.01
(theory: c1, c2 of ``theory_constants``); whole agent step act + outcome + update, ms per
decision per seed, min of 3; brute force = ``make_cucb(..., bruteforce=True)``, pair sums):

    K   c1      brute    this     ratio  |  K   c1      brute    this     ratio
    30  0.01    19.4     0.255    76x    |  20  0.01    4.03     0.104    39x
    30  1       21.0     0.274    77x    |  20  1       4.81     0.100    48x
    30  theory  18.3     0.017    1069x  |  20  theory  2.71     0.0078   348x
    10  0.01    0.182    0.021    8.6x   |  5   0.01    0.021    0.0097   2.1x
    10  1       0.264    0.044    6.0x   |  5   1       0.016    0.0094   1.6x
    10  theory  0.332    0.0030   111x   |  5   theory  0.017    0.0008   21x
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rpg_jax.agents.cucb_lambda import LAMBDA_FLOOR, _split, _unravel, group_sums, policy_value

__all__ = ["best_policy_exact", "lambda_exact_fast"]


def _ravel(u: jax.Array, n_actions: int) -> jax.Array:
    """Row-major joint-action index of the int array ``u`` (``(k,)``; 0 when empty)."""
    idx = jnp.zeros((), jnp.int32)
    for k in range(u.shape[0]):
        idx = idx * n_actions + u[k].astype(jnp.int32)
    return idx


def _sort_desc(T: jax.Array) -> jax.Array:
    """Permutation sorting ``T`` (integral values, as float) descending, ties by index.

    One int32 sort of packed keys ``(cap - min(T, cap)) * 2**bits + index`` (much cheaper on
    XLA:CPU than ``argsort``). Counts above ``cap`` tie; that only loosens the certificates.
    """
    N = T.shape[0]
    bits = max(1, (N - 1).bit_length())
    cap = (1 << (31 - bits)) - 1
    key = (cap - jnp.minimum(T, cap).astype(jnp.int32)) * (1 << bits) + jnp.arange(
        N, dtype=jnp.int32
    )
    return jnp.sort(key) & ((1 << bits) - 1)


def _blocks(R, D, T, block: int):
    """Sort items by ``T`` descending, pad to a multiple of ``block``, reshape to blocks.

    Padding items have ``R = -inf, D = T = 0``: they never pass a certificate nor win.
    Returns ``(order, RB, DB, TB, tmax)`` with ``RB...`` of shape ``(nb, block)`` and the
    original index of sorted position ``k`` in ``order[k]`` (padding: 0).
    """
    N = R.shape[0]
    nb = -(-N // block)
    pad = nb * block - N
    order = _sort_desc(T)
    Rs, Ds, Ts = R[order], D[order], T[order]
    if pad:
        Rs = jnp.concatenate([Rs, jnp.full((pad,), -jnp.inf, R.dtype)])
        Ds = jnp.concatenate([Ds, jnp.zeros((pad,), D.dtype)])
        Ts = jnp.concatenate([Ts, jnp.zeros((pad,), T.dtype)])
        order = jnp.concatenate([order, jnp.zeros((pad,), order.dtype)])
    RB, DB, TB = (v.reshape(nb, block) for v in (Rs, Ds, Ts))
    return order, RB, DB, TB, TB[:, 0]


def _refs(nb: int) -> tuple[int, ...]:
    """Static reference block indices ``0, 1, 2, 4, 8, ..., nb - 1`` for the chord bounds."""
    refs, k = [0], 1
    while k < nb - 1:
        refs.append(k)
        k *= 2
    if nb - 1 > 0:
        refs.append(nb - 1)
    return tuple(refs)


def _chord_max(RB, DB, theta):
    """Upper bound of ``M_I(theta[I, J]) = max_b RB[I, b] - theta[I, J] DB[I, b]`` for all J.

    ``theta`` (nb_I, nb_J) must be non-decreasing along J. ``M_I`` is evaluated exactly at the
    static reference columns ``_refs(nb_J)`` and bounded in between by the chord (``M_I`` is
    convex in ``theta``, so the chord lies above it).
    """
    nbj = theta.shape[1]
    refs = _refs(nbj)
    th_ref = theta[:, list(refs)]
    m_ref = jnp.max(RB[:, None, :] - th_ref[:, :, None] * DB[:, None, :], axis=2)
    cols = []
    for J in range(nbj):
        g = max(k for k in range(len(refs)) if refs[k] <= J)
        if refs[g] == J:
            cols.append(m_ref[:, g])
            continue
        t0, t1 = th_ref[:, g], th_ref[:, g + 1]
        m0, m1 = m_ref[:, g], m_ref[:, g + 1]
        span = t1 - t0
        w = jnp.where(span > 0, (theta[:, J] - t0) / jnp.where(span > 0, span, 1.0), 0.0)
        cols.append(jnp.maximum(m0 + w * (m1 - m0), jnp.minimum(m0, m1)))
    return jnp.stack(cols, axis=1)


def _block_size(N: int) -> int:
    return max(1, int(round(N**0.5)))


def best_policy_exact(
    n: jax.Array,
    sum_r: jax.Array,
    sum_d: jax.Array,
    c: jax.Array,
    u_prev: jax.Array,
    *,
    chunk_cert: int = 16,
    chunk_exact: int = 2,
):
    """``max_u f(u)`` over all policies by branch and bound (module docstring).

    Args:
      n: ``(C, A)`` int counts; sum_r, sum_d: ``(C, A)`` float sums (durations > 0).
      c: scalar ``sqrt(2 c1 L) >= 0``.
      u_prev: ``(C,)`` int policy used as the first incumbent (e.g. the last maximiser).
      chunk_cert: block pairs given the second certificate per loop iteration (static).
      chunk_exact: block pairs evaluated exactly per loop iteration (static).

    Returns:
      ``(value, u)``: ``value`` equals the full-enumeration maximum when that maximum is
      ``>= 1e-9`` (else it is a lower bound of it, and ``max(value, 1e-9)`` is still the exact
      clipped ``lambda``); ``u`` int32 ``(C,)`` attains ``value`` (``u_prev`` if nothing valid).
    """
    C, A = n.shape
    dtype = sum_r.dtype
    c = jnp.asarray(c, dtype)
    P, Q = _split(C)
    Rp_, Dp_, Tp_ = group_sums(n, sum_r, sum_d, P)
    Rq_, Dq_, Tq_ = group_sums(n, sum_r, sum_d, Q)
    u_prev = u_prev.astype(jnp.int32)
    i0 = _ravel(u_prev[: len(P)], A)
    j0 = _ravel(u_prev[len(P) :], A)
    v0 = policy_value(Rp_[i0] + Rq_[j0], Dp_[i0] + Dq_[j0], Tp_[i0] + Tq_[j0], c)
    lb_ = jnp.maximum(v0, jnp.asarray(LAMBDA_FLOOR, dtype))

    # Global certificate, O(C A): with theta_g = lb + c / sqrt(max_u T_u) <= theta_u, a policy
    # better than lb needs sum_x max_a (sum_r - theta_g sum_d)[x, a] > 0. The search below runs
    # inside a while loop of at most one iteration, so under vmap it is skipped when no seed
    # needs it (a lax.cond would become a select and always run).
    tmax_all = jnp.sum(jnp.max(n, axis=1)).astype(dtype)
    theta_g = lb_ + c * jax.lax.rsqrt(jnp.maximum(tmax_all, 1.0))
    need = (tmax_all > 0) & (jnp.sum(jnp.max(sum_r - theta_g * sum_d, axis=1)) > 0)

    def search(carry):
        flag, v0, i0, j0 = carry
        # Tie the inputs to the loop-variant flag so XLA cannot hoist the search out of the
        # loop (loop-invariant code motion would otherwise run it even when skipped).
        _, Rp, Dp, Tp, Rq, Dq, Tq, lb = jax.lax.optimization_barrier(
            (flag, Rp_, Dp_, Tp_, Rq_, Dq_, Tq_, lb_)
        )
        bp, bq = _block_size(Rp_.shape[0]), _block_size(Rq_.shape[0])
        op, RpB, DpB, TpB, tmax_p = _blocks(Rp, Dp, Tp, bp)
        oq, RqB, DqB, TqB, tmax_q = _blocks(Rq, Dq, Tq, bq)
        nbp, nbq = RpB.shape[0], RqB.shape[0]

        # Stage A, every block pair: alive iff M_I(theta_IJ) + M_J(theta_IJ) > 0 (chord bounds).
        tsum = tmax_p[:, None] + tmax_q[None, :]
        theta = lb + c * jax.lax.rsqrt(jnp.maximum(tsum, 1.0))
        m_p = _chord_max(RpB, DpB, theta)
        m_q = _chord_max(RqB, DqB, theta.T).T
        alive = ((tsum > 0) & (m_p + m_q > 0)).reshape(-1)
        n_pairs = nbp * nbq
        pad_a = -(-n_pairs // chunk_cert) * chunk_cert - n_pairs
        pad_e = -(-n_pairs // chunk_exact) * chunk_exact - n_pairs
        count_a = jnp.sum(alive)
        list_a = jnp.nonzero(alive, size=n_pairs + pad_a, fill_value=0)[0].astype(jnp.int32)
        theta_flat = theta.reshape(-1)
        big = jnp.asarray(jnp.inf, dtype)
        dmin_p = jnp.min(jnp.where(RpB > -jnp.inf, DpB, big), axis=1)
        dmin_q = jnp.min(jnp.where(RqB > -jnp.inf, DqB, big), axis=1)

        # Stage B, alive pairs: per-item theta on one side, linear bound on the other.
        def body_b(carry):
            k, buf, n_buf = carry
            ids = jax.lax.dynamic_slice(list_a, (k * chunk_cert,), (chunk_cert,))
            ok = (k * chunk_cert + jnp.arange(chunk_cert)) < count_a
            bi, bj = ids // nbq, ids % nbq
            th = theta_flat[ids][:, None]
            rp, dp, tp = RpB[bi], DpB[bi], TpB[bi]
            rq, dq, tq = RqB[bj], DqB[bj], TqB[bj]
            m_pi = jnp.max(rp - th * dp, axis=1)
            m_qj = jnp.max(rq - th * dq, axis=1)
            th_i = lb + c * jax.lax.rsqrt(jnp.maximum(tp + tmax_q[bj][:, None], 1.0))
            row = jnp.max(rp - th_i * dp - (th_i - th) * dmin_q[bj][:, None], axis=1)
            th_j = lb + c * jax.lax.rsqrt(jnp.maximum(tq + tmax_p[bi][:, None], 1.0))
            col = jnp.max(rq - th_j * dq - (th_j - th) * dmin_p[bi][:, None], axis=1)
            keep = ok & (row + m_qj > 0) & (col + m_pi > 0)
            pos = jnp.where(keep, n_buf + jnp.cumsum(keep) - 1, n_pairs + pad_e)
            buf = buf.at[pos].set(ids, mode="drop")
            return k + 1, buf, n_buf + jnp.sum(keep)

        buf0 = jnp.zeros((n_pairs + pad_e,), jnp.int32)
        _, buf, n_buf = jax.lax.while_loop(
            lambda carry: carry[0] * chunk_cert < count_a,
            body_b,
            (jnp.zeros((), jnp.int32), buf0, jnp.zeros((), count_a.dtype)),
        )

        # Stage C, pairs that passed both certificates: exact evaluation.
        def body_c(carry):
            k, best_v, best_i, best_j = carry
            ids = jax.lax.dynamic_slice(buf, (k * chunk_exact,), (chunk_exact,))
            ok = (k * chunk_exact + jnp.arange(chunk_exact)) < n_buf
            bi, bj = ids // nbq, ids % nbq
            vals = policy_value(
                RpB[bi][:, :, None] + RqB[bj][:, None, :],
                DpB[bi][:, :, None] + DqB[bj][:, None, :],
                TpB[bi][:, :, None] + TqB[bj][:, None, :],
                c,
            )
            vals = jnp.where(ok[:, None, None], vals, -jnp.inf).reshape(-1)
            f = jnp.argmax(vals)
            g, rem = f // (bp * bq), f % (bp * bq)
            pi = op[bi[g] * bp + rem // bq].astype(jnp.int32)
            qj = oq[bj[g] * bq + rem % bq].astype(jnp.int32)
            better = vals[f] > best_v
            return (
                k + 1,
                jnp.where(better, vals[f], best_v),
                jnp.where(better, pi, best_i),
                jnp.where(better, qj, best_j),
            )

        init = (jnp.zeros((), jnp.int32), v0, i0, j0)
        _, best_v, best_i, best_j = jax.lax.while_loop(
            lambda carry: carry[0] * chunk_exact < n_buf, body_c, init
        )
        return jnp.zeros((), bool), best_v, best_i, best_j

    _, best_v, best_i, best_j = jax.lax.while_loop(
        lambda carry: carry[0], search, (need, v0, i0.astype(jnp.int32), j0.astype(jnp.int32))
    )
    u = jnp.concatenate([_unravel(best_i, A, len(P)), _unravel(best_j, A, len(Q))])
    return best_v, u


def lambda_exact_fast(
    n: jax.Array,
    sum_r: jax.Array,
    sum_d: jax.Array,
    c1: jax.typing.ArrayLike,
    log_term: jax.typing.ArrayLike,
    u_prev: jax.Array | None = None,
) -> jax.Array:
    """Clipped ``lambda = max(max_u f(u), 1e-9)`` by :func:`best_policy_exact`.

    Same arguments as ``cucb_lambda.lambda_exact_bruteforce`` plus an optional incumbent
    ``u_prev`` (``(C,)`` int, default all zeros). Returns a scalar of the dtype of ``sum_r``.
    """
    dtype = sum_r.dtype
    c = jnp.sqrt(2.0 * jnp.asarray(c1, dtype) * jnp.asarray(log_term, dtype))
    if u_prev is None:
        u_prev = jnp.zeros((n.shape[0],), jnp.int32)
    value, _ = best_policy_exact(n, sum_r, sum_d, c, u_prev)
    return jnp.maximum(value, jnp.asarray(LAMBDA_FLOOR, dtype))

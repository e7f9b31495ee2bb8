//! PPDSparse (Yen et al. 2017): a greedy active-set method on the dual (10).
//!
//! - **Alg. 1.** The active set A starts as the column's positives. Each round solves the dual
//!   restricted to A, drops the negatives whose αᵢ fell to 0, then searches the other samples for
//!   the κ most violating ones and adds them. Outside A every αᵢ is 0.
//! - **Alg. 2.** The restricted problem is solved by randomized dual coordinate descent: epochs
//!   over A in a random order, each step a clipped Newton step on αᵢ with w = prox_λ(X̂ᵀα) kept up
//!   to date in O(nnz(xᵢ)). A round runs at most 3 epochs while A is still growing fast (the
//!   paper's fixed budget of S steps), and up to 10 once the search adds few samples.
//! - **Alg. 3.** The search needs yᵢ w·xᵢ for the samples outside A. It is computed through X's
//!   columns over the support of w, or of a random sparsification w̃ (R draws of j with
//!   probability |w_j|/‖w‖₁, so E[w̃] = w) when R = ⌈2‖w‖₁²/δ²⌉ is smaller than nnz(w).
//! - **§5.3.** X's columns are pre-sorted by |x_ij|, so the walk down column j stops at the first
//!   entry with |w_j x_ij| < `search_eps`.
//!
//! A sample outside A with αᵢ = 0 adds C·ℓ(yᵢ sᵢ) to the duality gap, so the search ranks samples by
//! their loss. A search with w̃ = w sees every score outside A, so it also yields the primal
//! objective and the duality gap at the cost of A's margins, never O(nnz(X)): the column stops when
//! the gap is below `tol`. When a sparsified search finds nothing, the next round searches with w
//! itself; when an exact one finds nothing but the gap is still too large, the inner tolerance is
//! tightened.

use super::dual::{self, Workspace};
use super::{ColumnStats, LinearColumn, Loss, Problem, SolverParams};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// δ of Alg. 3: the tolerated error of the sparsified scores.
const SPARSIFY_DELTA: f64 = 0.1;
/// A column whose positives are at least 1/`DENSE_POSITIVES` of the samples starts with every
/// sample active.
const DENSE_POSITIVES: usize = 4;
/// The most coordinate-descent epochs per round on the active set. Rounds are cheap to repeat, and
/// the duality gap, not this cap, decides when a column is done.
const INNER_EPOCHS: usize = 10;
/// The most epochs of a round whose active set is still growing fast: the first round, and any
/// round after a search that added at least half as many samples as were active. Alg. 2 runs a
/// fixed budget of steps per round; solving such a round precisely is wasted, because the samples
/// the next search adds change the problem and the α are re-optimised with them anyway.
const GROWING_EPOCHS: usize = 3;

pub(crate) fn solve(
    p: &Problem<'_>,
    positives: &[u32],
    params: &SolverParams,
    seed: u64,
    ws: &mut Workspace,
) -> LinearColumn {
    ws.begin(positives);
    let n = p.n();
    let c = f64::from(params.c);
    let tol = f64::from(params.tol);
    let mut stats = ColumnStats::default();
    if n == 0 {
        stats.converged = true;
        return ws.finish(params, positives, stats);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    if positives.len().saturating_mul(DENSE_POSITIVES) >= n {
        // Each round at least doubles A (κ grows to |A|), so with this many positives A would
        // cover nearly every sample within two rounds anyway; starting there saves those rounds
        // and their searches (the balanced internal nodes of a label tree are such columns).
        ws.active.extend(0..n as u32);
        ws.in_active[..n].fill(true);
    } else {
        for &i in positives {
            ws.active.push(i);
            ws.in_active[i as usize] = true;
        }
    }
    let mut inner_tol = 0.1;
    // An estimate of F, for the per-sample threshold of the logistic loss (whose every sample has a
    // positive loss): the trivial solution w = 0, w₀ = −1 costs about 2·C·n_p (Theorem 3.2).
    let mut f_est = (2.0 * c * positives.len() as f64).max(1.0);
    let mut candidates: Vec<(f64, u32)> = Vec::new();
    let mut wtilde: Vec<(u32, f64)> = Vec::new();
    let mut working: Vec<u32> = Vec::new();
    let mut force_exact = false;
    let mut epochs = GROWING_EPOCHS;
    for _ in 0..params.max_iter {
        stats.iterations += 1;
        // Alg. 2 on the active set (with liblinear-style shrinking inside the round).
        let active = std::mem::take(&mut ws.active);
        dual::descend(
            p,
            ws,
            &active,
            &mut working,
            params,
            &mut rng,
            epochs,
            inner_tol,
            &mut stats.updates,
        );
        ws.active = active;
        // Step 4: negatives whose α fell to 0 leave the active set.
        let (alpha, positive, in_active) = (&ws.alpha, &ws.positive, &mut ws.in_active);
        ws.active.retain(|&i| {
            let keep = positive[i as usize] || alpha[i as usize] > 0.0;
            if !keep {
                in_active[i as usize] = false;
            }
            keep
        });

        // Alg. 1 step 1–2: the search, with w̃ = w (exact) or its random sparsification.
        let theta = if params.loss == Loss::Logistic {
            0.1 * tol * f_est / n as f64
        } else {
            0.0
        };
        let exact = sparsify(ws, &mut rng, &mut wtilde, force_exact);
        let outside = if exact && rows_cheaper(p, &wtilde) {
            search_rows(p, ws, params, theta, &mut candidates)
        } else {
            search(p, ws, &wtilde, params, theta, &mut rng, &mut candidates)
        };
        if exact {
            // With w̃ = w the search saw every score outside A (up to the §5.3 truncation), so
            // the duality gap costs only the margins of A.
            let reg = ws.regularizer(f64::from(params.l1));
            let g = ws.dual_objective(&ws.active, params);
            // F ≥ reg + outside =: F_lb, and with G < 0 the gap 1 + G/F grows with F: when
            // 1 + G/F_lb already exceeds tol the round cannot be the last, and A's margins (an
            // epoch's worth of work) are not needed. The logistic loss wants F itself for θ.
            let lower = reg + outside;
            let surely_open =
                params.loss != Loss::Logistic && g < 0.0 && lower > 1e-12 && 1.0 + g / lower > tol;
            if !surely_open {
                let mut inside = 0.0;
                for k in 0..ws.active.len() {
                    let i = ws.active[k] as usize;
                    inside += dual::loss(params.loss, ws.y(i) * ws.margin(p, i));
                }
                let primal = reg + c * inside + outside;
                stats.primal = primal;
                stats.gap = (primal + g) / primal.max(1e-12);
                f_est = primal.max(1e-12);
                if stats.gap <= tol {
                    stats.converged = true;
                    break;
                }
            }
            if candidates.is_empty() {
                // Nothing left to add: the active problem needs solving more precisely.
                inner_tol *= 0.25;
            }
            force_exact = false;
        } else if candidates.is_empty() {
            // The sparsified search found nothing: check with the exact w next round.
            force_exact = true;
        }
        // κ new samples per round, or as many as are already active when that is more: a column
        // whose support is a large share of the samples then needs O(log n) rounds, not O(n / κ).
        take_top(&mut candidates, params.kappa.max(ws.active.len()));
        epochs = if 2 * candidates.len() >= ws.active.len() {
            GROWING_EPOCHS
        } else {
            INNER_EPOCHS
        };
        for &(_, i) in &candidates {
            ws.active.push(i);
            ws.in_active[i as usize] = true;
        }
        candidates.clear();
    }
    if !stats.converged {
        ws.all_scores(p);
        stats.primal = ws.primal_from_scores(params);
        let g = ws.dual_objective(&ws.active, params);
        stats.gap = (stats.primal + g) / stats.primal.max(1e-12);
        stats.converged = stats.gap <= tol;
    }
    stats.active = ws.active.len() as u32;
    ws.finish(params, positives, stats)
}

/// Alg. 3: fills `out` with w̃, either w itself (when that is no larger, or `exact`) or a random
/// sparsification with R = ⌈2‖w‖₁²/δ²⌉ draws. Returns whether w̃ = w.
fn sparsify(ws: &Workspace, rng: &mut ChaCha8Rng, out: &mut Vec<(u32, f64)>, exact: bool) -> bool {
    out.clear();
    let mut l1 = 0.0;
    let mut nnz = 0usize;
    for &j in &ws.touched {
        let w = ws.w[j as usize];
        if w != 0.0 {
            l1 += w.abs();
            nnz += 1;
        }
    }
    let r = (2.0 * l1 * l1 / (SPARSIFY_DELTA * SPARSIFY_DELTA)).ceil();
    if exact || r >= nnz as f64 || l1 == 0.0 {
        out.extend(
            ws.touched
                .iter()
                .map(|&j| (j, ws.w[j as usize]))
                .filter(|p| p.1 != 0.0),
        );
        return true;
    }
    // Draw R indices by |w_j|/‖w‖₁: sort R uniforms, then walk the cumulative sums once.
    let r = r as usize;
    let mut u: Vec<f64> = (0..r).map(|_| rng.random::<f64>() * l1).collect();
    u.sort_by(f64::total_cmp);
    let scale = l1 / r as f64;
    let mut acc = 0.0;
    let mut k = 0;
    for &j in &ws.touched {
        let w = ws.w[j as usize];
        if w == 0.0 {
            continue;
        }
        acc += w.abs();
        let mut count = 0usize;
        while k < u.len() && u[k] < acc {
            count += 1;
            k += 1;
        }
        if count > 0 {
            out.push((j, w.signum() * count as f64 * scale));
        }
    }
    false
}

/// Scores the samples that share a feature with w̃ (walking each column until |w̃_j x_ij| drops
/// below `search_eps`), and collects the violators outside the active set as (C·loss, row).
/// Returns C·Σ ℓ over all samples outside the active set, as far as w̃ tells.
fn search(
    p: &Problem<'_>,
    ws: &mut Workspace,
    wtilde: &[(u32, f64)],
    params: &SolverParams,
    theta: f64,
    rng: &mut ChaCha8Rng,
    out: &mut Vec<(f64, u32)>,
) -> f64 {
    let c = f64::from(params.c);
    let eps = f64::from(params.search_eps);
    for &(j, w) in wtilde {
        let (a, b) = (p.col_start[j as usize], p.col_start[j as usize + 1]);
        for (&r, &x) in p.col_rows[a..b].iter().zip(&p.col_vals[a..b]) {
            let contrib = w * f64::from(x);
            if contrib.abs() < eps {
                break;
            }
            let r = r as usize;
            if !ws.is_scored[r] {
                ws.is_scored[r] = true;
                ws.scored.push(r as u32);
            }
            ws.score[r] += contrib;
        }
    }
    let mut outside = 0.0;
    let mut scored_outside = 0usize;
    for k in 0..ws.scored.len() {
        let i = ws.scored[k] as usize;
        if !ws.in_active[i] {
            let l = c * dual::loss(params.loss, ws.y(i) * (ws.score[i] + ws.v0));
            outside += l;
            scored_outside += 1;
            if l > theta {
                out.push((l, i as u32));
            }
        }
    }
    // Samples sharing no feature with w̃ all score w₀ (they are negatives: positives are active).
    // If that violates, sample rows at random instead of scanning all n.
    let untouched_loss = c * dual::loss(params.loss, -ws.v0);
    outside += untouched_loss * (p.n() - ws.active.len() - scored_outside) as f64;
    if untouched_loss > theta && ws.scored.len() < p.n() {
        for _ in 0..params.kappa {
            let i = rng.random_range(0..p.n());
            if !ws.in_active[i] && !ws.is_scored[i] && !ws.positive[i] {
                ws.is_scored[i] = true;
                ws.scored.push(i as u32);
                out.push((untouched_loss, i as u32));
            }
        }
    }
    ws.clear_scores();
    outside
}

/// Whether scoring every row through its own non-zeros costs less than walking X's columns over
/// supp(w̃). A row's score is a gather with independent partial sums, while the column walk
/// scatters into per-row accumulators and tracks which rows it reached: at equal non-zeros the
/// scatter costs about twice as much, so rows win once supp(w̃) covers half of X.
fn rows_cheaper(p: &Problem<'_>, wtilde: &[(u32, f64)]) -> bool {
    let walked: usize = wtilde
        .iter()
        .map(|&(j, _)| p.col_start[j as usize + 1] - p.col_start[j as usize])
        .sum();
    2 * walked >= p.nnz()
}

/// The exact search: every row outside the active set scored by w itself through its own
/// non-zeros, with no §5.3 truncation. Collects the violators as (C·loss, row) and returns
/// C·Σ ℓ outside the active set, as [`search`] does.
fn search_rows(
    p: &Problem<'_>,
    ws: &Workspace,
    params: &SolverParams,
    theta: f64,
    out: &mut Vec<(f64, u32)>,
) -> f64 {
    let c = f64::from(params.c);
    let mut outside = 0.0;
    for i in 0..p.n() {
        if ws.in_active[i] {
            continue;
        }
        let l = c * dual::loss(params.loss, ws.y(i) * ws.margin(p, i));
        outside += l;
        if l > theta {
            out.push((l, i as u32));
        }
    }
    outside
}

/// Keeps the `k` largest by loss (ties by row, for determinism).
fn take_top(c: &mut Vec<(f64, u32)>, k: usize) {
    let cmp = |a: &(f64, u32), b: &(f64, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
    if c.len() > k {
        c.select_nth_unstable_by(k - 1, cmp);
        c.truncate(k);
    }
    c.sort_unstable_by(cmp);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::SparseMatrix;

    /// A seeded random CSR matrix with sorted, distinct column ids per row.
    fn random_x(n: usize, d: usize, per_row: usize, seed: u64) -> SparseMatrix {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (mut indptr, mut indices, mut data) = (vec![0usize], Vec::new(), Vec::new());
        for _ in 0..n {
            let mut cols: Vec<u32> = (0..per_row)
                .map(|_| rng.random_range(0..d as u32))
                .collect();
            cols.sort_unstable();
            cols.dedup();
            for &j in &cols {
                indices.push(j);
                data.push(rng.random_range(0.1f32..1.0));
            }
            indptr.push(indices.len());
        }
        SparseMatrix::new((n, d), indptr, indices, data)
    }

    #[test]
    fn row_search_matches_the_exact_column_walk() {
        let x = random_x(300, 40, 6, 3);
        let p = Problem::new(&x).unwrap();
        let positives: Vec<u32> = (0..300).step_by(7).collect();
        let params = SolverParams {
            search_eps: 0.0,
            ..SolverParams::DEFAULT
        };
        let mut ws = Workspace::new(p.n(), 40);
        ws.begin(&positives);
        // Some w and active set: a few coordinate steps on the positives.
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for &i in &positives[..20] {
            ws.active.push(i);
            ws.in_active[i as usize] = true;
            ws.apply(&p, i as usize, 0.3, 0.0);
        }
        let mut wtilde = Vec::new();
        assert!(sparsify(&ws, &mut rng, &mut wtilde, true));
        let (mut by_cols, mut by_rows) = (Vec::new(), Vec::new());
        let a = search(&p, &mut ws, &wtilde, &params, 0.0, &mut rng, &mut by_cols);
        let b = search_rows(&p, &ws, &params, 0.0, &mut by_rows);
        assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0), "{a} vs {b}");
        take_top(&mut by_cols, usize::MAX >> 1);
        take_top(&mut by_rows, usize::MAX >> 1);
        assert_eq!(by_cols.len(), by_rows.len());
        for (c, r) in by_cols.iter().zip(&by_rows) {
            assert_eq!(c.1, r.1);
            assert!((c.0 - r.0).abs() <= 1e-9 * c.0.max(1.0));
        }
    }
}

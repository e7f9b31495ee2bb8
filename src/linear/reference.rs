//! The reference solver: dual coordinate descent over all samples with shrinking (Hsieh et al.
//! 2008, the method of liblinear's `-s 1` and `-s 7`), for the same objective as PPDSparse.
//!
//! Each epoch visits the unshrunk samples in a random order and takes one exact (λ = 0) or
//! conservative (λ > 0) Newton step per coordinate. A sample at a bound whose gradient points out of
//! the box by more than last epoch's extreme projected gradients is shrunk. When the shrunk problem
//! looks solved, the duality gap over *all* samples decides: stop, or unshrink and go on.

use super::dual::{self, Workspace};
use super::{ColumnStats, LinearColumn, Loss, Problem, SolverParams};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Shuffles `v` in place (Fisher–Yates), deterministically for a given generator state.
pub(crate) fn shuffle(v: &mut [u32], rng: &mut ChaCha8Rng) {
    for k in (1..v.len()).rev() {
        let j = rng.random_range(0..=k);
        v.swap(k, j);
    }
}

pub(crate) fn solve(
    p: &Problem<'_>,
    positives: &[u32],
    params: &SolverParams,
    seed: u64,
    ws: &mut Workspace,
) -> LinearColumn {
    ws.begin(positives);
    let n = p.n();
    let (c, l1) = (f64::from(params.c), f64::from(params.l1));
    let tol = f64::from(params.tol);
    let all: Vec<u32> = (0..n as u32).collect();
    let mut stats = ColumnStats::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let shrink = params.loss != Loss::Logistic;
    let up = dual::upper(params.loss, c);
    ws.active.clear();
    ws.active.extend_from_slice(&all);
    let (mut pg_max_old, mut pg_min_old) = (f64::INFINITY, f64::NEG_INFINITY);
    // The projected-gradient spread at which the shrunk problem counts as solved; tightened each
    // time the gap over all samples says it was not.
    let mut eps = 0.1;
    for _ in 0..params.max_iter {
        stats.iterations += 1;
        let mut active = std::mem::take(&mut ws.active);
        shuffle(&mut active, &mut rng);
        let (mut pg_max, mut pg_min) = (f64::NEG_INFINITY, f64::INFINITY);
        let mut k = 0;
        while k < active.len() {
            let i = active[k] as usize;
            let ys = ws.y(i) * ws.margin(p, i);
            let a = ws.alpha[i];
            if shrink {
                let g = dual::gradient(params.loss, c, a, ys);
                if (a <= 0.0 && g > pg_max_old) || (a >= up && g < pg_min_old) {
                    active.swap_remove(k);
                    continue;
                }
            }
            let pg = dual::projected_gradient(params.loss, c, a, ys);
            pg_max = pg_max.max(pg);
            pg_min = pg_min.min(pg);
            if pg.abs() > 1e-12 {
                let next = dual::step(params.loss, c, a, ys, p.q_diag[i]);
                if next != a {
                    ws.apply(p, i, next - a, l1);
                    stats.updates += 1;
                }
            }
            k += 1;
        }
        ws.active = active;
        let spread = pg_max - pg_min;
        // A NaN spread (no sample visited) also counts as solved.
        let solved_here = spread.is_nan() || spread <= eps || ws.active.is_empty();
        if solved_here {
            ws.all_scores(p);
            let primal = ws.primal_from_scores(params);
            let gap = (primal + ws.dual_objective(&all, params)) / primal.max(1e-12);
            stats.primal = primal;
            stats.gap = gap;
            if gap <= tol {
                stats.converged = true;
                break;
            }
            eps *= 0.1;
            ws.active.clear();
            ws.active.extend_from_slice(&all);
            pg_max_old = f64::INFINITY;
            pg_min_old = f64::NEG_INFINITY;
        } else {
            pg_max_old = if pg_max <= 0.0 { f64::INFINITY } else { pg_max };
            pg_min_old = if pg_min >= 0.0 {
                f64::NEG_INFINITY
            } else {
                pg_min
            };
        }
    }
    if !stats.converged {
        ws.all_scores(p);
        stats.primal = ws.primal_from_scores(params);
        stats.gap = (stats.primal + ws.dual_objective(&all, params)) / stats.primal.max(1e-12);
        stats.converged = stats.gap <= tol;
    }
    stats.active = ws.active.len() as u32;
    // `finish` resets `in_active` only for listed rows; the reference never sets it.
    ws.active.clear();
    ws.finish(params, stats)
}

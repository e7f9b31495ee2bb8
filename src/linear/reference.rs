//! The reference solver: dual coordinate descent over all samples with shrinking (Hsieh et al.
//! 2008, the method of liblinear's `-s 1` and `-s 7`), for the same objective as PPDSparse.
//!
//! Each epoch visits the unshrunk samples in a random order and takes one exact (λ = 0) or
//! conservative (λ > 0) Newton step per coordinate. A sample at a bound whose gradient points out of
//! the box by more than last epoch's extreme projected gradients is shrunk. When the shrunk problem
//! looks solved, the duality gap over *all* samples decides: stop, or unshrink and go on.

use super::dual::{self, Workspace};
use super::{ColumnStats, LinearColumn, Problem, SolverParams};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub(crate) fn solve(
    p: &Problem<'_>,
    positives: &[u32],
    params: &SolverParams,
    seed: u64,
    ws: &mut Workspace,
) -> LinearColumn {
    ws.begin(positives);
    let n = p.n();
    let tol = f64::from(params.tol);
    let all: Vec<u32> = (0..n as u32).collect();
    let mut stats = ColumnStats::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut working = Vec::with_capacity(n);
    // The projected-gradient spread at which the problem counts as solved (liblinear's 0.1),
    // tightened each time the duality gap says it was not.
    let mut eps = 0.1;
    let mut epochs_left = params.max_iter;
    while epochs_left > 0 {
        // Run in slices of epochs so the iteration cap holds across tightenings.
        let slice = epochs_left.min(10);
        epochs_left -= slice;
        stats.iterations += slice as u32;
        let done = dual::descend(
            p,
            ws,
            &all,
            &mut working,
            params,
            &mut rng,
            slice,
            eps,
            &mut stats.updates,
        );
        if done {
            ws.all_scores(p);
            let primal = ws.primal_from_scores(params);
            stats.primal = primal;
            stats.gap = (primal + ws.dual_objective(&all, params)) / primal.max(1e-12);
            if stats.gap <= tol {
                stats.converged = true;
                break;
            }
            eps *= 0.1;
        }
    }
    if !stats.converged {
        ws.all_scores(p);
        stats.primal = ws.primal_from_scores(params);
        stats.gap = (stats.primal + ws.dual_objective(&all, params)) / stats.primal.max(1e-12);
        stats.converged = stats.gap <= tol;
    }
    stats.active = working.len() as u32;
    ws.alpha[..n].fill(0.0);
    ws.finish(params, positives, stats)
}

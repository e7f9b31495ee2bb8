//! The dual machinery both solvers share: per-thread scratch, the maintained primal vector
//! w = prox_λ(v), single-coordinate updates, objectives and the extraction of a pruned column.

use super::{ColumnStats, LinearColumn, Loss, Problem, SolverParams};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// Shuffles `v` in place (Fisher–Yates), deterministically for a given generator state.
fn shuffle(v: &mut [u32], rng: &mut ChaCha8Rng) {
    for k in (1..v.len()).rev() {
        let j = rng.random_range(0..=k);
        v.swap(k, j);
    }
}

/// Per-thread scratch, sized for one problem and reused across its columns. Every array is
/// restored to zero (or false) after each column, touching only what the column touched.
pub(crate) struct Workspace {
    /// v = Σᵢ αᵢ yᵢ xᵢ (unthresholded), per feature; unused (left zero) when λ = 0, where w = v.
    pub v: Vec<f64>,
    /// w = prox_λ(v), per feature.
    pub w: Vec<f64>,
    /// Features with a non-zero v, in first-touched order.
    pub touched: Vec<u32>,
    pub is_touched: Vec<bool>,
    /// Rows whose features are all in `touched` (rows that have had an update), and membership:
    /// a row's features are registered on its first update only, not checked on every one.
    pub seen_rows: Vec<u32>,
    pub row_seen: Vec<bool>,
    /// The bias coordinate of v (and of w: it is never thresholded).
    pub v0: f64,
    /// Dual variables, per row.
    pub alpha: Vec<f64>,
    /// Whether a row is a positive of the current column.
    pub positive: Vec<bool>,
    /// Scratch scores per row and the rows that hold one.
    pub score: Vec<f64>,
    pub scored: Vec<u32>,
    pub is_scored: Vec<bool>,
    /// Whether `score` holds values from [`Workspace::all_scores`] (else it is zero outside
    /// `scored`).
    pub score_dirty: bool,
    /// The current problem's number of rows (the arrays may be longer).
    pub n: usize,
    /// The active set (PPDSparse) or the unshrunk rows (reference), and membership.
    pub active: Vec<u32>,
    pub in_active: Vec<bool>,
}

impl Workspace {
    pub fn new(n: usize, d: usize) -> Self {
        Workspace {
            v: vec![0.0; d],
            w: vec![0.0; d],
            touched: Vec::new(),
            is_touched: vec![false; d],
            seen_rows: Vec::new(),
            row_seen: vec![false; n],
            v0: 0.0,
            alpha: vec![0.0; n],
            positive: vec![false; n],
            score: vec![0.0; n],
            scored: Vec::new(),
            is_scored: vec![false; n],
            score_dirty: false,
            n,
            active: Vec::new(),
            in_active: vec![false; n],
        }
    }

    /// Grows the per-feature and per-row arrays to at least `d` and `n` (new slots clean).
    pub fn ensure(&mut self, n: usize, d: usize) {
        self.n = n;
        if self.v.len() < d {
            self.v.resize(d, 0.0);
            self.w.resize(d, 0.0);
            self.is_touched.resize(d, false);
        }
        if self.alpha.len() < n {
            self.alpha.resize(n, 0.0);
            self.positive.resize(n, false);
            self.score.resize(n, 0.0);
            self.is_scored.resize(n, false);
            self.in_active.resize(n, false);
            self.row_seen.resize(n, false);
        }
    }

    /// Marks the column's positives.
    pub fn begin(&mut self, positives: &[u32]) {
        for &i in positives {
            self.positive[i as usize] = true;
        }
    }

    #[inline]
    pub fn y(&self, i: usize) -> f64 {
        if self.positive[i] { 1.0 } else { -1.0 }
    }

    /// w·xᵢ + w₀.
    #[inline]
    pub fn margin(&self, p: &Problem<'_>, i: usize) -> f64 {
        let row = p.row(i);
        let w = &self.w[..];
        // Four partial sums: one chain of dependent additions would make this loop, the
        // hottest of training, wait on the adder's latency at every non-zero.
        let mut s = [0.0f64; 4];
        let chunks = row.chunks_exact(4);
        let rest = chunks.remainder();
        for e in chunks {
            s[0] += w[e[0].j as usize] * f64::from(e[0].x);
            s[1] += w[e[1].j as usize] * f64::from(e[1].x);
            s[2] += w[e[2].j as usize] * f64::from(e[2].x);
            s[3] += w[e[3].j as usize] * f64::from(e[3].x);
        }
        for e in rest {
            s[0] += w[e.j as usize] * f64::from(e.x);
        }
        self.v0 + ((s[0] + s[1]) + (s[2] + s[3]))
    }

    /// Applies αᵢ += delta, keeping v and w = prox_λ(v) in step.
    #[inline]
    pub fn apply(&mut self, p: &Problem<'_>, i: usize, delta: f64, l1: f64) {
        self.alpha[i] += delta;
        let dy = delta * self.y(i);
        self.v0 += dy;
        let row = p.row(i);
        if !self.row_seen[i] {
            // In the order the per-update check would have found them, so `touched` (and every
            // sum over it) comes out the same.
            self.row_seen[i] = true;
            self.seen_rows.push(i as u32);
            for e in row {
                let j = e.j as usize;
                if !self.is_touched[j] {
                    self.is_touched[j] = true;
                    self.touched.push(j as u32);
                }
            }
        }
        if l1 == 0.0 {
            // Without the ℓ1 term prox is the identity: w = v, so only w is kept (half the
            // memory traffic of the update, which dominates training).
            for e in row {
                self.w[e.j as usize] += dy * f64::from(e.x);
            }
            return;
        }
        for e in row {
            let j = e.j as usize;
            let v = self.v[j] + dy * f64::from(e.x);
            self.v[j] = v;
            self.w[j] = soft_threshold(v, l1);
        }
    }

    /// ½‖w‖² + ½w₀² + λ‖w‖₁ over the current w.
    pub fn regularizer(&self, l1: f64) -> f64 {
        let mut r = 0.5 * self.v0 * self.v0;
        for &j in &self.touched {
            let w = self.w[j as usize];
            r += 0.5 * w * w + l1 * w.abs();
        }
        r
    }

    /// ½‖w‖² + ½w₀² (the first part of G).
    pub fn half_norm(&self) -> f64 {
        let mut r = 0.5 * self.v0 * self.v0;
        for &j in &self.touched {
            let w = self.w[j as usize];
            r += 0.5 * w * w;
        }
        r
    }

    /// Exact scores w·xᵢ + w₀ of every row into `score`, through X's columns.
    pub fn all_scores(&mut self, p: &Problem<'_>) {
        self.clear_scores();
        self.score_dirty = true;
        let v0 = self.v0;
        self.score[..self.n].fill(v0);
        for &j in &self.touched {
            let w = self.w[j as usize];
            if w != 0.0 {
                let (a, b) = (p.col_start[j as usize], p.col_start[j as usize + 1]);
                for (&r, &x) in p.col_rows[a..b].iter().zip(&p.col_vals[a..b]) {
                    self.score[r as usize] += w * f64::from(x);
                }
            }
        }
    }

    /// Zeroes `score` and forgets the scored rows.
    pub fn clear_scores(&mut self) {
        if self.score_dirty {
            self.score[..self.n].fill(0.0);
            self.score_dirty = false;
        }
        for &i in &self.scored {
            self.score[i as usize] = 0.0;
            self.is_scored[i as usize] = false;
        }
        self.scored.clear();
    }

    /// The primal objective F(w) from `score` holding every row's exact score.
    pub fn primal_from_scores(&self, params: &SolverParams) -> f64 {
        let mut l = 0.0;
        for (i, &s) in self.score[..self.n].iter().enumerate() {
            l += loss(params.loss, self.y(i) * s);
        }
        self.regularizer(f64::from(params.l1)) + f64::from(params.c) * l
    }

    /// G(α) = ½‖w(α)‖² + Σᵢ φ(αᵢ) over the rows in `rows` (every row with αᵢ ≠ 0 must be there).
    pub fn dual_objective(&self, rows: &[u32], params: &SolverParams) -> f64 {
        let c = f64::from(params.c);
        let mut g = self.half_norm();
        for &i in rows {
            g += phi(params.loss, c, self.alpha[i as usize]);
        }
        g
    }

    /// Builds the pruned column and resets everything the column touched: αᵢ must be zero outside
    /// `active` (the reference solver clears its dense α itself), and `positives` are the column's.
    pub fn finish(
        &mut self,
        params: &SolverParams,
        positives: &[u32],
        mut stats: ColumnStats,
    ) -> LinearColumn {
        let prune = f64::from(params.prune);
        let mut kept: Vec<(u32, f32)> = Vec::new();
        for &j in &self.touched {
            let w = self.w[j as usize];
            if w != 0.0 && w.abs() >= prune {
                kept.push((j, w as f32));
            }
            self.v[j as usize] = 0.0;
            self.w[j as usize] = 0.0;
            self.is_touched[j as usize] = false;
        }
        self.touched.clear();
        for &i in &self.seen_rows {
            self.row_seen[i as usize] = false;
        }
        self.seen_rows.clear();
        kept.sort_unstable_by_key(|p| p.0);
        let bias = self.v0 as f32;
        self.v0 = 0.0;
        for &i in &self.active {
            self.in_active[i as usize] = false;
            self.alpha[i as usize] = 0.0;
        }
        for &i in positives {
            self.positive[i as usize] = false;
        }
        self.active.clear();
        self.clear_scores();
        if !stats.primal.is_finite() {
            stats.primal = f64::MAX;
        }
        LinearColumn {
            indices: kept.iter().map(|p| p.0).collect(),
            values: kept.iter().map(|p| p.1).collect(),
            bias: if bias.is_finite() { bias } else { 0.0 },
            stats,
        }
    }
}

#[inline]
fn soft_threshold(v: f64, l1: f64) -> f64 {
    if v > l1 {
        v - l1
    } else if v < -l1 {
        v + l1
    } else {
        0.0
    }
}

/// ℓ(z), without C.
#[inline]
pub(crate) fn loss(loss: Loss, z: f64) -> f64 {
    match loss {
        Loss::SquaredHinge => {
            let m = (1.0 - z).max(0.0);
            m * m
        }
        Loss::Hinge => (1.0 - z).max(0.0),
        Loss::Logistic => {
            if z > 0.0 {
                (-z).exp().ln_1p()
            } else {
                -z + z.exp().ln_1p()
            }
        }
    }
}

/// φ(α), the per-sample part of the dual objective G.
#[inline]
fn phi(loss: Loss, c: f64, a: f64) -> f64 {
    match loss {
        Loss::SquaredHinge => -a + a * a / (4.0 * c),
        Loss::Hinge => -a,
        Loss::Logistic => xlogx_over(a, c) + xlogx_over(c - a, c),
    }
}

/// x ln(x / c), with 0 ln 0 = 0.
#[inline]
fn xlogx_over(x: f64, c: f64) -> f64 {
    if x <= 0.0 { 0.0 } else { x * (x / c).ln() }
}

/// The largest value αᵢ may take.
#[inline]
pub(crate) fn upper(loss: Loss, c: f64) -> f64 {
    match loss {
        Loss::SquaredHinge => f64::INFINITY,
        Loss::Hinge | Loss::Logistic => c,
    }
}

/// ∂G/∂αᵢ at αᵢ = a, given the margin yᵢ(w·xᵢ + w₀) = ys.
#[inline]
pub(crate) fn gradient(loss: Loss, c: f64, a: f64, ys: f64) -> f64 {
    match loss {
        Loss::SquaredHinge => ys - 1.0 + a / (2.0 * c),
        Loss::Hinge => ys - 1.0,
        Loss::Logistic => {
            if a <= 0.0 {
                f64::NEG_INFINITY
            } else if a >= c {
                f64::INFINITY
            } else {
                ys + (a / (c - a)).ln()
            }
        }
    }
}

/// The projected gradient: zero when the bound stops the coordinate from moving downhill.
#[inline]
pub(crate) fn projected_gradient(loss: Loss, c: f64, a: f64, ys: f64) -> f64 {
    let g = gradient(loss, c, a, ys);
    if loss == Loss::Logistic {
        // The optimum is interior: at αᵢ = 0 the gradient is −∞, so an untouched sample always
        // wants a step. Report it as a unit violation rather than an infinity.
        if a <= 0.0 {
            return -1.0;
        }
        return g;
    }
    if a <= 0.0 {
        g.min(0.0)
    } else if a >= upper(loss, c) {
        g.max(0.0)
    } else {
        g
    }
}

/// The new value of αᵢ from one coordinate step, given its margin ys and q = ‖x̂ᵢ‖² (an upper
/// bound on the curvature of ½‖w(α)‖² along αᵢ, exact when λ = 0).
#[inline]
pub(crate) fn step(loss: Loss, c: f64, a: f64, ys: f64, q: f64) -> f64 {
    match loss {
        Loss::SquaredHinge => {
            let h = q + 1.0 / (2.0 * c);
            (a - (ys - 1.0 + a / (2.0 * c)) / h).max(0.0)
        }
        Loss::Hinge => (a - (ys - 1.0) / q).clamp(0.0, c),
        Loss::Logistic => {
            // Minimise ys·(z − a) + ½q(z − a)² + z ln z + (c − z) ln(c − z) over z ∈ (0, c) by a
            // safeguarded Newton method (Yu, Huang & Lin 2011).
            let mut z = if a > 0.0 && a < c {
                a
            } else {
                (1e-3 * c).min(1e-8f64.max(1e-3 * c))
            };
            for _ in 0..20 {
                let g = ys + q * (z - a) + (z / (c - z)).ln();
                let h = q + c / (z * (c - z));
                let mut next = z - g / h;
                if next <= 0.0 {
                    next = z * 0.1;
                } else if next >= c {
                    next = z + (c - z) * 0.9;
                }
                let done = (next - z).abs() <= 1e-12 * c;
                z = next;
                if done {
                    break;
                }
            }
            z
        }
    }
}

/// Dual coordinate descent with shrinking (Hsieh et al. 2008) over the samples `set`, until the
/// spread of projected gradients is at most `eps` over the whole set, or `max_epochs` epochs.
/// Each epoch visits the unshrunk samples in a random order. Returns whether it converged, and
/// adds to `updates` the coordinate steps taken.
#[allow(clippy::too_many_arguments)]
pub(crate) fn descend(
    p: &Problem<'_>,
    ws: &mut Workspace,
    set: &[u32],
    working: &mut Vec<u32>,
    params: &SolverParams,
    rng: &mut ChaCha8Rng,
    max_epochs: usize,
    eps: f64,
    updates: &mut u64,
) -> bool {
    let (c, l1) = (f64::from(params.c), f64::from(params.l1));
    let shrink = params.loss != Loss::Logistic;
    let up = upper(params.loss, c);
    working.clear();
    working.extend_from_slice(set);
    let (mut pg_max_old, mut pg_min_old) = (f64::INFINITY, f64::NEG_INFINITY);
    for _ in 0..max_epochs {
        shuffle(working, rng);
        let (mut pg_max, mut pg_min) = (f64::NEG_INFINITY, f64::INFINITY);
        let mut k = 0;
        while k < working.len() {
            let i = working[k] as usize;
            let ys = ws.y(i) * ws.margin(p, i);
            let a = ws.alpha[i];
            if shrink {
                let g = gradient(params.loss, c, a, ys);
                if (a <= 0.0 && g > pg_max_old) || (a >= up && g < pg_min_old) {
                    working.swap_remove(k);
                    continue;
                }
            }
            let pg = projected_gradient(params.loss, c, a, ys);
            pg_max = pg_max.max(pg);
            pg_min = pg_min.min(pg);
            if pg.abs() > 1e-12 {
                let next = step(params.loss, c, a, ys, p.q_diag[i]);
                if next != a {
                    ws.apply(p, i, next - a, l1);
                    *updates += 1;
                }
            }
            k += 1;
        }
        // A NaN spread (nothing visited) counts as converged.
        let spread = pg_max - pg_min;
        if spread.is_nan() || spread <= eps {
            if working.len() == set.len() {
                return true;
            }
            // Converged on the shrunk set: verify on the whole set.
            working.clear();
            working.extend_from_slice(set);
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
    false
}

//! Sparse one-vs-all linear classifiers: the PPDSparse solver and its liblinear-style reference.
//!
//! Every classifier in xmc (tree nodes, leaves, a flat model) is a binary linear classifier
//! trained by [`train_columns`]: given one shared CSR matrix X (n × d) and, per output column, the
//! rows that are positive, it solves for each column independently
//!
//! ```text
//!   min_w  λ‖w_{1..d}‖₁ + ½‖w‖² + C·Σᵢ ℓ(yᵢ (w·xᵢ + w₀))
//! ```
//!
//! with yᵢ ∈ {±1} and ℓ the squared hinge (default), the hinge or the logistic loss.
//!
//! **The bias.** As in PPDSparse (Yen et al. 2017, eq. 9), the bias is the weight w₀ of an extra
//! feature x_{i,0} = 1: it is left out of the ℓ1 term (so sparsity never removes it) but sits in
//! ½‖w‖². It is therefore not *fully* unpenalized: its L2 penalty is ½w₀², the same as
//! liblinear's `-B 1` and Parabel's. Both solvers here use this exact objective, so they are
//! compared on equal terms.
//!
//! **The dual** (eq. 10, with C): with v = Σᵢ αᵢ yᵢ x̂ᵢ and w = prox_λ(v) (soft thresholding on
//! every coordinate but the bias), minimise G(α) = ½‖w(α)‖² + Σᵢ φ(αᵢ), where φ(α) = −α + α²/(4C)
//! on α ≥ 0 (squared hinge), −α on [0, C] (hinge), or α ln(α/C) + (C−α) ln((C−α)/C) on [0, C]
//! (logistic). The duality gap F(w(α)) + G(α) ≥ 0 certifies a solution; both solvers stop when it
//! is at most `tol` relative to F, and report it.
//!
//! - [`ppdsparse`]: the greedy active-set method (Alg. 1) with randomized dual coordinate descent
//!   on the active set (Alg. 2), random sparsification of w for the search (Alg. 3), and the
//!   magnitude-sorted, truncated feature columns of §5.3.
//! - [`reference`]: plain dual coordinate descent over all samples with shrinking (Hsieh et al.
//!   2008, as in liblinear). It exists to check and benchmark PPDSparse, not as a fallback.
//!
//! Columns are solved in parallel with rayon, one task per column (dynamic load balancing), over a
//! shared column-major copy of X; each worker thread owns O(n + d) scratch. Each column draws its
//! random numbers from a generator seeded by (seed, column index), so results are bit-identical
//! whatever the thread count or schedule. Columns without positives are one problem, solved once
//! and shared.

mod dual;
pub mod ppdsparse;
pub mod reference;

use crate::data::SparseMatrix;
use crate::seed::derive_seed;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The loss ℓ of the binary classifiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    /// max(0, 1 − z)², the default (Parabel's and PPDSparse's).
    #[serde(alias = "sqhinge")]
    SquaredHinge,
    /// max(0, 1 − z).
    Hinge,
    /// ln(1 + e^(−z)).
    #[serde(alias = "log")]
    Logistic,
}

/// Which algorithm [`train_columns`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The PPDSparse greedy active-set method.
    #[serde(rename = "ppdsparse")]
    PpdSparse,
    /// Dual coordinate descent over all samples with shrinking.
    Reference,
}

/// The solver's hyper-parameters (the `solver.*` train settings, [`crate::config`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SolverParams {
    /// λ, the weight of ‖w‖₁ (the bias excluded).
    pub l1: f32,
    /// C, the weight of the loss.
    pub c: f32,
    /// The loss.
    pub loss: Loss,
    /// Weights with |w| below this are dropped after training (the bias never is).
    pub prune: f32,
    /// The stopping tolerance on the relative duality gap (F + G) / F.
    pub tol: f32,
    /// κ: how many new samples the active set takes per round of PPDSparse.
    pub kappa: usize,
    /// The most outer rounds (PPDSparse) or epochs (reference) per column.
    pub max_iter: usize,
    /// Entries with |w_j · x_ij| below this end the search of column j of X (§5.3).
    pub search_eps: f32,
    /// The algorithm.
    pub method: Method,
    /// The random seed; each column derives its own from it and its index.
    pub seed: u64,
}

impl SolverParams {
    /// The defaults: Parabel's squared hinge with C = 1 and pruning at 0.1, no ℓ1 term.
    pub const DEFAULT: SolverParams = SolverParams {
        l1: 0.0,
        c: 1.0,
        loss: Loss::SquaredHinge,
        prune: 0.1,
        tol: 0.01,
        kappa: 256,
        max_iter: 100,
        search_eps: 1e-4,
        method: Method::PpdSparse,
        seed: 0,
    };
}

impl Default for SolverParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What the solver did for one column.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ColumnStats {
    /// Outer rounds (PPDSparse) or epochs (reference).
    pub iterations: u32,
    /// Coordinate updates made.
    pub updates: u64,
    /// The final active-set size (PPDSparse) or samples not shrunk (reference).
    pub active: u32,
    /// The primal objective F(w) before pruning.
    pub primal: f64,
    /// The relative duality gap (F + G) / max(F, 1e-12) at the end.
    pub gap: f64,
    /// Whether the gap reached the tolerance within `max_iter`.
    pub converged: bool,
}

/// One trained binary classifier.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinearColumn {
    /// Sorted feature ids of the kept weights.
    pub indices: Vec<u32>,
    /// Their weights, all finite.
    pub values: Vec<f32>,
    /// The bias w₀.
    pub bias: f32,
    /// What the solver did.
    pub stats: ColumnStats,
}

/// Why a problem was refused.
#[derive(Debug, Error, PartialEq)]
pub enum SolverError {
    /// A positive row index is not below the number of rows.
    #[error("column {column}: positive row {row} is out of range (the matrix has {rows} rows)")]
    RowOutOfRange {
        /// The column.
        column: usize,
        /// The offending row.
        row: u32,
        /// The number of rows.
        rows: usize,
    },
    /// A column's positives are not sorted and unique.
    #[error("column {column}: positive rows are not strictly increasing")]
    Unsorted {
        /// The column.
        column: usize,
    },
    /// X holds a NaN or an infinity.
    #[error("the feature matrix holds a non-finite value at row {row}")]
    NonFinite {
        /// The row.
        row: usize,
    },
    /// The selected rows are not strictly increasing, or not all below the number of rows.
    #[error("the selected rows are not strictly increasing below {rows}")]
    BadSelection {
        /// The number of rows.
        rows: usize,
    },
    /// A hyper-parameter is out of its domain.
    #[error("bad solver parameter: {0}")]
    Param(String),
}

/// Maps a classifier score to a node log-probability, always ≤ 0 and non-increasing in 1 − s:
/// −max(0, 1 − s)² for the squared hinge and the hinge (both are trained for a margin of 1),
/// −ln(1 + e^(−s)) for the logistic loss.
#[inline]
pub fn score_to_log_prob(loss: Loss, s: f32) -> f32 {
    match loss {
        Loss::SquaredHinge | Loss::Hinge => {
            let m = (1.0 - s).max(0.0);
            -m * m
        }
        Loss::Logistic => {
            // ln(1 + e^(−s)) computed without overflow for either sign of s.
            if s > 0.0 {
                -(-s).exp().ln_1p()
            } else {
                s - s.exp().ln_1p()
            }
        }
    }
}

/// X in both orientations, shared by every column of one call. It owns its column-major copy,
/// and its rows either as a packed copy of its own or borrowed from a [`PackedRows`] store.
pub(crate) struct Problem<'a> {
    n: usize,
    d: usize,
    nnz: usize,
    /// Column j of X is `col_rows/col_vals[col_start[j]..col_start[j + 1]]`, sorted by |value|
    /// descending (ties by row), for the truncated search of §5.3.
    pub col_start: Vec<usize>,
    pub col_rows: Vec<u32>,
    pub col_vals: Vec<f32>,
    /// ‖x̂ᵢ‖² = ‖xᵢ‖² + 1 (the bias feature).
    pub q_diag: Vec<f64>,
    rows: Rows<'a>,
}

/// X's rows, packed for the coordinate steps: each feature beside its value, so that a step on a
/// random row reads one contiguous run instead of three arrays.
enum Rows<'a> {
    /// A copy of the rows: row i is `entries[start[i]..start[i + 1]]`.
    Own {
        start: Vec<usize>,
        entries: Vec<Entry>,
    },
    /// Rows `ids` of a store, in the store's column ids.
    Shared {
        store: &'a PackedRows,
        ids: &'a [u32],
    },
}

impl Rows<'_> {
    #[inline]
    fn row(&self, i: usize) -> &[Entry] {
        match self {
            Rows::Own { start, entries } => &entries[start[i]..start[i + 1]],
            Rows::Shared { store, ids } => store.row(ids[i] as usize),
        }
    }
}

/// One non-zero of a packed row: a feature id and its value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub j: u32,
    pub x: f32,
}

/// A data set's feature rows packed once, so that the problem of a node over many of the points
/// can borrow its rows instead of copying them ([`train_columns_of_packed`]).
#[derive(Debug)]
pub struct PackedRows {
    cols: usize,
    start: Vec<usize>,
    entries: Vec<Entry>,
}

impl PackedRows {
    /// Packs the rows of `x`, taking it so that its memory goes once packed (a CSC matrix is
    /// turned to CSR first). A non-finite value is refused, with its row.
    pub fn of(x: SparseMatrix) -> Result<PackedRows, SolverError> {
        let x = if x.is_csr() { x } else { x.to_csr() };
        let mut start = Vec::with_capacity(x.rows() + 1);
        let mut entries = Vec::with_capacity(x.nnz());
        start.push(0);
        for i in 0..x.rows() {
            let (idx, val) = crate::data::row_slices(&x, i);
            for (&j, &v) in idx.iter().zip(val) {
                if !v.is_finite() {
                    return Err(SolverError::NonFinite { row: i });
                }
                entries.push(Entry { j, x: v });
            }
            start.push(entries.len());
        }
        Ok(PackedRows {
            cols: x.cols(),
            start,
            entries,
        })
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.start.len() - 1
    }

    /// The number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    #[inline]
    fn row(&self, i: usize) -> &[Entry] {
        &self.entries[self.start[i]..self.start[i + 1]]
    }
}

/// A selection of at least 1/`SHARED_ROWS` of a store's rows borrows them
/// ([`train_columns_of_packed`]): over most of the points, a copy of its own would cost nearly the
/// whole data set again, and compacting the columns saves little.
const SHARED_ROWS: usize = 8;

impl Problem<'static> {
    fn new(x: &SparseMatrix) -> Result<Self, SolverError> {
        Self::build(x.rows(), x.cols(), |i| csr_row(x, i), |j| j)
    }

    /// The rows of `x` that `row(i)` gives (its i-th selected row) over only the columns they
    /// use, renumbered `0..k` in increasing order, with the map from new column ids to old ones.
    /// A node's problem then has a weight vector of its own features, not of all `cols`: the
    /// solver's gathers and scatters hit a small, cache-resident array. Renumbering keeps the
    /// features' order, so the solver's arithmetic is the same as over the rows with their own
    /// ids.
    fn of_rows<I>(
        n: usize,
        cols: usize,
        row: impl Fn(usize) -> I,
    ) -> Result<(Self, Vec<u32>), SolverError>
    where
        I: ExactSizeIterator<Item = (u32, f32)>,
    {
        // new_id[j] = 1 + the new id of column j, or 0 while j is unseen.
        let mut new_id = vec![0u32; cols];
        let mut used = Vec::new();
        for i in 0..n {
            for (j, _) in row(i) {
                if new_id[j as usize] == 0 {
                    new_id[j as usize] = 1;
                    used.push(j);
                }
            }
        }
        used.sort_unstable();
        for (k, &j) in used.iter().enumerate() {
            // At most cols ≤ u32::MAX + 1 columns, so k + 1 fits.
            new_id[j as usize] = k as u32 + 1;
        }
        let problem = Self::build(n, used.len(), row, |j| new_id[j as usize] - 1)?;
        Ok((problem, used))
    }

    /// Packs n rows over d columns, row i given by `row(i)` with its column ids mapped by `id`
    /// (increasing ids to increasing ids).
    fn build<I>(
        n: usize,
        d: usize,
        row: impl Fn(usize) -> I,
        id: impl Fn(u32) -> u32,
    ) -> Result<Self, SolverError>
    where
        I: ExactSizeIterator<Item = (u32, f32)>,
    {
        let mut start = Vec::with_capacity(n + 1);
        let nnz = (0..n).map(|i| row(i).len()).sum();
        let mut entries = Vec::with_capacity(nnz);
        start.push(0);
        for i in 0..n {
            for (j, v) in row(i) {
                if !v.is_finite() {
                    return Err(SolverError::NonFinite { row: i });
                }
                entries.push(Entry { j: id(j), x: v });
            }
            start.push(entries.len());
        }
        Ok(Problem::with_rows(n, d, Rows::Own { start, entries }))
    }
}

impl<'a> Problem<'a> {
    /// The rows `ids` of `store`, borrowed, over the store's columns (its values were checked when
    /// it was packed).
    fn shared(store: &'a PackedRows, ids: &'a [u32]) -> Self {
        Problem::with_rows(ids.len(), store.cols(), Rows::Shared { store, ids })
    }

    /// The column-major copy and the squared norms of `rows` (n rows over d columns).
    fn with_rows(n: usize, d: usize, rows: Rows<'a>) -> Self {
        let mut q_diag = Vec::with_capacity(n);
        let mut counts = vec![0usize; d + 1];
        let mut nnz = 0;
        for i in 0..n {
            let row = rows.row(i);
            let mut sq = 1.0f64;
            for e in row {
                sq += f64::from(e.x) * f64::from(e.x);
                counts[e.j as usize + 1] += 1;
            }
            nnz += row.len();
            q_diag.push(sq);
        }
        for j in 0..d {
            counts[j + 1] += counts[j];
        }
        let col_start = counts;
        let mut fill = col_start.clone();
        let mut col_rows = vec![0u32; nnz];
        let mut col_vals = vec![0f32; nnz];
        for i in 0..n {
            for e in rows.row(i) {
                let p = &mut fill[e.j as usize];
                col_rows[*p] = i as u32;
                col_vals[*p] = e.x;
                *p += 1;
            }
        }
        for j in 0..d {
            let (a, b) = (col_start[j], col_start[j + 1]);
            if b - a > 1 {
                let mut pairs: Vec<(u32, f32)> = col_rows[a..b]
                    .iter()
                    .copied()
                    .zip(col_vals[a..b].iter().copied())
                    .collect();
                // Rows are distinct, so this order is total and an unstable sort is exact.
                pairs.sort_unstable_by(|p, q| q.1.abs().total_cmp(&p.1.abs()).then(p.0.cmp(&q.0)));
                for (k, (r, v)) in pairs.into_iter().enumerate() {
                    col_rows[a + k] = r;
                    col_vals[a + k] = v;
                }
            }
        }
        Problem {
            n,
            d,
            nnz,
            col_start,
            col_rows,
            col_vals,
            q_diag,
            rows,
        }
    }

    /// Row i, packed.
    #[inline]
    pub fn row(&self, i: usize) -> &[Entry] {
        self.rows.row(i)
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn d(&self) -> usize {
        self.d
    }

    /// The stored non-zeros of X.
    pub fn nnz(&self) -> usize {
        self.nnz
    }
}

/// Row i of the CSR matrix `x` as (column, value) pairs.
fn csr_row(x: &SparseMatrix, i: usize) -> impl ExactSizeIterator<Item = (u32, f32)> + '_ {
    let (idx, val) = crate::data::row_slices(x, i);
    idx.iter().copied().zip(val.iter().copied())
}

fn check_params(p: &SolverParams) -> Result<(), SolverError> {
    let bad = |m: &str| Err(SolverError::Param(m.to_string()));
    if !(p.c.is_finite() && p.c > 0.0) {
        return bad("c must be finite and > 0");
    }
    if !(p.l1.is_finite() && p.l1 >= 0.0) {
        return bad("l1 must be finite and >= 0");
    }
    if !(p.tol.is_finite() && p.tol > 0.0) {
        return bad("tol must be finite and > 0");
    }
    let nonneg = |v: f32| v.is_finite() && v >= 0.0;
    if !nonneg(p.prune) || !nonneg(p.search_eps) {
        return bad("prune and search_eps must be finite and >= 0");
    }
    if p.kappa == 0 || p.max_iter == 0 {
        return bad("kappa and max_iter must be > 0");
    }
    Ok(())
}

fn check_positives(positives: &[Vec<u32>], n: usize) -> Result<(), SolverError> {
    for (column, rows) in positives.iter().enumerate() {
        if rows.windows(2).any(|w| w[0] >= w[1]) {
            return Err(SolverError::Unsorted { column });
        }
        if let Some(&row) = rows.last().filter(|&&r| r as usize >= n) {
            return Err(SolverError::RowOutOfRange {
                column,
                row,
                rows: n,
            });
        }
    }
    Ok(())
}

/// Trains one binary classifier per entry of `positives` over the rows of `x` (CSR, n × d).
/// Column j's positives are the rows `positives[j]` (sorted, unique, < n); every other row is a
/// negative. The method is `params.method`.
pub fn train_columns(
    x: &SparseMatrix,
    positives: &[Vec<u32>],
    params: &SolverParams,
) -> Result<Vec<LinearColumn>, SolverError> {
    check_params(params)?;
    check_positives(positives, x.rows())?;
    let problem = Problem::new(x)?;
    let first_empty = positives.iter().position(Vec::is_empty).unwrap_or(0) as u64;
    Ok(train_problem(
        &problem,
        positives,
        params,
        |j| j as u64,
        first_empty,
    ))
}

/// [`train_columns`] over the rows `rows` of `x` (sorted, unique), for some columns of a larger
/// problem: entry j of `positives` (positions in `rows`) is column `number(j)` of it, whose seed
/// it takes, so that each column is trained exactly as it would be among all of them (sharded
/// training splits one node's columns between processes). The weights come in `x`'s feature ids.
///
/// A column without positives is the same problem whatever its number, so all of them share one
/// solution: that of the larger problem's first such column, `first_empty`. It is solved once.
pub fn train_columns_of_rows(
    x: &SparseMatrix,
    rows: &[u32],
    positives: &[Vec<u32>],
    params: &SolverParams,
    number: impl Fn(usize) -> u64 + Sync,
    first_empty: u64,
) -> Result<Vec<LinearColumn>, SolverError> {
    check_selection(params, positives, rows, x.rows())?;
    let (problem, features) =
        Problem::of_rows(rows.len(), x.cols(), |i| csr_row(x, rows[i] as usize))?;
    let columns = train_problem(&problem, positives, params, number, first_empty);
    drop(problem);
    Ok(in_ids(columns, &features))
}

/// [`train_columns_of_rows`] over the rows `rows` of `store`, with the same columns as a result.
/// A selection of at least 1/8 of the store's rows borrows them rather than copying them, so that
/// the problem of a node over most of the points holds only its column-major copy.
pub fn train_columns_of_packed(
    store: &PackedRows,
    rows: &[u32],
    positives: &[Vec<u32>],
    params: &SolverParams,
    number: impl Fn(usize) -> u64 + Sync,
    first_empty: u64,
) -> Result<Vec<LinearColumn>, SolverError> {
    check_selection(params, positives, rows, store.rows())?;
    if rows.len() * SHARED_ROWS >= store.rows() {
        let problem = Problem::shared(store, rows);
        return Ok(train_problem(
            &problem,
            positives,
            params,
            number,
            first_empty,
        ));
    }
    let packed_row = |i: usize| store.row(rows[i] as usize).iter().map(|e| (e.j, e.x));
    let (problem, features) = Problem::of_rows(rows.len(), store.cols(), packed_row)?;
    let columns = train_problem(&problem, positives, params, number, first_empty);
    drop(problem);
    Ok(in_ids(columns, &features))
}

/// The checks of a call that trains on the rows `rows` (increasing, each below `n`) of a matrix.
fn check_selection(
    params: &SolverParams,
    positives: &[Vec<u32>],
    rows: &[u32],
    n: usize,
) -> Result<(), SolverError> {
    check_params(params)?;
    check_positives(positives, rows.len())?;
    let increasing = rows.windows(2).all(|w| w[0] < w[1]);
    if !increasing || rows.last().is_some_and(|&r| r as usize >= n) {
        return Err(SolverError::BadSelection { rows: n });
    }
    Ok(())
}

/// `columns` trained over renumbered features, in the original ids (`features[new id]`).
fn in_ids(mut columns: Vec<LinearColumn>, features: &[u32]) -> Vec<LinearColumn> {
    for column in &mut columns {
        for j in &mut column.indices {
            *j = features[*j as usize];
        }
    }
    columns
}

fn train_problem(
    problem: &Problem<'_>,
    positives: &[Vec<u32>],
    params: &SolverParams,
    number: impl Fn(usize) -> u64 + Sync,
    first_empty: u64,
) -> Vec<LinearColumn> {
    let empty = positives
        .iter()
        .any(Vec::is_empty)
        .then(|| solve_column(problem, &[], params, derive_seed(params.seed, first_empty)));
    positives
        .par_iter()
        .enumerate()
        .with_max_len(1)
        .map(|(j, pos)| match &empty {
            Some(column) if pos.is_empty() => column.clone(),
            _ => solve_column(problem, pos, params, derive_seed(params.seed, number(j))),
        })
        .collect()
}

fn solve_column(
    problem: &Problem<'_>,
    positives: &[u32],
    params: &SolverParams,
    seed: u64,
) -> LinearColumn {
    let solve = |ws: &mut dual::Workspace| match params.method {
        Method::PpdSparse => ppdsparse::solve(problem, positives, params, seed, ws),
        Method::Reference => reference::solve(problem, positives, params, seed, ws),
    };
    WORKSPACE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut ws) => {
            ws.ensure(problem.n(), problem.d());
            solve(&mut ws)
        }
        // Only if a solve ever ran nested on this thread; it does not today.
        Err(_) => solve(&mut dual::Workspace::new(problem.n(), problem.d())),
    })
}

thread_local! {
    /// Each worker thread's scratch, kept across columns, nodes and calls: zeroing O(n + d) per
    /// column would cost more than solving most tail labels. Every solve leaves it clean.
    static WORKSPACE: std::cell::RefCell<dual::Workspace> =
        std::cell::RefCell::new(dual::Workspace::new(0, 0));
}

/// The primal objective F(w) of a column for the given weights (not pruned), for tests and
/// benchmarks: λ‖w‖₁ + ½‖w‖² + ½w₀² + C·Σᵢ ℓ(yᵢ (w·xᵢ + w₀)).
pub fn primal_objective(
    x: &SparseMatrix,
    positives: &[u32],
    column: &LinearColumn,
    params: &SolverParams,
) -> f64 {
    let mut dense = vec![0f64; x.cols()];
    let mut reg = 0.5 * f64::from(column.bias).powi(2);
    for (&j, &w) in column.indices.iter().zip(&column.values) {
        dense[j as usize] = f64::from(w);
        reg += 0.5 * f64::from(w) * f64::from(w) + f64::from(params.l1) * f64::from(w).abs();
    }
    let mut loss = 0.0;
    for i in 0..x.rows() {
        let (idx, val) = crate::data::row_slices(x, i);
        let s: f64 = f64::from(column.bias)
            + idx
                .iter()
                .zip(val)
                .map(|(&j, &v)| dense[j as usize] * f64::from(v))
                .sum::<f64>();
        let y = if positives.binary_search(&(i as u32)).is_ok() {
            1.0
        } else {
            -1.0
        };
        loss += dual::loss(params.loss, y * s);
    }
    reg + f64::from(params.c) * loss
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_probs_are_non_positive_and_monotone() {
        for loss in [Loss::SquaredHinge, Loss::Hinge, Loss::Logistic] {
            let mut prev = f32::NEG_INFINITY;
            for s in [-50.0f32, -3.0, -1.0, 0.0, 0.5, 1.0, 2.0, 50.0] {
                let lp = score_to_log_prob(loss, s);
                assert!(lp <= 0.0 && lp.is_finite(), "{loss:?} {s} {lp}");
                assert!(lp >= prev, "{loss:?} not monotone at {s}");
                prev = lp;
            }
        }
        assert_eq!(score_to_log_prob(Loss::SquaredHinge, 0.0), -1.0);
        assert!((score_to_log_prob(Loss::Logistic, 0.0) + std::f32::consts::LN_2).abs() < 1e-6);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = SparseMatrix::new((2, 2), vec![0, 1, 2], vec![0, 1], vec![1.0, 1.0]);
        let p = SolverParams::DEFAULT;
        assert!(matches!(
            train_columns(&x, &[vec![2]], &p),
            Err(SolverError::RowOutOfRange { .. })
        ));
        assert!(matches!(
            train_columns(&x, &[vec![1, 0]], &p),
            Err(SolverError::Unsorted { .. })
        ));
        let bad_c = SolverParams { c: 0.0, ..p };
        assert!(matches!(
            train_columns(&x, &[vec![0]], &bad_c),
            Err(SolverError::Param(_))
        ));
        let nan = SparseMatrix::new((1, 1), vec![0, 1], vec![0], vec![f32::NAN]);
        assert!(matches!(
            train_columns(&nan, &[vec![0]], &p),
            Err(SolverError::NonFinite { row: 0 })
        ));
    }
}

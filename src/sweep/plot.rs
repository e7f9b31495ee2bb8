//! The sweep's figure: precision and latency against expected depth, one point per λ.

use super::SweepRow;
use plotters::prelude::*;
use std::path::Path;

/// Why the figure could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing {path}: {message}")]
pub struct PlotError {
    /// The output file.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

/// A series: its name, colour and points (x = expected depth@1), one per row.
type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// Writes a two-panel SVG to `path`: P@1 and P@5 against expected depth@1 (left), and mean
/// per-query latency of top-k and top-1 queries, with and without early stopping, against
/// expected depth@1 (right). Each point is labelled with its λ'.
pub fn write_svg(rows: &[SweepRow], title: &str, path: &Path) -> Result<(), PlotError> {
    draw(rows, title, path).map_err(|message| PlotError {
        path: path.display().to_string(),
        message,
    })
}

fn draw(rows: &[SweepRow], title: &str, path: &Path) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(640);
    let labels: Vec<String> = rows
        .iter()
        .map(|r| format!("λ'={}", r.lambda_prime))
        .collect();
    let at = |f: fn(&SweepRow) -> f64| -> Vec<(f64, f64)> {
        rows.iter().map(|r| (r.depth1, f(r))).collect()
    };
    panel(
        &left,
        "precision vs expected depth@1",
        "precision",
        &[("P@1", BLUE, at(|r| r.p1)), ("P@5", RED, at(|r| r.p5))],
        &labels,
    )?;
    panel(
        &right,
        "latency vs expected depth@1 (one thread)",
        "mean µs per query",
        &[
            ("top-k, early stop", BLUE, at(|r| r.latency_us_mean)),
            (
                "top-k, level-wise beam",
                RED,
                at(|r| r.latency_us_mean_beam),
            ),
            ("top-1, early stop", GREEN, at(|r| r.latency_us_k1)),
            (
                "top-1, level-wise beam",
                MAGENTA,
                at(|r| r.latency_us_k1_beam),
            ),
        ],
        &labels,
    )?;
    root.present().map_err(|e| err(&e))
}

/// One panel: each series as a line through its points in row order, the first series' points
/// labelled.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    y_desc: &str,
    series: &[Series<'_>],
    labels: &[String],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let points = series.iter().flat_map(|s| s.2.iter().copied());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in points.filter(|(x, y)| x.is_finite() && y.is_finite()) {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let pad = |lo: f64, hi: f64| {
        let d = ((hi - lo) * 0.08).max(1e-3);
        (lo - d, hi + d)
    };
    let ((x0, x1), (y0, y1)) = (pad(x0, x1), pad(y0, y1));
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("expected depth@1")
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;
    for (name, color, pts) in series {
        let color = *color;
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color))
            .map_err(|e| err(&e))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(
                pts.iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
            )
            .map_err(|e| err(&e))?;
    }
    if let Some((_, _, pts)) = series.first() {
        chart
            .draw_series(
                pts.iter()
                    .zip(labels)
                    .map(|(&(x, y), l)| Text::new(l.clone(), (x, y), ("sans-serif", 11))),
            )
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_every_lambda() {
        let rows: Vec<SweepRow> = [(0.0, 10.0, 0.75, 90.0), (1.0, 7.3, 0.74, 80.0)]
            .into_iter()
            .map(|(lp, d, p, us)| SweepRow {
                lambda_prime: lp,
                depth1: d,
                p1: p,
                p5: p / 2.0,
                latency_us_mean: us,
                latency_us_mean_beam: 2.0 * us,
                ..SweepRow::default()
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sweep.svg");
        write_svg(&rows, "test sweep", &path).unwrap();
        // SVG escapes the prime of λ'.
        let svg = std::fs::read_to_string(&path)
            .unwrap()
            .replace("&apos;", "'");
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        assert!(svg.contains("λ'=0") && svg.contains("λ'=1"));
        assert!(svg.contains("expected depth@1"));
    }
}

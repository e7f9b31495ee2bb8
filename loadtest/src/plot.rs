//! Figures: plotters draws SVG; resvg rasterises the same SVG to PNG.
//!
//! PNG text needs a font. plotters' bitmap backend would need its `ttf` feature (font-kit and
//! fontconfig) or `ab_glyph` with a registered font, and either feature would also change how the
//! root crate's SVG plots lay out text (Cargo unifies features across the workspace). So the PNG
//! is the SVG rendered by resvg, which finds fonts itself (fontdb, pure Rust, no fontconfig). On a
//! headless machine without any font files the PNG is still drawn, without its text; the SVG
//! always carries the text.

use anyhow::{Context, anyhow};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// One series: a name and its points, drawn as a line with markers; `labels` (one per point)
/// are written next to the points.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// The legend entry.
    pub name: String,
    /// (x, y) points, in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Optional point labels.
    pub labels: Vec<String>,
    /// Draw points only, no connecting line.
    pub scatter: bool,
}

/// A chart's text and y scale.
#[derive(Clone, Copy, Debug)]
pub struct Axes<'a> {
    /// The title.
    pub title: &'a str,
    /// The x axis.
    pub x: &'a str,
    /// The y axis.
    pub y: &'a str,
    /// A logarithmic y axis: for latencies, whose p50 and p99 can differ by 10–100×, so that
    /// the p50 series is not a flat line along the bottom of a linear axis.
    pub log_y: bool,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
];

fn bounds(series: &[Series]) -> ((f64, f64), (f64, f64)) {
    let mut b = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in series.iter().flat_map(|s| s.points.iter()) {
        if x.is_finite() && y.is_finite() {
            b = (b.0.min(x), b.1.max(x), b.2.min(y), b.3.max(y));
        }
    }
    if b.0 > b.1 {
        return ((0.0, 1.0), (0.0, 1.0));
    }
    let widen = |lo: f64, hi: f64| {
        let m = ((hi - lo) * 0.1).max(hi.abs() * 0.05).max(1e-6);
        (lo - m, hi + m)
    };
    (widen(b.0, b.1), widen(b.2, b.3))
}

/// Draws the chart as an SVG string.
///
/// A log axis is drawn as a linear axis over log₁₀ y, labelled with the values themselves:
/// plotters' own log coordinate labels only powers of ten and their integer multiples, which
/// leaves a range of sub-millisecond latencies without a single label.
pub fn svg(axes: Axes<'_>, series: &[Series]) -> anyhow::Result<String> {
    let log_series;
    let series = if axes.log_y {
        log_series = series
            .iter()
            .map(|s| {
                let (points, labels) = s
                    .points
                    .iter()
                    .zip(s.labels.iter().map(Some).chain(std::iter::repeat(None)))
                    .filter(|(p, _)| p.1.is_finite() && p.1 > 0.0)
                    .map(|(&(x, y), l)| ((x, y.log10()), l.cloned()))
                    .unzip::<_, _, Vec<_>, Vec<_>>();
                Series {
                    name: s.name.clone(),
                    points,
                    labels: labels.into_iter().flatten().collect(),
                    scatter: s.scatter,
                }
            })
            .collect::<Vec<_>>();
        &log_series[..]
    } else {
        series
    };
    let mut out = String::new();
    {
        let area = SVGBackend::with_string(&mut out, (900, 560)).into_drawing_area();
        let e = |e: &dyn std::fmt::Display| anyhow!("drawing {:?}: {e}", axes.title);
        area.fill(&WHITE).map_err(|x| e(&x))?;
        let ((x0, x1), (y0, y1)) = bounds(series);
        let mut chart = ChartBuilder::on(&area)
            .caption(axes.title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|x| e(&x))?;
        let unlog = |v: &f64| {
            let y = 10f64.powf(*v);
            // Two significant digits: 0.42, 1.3, 25.
            let decimals = (1 - (y * (1.0 + 1e-9)).log10().floor() as i32).max(0) as usize;
            format!("{y:.decimals$}")
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(axes.x).y_desc(axes.y);
        if axes.log_y {
            mesh.y_label_formatter(&unlog);
        }
        mesh.draw().map_err(|x| e(&x))?;
        draw(
            &mut chart,
            series,
            legend_position(series, (x0, x1), (y0, y1)),
        )
        .map_err(|x| e(&x))?;
        area.present().map_err(|x| e(&x))?;
    }
    Ok(out)
}

type DrawResult =
    Result<(), DrawingAreaErrorKind<<SVGBackend<'static> as DrawingBackend>::ErrorType>>;

/// The legend's place: of the corners and the middle of either side, the one whose box (a
/// third of the width, a row per series) covers the fewest points, the first on a tie.
fn legend_position(
    series: &[Series],
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> SeriesLabelPosition {
    let h = (0.04 + 0.045 * series.len() as f64).min(0.95);
    let w = 0.34;
    // Boxes in unit coordinates, y upwards: (position, x range, y range).
    let mid = (0.5 - h / 2.0, 0.5 + h / 2.0);
    let candidates = [
        (SeriesLabelPosition::UpperLeft, (0.0, w), (1.0 - h, 1.0)),
        (
            SeriesLabelPosition::UpperRight,
            (1.0 - w, 1.0),
            (1.0 - h, 1.0),
        ),
        (SeriesLabelPosition::MiddleRight, (1.0 - w, 1.0), mid),
        (SeriesLabelPosition::MiddleLeft, (0.0, w), mid),
        (SeriesLabelPosition::LowerRight, (1.0 - w, 1.0), (0.0, h)),
        (SeriesLabelPosition::LowerLeft, (0.0, w), (0.0, h)),
    ];
    let unit = |&(x, y): &(f64, f64)| ((x - x0) / (x1 - x0), (y - y0) / (y1 - y0));
    let covered = |(bx, by): ((f64, f64), (f64, f64))| {
        series
            .iter()
            .flat_map(|s| s.points.iter().map(unit))
            .filter(|&(x, y)| (bx.0..=bx.1).contains(&x) && (by.0..=by.1).contains(&y))
            .count()
    };
    let mut best = (usize::MAX, SeriesLabelPosition::UpperLeft);
    for (pos, bx, by) in candidates {
        let n = covered((bx, by));
        if n < best.0 {
            best = (n, pos);
        }
    }
    best.1
}

/// Draws every series (lines, markers and point labels) and the legend.
fn draw<'a>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    series: &[Series],
    legend: SeriesLabelPosition,
) -> DrawResult {
    for (i, s) in series.iter().enumerate() {
        let c = PALETTE[i % PALETTE.len()];
        if !s.scatter {
            chart.draw_series(LineSeries::new(s.points.iter().copied(), c))?;
        }
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled())))?
            .label(s.name.as_str())
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.filled()));
        chart.draw_series(
            s.points
                .iter()
                .zip(&s.labels)
                .map(|(&p, l)| Text::new(l.clone(), p, ("sans-serif", 11))),
        )?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}

/// The system's fonts, loaded once; `sans-serif` is mapped to a sans face that exists.
fn fonts() -> Arc<resvg::usvg::fontdb::Database> {
    static DB: OnceLock<Arc<resvg::usvg::fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = resvg::usvg::fontdb::Database::new();
        db.load_system_fonts();
        let families: Vec<String> = db
            .faces()
            .flat_map(|f| f.families.iter().map(|(n, _)| n.clone()))
            .collect();
        let sans = families
            .iter()
            .find(|n| n.as_str() == "DejaVu Sans")
            .or_else(|| {
                families
                    .iter()
                    .find(|n| n.contains("Sans") && !n.contains("Mono"))
            })
            .or_else(|| families.first());
        if let Some(name) = sans {
            db.set_sans_serif_family(name.clone());
        }
        Arc::new(db)
    })
    .clone()
}

/// Renders SVG text to PNG bytes.
pub fn png(svg: &str) -> anyhow::Result<Vec<u8>> {
    let opt = resvg::usvg::Options {
        fontdb: fonts(),
        ..Default::default()
    };
    let tree = resvg::usvg::Tree::from_str(svg, &opt).context("parsing the SVG")?;
    let size = tree.size().to_int_size();
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width(), size.height()).context("allocating the PNG")?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().context("encoding the PNG")
}

/// Writes `stem.svg` and `stem.png`.
pub fn write(stem: &Path, axes: Axes<'_>, series: &[Series]) -> anyhow::Result<()> {
    let text = svg(axes, series)?;
    let svg_path = stem.with_extension("svg");
    std::fs::write(&svg_path, &text).with_context(|| format!("writing {}", svg_path.display()))?;
    let png_path = stem.with_extension("png");
    std::fs::write(&png_path, png(&text)?)
        .with_context(|| format!("writing {}", png_path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of every `<text>` element.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once('<')?.0.trim().to_string()))
            .collect()
    }

    #[test]
    fn a_log_axis_labels_values_below_one() {
        let s = Series {
            name: "p50".into(),
            points: vec![(1.0, 0.42), (2.0, 0.63), (3.0, 0.0), (4.0, 6.5)],
            labels: vec!["a".into(), "b".into(), "zero".into(), "d".into()],
            scatter: false,
        };
        let axes = Axes {
            title: "t",
            x: "depth",
            y: "ms",
            log_y: true,
        };
        let t = texts(&svg(axes, &[s]).expect("drawn"));
        let ticks: Vec<f64> = t.iter().filter_map(|x| x.parse().ok()).collect();
        assert!(ticks.iter().any(|&v| v > 0.0 && v < 1.0), "{t:?}");
        assert!(ticks.iter().any(|&v| v > 1.0), "{t:?}");
        // A point that a log axis cannot show is left out, with its label; the others keep theirs.
        assert!(
            t.contains(&"a".to_string()) && t.contains(&"d".to_string()),
            "{t:?}"
        );
        assert!(!t.contains(&"zero".to_string()), "{t:?}");
    }

    #[test]
    fn the_legend_avoids_the_points() {
        let series = |points: Vec<(f64, f64)>| Series {
            name: "s".into(),
            labels: Vec::new(),
            scatter: true,
            points,
        };
        let x = (0.0, 10.0);
        let y = (0.0, 10.0);
        let upper_left = [series(vec![(0.5, 9.5), (1.0, 9.0)])];
        assert_eq!(
            legend_position(&upper_left, x, y),
            SeriesLabelPosition::UpperRight
        );
        let top = [series(vec![(0.5, 9.5), (9.5, 9.5), (1.0, 0.5), (9.5, 5.0)])];
        assert_eq!(legend_position(&top, x, y), SeriesLabelPosition::MiddleLeft);
        let none = [series(vec![(5.0, 5.0)])];
        assert_eq!(legend_position(&none, x, y), SeriesLabelPosition::UpperLeft);
    }

    #[test]
    fn writes_svg_and_png() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Series {
            name: "p50".into(),
            points: vec![(1.0, 2.0), (2.0, 3.5)],
            labels: vec!["a".into(), "b".into()],
            scatter: false,
        };
        let axes = Axes {
            title: "t",
            x: "depth",
            y: "ms",
            log_y: false,
        };
        write(&dir.path().join("fig"), axes, std::slice::from_ref(&s)).expect("written");
        let log = Axes {
            log_y: true,
            ..axes
        };
        write(&dir.path().join("log"), log, &[s]).expect("written on a log axis");
        let svg = std::fs::read_to_string(dir.path().join("fig.svg")).expect("svg");
        assert!(svg.contains("<svg") && svg.contains("p50"));
        let png = std::fs::read(dir.path().join("fig.png")).expect("png");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(png.len() > 1000);
    }
}

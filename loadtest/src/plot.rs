//! Figures: plotters draws SVG; resvg rasterises the same SVG to PNG.
//!
//! PNG text needs a font. plotters' bitmap backend would need its `ttf` feature (font-kit and
//! fontconfig) or `ab_glyph` with a registered font, and either feature would also change how the
//! root crate's SVG plots lay out text (Cargo unifies features across the workspace). So the PNG
//! is the SVG rendered by resvg, which finds fonts itself (fontdb, pure Rust, no fontconfig). On a
//! headless machine without any font files the PNG is still drawn, without its text; the SVG
//! always carries the text.

use anyhow::{Context, anyhow};
use plotters::coord::ranged1d::ValueFormatter;
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
pub fn svg(axes: Axes<'_>, series: &[Series]) -> anyhow::Result<String> {
    let mut out = String::new();
    {
        let area = SVGBackend::with_string(&mut out, (900, 560)).into_drawing_area();
        let e = |e: &dyn std::fmt::Display| anyhow!("drawing {:?}: {e}", axes.title);
        area.fill(&WHITE).map_err(|x| e(&x))?;
        let ((x0, x1), (y0, y1)) = bounds(series);
        let mut builder = ChartBuilder::on(&area);
        builder
            .caption(axes.title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(45)
            .y_label_area_size(65);
        if axes.log_y {
            // A log axis needs positive bounds: from just below the smallest positive value.
            let lo = series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1))
                .filter(|y| y.is_finite() && *y > 0.0)
                .fold(f64::MAX, f64::min);
            let lo = if lo == f64::MAX { 1e-3 } else { lo * 0.8 };
            let chart = builder
                .build_cartesian_2d(x0..x1, (lo..y1.max(lo * 2.0)).log_scale())
                .map_err(|x| e(&x))?;
            draw(chart, axes, series).map_err(|x| e(&x))?;
        } else {
            let chart = builder
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|x| e(&x))?;
            draw(chart, axes, series).map_err(|x| e(&x))?;
        }
        area.present().map_err(|x| e(&x))?;
    }
    Ok(out)
}

type DrawResult =
    Result<(), DrawingAreaErrorKind<<SVGBackend<'static> as DrawingBackend>::ErrorType>>;

/// Draws the mesh, every series (lines, markers and point labels) and the legend.
fn draw<'a, Y>(
    mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    axes: Axes<'_>,
    series: &[Series],
) -> DrawResult
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .draw()?;
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
        .position(SeriesLabelPosition::UpperLeft)
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

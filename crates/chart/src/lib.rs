//! nfx-chart: what every nfx chart shares — the embedded DejaVu Sans font (so charts
//! render on machines without system fonts), the colour cycle, and a panel of named line
//! or point series on linear axes. Experiments draw their figures with it (re-exported
//! `plotters` for anything more specific).

pub use plotters;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// The colour cycle of series.
pub const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

/// Registers the embedded font as `sans-serif` (call before drawing any text).
pub fn register_fonts() -> Result<(), String> {
    register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| "embedded font is invalid".to_string())
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A line through the points in order.
    Line,
    /// A dot per point.
    Points,
    /// A line with a dot per point.
    LinePoints,
}

/// One named series of (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64)>,
    /// How to draw it.
    pub style: Style,
}

/// Axis labels of a panel.
#[derive(Debug, Clone, Copy)]
pub struct Axes<'a> {
    /// Panel caption.
    pub caption: &'a str,
    /// X axis label.
    pub x: &'a str,
    /// Y axis label.
    pub y: &'a str,
}

/// The bounds that fit every point (x from its minimum, y from 0), with 10 % headroom.
pub fn bounds(series: &[Series]) -> ((f64, f64), (f64, f64)) {
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let xmin = pts().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let xmax = pts().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let ymax = pts().map(|p| p.1).fold(0.0f64, f64::max);
    let (xmin, xmax) = if xmin.is_finite() && xmax > xmin {
        (xmin, xmax)
    } else {
        (0.0, 1.0)
    };
    ((xmin, xmax), (0.0, (ymax * 1.1).max(1e-6)))
}

/// A PNG figure of panels stacked under a title: how every experiment's chart starts.
pub struct Figure<'a> {
    root: DrawingArea<BitMapBackend<'a>, Shift>,
    what: String,
    /// The panels, top to bottom.
    pub panels: Vec<DrawingArea<BitMapBackend<'a>, Shift>>,
}

impl<'a> Figure<'a> {
    /// A white `size` image at `path` with `title` (in `title_px` type) over `rows`
    /// equal panels (fonts registered).
    pub fn new(
        path: &'a std::path::Path,
        size: (u32, u32),
        title: &str,
        title_px: u32,
        rows: usize,
    ) -> Result<Self, String> {
        register_fonts()?;
        let what = format!("chart {}", path.display());
        let e = |x: &dyn std::fmt::Display| format!("{what}: {x}");
        let root = BitMapBackend::new(path, size).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let root = root
            .titled(title, ("sans-serif", title_px))
            .map_err(|x| e(&x))?;
        let panels = root.split_evenly((rows, 1));
        Ok(Self { root, what, panels })
    }

    /// Writes the image.
    pub fn present(&self) -> Result<(), String> {
        self.root
            .present()
            .map_err(|x| format!("{}: {x}", self.what))
    }
}

/// Draws `series` into `area` with a mesh, axis labels and a legend.
pub fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    axes: Axes<'_>,
    series: &[Series],
) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| format!("chart panel {:?}: {x}", axes.caption);
    let ((x0, x1), (y0, y1)) = bounds(series);
    let mut c = ChartBuilder::on(area)
        .caption(axes.caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, s) in series.iter().enumerate() {
        let col = COLORS[i % COLORS.len()];
        let legend = move |(x, y): (i32, i32)| {
            PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2))
        };
        if matches!(s.style, Style::Line | Style::LinePoints) {
            c.draw_series(LineSeries::new(
                s.points.iter().copied(),
                col.stroke_width(2),
            ))
            .map_err(|x| e(&x))?
            .label(s.name.clone())
            .legend(legend);
        }
        if matches!(s.style, Style::Points | Style::LinePoints) {
            let dots = c
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, col.filled())))
                .map_err(|x| e(&x))?;
            if s.style == Style::Points {
                dots.label(s.name.clone()).legend(legend);
            }
        }
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_fit_the_points_and_survive_empty_input() {
        let s = Series {
            name: "a".into(),
            points: vec![(2.0, 1.0), (5.0, 10.0)],
            style: Style::Line,
        };
        let ((x0, x1), (y0, y1)) = bounds(&[s]);
        assert_eq!((x0, x1, y0), (2.0, 5.0, 0.0));
        assert!((y1 - 11.0).abs() < 1e-9);
        assert_eq!(bounds(&[]).0, (0.0, 1.0));
    }

    #[test]
    fn draws_a_png_with_text() {
        register_fonts().unwrap();
        let dir = std::env::temp_dir().join(format!("nfx-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.png");
        {
            let root = BitMapBackend::new(&p, (500, 300)).into_drawing_area();
            root.fill(&WHITE).unwrap();
            let s = [
                Series {
                    name: "line".into(),
                    points: vec![(0.0, 1.0), (1.0, 2.0)],
                    style: Style::LinePoints,
                },
                Series {
                    name: "dots".into(),
                    points: vec![(0.5, 1.5)],
                    style: Style::Points,
                },
            ];
            panel(
                &root,
                Axes {
                    caption: "t",
                    x: "x",
                    y: "y",
                },
                &s,
            )
            .unwrap();
            root.present().unwrap();
        }
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

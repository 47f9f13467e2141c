//! The accel-switch chart (like Fig. 5 of the SSH-tunnel paper): CPU % and throughput per
//! tunnel against time, with every engine change marked. Font and colours come from
//! `nfx-chart`.

use std::path::Path;

use nfx_chart::plotters::prelude::*;
use nfx_chart::COLORS;

/// One sample of one tunnel.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Seconds since the experiment started.
    pub t_s: f64,
    /// CPU utilisation, percent of one core.
    pub cpu_pct: f64,
    /// Throughput, Gbit/s.
    pub gbps: f64,
    /// Engine in use.
    pub engine: String,
}

/// The time series of one tunnel.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Tunnel name.
    pub name: String,
    /// Its samples in time order.
    pub points: Vec<Point>,
}

/// Times (s) and labels where a series' engine changed.
pub fn engine_changes(s: &Series) -> Vec<(f64, String)> {
    s.points
        .windows(2)
        .filter(|w| w[0].engine != w[1].engine)
        .map(|w| (w[1].t_s, format!("{}→{}", s.name, w[1].engine)))
        .collect()
}

/// Every engine change of every series (series index, time, label) with the text row
/// it is printed on: rows go round in time order across all series, so two changes
/// close in time never share a row and overprint each other.
fn label_levels(series: &[Series]) -> Vec<(usize, (usize, f64, String))> {
    let mut all: Vec<(usize, f64, String)> = series
        .iter()
        .enumerate()
        .flat_map(|(i, s)| engine_changes(s).into_iter().map(move |(t, l)| (i, t, l)))
        .collect();
    all.sort_by(|a, b| a.1.total_cmp(&b.1));
    all.into_iter()
        .enumerate()
        .map(|(k, c)| (k % 4, c))
        .collect()
}

/// Draws the two-panel chart to a PNG at `path`.
pub fn draw(path: &Path, title: &str, series: &[Series]) -> Result<(), String> {
    nfx_chart::register_fonts()?;
    let e = |e: &dyn std::fmt::Display| format!("chart {}: {e}", path.display());
    let tmax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.t_s))
        .fold(1.0f64, f64::max);
    let gmax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.gbps))
        .fold(0.0f64, f64::max)
        .max(0.01)
        * 1.2;
    let cmax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.cpu_pct))
        .fold(100.0f64, f64::max)
        * 1.1;
    let root = BitMapBackend::new(path, (1100, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(|x| e(&x))?;
    let (top, bottom) = root.split_vertically(360);
    let panels = [
        (top, "CPU utilisation (% of one core)", cmax, true),
        (bottom, "throughput (Gbit/s)", gmax, false),
    ];
    for (area, ylabel, ymax, cpu) in panels {
        let mut c = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..tmax, 0.0..ymax)
            .map_err(|x| e(&x))?;
        c.configure_mesh()
            .x_desc("time (s)")
            .y_desc(ylabel)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|x| e(&x))?;
        for (i, s) in series.iter().enumerate() {
            let col = COLORS[i % COLORS.len()];
            let pts = s
                .points
                .iter()
                .map(|p| (p.t_s, if cpu { p.cpu_pct } else { p.gbps }));
            c.draw_series(LineSeries::new(pts, col.stroke_width(2)))
                .map_err(|x| e(&x))?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2))
                });
        }
        for (level, (i, t, label)) in label_levels(series).into_iter() {
            let col = COLORS[i % COLORS.len()];
            let line = PathElement::new(vec![(t, 0.0), (t, ymax)], col.mix(0.6).stroke_width(1));
            c.draw_series(std::iter::once(line)).map_err(|x| e(&x))?;
            if cpu {
                let y = ymax * (0.95 - 0.07 * level as f64);
                let text = Text::new(label, (t, y), ("sans-serif", 13).into_font().color(&col));
                c.draw_series(std::iter::once(text)).map_err(|x| e(&x))?;
            }
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, switch_at: usize) -> Series {
        Series {
            name: name.into(),
            points: (0..20)
                .map(|i| Point {
                    t_s: i as f64 * 0.5,
                    cpu_pct: if i < switch_at { 99.0 } else { 70.0 },
                    gbps: if i < switch_at { 0.3 } else { 0.9 },
                    engine: if i < switch_at { "soft" } else { "lookaside" }.into(),
                })
                .collect(),
        }
    }

    #[test]
    fn engine_changes_are_found() {
        let c = engine_changes(&series("t1", 6));
        assert_eq!(c, vec![(3.0, "t1→lookaside".to_string())]);
        assert!(engine_changes(&series("t2", 0)).is_empty());
    }

    #[test]
    fn close_engine_changes_of_two_series_get_different_rows() {
        let (a, b) = (series("t1", 6), series("t2", 7));
        let levels = label_levels(&[a, b]);
        assert_eq!(levels.len(), 2);
        assert_eq!((levels[0].1 .0, levels[1].1 .0), (0, 1));
        assert_ne!(levels[0].0, levels[1].0);
    }

    #[test]
    fn draws_a_png() {
        let dir = std::env::temp_dir().join(format!("nfx-ssm-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.png");
        draw(&p, "test", &[series("t1", 6), series("t2", 12)]).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Figures as SVG: the day's load, the configuration mix, energy against tardiness.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::metrics::Series;

/// A plotting failure.
#[derive(Debug, thiserror::Error)]
#[error("cannot write plot {path}: {message}")]
pub struct PlotError {
    /// The file.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

fn err(path: &Path) -> impl Fn(String) -> PlotError + '_ {
    move |message| PlotError {
        path: path.to_path_buf(),
        message,
    }
}

const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(57, 59, 121),
    RGBColor(173, 73, 74),
];

/// One labelled line of a [`line_chart`].
struct Line {
    label: String,
    points: Vec<(f64, f64)>,
}

/// Lines over a shared x axis, with a legend; axis ranges fit the data.
fn line_chart(path: &Path, title: &str, axes: (&str, &str), lines: &[Line]) -> Result<(), PlotError> {
    let e = err(path);
    let all = || lines.iter().flat_map(|l| l.points.iter());
    let x_max = all().map(|p| p.0).fold(1.0, f64::max);
    let (lo, hi) = all().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let (lo, hi) = if lo > hi { (0.0, 1.0) } else { (lo, hi) };
    let pad = ((hi - lo).abs() * 0.05).max(0.01);
    let y0 = if lo >= 0.0 { (lo - pad).max(0.0) } else { lo - pad };
    let root = SVGBackend::new(path, (900, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..x_max, y0..hi + pad)
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_desc(axes.0)
        .y_desc(axes.1)
        .draw()
        .map_err(|x| e(x.to_string()))?;
    for (i, l) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(l.points.iter().copied(), color.stroke_width(2)))
            .map_err(|x| e(x.to_string()))?
            .label(l.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(x.to_string()))?;
    root.present().map_err(|x| e(x.to_string()))
}

/// Arrivals per hour, busy compute slices and waiting jobs over time.
pub fn load_over_time(path: &Path, s: &Series, title: &str) -> Result<(), PlotError> {
    let per_hour = 60.0 / s.every;
    let hours = |t: f64| t / 60.0;
    let lines = [
        Line {
            label: "arrivals per hour".into(),
            points: s
                .samples
                .iter()
                .zip(&s.arrivals)
                .map(|(x, &a)| (hours(x.t), f64::from(a) * per_hour))
                .collect(),
        },
        Line {
            label: format!("busy compute slices (of {})", s.total_slices),
            points: s
                .samples
                .iter()
                .map(|x| (hours(x.t), f64::from(x.busy_slices)))
                .collect(),
        },
        Line {
            label: "waiting jobs".into(),
            points: s.samples.iter().map(|x| (hours(x.t), x.waiting as f64)).collect(),
        },
    ];
    line_chart(path, title, ("hours", "count"), &lines)
}

/// Share of GPUs in each configuration over time, stacked.
pub fn configuration_mix(path: &Path, s: &Series, title: &str) -> Result<(), PlotError> {
    let e = err(path);
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let t_max = s.samples.last().map_or(1.0, |x| x.t).max(1.0) / 60.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .right_y_label_area_size(10)
        .build_cartesian_2d(0.0..t_max, 0.0..1.0)
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("hours")
        .y_desc("share of GPUs")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let k = s.config_names.len();
    let totals: Vec<f64> = s
        .config_counts
        .iter()
        .map(|row| f64::from(row.iter().sum::<u32>().max(1)))
        .collect();
    // Stack from the top down so each band is drawn over the ones below it.
    for c in (0..k).rev() {
        if s.config_counts.iter().all(|row| row[c] == 0) {
            continue;
        }
        let color = PALETTE[c % PALETTE.len()];
        let upper = s
            .samples
            .iter()
            .zip(&s.config_counts)
            .zip(&totals)
            .map(|((x, row), tot)| {
                (
                    x.t / 60.0,
                    row[..=c].iter().map(|&n| f64::from(n)).sum::<f64>() / tot,
                )
            });
        chart
            .draw_series(AreaSeries::new(upper, 0.0, color.mix(0.9)).border_style(color))
            .map_err(|x| e(x.to_string()))?
            .label(s.config_names[c].clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(x.to_string()))?;
    root.present().map_err(|x| e(x.to_string()))
}

/// One point per policy: energy (kWh) against average tardiness (minutes).
pub fn energy_vs_tardiness(path: &Path, points: &[(String, f64, f64)], title: &str) -> Result<(), PlotError> {
    let e = err(path);
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (_, en, t) in points {
        x0 = x0.min(*t);
        x1 = x1.max(*t);
        y0 = y0.min(*en);
        y1 = y1.max(*en);
    }
    let pad = |a: f64, b: f64| ((b - a).abs() * 0.1).max(1e-3);
    let (px, py) = (pad(x0, x1), pad(y0, y1));
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x0 - px).max(0.0)..x1 + px, (y0 - py).max(0.0)..y1 + py)
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("average tardiness (min)")
        .y_desc("energy (kWh)")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    for (i, (name, en, t)) in points.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(std::iter::once(Circle::new((*t, *en), 6, color.filled())))
            .map_err(|x| e(x.to_string()))?;
        chart
            .draw_series(std::iter::once(Text::new(
                name.clone(),
                (*t, *en),
                ("sans-serif", 13),
            )))
            .map_err(|x| e(x.to_string()))?;
    }
    root.present().map_err(|x| e(x.to_string()))
}

/// ET per training iteration, with horizontal reference lines (e.g. static-best).
pub fn learning_curve(
    path: &Path,
    series: &[(String, Vec<(u32, f64)>)],
    refs: &[(String, f64)],
    title: &str,
) -> Result<(), PlotError> {
    let x_max = series
        .iter()
        .filter_map(|(_, c)| c.last())
        .map(|p| p.0 + 1)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut lines: Vec<Line> = series
        .iter()
        .map(|(label, c)| Line {
            label: label.clone(),
            points: c.iter().map(|p| (f64::from(p.0), p.1)).collect(),
        })
        .collect();
    lines.extend(refs.iter().map(|(name, v)| Line {
        label: name.clone(),
        points: vec![(0.0, *v), (x_max, *v)],
    }));
    line_chart(
        path,
        title,
        ("iteration", "ET vs static CEDF (lower is better)"),
        &lines,
    )
}

/// Shares per slice size (1g, 2g, 3g, 4g, 7g), one group of bars per row.
pub fn slice_mix(path: &Path, rows: &[(String, [f64; 5])], title: &str) -> Result<(), PlotError> {
    let e = err(path);
    let root = SVGBackend::new(path, (800, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let n = rows.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..5.0, 0.0..1.0)
        .map_err(|x| e(x.to_string()))?;
    const SIZES: [&str; 5] = ["1g", "2g", "3g", "4g", "7g"];
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(5)
        .x_label_formatter(&|x: &f64| {
            let i = x.floor() as usize;
            SIZES.get(i).copied().unwrap_or("").to_string()
        })
        .x_desc("slice size")
        .y_desc("share")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let width = 0.8 / n as f64;
    for (r, (label, shares)) in rows.iter().enumerate() {
        let color = PALETTE[r % PALETTE.len()];
        let bars = shares.iter().enumerate().map(move |(i, &v)| {
            let x0 = i as f64 + 0.1 + r as f64 * width;
            Rectangle::new([(x0, 0.0), (x0 + width, v)], color.filled())
        });
        chart
            .draw_series(bars)
            .map_err(|x| e(x.to_string()))?
            .label(label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(x.to_string()))?;
    root.present().map_err(|x| e(x.to_string()))
}

/// Runs a figure function on a scratch file and returns the SVG text, for reports that
/// inline their figures (the figure functions draw to paths).
pub fn svg_text(name: &str, draw: impl FnOnce(&Path) -> Result<(), PlotError>) -> Result<String, PlotError> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("smartmig-plot-{}", std::process::id()));
    // Unique per call, so threads drawing at once do not share a file.
    let path = dir.join(format!("{name}-{n}.svg"));
    let io = |x: std::io::Error| err(&path)(x.to_string());
    std::fs::create_dir_all(&dir).map_err(io)?;
    let drawn = draw(&path);
    let text = drawn.and_then(|()| std::fs::read_to_string(&path).map_err(io));
    // Best effort: a scratch file left behind is harmless.
    let _ = std::fs::remove_file(&path);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::metrics::Sample;

    fn svg(name: &str, draw: impl FnOnce(&Path) -> Result<(), PlotError>) -> String {
        let path = std::env::temp_dir().join(format!("smartmig-plot-{}-{name}.svg", std::process::id()));
        draw(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).ok();
        text
    }

    #[test]
    fn the_load_plot_shows_arrivals_busy_slices_and_waiting_jobs() {
        let s = Series {
            every: 10.0,
            samples: (0..5)
                .map(|i| Sample {
                    t: f64::from(i) * 10.0,
                    busy_slices: i * 7,
                    waiting: i as usize,
                })
                .collect(),
            arrivals: vec![1, 2, 3, 4, 5],
            config_names: vec!["c1".into()],
            config_counts: vec![vec![1]; 5],
            total_slices: 56,
        };
        let text = svg("load", |p| load_over_time(p, &s, "load"));
        for label in ["arrivals per hour", "busy compute slices (of 56)", "waiting jobs"] {
            assert!(text.contains(label), "{label}");
        }
    }

    #[test]
    fn the_learning_curve_shows_its_reference_lines() {
        let text = svg("curve", |p| {
            let series = [
                ("training days".to_string(), vec![(0, 0.9), (1, 0.8)]),
                ("validation days".to_string(), vec![(1, 0.7)]),
            ];
            learning_curve(p, &series, &[("static-best".into(), 0.64)], "t")
        });
        assert!(text.contains("training days") && text.contains("validation days"));
        assert!(text.contains("static-best"));
    }
}

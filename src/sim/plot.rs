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

/// Arrivals per hour and busy compute slices over time.
pub fn load_over_time(path: &Path, s: &Series, title: &str) -> Result<(), PlotError> {
    let e = err(path);
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let t_max = s.samples.last().map_or(1.0, |x| x.t).max(1.0) / 60.0;
    let per_hour = 60.0 / s.every;
    let arr_max = s.arrivals.iter().copied().max().unwrap_or(1) as f64 * per_hour;
    let y_max = arr_max.max(f64::from(s.total_slices)).max(1.0) * 1.05;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("hours")
        .y_desc("arrivals/hour, busy slices")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    chart
        .draw_series(LineSeries::new(
            s.samples
                .iter()
                .zip(&s.arrivals)
                .map(|(x, &a)| (x.t / 60.0, f64::from(a) * per_hour)),
            &PALETTE[0],
        ))
        .map_err(|x| e(x.to_string()))?
        .label("arrivals per hour")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], PALETTE[0]));
    chart
        .draw_series(LineSeries::new(
            s.samples.iter().map(|x| (x.t / 60.0, f64::from(x.busy_slices))),
            &PALETTE[1],
        ))
        .map_err(|x| e(x.to_string()))?
        .label("busy compute slices")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], PALETTE[1]));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(x.to_string()))?;
    root.present().map_err(|x| e(x.to_string()))
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
    curve: &[(u32, f64)],
    refs: &[(String, f64)],
    title: &str,
) -> Result<(), PlotError> {
    let e = err(path);
    let root = SVGBackend::new(path, (900, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let x_max = curve.last().map_or(1, |p| p.0 + 1).max(1) as f64;
    let ys = curve.iter().map(|p| p.1).chain(refs.iter().map(|r| r.1));
    let (lo, hi) = ys.fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    let pad = ((hi - lo).abs() * 0.1).max(0.01);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..x_max, (lo - pad)..(hi + pad))
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("iteration")
        .y_desc("ET vs static CEDF (lower is better)")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    chart
        .draw_series(LineSeries::new(
            curve.iter().map(|p| (f64::from(p.0), p.1)),
            &PALETTE[0],
        ))
        .map_err(|x| e(x.to_string()))?
        .label("smart-mig (training days)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], PALETTE[0]));
    for (i, (name, v)) in refs.iter().enumerate() {
        let color = PALETTE[(i + 1) % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, *v), (x_max, *v)],
                color.stroke_width(2),
            ))
            .map_err(|x| e(x.to_string()))?
            .label(name.clone())
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

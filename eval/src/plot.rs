//! Figures as SVG: the day's load, the configuration mix, energy against tardiness.
//!
//! Each figure draws on a [`Canvas`]: a file, or a string for reports that inline their
//! figures (no scratch file).

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use smartmig_sim::metrics::Series;

/// A plotting failure.
#[derive(Debug, thiserror::Error)]
#[error("cannot write plot {path}: {message}")]
pub struct PlotError {
    /// The file.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

fn err(path: PathBuf) -> impl Fn(String) -> PlotError {
    move |message| PlotError {
        path: path.clone(),
        message,
    }
}

/// Where a figure is drawn.
pub enum Canvas<'a> {
    /// An SVG file at this path.
    File(&'a Path),
    /// SVG text appended to the string; `name` stands for the figure in errors.
    Text {
        /// The figure's name.
        name: &'a str,
        /// Receives the SVG.
        out: &'a mut String,
    },
}

impl<'a> Canvas<'a> {
    /// What errors name: the file, or the inline figure's name.
    fn label(&self) -> PathBuf {
        match self {
            Canvas::File(p) => p.to_path_buf(),
            Canvas::Text { name, .. } => PathBuf::from(format!("{name} (inline SVG)")),
        }
    }

    /// The SVG backend of this size, and the error maker naming the canvas.
    fn open(self, size: (u32, u32)) -> (SVGBackend<'a>, impl Fn(String) -> PlotError) {
        let e = err(self.label());
        let backend = match self {
            Canvas::File(p) => SVGBackend::new(p, size),
            Canvas::Text { out, .. } => SVGBackend::with_string(out, size),
        };
        (backend, e)
    }
}

impl<'a> From<&'a Path> for Canvas<'a> {
    fn from(p: &'a Path) -> Self {
        Canvas::File(p)
    }
}

impl<'a> From<&'a PathBuf> for Canvas<'a> {
    fn from(p: &'a PathBuf) -> Self {
        Canvas::File(p)
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
    /// Mark each point: measured values, not reference levels (a one-point series is
    /// always drawn, as a ring).
    markers: bool,
}

/// Lines over a shared x axis, with a legend; axis ranges fit the data.
fn line_chart<'a>(
    canvas: impl Into<Canvas<'a>>,
    title: &str,
    axes: (&str, &str),
    lines: &[Line],
) -> Result<(), PlotError> {
    // The legend sits right of the plot, as wide as its longest label: it never hides data.
    let longest = lines.iter().map(|l| l.label.chars().count()).max().unwrap_or(0);
    let legend_w = 40 + 6 * longest as u32;
    let (backend, e) = canvas.into().open((720 + legend_w, 440));
    let all = || lines.iter().flat_map(|l| l.points.iter());
    let x_max = all().map(|p| p.0).fold(1.0, f64::max);
    let (lo, hi) = all().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let (lo, hi) = if lo > hi { (0.0, 1.0) } else { (lo, hi) };
    let pad = ((hi - lo).abs() * 0.05).max(0.01);
    let y0 = if lo >= 0.0 { (lo - pad).max(0.0) } else { lo - pad };
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .margin_right(legend_w)
        .x_label_area_size(35)
        .y_label_area_size(55)
        // A quarter iteration before 0, so that a point at 0 is drawn whole.
        .build_cartesian_2d(-0.25..x_max, y0..hi + pad)
        .map_err(|x| e(x.to_string()))?;
    // The x axis counts iterations: whole numbers from 0 only (abs: no "-0").
    let whole = |x: &f64| {
        if *x > -0.5 && (x - x.round()).abs() < 1e-9 {
            format!("{:.0}", x.abs())
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_labels((x_max as usize + 1).min(12))
        .x_label_formatter(&whole)
        .x_desc(axes.0)
        .y_desc(axes.1)
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let mut items = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(l.points.iter().copied(), color.stroke_width(2)))
            .map_err(|x| e(x.to_string()))?;
        if let [p] = l.points[..] {
            // One point singles out a point of another series (e.g. the kept round): a
            // ring around it, which leaves that series' own marker visible.
            chart
                .draw_series(std::iter::once(Circle::new(p, 7, color.stroke_width(2))))
                .map_err(|x| e(x.to_string()))?;
        } else if l.markers {
            chart
                .draw_series(l.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|x| e(x.to_string()))?;
        }
        items.push((l.label.clone(), color, false));
    }
    let left = root.dim_in_pixel().0 as i32 - legend_w as i32 + 12;
    legend_at(&root, left, 50, &items).map_err(&e)?;
    root.present().map_err(|x| e(x.to_string()))
}

/// Width of the right margin that holds a figure's legend, pixels.
const LEGEND_W: u32 = 190;

/// A legend drawn in the right margin of `area`, one row per item, from `top`: a short
/// line or box in the item's colour and its label. Outside the plot, it never hides data.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    top: i32,
    items: &[(String, RGBColor, bool)],
) -> Result<(), String> {
    legend_at(
        area,
        area.dim_in_pixel().0 as i32 - LEGEND_W as i32 + 12,
        top,
        items,
    )
}

/// A legend as [`legend`] draws it, from pixel column `x`.
fn legend_at<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    x: i32,
    top: i32,
    items: &[(String, RGBColor, bool)],
) -> Result<(), String> {
    for (i, (label, color, boxed)) in items.iter().enumerate() {
        let y = top + 18 * i as i32;
        let swatch: Result<(), _> = if *boxed {
            area.draw(&Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()))
        } else {
            area.draw(&PathElement::new(
                vec![(x, y), (x + 14, y)],
                color.stroke_width(2),
            ))
        };
        swatch.map_err(|e| e.to_string())?;
        area.draw(&Text::new(label.clone(), (x + 20, y - 6), ("sans-serif", 12)))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A chart on `area` with the right margin for [`legend`] and room for the axes' labels.
fn chart_in<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, plotters::coord::Shift>,
    caption: Option<&str>,
    x_label_area: u32,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> Result<
    ChartContext<
        'a,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    String,
> {
    let mut builder = ChartBuilder::on(area);
    if let Some(c) = caption {
        builder.caption(c, ("sans-serif", 18));
    }
    builder
        .margin(10)
        .margin_right(LEGEND_W)
        .x_label_area_size(x_label_area)
        .y_label_area_size(60)
        .build_cartesian_2d(x, y)
        .map_err(|x| x.to_string())
}

/// The x axis of a day's figures: hours, or minutes for runs shorter than two hours.
fn time_axis(t_max_min: f64) -> (f64, &'static str) {
    if t_max_min < 120.0 {
        (1.0, "minutes")
    } else {
        (60.0, "hours")
    }
}

/// Sampled counts as a step line: each value holds until the next sample (the last until
/// `x_end`), so a jump between samples is drawn as a jump, not a slope.
fn steps(points: impl IntoIterator<Item = (f64, f64)>, x_end: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (x, y) in points {
        if let Some(&(_, held)) = out.last() {
            out.push((x, held));
        }
        out.push((x, y));
    }
    if let Some(&(x, y)) = out.last() {
        if x < x_end {
            out.push((x_end, y));
        }
    }
    out
}

/// Decimals for tick labels of an axis that ends at `max`: enough to tell ticks apart.
fn decimals(max: f64) -> usize {
    match max {
        m if m >= 10.0 => 0,
        m if m >= 1.0 => 1,
        _ => 2,
    }
}

/// The day's load in two panels over a shared time axis: arrivals per hour on top;
/// busy compute slices (with the cluster's total) and waiting jobs below.
pub fn load_over_time<'a>(canvas: impl Into<Canvas<'a>>, s: &Series, title: &str) -> Result<(), PlotError> {
    let (backend, e) = canvas.into().open((900, 560));
    let t_end = s.samples.last().map_or(0.0, |x| x.t) + s.every;
    let (unit, unit_name) = time_axis(t_end);
    let x_max = (t_end / unit).max(1e-3);
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let root = root
        .titled(title, ("sans-serif", 18))
        .map_err(|x| e(x.to_string()))?;
    let (top, bottom) = root.split_vertically(200);
    // Arrivals in whole hours: rates from 10-minute counts are mostly noise. Short runs
    // keep their sampling interval.
    let bin = if unit_name == "hours" { 60.0 } else { s.every };
    let per_bin = (bin / s.every).round().max(1.0) as usize;
    let bars: Vec<(f64, f64)> = s
        .arrivals
        .chunks(per_bin)
        .enumerate()
        .map(|(i, c)| {
            (
                i as f64 * bin,
                f64::from(c.iter().sum::<u32>()) * 60.0 / (c.len() as f64 * s.every),
            )
        })
        .collect();
    let a_max = bars.iter().map(|b| b.1).fold(1.0, f64::max) * 1.1;
    let blue = PALETTE[0];
    let mut upper = chart_in(&top, None, 10, 0.0..x_max, 0.0..a_max).map_err(&e)?;
    upper
        .configure_mesh()
        .x_labels(0)
        .y_desc("arrivals per hour")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    upper
        .draw_series(bars.iter().map(|&(t0, v)| {
            Rectangle::new(
                [(t0 / unit, 0.0), ((t0 + bin).min(t_end) / unit, v)],
                blue.mix(0.6).filled(),
            )
        }))
        .map_err(|x| e(x.to_string()))?;
    let waiting_max = s.samples.iter().map(|x| x.waiting as f64).fold(0.0, f64::max);
    let y_max = f64::from(s.total_slices).max(waiting_max).max(1.0) * 1.08;
    let mut lower = chart_in(&bottom, None, 35, 0.0..x_max, 0.0..y_max).map_err(&e)?;
    let places = decimals(x_max);
    lower
        .configure_mesh()
        .x_desc(unit_name)
        .x_label_formatter(&|v| format!("{v:.places$}"))
        .y_desc("count")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let (orange, green, grey) = (PALETTE[1], PALETTE[2], PALETTE[7]);
    lower
        .draw_series(LineSeries::new(
            [
                (0.0, f64::from(s.total_slices)),
                (x_max, f64::from(s.total_slices)),
            ],
            grey.stroke_width(1),
        ))
        .map_err(|x| e(x.to_string()))?;
    lower
        .draw_series(LineSeries::new(
            steps(
                s.samples.iter().map(|x| (x.t / unit, f64::from(x.busy_slices))),
                x_max,
            ),
            orange.stroke_width(2),
        ))
        .map_err(|x| e(x.to_string()))?;
    lower
        .draw_series(LineSeries::new(
            steps(s.samples.iter().map(|x| (x.t / unit, x.waiting as f64)), x_max),
            green.stroke_width(2),
        ))
        .map_err(|x| e(x.to_string()))?;
    legend(&top, 30, &[("arrivals per hour".into(), blue, true)]).map_err(&e)?;
    legend(
        &bottom,
        20,
        &[
            ("busy compute slices".into(), orange, false),
            (format!("all slices ({})", s.total_slices), grey, false),
            ("waiting jobs".into(), green, false),
        ],
    )
    .map_err(&e)?;
    root.present().map_err(|x| e(x.to_string()))
}

/// Legend labels of a scenario's configurations, in [`Series::config_names`] order, with
/// the slices each holds: `c2 (4+3)`.
pub fn configuration_labels(sc: &smartmig_sim::scenario::ResolvedScenario) -> Vec<String> {
    let multi = sc.models.len() > 1;
    sc.models
        .iter()
        .flat_map(|m| {
            m.configurations.iter().map(move |c| {
                let sizes: Vec<String> = c.sizes.iter().map(u8::to_string).collect();
                let name = if multi {
                    format!("{}/{}", m.model.key, c.name)
                } else {
                    c.name.clone()
                };
                format!("{name} ({})", sizes.join("+"))
            })
        })
        .collect()
}

/// GPUs in each configuration over time, stacked, as steps (a GPU keeps its
/// configuration until the next sample); `labels` name the configurations (see
/// [`configuration_labels`]).
pub fn configuration_mix<'a>(
    canvas: impl Into<Canvas<'a>>,
    s: &Series,
    labels: &[String],
    title: &str,
) -> Result<(), PlotError> {
    let (backend, e) = canvas.into().open((900, 420));
    let t_end = s.samples.last().map_or(0.0, |x| x.t) + s.every;
    let (unit, unit_name) = time_axis(t_end);
    let gpus = s
        .config_counts
        .iter()
        .map(|row| row.iter().sum::<u32>())
        .max()
        .unwrap_or(1)
        .max(1);
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let mut chart = chart_in(&root, Some(title), 35, 0.0..t_end / unit, 0.0..f64::from(gpus)).map_err(&e)?;
    let places = decimals(t_end / unit);
    chart
        .configure_mesh()
        .x_desc(unit_name)
        .x_label_formatter(&|v| format!("{v:.places$}"))
        .y_desc(format!("GPUs (of {gpus})"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let used: Vec<usize> = (0..s.config_names.len())
        .filter(|&c| s.config_counts.iter().any(|row| row[c] > 0))
        .collect();
    // Sample i's counts hold from t_i until t_{i+1} (the run's end for the last).
    let ends: Vec<(f64, f64)> = s
        .samples
        .iter()
        .enumerate()
        .map(|(i, x)| (x.t / unit, s.samples.get(i + 1).map_or(t_end, |n| n.t) / unit))
        .collect();
    let mut items = Vec::new();
    for (k, &c) in used.iter().enumerate() {
        let color = PALETTE[c % PALETTE.len()];
        let below = |row: &Vec<u32>| used[..k].iter().map(|&o| f64::from(row[o])).sum::<f64>();
        let mut outline: Vec<(f64, f64)> = Vec::new();
        for (row, &(t0, t1)) in s.config_counts.iter().zip(&ends) {
            let top = below(row) + f64::from(row[c]);
            outline.extend([(t0, top), (t1, top)]);
        }
        for (row, &(t0, t1)) in s.config_counts.iter().zip(&ends).rev() {
            let bottom = below(row);
            outline.extend([(t1, bottom), (t0, bottom)]);
        }
        chart
            .draw_series(std::iter::once(Polygon::new(outline, color.mix(0.85).filled())))
            .map_err(|x| e(x.to_string()))?;
        let label = labels
            .get(c)
            .cloned()
            .unwrap_or_else(|| s.config_names[c].clone());
        items.push((label, color, true));
    }
    legend(&root, 50, &items).map_err(&e)?;
    root.present().map_err(|x| e(x.to_string()))
}

/// One policy in [`energy_vs_tardiness`]: means over days and their standard deviations.
#[derive(Debug, Clone, PartialEq)]
pub struct EtPoint {
    /// Policy name.
    pub name: String,
    /// Mean energy, kWh.
    pub energy_kwh: f64,
    /// Its standard deviation over days, kWh.
    pub energy_sd: f64,
    /// Mean average tardiness, minutes.
    pub tardiness_min: f64,
    /// Its standard deviation over days, minutes.
    pub tardiness_sd: f64,
}

/// One point per policy (energy against average tardiness), with ±1 standard deviation
/// bars, and the lower bounds: energy as a dashed line, tardiness as one when it is above
/// zero. Names are in the legend, colour-coded, so close points never hide each other's.
pub fn energy_vs_tardiness<'a>(
    canvas: impl Into<Canvas<'a>>,
    points: &[EtPoint],
    bounds: Option<(f64, f64)>,
    title: &str,
) -> Result<(), PlotError> {
    let (backend, e) = canvas.into().open((900, 520));
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for p in points {
        x0 = x0.min(p.tardiness_min - p.tardiness_sd);
        x1 = x1.max(p.tardiness_min + p.tardiness_sd);
        y0 = y0.min(p.energy_kwh - p.energy_sd);
        y1 = y1.max(p.energy_kwh + p.energy_sd);
    }
    if let Some((energy, tardiness)) = bounds {
        y0 = y0.min(energy);
        x0 = x0.min(tardiness);
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let pad = |a: f64, b: f64| ((b - a).abs() * 0.08).max(1e-3);
    let (px, py) = (pad(x0, x1), pad(y0, y1));
    let (x_lo, x_hi, y_lo, y_hi) = ((x0 - px).max(0.0), x1 + px, (y0 - py).max(0.0), y1 + py);
    let mut chart = chart_in(&root, Some(title), 40, x_lo..x_hi, y_lo..y_hi).map_err(&e)?;
    chart
        .configure_mesh()
        .x_desc("average tardiness (min)")
        .y_desc("energy (kWh)")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let mut items = Vec::new();
    if let Some((energy, tardiness)) = bounds {
        let dashed = |a: (f64, f64), b: (f64, f64)| {
            // Dashes as short segments: plotters 0.3 strokes no dash pattern.
            let n = 60;
            (0..n).step_by(2).map(move |i| {
                let f = |k: usize| {
                    (
                        a.0 + (b.0 - a.0) * k as f64 / n as f64,
                        a.1 + (b.1 - a.1) * k as f64 / n as f64,
                    )
                };
                PathElement::new(vec![f(i), f(i + 1)], BLACK.stroke_width(1))
            })
        };
        chart
            .draw_series(dashed((x_lo, energy), (x_hi, energy)))
            .map_err(|x| e(x.to_string()))?;
        if tardiness > 0.0 {
            chart
                .draw_series(dashed((tardiness, y_lo), (tardiness, y_hi)))
                .map_err(|x| e(x.to_string()))?;
        }
        let shown = if energy >= 1.0 {
            format!("{energy:.2} kWh")
        } else {
            format!("{:.2} Wh", energy * 1000.0)
        };
        items.push((format!("lower bounds ({shown})"), BLACK, false));
    }
    for (i, p) in points.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let (t, en) = (p.tardiness_min, p.energy_kwh);
        chart
            .draw_series([
                PathElement::new(
                    vec![(t - p.tardiness_sd, en), (t + p.tardiness_sd, en)],
                    color.stroke_width(2),
                ),
                PathElement::new(
                    vec![(t, en - p.energy_sd), (t, en + p.energy_sd)],
                    color.stroke_width(2),
                ),
            ])
            .map_err(|x| e(x.to_string()))?;
        // Rings of three sizes, not discs: policies on the same spot all stay visible.
        let radius = 5 + 4 * (i % 3) as i32;
        chart
            .draw_series(std::iter::once(Circle::new(
                (t, en),
                radius,
                color.stroke_width(2),
            )))
            .map_err(|x| e(x.to_string()))?;
        items.push((p.name.clone(), color, true));
    }
    legend(&root, 50, &items).map_err(&e)?;
    root.present().map_err(|x| e(x.to_string()))
}

/// ET per training iteration, with horizontal reference lines (e.g. static-best).
pub fn learning_curve<'a>(
    canvas: impl Into<Canvas<'a>>,
    series: &[(String, Vec<(u32, f64)>)],
    refs: &[(String, f64)],
    title: &str,
) -> Result<(), PlotError> {
    per_iteration(
        canvas,
        series,
        refs,
        title,
        ("iteration", "ET vs static CEDF (lower is better)"),
    )
}

/// Any quantity per training iteration (or round), with horizontal reference lines.
pub fn per_iteration<'a>(
    canvas: impl Into<Canvas<'a>>,
    series: &[(String, Vec<(u32, f64)>)],
    refs: &[(String, f64)],
    title: &str,
    axes: (&str, &str),
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
            markers: true,
        })
        .collect();
    lines.extend(refs.iter().map(|(name, v)| Line {
        label: name.clone(),
        points: vec![(0.0, *v), (x_max, *v)],
        markers: false,
    }));
    line_chart(canvas, title, axes, &lines)
}

/// Shares per slice size (1g, 2g, 3g, 4g, 7g), one group of bars per row.
pub fn slice_mix<'a>(
    canvas: impl Into<Canvas<'a>>,
    rows: &[(String, [f64; 5])],
    title: &str,
) -> Result<(), PlotError> {
    const SIZES: [&str; 5] = ["1g", "2g", "3g", "4g", "7g"];
    let (backend, e) = canvas.into().open((900, 420));
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let n = rows.len().max(1);
    let top = rows.iter().flat_map(|r| r.1).fold(0.0, f64::max).clamp(0.05, 1.0) * 1.1;
    // Size i's group is centred on x = i, where its tick is.
    let mut chart = chart_in(&root, Some(title), 35, -0.5..4.5, 0.0..top).map_err(&e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(5)
        .x_label_formatter(&|x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && (0.0..5.0).contains(&i) {
                SIZES[i as usize].to_string()
            } else {
                String::new()
            }
        })
        .x_desc("slice size")
        .y_desc("share")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let width = 0.8 / n as f64;
    let mut items = Vec::new();
    for (r, (label, shares)) in rows.iter().enumerate() {
        let color = PALETTE[r % PALETTE.len()];
        let bars = shares.iter().enumerate().map(move |(i, &v)| {
            let x0 = i as f64 - 0.4 + r as f64 * width;
            Rectangle::new([(x0, 0.0), (x0 + width, v)], color.filled())
        });
        chart.draw_series(bars).map_err(|x| e(x.to_string()))?;
        items.push((label.clone(), color, true));
    }
    legend(&root, 50, &items).map_err(&e)?;
    root.present().map_err(|x| e(x.to_string()))
}

/// Runs a figure function on a string canvas and returns the SVG text, for reports that
/// inline their figures.
pub fn svg_text(
    name: &str,
    draw: impl FnOnce(Canvas<'_>) -> Result<(), PlotError>,
) -> Result<String, PlotError> {
    let mut out = String::new();
    draw(Canvas::Text { name, out: &mut out })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartmig_sim::metrics::Sample;

    fn svg(name: &str, draw: impl FnOnce(Canvas<'_>) -> Result<(), PlotError>) -> String {
        svg_text(name, draw).unwrap()
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
        for label in [
            "arrivals per hour",
            "busy compute slices",
            "all slices (56)",
            "waiting jobs",
        ] {
            assert!(text.contains(label), "{label}");
        }
    }

    fn day(configs: Vec<Vec<u32>>) -> Series {
        let n = configs.len();
        Series {
            every: 10.0,
            samples: (0..n)
                .map(|i| Sample {
                    t: i as f64 * 10.0,
                    busy_slices: 7,
                    waiting: 0,
                })
                .collect(),
            arrivals: vec![1; n],
            config_names: vec!["c1".into(), "c2".into()],
            config_counts: configs,
            total_slices: 14,
        }
    }

    /// Issue 17: steps were drawn as slopes, and the configurations were not explained.
    #[test]
    fn the_configuration_mix_is_drawn_in_steps_and_names_each_configurations_slices() {
        let s = day(vec![vec![2, 0], vec![1, 1], vec![0, 2]]);
        let labels = ["c1 (7)".to_string(), "c2 (4+3)".to_string()];
        let text = svg("mix", |p| configuration_mix(p, &s, &labels, "mix"));
        assert!(text.contains("c1 (7)") && text.contains("c2 (4+3)"), "{text}");
        // c2's band: 0 GPUs until 10 min, 1 until 20, 2 until 30 — vertical edges, i.e.
        // two polygon corners with the same x and different y at each change.
        let polygons: Vec<&str> = text.split("<polygon").skip(1).collect();
        assert_eq!(polygons.len(), 2, "one band per configuration in use");
        let corners: Vec<(f64, f64)> = polygons[1]
            .split("points=\"")
            .nth(1)
            .and_then(|p| p.split('"').next())
            .unwrap()
            .split_whitespace()
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        let vertical = corners
            .windows(2)
            .filter(|w| w[0].0 == w[1].0 && w[0].1 != w[1].1)
            .count();
        assert!(vertical >= 2, "steps, not slopes: {corners:?}");
    }

    /// Issue 17: names overlapped; no spread, no bound.
    #[test]
    fn energy_vs_tardiness_has_error_bars_a_legend_and_the_lower_bound() {
        let p = |name: &str, e: f64, t: f64| EtPoint {
            name: name.into(),
            energy_kwh: e,
            energy_sd: 0.5,
            tardiness_min: t,
            tardiness_sd: 0.4,
        };
        let points = [p("static-best", 41.84, 1.83), p("smart-mig", 41.84, 2.05)];
        let text = svg("et", |path| {
            energy_vs_tardiness(path, &points, Some((32.93, 0.0)), "et")
        });
        for want in ["static-best", "smart-mig", "lower bounds (32.93 kWh)"] {
            assert!(text.contains(want), "{want}");
        }
        // Two bars (±sd) per point, plus the dashed bound.
        assert!(text.matches("<polyline").count() >= 4 + 10, "{text}");
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
        // Iterations are whole: ticks 0, 1, 2 and no 0.5 or 1.5 between them.
        let label = |v: &str| text.contains(&format!("\n{v}\n</text>"));
        assert!(label("1") && label("2"), "{text}");
        assert!(!label("0.5") && !label("1.5"), "{text}");
        // Every measured point is marked, the one-point validation series too; the
        // reference level is not.
        assert_eq!(text.matches("<circle").count(), 3, "{text}");
        // The legend is right of the plot (its last tick, 2), never over the lines.
        let x_of = |label: &str| {
            text.split("<text x=")
                .find(|t| t.contains(&format!("\n{label}\n</text>")))
                .and_then(|t| t.split('"').nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        };
        let (legend, right_edge) = (x_of("validation days"), x_of("2"));
        assert!(
            legend.zip(right_edge).is_some_and(|(l, r)| l > r),
            "{legend:?} {right_edge:?}\n{text}"
        );
    }

    #[test]
    fn sampled_counts_are_drawn_as_steps_held_to_the_end() {
        let line = steps([(0.0, 1.0), (1.0, 5.0), (2.0, 3.0)], 3.0);
        assert_eq!(
            line,
            vec![
                (0.0, 1.0),
                (1.0, 1.0),
                (1.0, 5.0),
                (2.0, 5.0),
                (2.0, 3.0),
                (3.0, 3.0)
            ]
        );
        assert!(steps([], 3.0).is_empty());
    }
}

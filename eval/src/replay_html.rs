//! The replay what-if as one self-contained HTML page: tables, inline SVG figures, and
//! the section on what is inferred. No scripts, styles or images from elsewhere.

use std::fmt::Write;

use super::replay::Replay;
use crate::plot::{self, PlotError};
use smartmig_sim::energy::WMIN_PER_KWH;

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn kwh(wmin: f64) -> String {
    format!("{:.3}", wmin / WMIN_PER_KWH)
}

/// Renders the report; `labels` name the scenario's configurations in the figures
/// ([`plot::configuration_labels`]).
pub fn render(r: &Replay, labels: &[String]) -> Result<String, PlotError> {
    let point = |name: &str, energy_wmin: f64, tardiness_min: f64| plot::EtPoint {
        name: name.to_string(),
        energy_kwh: energy_wmin / WMIN_PER_KWH,
        energy_sd: 0.0,
        tardiness_min,
        tardiness_sd: 0.0,
    };
    let mut points = vec![point("as ran", r.as_ran.energy_wmin, r.as_ran.avg_tardiness_min)];
    points.extend(
        r.columns
            .iter()
            .map(|c| point(&c.name, c.energy_wmin, c.avg_tardiness_min)),
    );
    let bounds = Some((
        r.bounds.energy_wmin / WMIN_PER_KWH,
        r.bounds.tardiness_min.unwrap_or(0.0),
    ));
    let et_svg = plot::svg_text("energy-vs-tardiness", |p| {
        plot::energy_vs_tardiness(p, &points, bounds, "energy vs tardiness")
    })?;
    let total: f64 = r.as_ran.slice_minutes.iter().sum();
    let mut mix = vec![(
        "as ran (busy slice-minutes)".to_string(),
        r.as_ran
            .slice_minutes
            .map(|x| if total > 0.0 { x / total } else { 0.0 }),
    )];
    mix.extend(
        r.columns
            .iter()
            .map(|c| (format!("{} (slice capacity)", c.name), c.slice_capacity_share)),
    );
    let mix_svg = plot::svg_text("slice-mix", |p| plot::slice_mix(p, &mix, "slice mix"))?;
    let mut figures = vec![et_svg, mix_svg];
    for run in &r.runs {
        if let Some(series) = &run.series {
            if run.repartitions > 0 {
                figures.push(plot::svg_text("configurations", |p| {
                    plot::configuration_mix(p, series, labels, &format!("{}: configuration mix", run.policy))
                })?);
            } else if run.policy == "static-best" {
                figures.push(plot::svg_text("load", |p| {
                    plot::load_over_time(p, series, "static-best: arrivals, busy slices, waiting jobs")
                })?);
            }
        }
    }

    let mut h = String::new();
    // Writing to a String cannot fail.
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>smartmig replay: {src}</title>\n<style>\
         body{{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #bbb;padding:4px 8px;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}}.note{{color:#555}}\
         </style></head><body>\n<h1>smartmig replay</h1>\n\
         <p>History <code>{src}</code>: {rows} rows, {jobs} jobs replayed on <b>{sc}</b> ({gpus} GPUs); \
         simulation seed {seed}.</p>\n",
        src = esc(&r.source),
        rows = r.rows,
        jobs = r.jobs,
        sc = esc(&r.scenario),
        gpus = r.gpus,
        seed = r.seed,
    );
    if !r.skipped.is_empty() {
        let parts: Vec<String> = r.skipped.iter().map(|(w, n)| format!("{n} {}", esc(w))).collect();
        let _ = writeln!(h, "<p class=\"note\">Left out: {}.</p>", parts.join(", "));
    }
    let _ = writeln!(
        h,
        "<h2>Results</h2>\n<table><tr><th>schedule</th><th>energy kWh</th><th>avg tardiness min</th>\
         <th>ET vs as ran (a = {a})</th><th>makespan min</th><th>repartitions</th><th>layout</th></tr>",
        a = r.energy_weight
    );
    let _ = writeln!(
        h,
        "<tr><td>as ran</td><td>{} ({}–{})</td><td>{:.3}</td><td>1.000</td><td>{:.1}</td><td>-</td><td>as scheduled by Slurm</td></tr>",
        kwh(r.as_ran.energy_wmin),
        kwh(r.as_ran.energy_wmin_low),
        kwh(r.as_ran.energy_wmin_high),
        r.as_ran.avg_tardiness_min,
        r.as_ran.makespan_min
    );
    for c in &r.columns {
        let _ =
            writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.1}</td><td>{}</td><td>{}</td></tr>",
            esc(&c.name),
            kwh(c.energy_wmin),
            c.avg_tardiness_min,
            c.et_vs_as_ran,
            c.makespan_min,
            c.repartitions,
            c.layout.as_ref().map(|l| esc(&l.join(" "))).unwrap_or_else(|| "learned".into())
        );
    }
    let _ = writeln!(
        h,
        "<tr><td>lower bounds</td><td>{}</td><td>{}</td><td>-</td><td>-</td><td>-</td><td>no schedule does better</td></tr>\n</table>",
        kwh(r.bounds.energy_wmin),
        match (r.bounds.tardiness_min, &r.bounds.tardiness_method) {
            (Some(t), Some(m)) => format!("{t:.3} ({})", esc(m)),
            _ => "none".into(),
        }
    );
    if let Some(why) = &r.smart_mig_missing {
        let _ = writeln!(h, "<p class=\"note\">No smart-mig column: {}.</p>", esc(why));
    }
    let _ = writeln!(
        h,
        "<h2>Slice mix</h2>\n<table><tr><th>schedule</th><th>1g</th><th>2g</th><th>3g</th><th>4g</th><th>7g</th></tr>"
    );
    for (name, shares) in &mix {
        let cells: String = shares
            .iter()
            .map(|s| format!("<td>{:.1}%</td>", 100.0 * s))
            .collect();
        let _ = writeln!(h, "<tr><td>{}</td>{cells}</tr>", esc(name));
    }
    let _ = writeln!(h, "</table>\n<h2>Figures</h2>");
    for f in &figures {
        // plotters writes an XML declaration first; inline SVG starts at <svg.
        let svg = f.find("<svg").map_or(f.as_str(), |i| &f[i..]);
        let _ = writeln!(h, "<div>{svg}</div>");
    }
    let _ = writeln!(
        h,
        "<h2>What is inferred, and how confident each number is</h2>\n\
         <table><tr><th>quantity</th><th>source</th><th>confidence</th></tr>"
    );
    for i in &r.inferred {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td style=\"text-align:left\">{}</td><td>{}</td></tr>",
            esc(&i.quantity),
            esc(&i.source),
            i.confidence
        );
    }
    let sources: Vec<String> = r
        .speedup_sources
        .iter()
        .map(|(s, n)| format!("{} {n}", esc(s)))
        .collect();
    let _ = writeln!(
        h,
        "</table>\n<p class=\"note\">Per-slice times by source: {}. A job's <code>Comment</code> \
         <code>smartmig:class=NAME</code> selects a class curve (built-in, or <code>[[routing.class]]</code> \
         of the smartmig.toml given with <code>--config</code>); other jobs are assumed to use exactly the \
         share of a GPU they were given. The energy range of the as-ran schedule spans packing the busy \
         slices onto as few GPUs as possible and spreading them evenly.</p>\n</body></html>",
        sources.join(", ")
    );
    Ok(h)
}

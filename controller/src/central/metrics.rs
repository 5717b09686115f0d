//! Prometheus metrics of the central role on `[controller] metrics_listen` (loopback by
//! default): each scrape is answered from the status file, so the endpoint shares no
//! state with the loop and shows what `smartmigd status` shows.

use std::path::PathBuf;

use super::status::Status;

/// Renders the status as Prometheus text exposition.
pub fn render(s: &Status) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let c = &s.counters;
    for (name, help, v) in [
        (
            "decisions_total",
            "GPU decisions made by the central role.",
            c.decisions,
        ),
        ("repartitions_total", "GPUs re-laid out.", c.repartitions),
        ("failures_total", "Errors met by the central role.", c.failures),
        (
            "reroutes_total",
            "Pending jobs re-routed after their type vanished.",
            c.reroutes,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP smartmig_{name} {help}\n# TYPE smartmig_{name} counter\nsmartmig_{name} {v}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP smartmig_configuration_seconds_total Seconds GPUs spent in each configuration.\n\
         # TYPE smartmig_configuration_seconds_total counter"
    );
    for (c, secs) in &s.seconds_in_configuration {
        let _ = writeln!(
            out,
            "smartmig_configuration_seconds_total{{configuration=\"{}\"}} {secs}",
            crate::metrics::label(c)
        );
    }
    let _ = writeln!(
        out,
        "# HELP smartmig_cycles_total Central cycles run.\n# TYPE smartmig_cycles_total counter\nsmartmig_cycles_total {}\n\
         # HELP smartmig_pending_transitions Nodes in the middle of a re-layout.\n# TYPE smartmig_pending_transitions gauge\nsmartmig_pending_transitions {}\n\
         # HELP smartmig_stranded_jobs Pending jobs waiting for a GPU type no GPU has, not re-routable on this Slurm.\n# TYPE smartmig_stranded_jobs gauge\nsmartmig_stranded_jobs {}\n\
         # HELP smartmig_last_update_seconds When the status was last written (Unix seconds).\n# TYPE smartmig_last_update_seconds gauge\nsmartmig_last_update_seconds {}",
        s.cycles,
        s.pending_transitions.len(),
        s.stranded_jobs.len(),
        s.updated_at
    );
    out
}

/// Starts the endpoint on `listen` (nothing when empty); each scrape renders the status
/// file in `state_dir` (an empty exposition before the first cycle).
pub fn serve(listen: &str, state_dir: PathBuf) -> std::io::Result<Option<std::net::SocketAddr>> {
    crate::metrics::serve(listen, move || {
        Status::read(&state_dir).map(|s| render(&s)).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    #[test]
    fn a_scrape_shows_the_status_counters_and_time_per_configuration() {
        let dir = std::env::temp_dir().join(format!("smartmig-metrics-{}", std::process::id()));
        let mut s = Status::default();
        s.counters.repartitions = 3;
        s.seconds_in_configuration.insert("c8".into(), 120.0);
        s.write(&dir).unwrap();
        let addr = serve("127.0.0.1:0", dir.clone()).unwrap().unwrap();
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        conn.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
        assert!(text.contains("smartmig_repartitions_total 3"), "{text}");
        assert!(
            text.contains("smartmig_configuration_seconds_total{configuration=\"c8\"} 120"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

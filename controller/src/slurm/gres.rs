//! Slurm's GRES strings (`gpu:1g.10gb:3,gpu:3g.40gb:1(S:0)`,
//! `gpu:1g.10gb:1(IDX:0,2-3)`) as counts per type and device indices.

/// One `gpu:<type>:<count>` entry, with the device indices when Slurm gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresCount {
    /// The GPU type (`1g.10gb`); empty for untyped GPUs.
    pub gpu_type: String,
    /// The count.
    pub count: u32,
    /// Device indices (`IDX:` lists); empty when absent or `N/A`.
    pub indices: Vec<u32>,
}

/// Parses the `gpu` entries of a GRES string; other GRES are skipped. `what` names the
/// string in errors.
pub fn parse_gres(text: &str, what: &str) -> Result<Vec<GresCount>, String> {
    let mut out = Vec::new();
    for entry in split_top(text) {
        let entry = entry.trim();
        if entry.is_empty() || entry == "(null)" {
            continue;
        }
        let (main, paren) = match entry.split_once('(') {
            Some((m, p)) => (m, Some(p.trim_end_matches(')'))),
            None => (entry, None),
        };
        let main = main
            .strip_prefix("gres/")
            .or(main.strip_prefix("gres:"))
            .unwrap_or(main);
        let mut parts = main.split(':');
        if parts.next() != Some("gpu") {
            continue;
        }
        let rest: Vec<&str> = parts.collect();
        let bad = || format!("{what}: cannot read GRES entry `{entry}`");
        let (gpu_type, count) = match rest.as_slice() {
            [] => (String::new(), 1),
            [n] if n.parse::<u32>().is_ok() => (String::new(), n.parse().map_err(|_| bad())?),
            [t] => (t.to_string(), 1),
            [t, n] => (t.to_string(), n.parse().map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        let mut indices = Vec::new();
        if let Some(idx) = paren.and_then(|p| p.split_once("IDX:").map(|(_, i)| i)) {
            let idx = idx.split(')').next().unwrap_or("");
            if idx != "N/A" {
                for r in idx.split(',').filter(|s| !s.is_empty()) {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    let (a, b): (u32, u32) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                    indices.extend(a..=b);
                }
            }
        }
        out.push(GresCount {
            gpu_type,
            count,
            indices,
        });
    }
    Ok(out)
}

/// Splits on commas outside parentheses (`IDX:0,2` lists contain commas).
fn split_top(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_used_and_job_gres_strings_give_types_counts_and_indices() {
        let g = parse_gres("gpu:1g.10gb:3,gpu:3g.40gb:1(S:0),license:2", "n1 Gres").unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].gpu_type.as_str(), g[0].count), ("1g.10gb", 3));
        let u = parse_gres("gpu:1g.10gb:2(IDX:0,2-3),gpu:3g.40gb:0(IDX:N/A)", "n1 GresUsed").unwrap();
        assert_eq!(u[0].indices, vec![0, 2, 3]);
        assert!(u[1].indices.is_empty());
        let j = parse_gres("gres:gpu:1g.10gb:1", "job 4").unwrap();
        assert_eq!(j[0].gpu_type, "1g.10gb");
        let e = parse_gres("gpu:a:b:c", "n2 Gres").unwrap_err();
        assert!(e.contains("n2 Gres") && e.contains("gpu:a:b:c"), "{e}");
    }
}

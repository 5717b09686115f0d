//! Slurm's GRES strings (`gpu:1g.10gb:3,gpu:3g.40gb:1(S:0)`,
//! `gpu:1g.10gb:1(IDX:0,2-3)`) as counts per type and device indices.

use smartmig_core::tres::{self, TresError};

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

/// A GRES string that does not read; `what` names it (e.g. `node n1 GresUsed`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: cannot read GRES entry: {source}")]
pub struct GresError {
    /// Which string it was.
    pub what: String,
    /// The entry and its fault.
    pub source: TresError,
}

/// Parses the `gpu` entries of a GRES string (grammar: `smartmig_core::tres`); other GRES
/// are skipped. `what` names the string in errors.
pub fn parse_gres(text: &str, what: &str) -> Result<Vec<GresCount>, GresError> {
    let bad = |source| GresError {
        what: what.to_string(),
        source,
    };
    let mut out = Vec::new();
    for raw in tres::entries(text) {
        let e = match tres::parse(raw) {
            Ok(e) if e.is_gpu() => e,
            Ok(_) => continue,
            Err(_) if !tres::names_gpu(raw) => continue,
            Err(err) => return Err(bad(err)),
        };
        out.push(GresCount {
            gpu_type: e.gpu_type.unwrap_or_default().to_string(),
            count: u32::try_from(e.count().map_err(bad)?).map_err(|_| {
                bad(TresError::Count {
                    entry: raw.to_string(),
                    count: e.count.unwrap_or_default().to_string(),
                })
            })?,
            indices: e.indices().map_err(bad)?,
        });
    }
    Ok(out)
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
        let e = parse_gres("gpu:a:b:c", "n2 Gres").unwrap_err().to_string();
        assert!(e.contains("n2 Gres") && e.contains("gpu:a:b:c"), "{e}");
    }
}

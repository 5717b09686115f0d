//! Slurm's GRES strings (`gpu:1g.10gb:3,gpu:3g.40gb:1(S:0)`,
//! `gpu:1g.10gb:1(IDX:0,2-3)`) as counts per type and device indices.

use std::collections::HashSet;

use smartmig_core::mig::padding::{is_pad_type, PAD_PREFIX};
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
    // Devices named so far: callers build a list per device, so a garbled count is
    // refused here rather than allocated.
    let mut total: u64 = 0;
    for raw in tres::entries(text) {
        let e = match tres::parse(raw) {
            Ok(e) if e.is_gpu() => e,
            Ok(_) => continue,
            Err(_) if !tres::names_gpu(raw) => continue,
            Err(err) => return Err(bad(err)),
        };
        let count = e.count().map_err(bad)?;
        let indices = e.indices().map_err(bad)?;
        // An entry names its count of devices, or its indices where more (`GresUsed`
        // writes `gpu:T:0(IDX:N/A)` and counts that need not match its list).
        total = total.saturating_add(count.max(indices.len() as u64));
        if total > u64::from(tres::MAX_DEVICES) {
            return Err(bad(TresError::TooManyDevices(raw.to_string())));
        }
        out.push(GresCount {
            gpu_type: e.gpu_type.unwrap_or_default().to_string(),
            count: count as u32, // at most MAX_DEVICES
            indices,
        });
    }
    Ok(out)
}

/// A node's `Gres` value with its entries of the types in `managed` (and their padding
/// types, `pad-TYPE`) set to `mig` (`gpu:TYPE:N`, one per type): each type keeps its place,
/// a type gone is dropped, new ones follow the last GPU entry (in `mig`'s order), and
/// every other entry stays as it is. Slurm numbers a node's devices type by type in `Gres`
/// order, so keeping the order keeps running jobs' device indices wherever the counts
/// before them stay. A padded `mig` (it has padding entries) is a block whose order is its
/// own: it goes whole where the first managed entry was.
pub fn merge_mig_gres(value: &str, mig: &str, managed: &HashSet<String>) -> String {
    let (new, managed_type, gpu_type) = managed_parts(mig, managed);
    if new.iter().any(|(t, _)| is_pad_type(t)) {
        return merge_block(value, &new, managed_type, gpu_type);
    }
    let mut placed: HashSet<&str> = HashSet::new();
    let mut out: Vec<&str> = Vec::new();
    // Where new types go: after the last GPU entry, else where the managed ones were.
    let mut insert_at = None;
    for e in tres::entries(value).map(str::trim).filter(|e| !e.is_empty()) {
        match managed_type(e) {
            None => {
                out.push(e);
                if gpu_type(e).is_some() {
                    insert_at = Some(out.len());
                }
            }
            Some(t) => match new.iter().find(|(u, _)| *u == t) {
                Some((t, n)) if placed.insert(t) => {
                    out.push(n);
                    insert_at = Some(out.len());
                }
                _ => {
                    insert_at.get_or_insert(out.len());
                }
            },
        }
    }
    let at = insert_at.unwrap_or(out.len());
    let added: Vec<&str> = new
        .iter()
        .filter(|(t, _)| !placed.contains(t.as_str()))
        .map(|(_, e)| *e)
        .collect();
    out.splice(at..at, added);
    out.join(",")
}

/// A node's `Gres` value with every entry of the types in `managed` (and their padding
/// types) replaced by `mig`'s, in `mig`'s order, where the first of them was: `mig`'s
/// device numbering, whatever order `value` had.
pub fn set_mig_block(value: &str, mig: &str, managed: &HashSet<String>) -> String {
    let (new, managed_type, gpu_type) = managed_parts(mig, managed);
    merge_block(value, &new, managed_type, gpu_type)
}

/// Whether `ty` is one of `managed` or the padding type of one.
pub fn is_managed_type(ty: &str, managed: &HashSet<String>) -> bool {
    managed.contains(ty) || ty.strip_prefix(PAD_PREFIX).is_some_and(|m| managed.contains(m))
}

/// The managed `gpu` entries of a GRES string, in its order, as (type, count); None when
/// it does not read.
pub fn managed_counts(gres: &str, managed: &HashSet<String>) -> Option<Vec<(String, u32)>> {
    let entries = parse_gres(gres, "GRES").ok()?;
    Some(
        entries
            .into_iter()
            .filter(|e| is_managed_type(&e.gpu_type, managed))
            .map(|e| (e.gpu_type, e.count))
            .collect(),
    )
}

/// `mig`'s managed entries (type, entry), and how to tell an entry's managed type and its
/// GPU type.
#[allow(clippy::type_complexity)]
fn managed_parts<'a>(
    mig: &'a str,
    managed: &'a HashSet<String>,
) -> (
    Vec<(String, &'a str)>,
    impl Fn(&str) -> Option<String> + 'a,
    impl Fn(&str) -> Option<Option<String>> + Copy,
) {
    let gpu_type = |e: &str| -> Option<Option<String>> {
        let e = tres::parse(e).ok().filter(|e| e.is_gpu())?;
        Some(e.gpu_type.map(str::to_string))
    };
    let managed_type = move |e: &str| gpu_type(e).flatten().filter(|t| is_managed_type(t, managed));
    let new: Vec<(String, &str)> = tres::entries(mig)
        .filter_map(|e| Some((managed_type(e)?, e.trim())))
        .collect();
    (new, managed_type, gpu_type)
}

/// [`merge_mig_gres`] for a padded block: every managed entry of `value` out, `new` whole
/// where the first of them was (else after the last GPU entry).
fn merge_block(
    value: &str,
    new: &[(String, &str)],
    managed_type: impl Fn(&str) -> Option<String>,
    gpu_type: impl Fn(&str) -> Option<Option<String>>,
) -> String {
    let mut out: Vec<&str> = Vec::new();
    let (mut first_managed, mut after_gpu) = (None, None);
    for e in tres::entries(value).map(str::trim).filter(|e| !e.is_empty()) {
        if managed_type(e).is_some() {
            first_managed.get_or_insert(out.len());
            continue;
        }
        out.push(e);
        if gpu_type(e).is_some() {
            after_gpu = Some(out.len());
        }
    }
    let at = first_managed.or(after_gpu).unwrap_or(out.len());
    out.splice(at..at, new.iter().map(|(_, e)| *e));
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_gres_keeps_each_types_place_drops_gone_types_and_appends_new_ones() {
        let managed: HashSet<String> = ["1g.5gb", "3g.20gb", "4g.20gb", "7g.40gb"]
            .map(String::from)
            .into();
        // A whole GPU first, then MIG types in an order that is not by name, then a license.
        let value = "gpu:a100:1,gpu:4g.20gb:2,gpu:3g.20gb:2,license:2";
        assert_eq!(
            merge_mig_gres(value, "gpu:1g.5gb:2,gpu:3g.20gb:3,gpu:4g.20gb:1", &managed),
            "gpu:a100:1,gpu:4g.20gb:1,gpu:3g.20gb:3,gpu:1g.5gb:2,license:2"
        );
        assert_eq!(
            merge_mig_gres(value, "gpu:7g.40gb:1", &managed),
            "gpu:a100:1,gpu:7g.40gb:1,license:2"
        );
        assert_eq!(merge_mig_gres("", "gpu:7g.40gb:1", &managed), "gpu:7g.40gb:1");
        assert_eq!(
            merge_mig_gres("license:2,gpu:3g.20gb:2,nvme:1", "gpu:7g.40gb:1", &managed),
            "license:2,gpu:7g.40gb:1,nvme:1"
        );
    }

    #[test]
    fn a_padded_block_replaces_every_managed_entry_where_the_first_was_and_unpadding_drops_the_pads() {
        let managed: HashSet<String> = ["3g.20gb", "4g.20gb", "7g.40gb"].map(String::from).into();
        let block = "gpu:3g.20gb:1,gpu:pad-3g.20gb:3,gpu:pad-4g.20gb:2,gpu:7g.40gb:1,gpu:pad-7g.40gb:1";
        // First padding of a node whose admin listed 4g.20gb first, after a whole GPU.
        assert_eq!(
            merge_mig_gres(
                "gpu:a100:1,gpu:4g.20gb:2,gpu:3g.20gb:2,license:2",
                block,
                &managed
            ),
            format!("gpu:a100:1,{block},license:2")
        );
        // A padded node padded again: the block is rewritten whole, in its own order.
        let again = "gpu:3g.20gb:2,gpu:pad-3g.20gb:2,gpu:4g.20gb:2,gpu:pad-7g.40gb:2";
        assert_eq!(
            merge_mig_gres(&format!("gpu:a100:1,{block},license:2"), again, &managed),
            format!("gpu:a100:1,{again},license:2")
        );
        // Padding turned off: the pads are managed entries no longer wanted.
        assert_eq!(
            merge_mig_gres(
                &format!("{block},license:2"),
                "gpu:3g.20gb:2,gpu:4g.20gb:2",
                &managed
            ),
            "gpu:3g.20gb:2,gpu:4g.20gb:2,license:2"
        );
    }

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

    #[test]
    fn a_gres_string_naming_more_devices_than_any_node_is_refused_by_name() {
        let max = tres::MAX_DEVICES;
        assert_eq!(
            parse_gres(&format!("gpu:1g.10gb:{max}"), "n1 Gres").unwrap()[0].count,
            max
        );
        let full = format!("gpu:1g.10gb:0(IDX:0-{})", max - 1);
        for (text, entry) in [
            (
                format!("gpu:1g.10gb:{}", max + 1),
                format!("gpu:1g.10gb:{}", max + 1),
            ),
            (
                "gpu:1g.10gb:4294967296".to_string(),
                "gpu:1g.10gb:4294967296".to_string(),
            ),
            (
                format!("gpu:1g.10gb:{max},gpu:3g.40gb:1"),
                "gpu:3g.40gb:1".to_string(),
            ),
            // Indices count too: entries of count 0 with full lists, one after another.
            (format!("{full},{full}"), full.clone()),
        ] {
            let e = parse_gres(&text, "n1 Gres").unwrap_err();
            assert_eq!(e.source, TresError::TooManyDevices(entry), "{text}");
            assert!(e.to_string().contains("n1 Gres"), "{e}");
        }
        assert_eq!(
            parse_gres(&full, "n1 GresUsed").unwrap()[0].indices.len(),
            max as usize
        );
    }
}

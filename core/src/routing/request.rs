//! GPU requests in Slurm's tres strings (`tres_per_node`, `tres_per_job`, ...).
//!
//! Format: comma-separated entries `gres:gpu[:type][:count]` (Slurm 22.05) or
//! `gres/gpu[:type][:count]` (later releases), read with the grammar of [`crate::tres`].
//! `gpu:mig[:N]` asks for automatic routing.

use std::fmt;

use crate::mig::padding::PAD_PREFIX;
pub use crate::tres::Spelling;

/// The pseudo-type that asks smartmig to choose the slice.
pub const AUTO_TYPE: &str = "mig";

/// Which `job_desc_msg_t` field an entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TresField {
    /// `tres_per_node` (`--gres`, `--gpus-per-node`).
    PerNode = 0,
    /// `tres_per_job` (`--gpus`).
    PerJob = 1,
    /// `tres_per_task` (`--gpus-per-task`).
    PerTask = 2,
    /// `tres_per_socket` (`--gpus-per-socket`).
    PerSocket = 3,
}

impl TresField {
    /// All fields, in index order.
    pub const ALL: [TresField; 4] = [
        TresField::PerNode,
        TresField::PerJob,
        TresField::PerTask,
        TresField::PerSocket,
    ];

    /// The `job_desc_msg_t` member name.
    pub fn as_str(self) -> &'static str {
        match self {
            TresField::PerNode => "tres_per_node",
            TresField::PerJob => "tres_per_job",
            TresField::PerTask => "tres_per_task",
            TresField::PerSocket => "tres_per_socket",
        }
    }
}

/// The four tres strings of a request, indexed by [`TresField`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TresStrings<'a>(pub [Option<&'a str>; 4]);

/// What type an entry asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuType {
    /// `gpu:mig`: smartmig chooses.
    Auto,
    /// A concrete type such as `3g.20gb`.
    Concrete(String),
    /// `gpu` or `gpu:N`.
    Untyped,
}

/// One `gpu` entry of one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuEntry {
    /// The field it is in.
    pub field: TresField,
    /// Its position among the field's comma-separated entries.
    pub index: usize,
    /// Its prefix spelling.
    pub spelling: Spelling,
    /// Its count follows `=` (`gres/gpu:mig=1`: how clients from Slurm 23.11 write
    /// `--gpus-per-task` into `tres_per_task`), kept when the entry is rewritten.
    pub equals: bool,
    /// The requested type.
    pub gpu_type: GpuType,
    /// The requested count.
    pub count: u64,
}

/// What a job asks of GPUs, after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuRequest {
    /// No GPU entry at all (0-count entries, which Slurm drops, count as none).
    None,
    /// Only concrete types: left to Slurm, which checks them against its nodes.
    Concrete(Vec<GpuEntry>),
    /// Only untyped entries.
    Untyped(Vec<GpuEntry>),
    /// Only `gpu:mig` entries: to route.
    Auto(Vec<GpuEntry>),
}

/// Why a request is refused (one line, shown by sbatch).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// An entry that is not `gpu[:type][:count]`.
    #[error("cannot read GPU request `{0}` (expected gpu[:type][:count])")]
    Malformed(String),
    /// A padding type asked for by name: its records are no GPUs.
    #[error("GPU type `{0}` is a padding record, not a GPU; ask for a MIG type or gpu:mig:N")]
    PaddingType(String),
    /// More instances of a type smartmig chooses than one GPU can hold.
    #[error("GPU request `{entry}` asks for {count} instances; one GPU holds at most {max}")]
    TooMany {
        /// The entry.
        entry: String,
        /// The count asked for.
        count: u64,
        /// The most any routable type holds.
        max: u64,
    },
    /// Typed and untyped (or automatic and concrete) entries together.
    #[error("GPU request mixes {0}; use one form (e.g. only gpu:mig:N)")]
    Mixed(&'static str),
}

impl fmt::Display for GpuEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.gpu_type {
            GpuType::Auto => write!(f, "gpu:{AUTO_TYPE}:{}", self.count),
            GpuType::Concrete(t) => write!(f, "gpu:{t}:{}", self.count),
            GpuType::Untyped => write!(f, "gpu:{}", self.count),
        }
    }
}

/// Parses one entry; `Ok(None)` for a non-GPU entry such as `gres:shard:1` and for a
/// 0-count GPU entry.
fn parse_entry(field: TresField, index: usize, raw: &str) -> Result<Option<GpuEntry>, RequestError> {
    let malformed = || RequestError::Malformed(raw.to_string());
    let e = match crate::tres::parse(raw) {
        Ok(e) if e.is_gpu() => e,
        // Other GRES are not smartmig's to judge, however they are written.
        Ok(_) => return Ok(None),
        Err(_) if !crate::tres::names_gpu(raw) => return Ok(None),
        Err(_) => return Err(malformed()),
    };
    // A request has no parenthesised detail; `=` stands only before its count.
    let equals = e.raw.contains('=');
    if e.detail.is_some() || (equals && e.count.is_none_or(|c| c.contains('='))) {
        return Err(malformed());
    }
    let gpu_type = match e.gpu_type {
        None => GpuType::Untyped,
        Some(t) => type_of(t).ok_or_else(malformed)?,
    };
    let count = e.count().map_err(|_| malformed())?;
    if count == 0 {
        // Slurm drops 0-count entries (22.05 `_get_next_gres`, 24.11
        // `slurm_get_next_tres`): `--gres=gpu:0` asks for no GPU.
        return Ok(None);
    }
    Ok(Some(GpuEntry {
        field,
        index,
        spelling: e.spelling,
        equals,
        gpu_type,
        count,
    }))
}

fn type_of(t: &str) -> Option<GpuType> {
    if t.is_empty() {
        None
    } else if t.eq_ignore_ascii_case(AUTO_TYPE) {
        Some(GpuType::Auto)
    } else {
        Some(GpuType::Concrete(t.to_string()))
    }
}

/// Parses and checks the GPU part of a request.
///
/// `max_auto` is the most instances an automatic per-node, per-task or per-socket request
/// may ask for (the largest `max_count` among the profiles routing may choose); a per-job
/// count (`--gpus=mig:N`) is not bounded by one GPU. Concrete types are not checked
/// against the catalogue: the cluster may have GPUs smartmig does not manage, and a
/// per-node count may span the node's GPUs; Slurm checks them against its nodes.
pub fn parse_request(tres: &TresStrings<'_>, max_auto: u64) -> Result<GpuRequest, RequestError> {
    let mut entries = Vec::new();
    for field in TresField::ALL {
        let Some(text) = tres.0[field as usize] else {
            continue;
        };
        for (index, raw) in text.split(',').enumerate() {
            let raw = raw.trim();
            if raw.is_empty() {
                continue;
            }
            if let Some(e) = parse_entry(field, index, raw)? {
                entries.push(e);
            }
        }
    }
    let Some(first) = entries.first() else {
        return Ok(GpuRequest::None);
    };
    let same_form = |a: &GpuType, b: &GpuType| {
        matches!(
            (a, b),
            (GpuType::Auto, GpuType::Auto)
                | (GpuType::Untyped, GpuType::Untyped)
                | (GpuType::Concrete(_), GpuType::Concrete(_))
        )
    };
    if let Some(other) = entries.iter().find(|e| !same_form(&e.gpu_type, &first.gpu_type)) {
        let untyped = [&first.gpu_type, &other.gpu_type].contains(&&GpuType::Untyped);
        return Err(RequestError::Mixed(if untyped {
            "typed and untyped GPUs"
        } else {
            "gpu:mig with concrete GPU types"
        }));
    }
    match first.gpu_type {
        GpuType::Auto => {
            // A per-job count (`--gpus`) may spread over GPUs; the others share one GPU.
            if let Some(e) = entries
                .iter()
                .find(|e| e.field != TresField::PerJob && e.count > max_auto)
            {
                return Err(RequestError::TooMany {
                    entry: e.to_string(),
                    count: e.count,
                    max: max_auto,
                });
            }
            Ok(GpuRequest::Auto(entries))
        }
        GpuType::Untyped => Ok(GpuRequest::Untyped(entries)),
        GpuType::Concrete(_) => {
            // Padding records are typed GPUs to Slurm: only their name keeps jobs off them
            // (nodes stay padded after `padding` is turned off, until their next re-layout).
            if let Some(name) = entries.iter().find_map(|e| match &e.gpu_type {
                GpuType::Concrete(t) if is_padding(t) => Some(t),
                _ => None,
            }) {
                return Err(RequestError::PaddingType(name.clone()));
            }
            Ok(GpuRequest::Concrete(entries))
        }
    }
}

/// Whether `t` names a padding type, in any case.
fn is_padding(t: &str) -> bool {
    t.get(..PAD_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(PAD_PREFIX))
}

/// Rewrites the fields holding `entries` so that each asks for `gpu_type` with its count.
///
/// Returns the new text of every field that changed; other entries keep their text.
pub fn rewrite(tres: &TresStrings<'_>, entries: &[GpuEntry], gpu_type: &str) -> Vec<(TresField, String)> {
    let mut out = Vec::new();
    for field in TresField::ALL {
        let mine: Vec<&GpuEntry> = entries.iter().filter(|e| e.field == field).collect();
        let (Some(text), false) = (tres.0[field as usize], mine.is_empty()) else {
            continue;
        };
        let parts: Vec<String> = text
            .split(',')
            .enumerate()
            .map(|(i, raw)| match mine.iter().find(|e| e.index == i) {
                Some(e) => {
                    let sep = if e.equals { '=' } else { ':' };
                    format!("{}gpu:{gpu_type}{sep}{}", e.spelling.prefix(), e.count)
                }
                None => raw.to_string(),
            })
            .collect();
        out.push((field, parts.join(",")));
    }
    out
}

/// A GPU option's value as `srun` and `salloc` hold it, with every `mig` type taken out:
/// `gres:gpu:mig:2` → `gres:gpu:2`, `gpu:mig` → `gpu` and `gres/gpu:mig=1` → `gres/gpu=1`
/// for `--gres` and `--tres-per-task` (`named`: entries start with the resource name;
/// other resources such as `cpu=2` are kept), `mig:2` → `2` for `--gpus` and
/// `--gpus-per-*`. None when no entry asks for `mig`. A job step inside a routed
/// allocation must ask for untyped GPUs: they match the concrete type its job holds,
/// which `gpu:mig` does not.
pub fn untype_auto(value: &str, named: bool) -> Option<String> {
    let mut changed = false;
    let entries: Vec<String> = value
        .split(',')
        .map(|raw| {
            let (lead, rest) = if named {
                let bare = raw
                    .strip_prefix("gres:")
                    .or_else(|| raw.strip_prefix("gres/"))
                    .unwrap_or(raw);
                match bare.strip_prefix("gpu:") {
                    Some(rest) => (&raw[..raw.len() - rest.len()], rest),
                    None => return raw.to_string(),
                }
            } else {
                ("", raw)
            };
            // The count follows `:`, or `=` in the TRES form 23.11's clients write.
            let (ty, count) = match rest.find([':', '=']) {
                Some(i) => (&rest[..i], Some((&rest[i..i + 1], &rest[i + 1..]))),
                None => (rest, None),
            };
            if !ty.eq_ignore_ascii_case(AUTO_TYPE) {
                return raw.to_string();
            }
            changed = true;
            let name = lead.trim_end_matches(':');
            match (count, named) {
                (Some((sep, n)), true) => format!("{name}{sep}{n}"),
                (Some((_, n)), false) => n.to_string(),
                (None, true) => name.to_string(),
                (None, false) => "1".to_string(),
            }
        })
        .collect();
    changed.then(|| entries.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untyping_takes_out_only_the_mig_type() {
        assert_eq!(untype_auto("gres:gpu:mig:2", true).as_deref(), Some("gres:gpu:2"));
        assert_eq!(untype_auto("gres/gpu:mig", true).as_deref(), Some("gres/gpu"));
        assert_eq!(
            untype_auto("gres:shard:1,gpu:MIG:3", true).as_deref(),
            Some("gres:shard:1,gpu:3")
        );
        assert_eq!(untype_auto("mig:2", false).as_deref(), Some("2"));
        assert_eq!(untype_auto("mig=2", false).as_deref(), Some("2"));
        assert_eq!(untype_auto("mig", false).as_deref(), Some("1"));
        for left in ["gres:gpu:3g.20gb:1", "gres:gpu:2", "gres:shard:mig:1"] {
            assert_eq!(untype_auto(left, true), None, "{left}");
        }
        assert_eq!(untype_auto("3g.20gb:1", false), None);
        assert_eq!(untype_auto("4", false), None);
    }

    #[test]
    fn untyping_reads_the_tres_per_task_form_and_keeps_other_tres() {
        // SLURM_TRES_PER_TASK as 24.11's sbatch exports `--cpus-per-task=2 --gpus-per-task=mig:1`.
        assert_eq!(
            untype_auto("cpu=2,gres/gpu:mig=1", true).as_deref(),
            Some("cpu=2,gres/gpu=1")
        );
        assert_eq!(untype_auto("gres:gpu:mig=2", true).as_deref(), Some("gres:gpu=2"));
        for left in ["cpu=2,gres/gpu=1", "gres/gpu:3g.20gb=1", "cpu=4"] {
            assert_eq!(untype_auto(left, true), None, "{left}");
        }
    }

    fn parse(node: Option<&str>, job: Option<&str>) -> Result<GpuRequest, RequestError> {
        parse_request(&TresStrings([node, job, None, None]), 7)
    }

    #[test]
    fn gpu_mig_with_and_without_count_is_automatic() {
        let GpuRequest::Auto(e) = parse(Some("gres:gpu:mig:2"), None).unwrap() else {
            panic!("not auto")
        };
        assert_eq!(e[0].count, 2);
        let GpuRequest::Auto(e) = parse(None, Some("gres/gpu:mig")).unwrap() else {
            panic!("not auto")
        };
        assert_eq!(
            (e[0].count, e[0].spelling, e[0].field),
            (1, Spelling::Slash, TresField::PerJob)
        );
    }

    #[test]
    fn concrete_types_are_left_to_slurm_whatever_the_name_and_count() {
        // A non-MIG GPU of the same cluster, a per-node count over two GPUs of one type, a
        // per-job count, a type of a model not configured here: Slurm checks them.
        for (node, job) in [
            (Some("gres:gpu:3g.20gb:1"), None),
            (Some("gres:gpu:v100:1"), None),
            (Some("gres:gpu:7g.40gb:2"), None),
            (Some("gres:gpu:3g.20gb:3"), None),
            (Some("gres:gpu:3g.71gb:1"), None),
            (None, Some("gres/gpu:3g.20gb:4")),
        ] {
            let Ok(GpuRequest::Concrete(e)) = parse(node, job) else {
                panic!("{node:?} {job:?}: {:?}", parse(node, job))
            };
            assert_eq!(e.len(), 1);
        }
    }

    #[test]
    fn padding_types_cannot_be_asked_for_by_name() {
        for t in [
            "gres:gpu:pad-3g.20gb:1",
            "gres/gpu:PAD-1g.5gb",
            "gres:gpu:3g.20gb:1,gres:gpu:pad-1g.5gb:1",
        ] {
            let e = parse(Some(t), None).unwrap_err();
            assert!(matches!(e, RequestError::PaddingType(_)), "{t}: {e}");
            assert!(e.to_string().contains("padding record"), "{e}");
        }
        assert!(matches!(
            parse(Some("gres:gpu:padded:1"), None),
            Ok(GpuRequest::Concrete(_))
        ));
    }

    #[test]
    fn more_automatic_instances_than_a_gpu_holds_are_refused() {
        let e = parse(Some("gres:gpu:mig:8"), None).unwrap_err();
        assert!(matches!(e, RequestError::TooMany { count: 8, max: 7, .. }), "{e}");
        assert!(matches!(
            parse(None, Some("gres:gpu:mig:8")),
            Ok(GpuRequest::Auto(_))
        ));
    }

    #[test]
    fn zero_count_gpu_entries_are_no_request() {
        for t in [
            "gres:gpu:0",
            "gres:gpu:mig:0",
            "gres/gpu:3g.20gb:0",
            "gres/gpu:mig=0",
            "gpu:0",
        ] {
            assert_eq!(parse(Some(t), None), Ok(GpuRequest::None), "{t}");
        }
        // Dropped before the forms are compared, as Slurm drops them.
        assert!(matches!(
            parse(Some("gres:gpu:0,gres:gpu:3g.20gb:1"), None),
            Ok(GpuRequest::Concrete(_))
        ));
        assert!(matches!(
            parse(Some("gres:gpu:mig:0"), Some("gres:gpu:2")),
            Ok(GpuRequest::Untyped(_))
        ));
        // The other entries keep their place, and a rewrite keeps the 0-count one as written.
        let tres = TresStrings([Some("gres:gpu:0,gres:gpu:mig:2"), None, None, None]);
        let Ok(GpuRequest::Auto(entries)) = parse_request(&tres, 7) else {
            panic!("not auto")
        };
        assert_eq!((entries.len(), entries[0].index), (1, 1));
        assert_eq!(
            rewrite(&tres, &entries, "1g.5gb"),
            vec![(TresField::PerNode, "gres:gpu:0,gres:gpu:1g.5gb:2".to_string())]
        );
    }

    #[test]
    fn mixed_forms_are_refused() {
        let e = parse(Some("gres:gpu:3g.20gb:1"), Some("gres:gpu:1")).unwrap_err();
        assert_eq!(e, RequestError::Mixed("typed and untyped GPUs"));
        let e = parse(Some("gres:gpu:mig:1,gres:gpu:3g.20gb:1"), None).unwrap_err();
        assert_eq!(e, RequestError::Mixed("gpu:mig with concrete GPU types"));
    }

    #[test]
    fn untyped_and_non_gpu_entries_are_recognised() {
        assert!(matches!(
            parse(Some("gres:gpu:2"), None),
            Ok(GpuRequest::Untyped(_))
        ));
        assert!(matches!(
            parse(Some("gres:gpu"), None),
            Ok(GpuRequest::Untyped(_))
        ));
        assert_eq!(parse(Some("gres:shard:2"), None), Ok(GpuRequest::None));
        assert_eq!(parse(None, None), Ok(GpuRequest::None));
        // `--gres=gpu:3g.20gb` reaches the plugin without a count: one, not malformed.
        let Ok(GpuRequest::Concrete(e)) = parse(Some("gres:gpu:3g.20gb"), None) else {
            panic!("gres:gpu:3g.20gb was refused")
        };
        assert_eq!(
            (e[0].gpu_type.clone(), e[0].count),
            (GpuType::Concrete("3g.20gb".into()), 1)
        );
    }

    #[test]
    fn garbage_entries_are_malformed() {
        for bad in [
            "gres:gpu:mig:x",
            "gres:gpu:a:b:c",
            "gres:gpu:mig:-1",
            "gres:gpu::1",
        ] {
            assert!(
                matches!(parse(Some(bad), None), Err(RequestError::Malformed(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn rewrite_replaces_only_gpu_entries_and_keeps_spelling() {
        let tres = TresStrings([
            Some("gres:shard:1,gres:gpu:mig:2"),
            Some("gres/gpu:mig:1"),
            None,
            None,
        ]);
        let GpuRequest::Auto(entries) = parse_request(&tres, 7).unwrap() else {
            panic!("not auto")
        };
        let out = rewrite(&tres, &entries, "2g.10gb");
        assert_eq!(
            out,
            vec![
                (TresField::PerNode, "gres:shard:1,gres:gpu:2g.10gb:2".to_string()),
                (TresField::PerJob, "gres/gpu:2g.10gb:1".to_string()),
            ]
        );
    }

    #[test]
    fn a_per_task_request_as_slurm_23_11_writes_it_is_read_and_rewritten_in_its_form() {
        // `sbatch --cpus-per-task=2 --gpus-per-task=mig:1` on 24.11.
        let tres = TresStrings([None, None, Some("cpu=2,gres/gpu:mig=1"), None]);
        let GpuRequest::Auto(entries) = parse_request(&tres, 7).unwrap() else {
            panic!("not auto")
        };
        assert_eq!((entries[0].count, entries[0].equals), (1, true));
        assert_eq!(
            rewrite(&tres, &entries, "3g.20gb"),
            vec![(TresField::PerTask, "cpu=2,gres/gpu:3g.20gb=1".to_string())]
        );
        for (text, want) in [
            ("gres/gpu=2", GpuType::Untyped),
            ("gres/gpu:1g.5gb=1", GpuType::Concrete("1g.5gb".into())),
        ] {
            let tres = TresStrings([None, None, Some(text), None]);
            let entries = match parse_request(&tres, 7) {
                Ok(GpuRequest::Untyped(e) | GpuRequest::Concrete(e)) => e,
                other => panic!("{text}: {other:?}"),
            };
            assert_eq!(entries[0].gpu_type, want, "{text}");
        }
        for bad in ["gres/gpu:mig=", "gres/gpu:mig=x", "gres/gpu=1=2"] {
            let tres = TresStrings([None, None, Some(bad), None]);
            assert!(parse_request(&tres, 7).is_err(), "{bad}");
        }
    }
}

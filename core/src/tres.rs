//! Slurm's TRES and GRES strings: one grammar for every reader (the job_submit plugin,
//! the central role's node and job reads, the sacct reader, doctor).
//!
//! The forms Slurm writes:
//! - requests (`job_desc_msg_t.tres_per_*`): `gres:gpu:3g.20gb:2` (22.05), `gres/gpu:mig:1`
//!   (from 23.02), `gpu:2`, other GRES such as `gres:shard:1`; the count may be left out
//!   (`gres:gpu:3g.20gb` is one);
//! - node and job GRES (`Gres`, `GresUsed`, a job's `GRES`): `gpu:1g.10gb:3(S:0)`,
//!   `gpu:1g.10gb:1(IDX:0,2-3)`, `(null)`;
//! - accounting TRES (sacct's `AllocTRES`): `cpu=1,gres/gpu:3g.20gb=1,gres/gpu=1,mem=4000M`.
//!
//! Entries are separated by commas outside parentheses.

use std::fmt;

/// How an entry spells its prefix, kept when one is rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// `gres:gpu` (22.05).
    Colon,
    /// `gres/gpu` (later releases, and accounting TRES).
    Slash,
    /// `gpu` without prefix.
    Bare,
}

impl Spelling {
    /// The prefix as written (`gres:`, `gres/` or nothing).
    pub fn prefix(self) -> &'static str {
        match self {
            Spelling::Colon => "gres:",
            Spelling::Slash => "gres/",
            Spelling::Bare => "",
        }
    }
}

/// One entry of a TRES or GRES string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The entry as written (trimmed).
    pub raw: &'a str,
    /// Its prefix spelling.
    pub spelling: Spelling,
    /// The resource (`gpu`, `shard`, `cpu`, `mem`, ...).
    pub name: &'a str,
    /// The type (`3g.20gb`, `mig`), when one is given.
    pub gpu_type: Option<&'a str>,
    /// The count as written (after `:` or `=`), when one is given.
    pub count: Option<&'a str>,
    /// What stands in parentheses after it (`S:0`, `IDX:0,2-3`), when anything does.
    pub detail: Option<&'a str>,
}

/// An entry that does not follow the grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TresError {
    /// Not `name[:type][:count]`, `name[:type]=count` or with a bad parenthesis.
    #[error("`{0}` is not name[:type][:count] or name[:type]=count")]
    Malformed(String),
    /// A count that is not a whole number.
    #[error("`{entry}` has no whole count (`{count}`)")]
    Count {
        /// The entry.
        entry: String,
        /// The count as written.
        count: String,
    },
    /// A device index list that does not read (`IDX:0,2-3` expected).
    #[error("`{0}` has an unreadable device index list")]
    Indices(String),
    /// The entry brings the devices named past any node's ([`MAX_DEVICES`]).
    #[error("`{0}` brings the GPU devices named past {MAX_DEVICES}")]
    TooManyDevices(String),
}

/// The most GPU devices one GRES string may name (counts or indices): far above any
/// node's, low enough that a garbled `IDX:0-4294967295` cannot exhaust memory.
pub const MAX_DEVICES: u32 = 1 << 16;

/// The entries of `text`, split at commas outside parentheses; empty entries and Slurm's
/// `(null)` are left out.
pub fn entries(text: &str) -> impl Iterator<Item = &str> {
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
        .into_iter()
        .map(str::trim)
        .filter(|e| !e.is_empty() && *e != "(null)")
}

/// Reads one entry (see the module documentation for the forms).
pub fn parse(raw: &str) -> Result<Entry<'_>, TresError> {
    let raw = raw.trim();
    let malformed = || TresError::Malformed(raw.to_string());
    let (spelling, rest) = if let Some(r) = raw.strip_prefix("gres:") {
        (Spelling::Colon, r)
    } else if let Some(r) = raw.strip_prefix("gres/") {
        (Spelling::Slash, r)
    } else {
        (Spelling::Bare, raw)
    };
    let (main, detail) = match rest.split_once('(') {
        Some((m, d)) => (m, Some(d.strip_suffix(')').ok_or_else(malformed)?)),
        None => (rest, None),
    };
    let (name, gpu_type, count) = match main.split_once('=') {
        // Accounting: name[:type]=count.
        Some((key, count)) => match key.split_once(':') {
            Some((name, t)) => (name, Some(t), Some(count)),
            None => (key, None, Some(count)),
        },
        None => {
            let parts: Vec<&str> = main.split(':').collect();
            match parts.as_slice() {
                [name] => (*name, None, None),
                // A second part of digits only is a count; anything else (`3g.20gb`) a type.
                [name, n] if is_number(n) => (*name, None, Some(*n)),
                [name, t] => (*name, Some(*t), None),
                [name, t, n] => (*name, Some(*t), Some(*n)),
                _ => return Err(malformed()),
            }
        }
    };
    if name.is_empty() || gpu_type.is_some_and(str::is_empty) || count.is_some_and(str::is_empty) {
        return Err(malformed());
    }
    Ok(Entry {
        raw,
        spelling,
        name,
        gpu_type,
        count,
        detail,
    })
}

/// Whether an entry names GPUs (`gpu` with any prefix), even one that does not parse.
pub fn names_gpu(raw: &str) -> bool {
    let rest = raw.trim();
    let rest = rest
        .strip_prefix("gres:")
        .or_else(|| rest.strip_prefix("gres/"))
        .unwrap_or(rest);
    rest.split([':', '=', '(']).next() == Some("gpu")
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

impl Entry<'_> {
    /// Whether the entry is a GPU (`gpu`, with any prefix).
    pub fn is_gpu(&self) -> bool {
        self.name == "gpu"
    }

    /// The count: 1 when none is written, an error when it is not a whole number.
    pub fn count(&self) -> Result<u64, TresError> {
        match self.count {
            None => Ok(1),
            Some(c) if is_number(c) => c.parse().map_err(|_| self.bad_count(c)),
            Some(c) => Err(self.bad_count(c)),
        }
    }

    fn bad_count(&self, c: &str) -> TresError {
        TresError::Count {
            entry: self.raw.to_string(),
            count: c.to_string(),
        }
    }

    /// Device indices of an `IDX:` list (`IDX:0,2-3` → 0, 2, 3); empty when there is none
    /// or Slurm wrote `N/A`.
    pub fn indices(&self) -> Result<Vec<u32>, TresError> {
        let Some(list) = self.detail.and_then(|d| d.split_once("IDX:").map(|(_, l)| l)) else {
            return Ok(Vec::new());
        };
        let list = list.split(')').next().unwrap_or("");
        if list == "N/A" {
            return Ok(Vec::new());
        }
        let bad = || TresError::Indices(self.raw.to_string());
        let mut out = Vec::new();
        for r in list.split(',').filter(|s| !s.is_empty()) {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            let (a, b): (u32, u32) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            if b < a {
                return Err(bad());
            }
            if (b - a) as usize + out.len() >= MAX_DEVICES as usize {
                return Err(TresError::TooManyDevices(self.raw.to_string()));
            }
            out.extend(a..=b);
        }
        Ok(out)
    }
}

impl fmt::Display for Entry<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(raw: &str) -> (Spelling, &str, Option<&str>, Option<&str>, Option<&str>) {
        let e = parse(raw).unwrap();
        (e.spelling, e.name, e.gpu_type, e.count, e.detail)
    }

    #[test]
    fn every_form_slurm_writes_reads_the_same_way() {
        use Spelling::*;
        assert_eq!(
            one("gres:gpu:3g.20gb:2"),
            (Colon, "gpu", Some("3g.20gb"), Some("2"), None)
        );
        assert_eq!(
            one("gres/gpu:mig:1"),
            (Slash, "gpu", Some("mig"), Some("1"), None)
        );
        assert_eq!(one("gpu:2"), (Bare, "gpu", None, Some("2"), None));
        assert_eq!(one("gres:gpu"), (Colon, "gpu", None, None, None));
        // A type that starts with a digit is a type, not a count.
        assert_eq!(
            one("gres:gpu:3g.20gb"),
            (Colon, "gpu", Some("3g.20gb"), None, None)
        );
        assert_eq!(
            one("gpu:1g.10gb:1(IDX:0,2-3)"),
            (Bare, "gpu", Some("1g.10gb"), Some("1"), Some("IDX:0,2-3"))
        );
        assert_eq!(
            one("gres/gpu:3g.20gb=1"),
            (Slash, "gpu", Some("3g.20gb"), Some("1"), None)
        );
        assert_eq!(one("gres/gpu=2"), (Slash, "gpu", None, Some("2"), None));
        assert_eq!(one("mem=4000M"), (Bare, "mem", None, Some("4000M"), None));
        assert_eq!(one("gres:shard:1"), (Colon, "shard", None, Some("1"), None));
    }

    #[test]
    fn commas_inside_parentheses_do_not_split_and_null_is_no_entry() {
        let got: Vec<&str> = entries("gpu:1g.10gb:3(S:0),gpu:3g.40gb:1(IDX:0,2), ,(null)").collect();
        assert_eq!(got, ["gpu:1g.10gb:3(S:0)", "gpu:3g.40gb:1(IDX:0,2)"]);
    }

    #[test]
    fn counts_and_indices_are_numbers_or_named_errors() {
        assert_eq!(parse("gpu:3g.20gb").unwrap().count(), Ok(1));
        assert_eq!(parse("gpu:3g.20gb:12").unwrap().count(), Ok(12));
        assert!(matches!(
            parse("gres/gpu:2g.10gb=x").unwrap().count(),
            Err(TresError::Count { .. })
        ));
        assert!(matches!(parse("gpu:a:b:c"), Err(TresError::Malformed(_))));
        assert!(matches!(parse("gpu::1"), Err(TresError::Malformed(_))));
        assert!(matches!(
            parse("gpu:1g.10gb:1(IDX:0"),
            Err(TresError::Malformed(_))
        ));
        let e = parse("gpu:1g.10gb:4(IDX:0,2-3,6)").unwrap();
        assert_eq!(e.indices(), Ok(vec![0, 2, 3, 6]));
        assert_eq!(parse("gpu:1g.10gb:1(IDX:N/A)").unwrap().indices(), Ok(vec![]));
        assert!(parse("gpu:1g.10gb:1(IDX:a-b)").unwrap().indices().is_err());
        assert!(parse("gpu:1g.10gb:1(IDX:3-2)").unwrap().indices().is_err());
    }

    #[test]
    fn an_index_list_longer_than_any_node_is_refused_before_it_is_expanded() {
        let ok = format!("gpu:1g.10gb:1(IDX:0-{})", MAX_DEVICES - 1);
        assert_eq!(
            parse(&ok).unwrap().indices().map(|i| i.len()),
            Ok(MAX_DEVICES as usize)
        );
        for raw in [
            format!("gpu:1g.10gb:1(IDX:0-{MAX_DEVICES})"),
            "gpu:1g.10gb:1(IDX:0-4294967295)".to_string(),
            format!("gpu:1g.10gb:1(IDX:7,0-{})", MAX_DEVICES - 1),
        ] {
            assert_eq!(
                parse(&raw).unwrap().indices(),
                Err(TresError::TooManyDevices(raw.clone())),
                "{raw}"
            );
        }
    }
}

//! Slurm host lists (`gpu[001-016,020],login1`), for the node allow-list of the central
//! role: the same syntax admins write in slurm.conf and `scontrol`.

use std::collections::HashSet;

/// The most names one host list may expand to (a typo such as `n[1-99999999]` is an
/// error, not a memory blow-up).
pub const MAX_NAMES: usize = 1_000_000;

/// The names a host list expression stands for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostList {
    names: HashSet<String>,
}

impl HostList {
    /// Parses one or more comma-separated host list expressions.
    pub fn parse(text: &str) -> Result<HostList, String> {
        let mut names = HashSet::new();
        for part in split_top_level(text)? {
            let part = part.trim();
            if part.is_empty() {
                return Err(format!("`{text}`: empty host name"));
            }
            for name in expand(part)? {
                names.insert(name);
                if names.len() > MAX_NAMES {
                    return Err(format!("`{text}`: more than {MAX_NAMES} host names"));
                }
            }
        }
        Ok(HostList { names })
    }

    /// Whether `node` is one of the names.
    pub fn contains(&self, node: &str) -> bool {
        self.names.contains(node)
    }

    /// How many names.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are no names.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Splits at commas outside brackets.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("`{text}`: unbalanced or nested brackets"));
        }
    }
    if depth != 0 {
        return Err(format!("`{text}`: unbalanced brackets"));
    }
    out.push(&text[start..]);
    Ok(out)
}

/// Expands one expression (`prefix[ranges]rest`), brackets left to right.
fn expand(expr: &str) -> Result<Vec<String>, String> {
    let Some(open) = expr.find('[') else {
        if expr.contains(']') {
            return Err(format!("`{expr}`: `]` without `[`"));
        }
        return Ok(vec![expr.to_string()]);
    };
    let close = expr[open..]
        .find(']')
        .map(|i| open + i)
        .ok_or_else(|| format!("`{expr}`: `[` without `]`"))?;
    let (prefix, ranges, rest) = (&expr[..open], &expr[open + 1..close], &expr[close + 1..]);
    let tails = expand(rest)?;
    let mut out = Vec::new();
    for range in ranges.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let bad = || format!("`{expr}`: `{range}` is not a number or a range such as 01-16");
        if lo.is_empty() || !lo.bytes().all(|b| b.is_ascii_digit()) || !hi.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let (a, b): (u64, u64) = (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?);
        if b < a {
            return Err(format!("`{expr}`: range `{range}` runs backwards"));
        }
        if (b - a) as usize >= MAX_NAMES {
            return Err(format!("`{expr}`: more than {MAX_NAMES} host names"));
        }
        // Slurm keeps the width of the lower bound (`[001-016]` gives `001`).
        let width = lo.len();
        for n in a..=b {
            for t in &tails {
                out.push(format!("{prefix}{n:0width$}{t}"));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_keep_their_zero_padding_and_lists_combine() {
        let h = HostList::parse("gpu[001-003,010],login1,rack[1-2]-n[1-2]").unwrap();
        for n in [
            "gpu001", "gpu002", "gpu003", "gpu010", "login1", "rack1-n1", "rack2-n2",
        ] {
            assert!(h.contains(n), "{n}");
        }
        assert!(!h.contains("gpu004") && !h.contains("gpu1"));
        assert_eq!(h.len(), 9);
    }

    #[test]
    fn malformed_lists_are_errors_that_quote_them() {
        for bad in [
            "gpu[1-",
            "gpu]1",
            "gpu[a-b]",
            "gpu[5-1]",
            "a,,b",
            "n[[1-2]]",
            "n[1-99999999]",
        ] {
            let e = HostList::parse(bad).unwrap_err();
            assert!(e.contains('`'), "{bad}: {e}");
        }
    }
}

//! Errors that point into a source file: `file:line:column: message`.

use std::fmt;

/// A problem at a place in a text source (a config, catalogue or scenario file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError {
    /// The file (or other origin) the text came from.
    pub origin: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// The dotted key the problem is about, when known.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if let Some(key) = &self.key {
            write!(f, ": key `{key}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for SourceError {}

/// 1-based (line, column) of a byte offset in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = offset - before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1) + 1;
    (line, col)
}

/// Turns a TOML error into a [`SourceError`] with the line and, where it can tell, the key.
pub fn toml_error(origin: &str, text: &str, err: &toml::de::Error) -> SourceError {
    let (line, column) = match err.span() {
        Some(span) => {
            let (l, c) = line_col(text, span.start);
            (Some(l), Some(c))
        }
        None => (None, None),
    };
    let key = line.and_then(|l| key_on_line(text, l));
    SourceError {
        origin: origin.to_string(),
        line,
        column,
        key,
        message: err.message().trim().to_string(),
    }
}

/// The bare key assigned on a line (`interval = 5` → `interval`), if the line assigns one.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let l = text.lines().nth(line - 1)?.trim();
    if l.starts_with('[') || l.starts_with('#') {
        return None;
    }
    let (k, _) = l.split_once('=')?;
    let k = k.trim().trim_matches('"');
    (!k.is_empty() && !k.contains('{')).then(|| k.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }

    #[test]
    fn toml_errors_carry_file_line_and_key() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct T {
            interval: u32,
        }
        let text = "\ninterval = -5\n";
        let err = toml::from_str::<T>(text).unwrap_err();
        let e = toml_error("x.toml", text, &err);
        assert_eq!(e.line, Some(2));
        assert_eq!(e.key.as_deref(), Some("interval"));
        assert!(e.to_string().starts_with("x.toml:2:"), "{e}");
    }
}

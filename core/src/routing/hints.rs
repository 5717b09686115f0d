//! Routing hints in a job's `--comment`.
//!
//! Grammar: the comment is split at white space; every word that starts with `smartmig:`
//! carries one or more `key=value` pairs separated by `;`. Other words are the user's
//! own comment and are ignored. Keys:
//!
//! | key | value | meaning |
//! |---|---|---|
//! | `class` | a class name | use this class's speed-ups and memory need |
//! | `gpumem` | `12`, `12G`, `12GB`, `800M`, `800MB` | GPU memory per instance (GB by default) |
//! | `speedup` | five numbers `1,1.9,2.6,3.2,4.8` | speed-up over 1g on 1g/2g/3g/4g/7g |
//! | `time-on` | `1g`, `2g`, `3g`, `4g`, `7g` | the slice `--time` refers to |
//! | `due` | `90`, `90m`, `2h`, `1h30m`, `1d` | soft due time after submission (minutes by default) |
//! | `gpus` | `mig` | the job's untyped GPU requests are `gpu:mig` ones: set by the cli_filter plugin on `srun`, whose step must ask for untyped GPUs (`docs/admin-guide.md`) |
//!
//! A key given twice, an unknown key or a bad value is an error: a typo must not route a
//! job silently on defaults.

use super::config::{check_speedup, parse_base_kind};
use crate::mig::Kind;

/// The prefix that marks a hint word in a comment.
pub const HINT_PREFIX: &str = "smartmig:";

/// The hints found in a comment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hints {
    /// `class=`.
    pub class: Option<String>,
    /// `gpumem=`, in GB.
    pub gpumem_gb: Option<f64>,
    /// `speedup=`, normalised so that the first value is 1.
    pub speedup: Option<[f64; 5]>,
    /// `time-on=`.
    pub time_on: Option<Kind>,
    /// `due=`, in minutes after submission.
    pub due_min: Option<f64>,
    /// `gpus=mig`: route the job's untyped GPU requests as `gpu:mig` ones.
    pub gpus_mig: Option<bool>,
}

/// A hint that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HintError {
    /// A hint word without `key=value`.
    #[error("hint `{0}` is not key=value")]
    NotKeyValue(String),
    /// An unknown key.
    #[error("unknown hint `{0}` (known: class, gpumem, speedup, time-on, due, gpus)")]
    UnknownKey(String),
    /// A key given twice.
    #[error("hint `{0}` is given twice")]
    Duplicate(String),
    /// A value that does not parse.
    #[error("hint {key}={value}: {why}")]
    BadValue {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        why: String,
    },
}

impl Hints {
    /// Whether no hint was given.
    pub fn is_empty(&self) -> bool {
        *self == Hints::default()
    }
}

/// Parses the hints in a comment; a comment without `smartmig:` words gives empty hints.
pub fn parse_hints(comment: &str) -> Result<Hints, HintError> {
    let mut h = Hints::default();
    for word in comment.split_whitespace() {
        let Some(body) = word.strip_prefix(HINT_PREFIX) else {
            continue;
        };
        for pair in body.split(';').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| HintError::NotKeyValue(pair.to_string()))?;
            let bad = |why: String| HintError::BadValue {
                key: key.to_string(),
                value: value.to_string(),
                why,
            };
            let dup = || HintError::Duplicate(key.to_string());
            match key {
                "class" => {
                    if value.is_empty() {
                        return Err(bad("empty class name".into()));
                    }
                    set(&mut h.class, value.to_string(), dup)?;
                }
                "gpumem" => set(&mut h.gpumem_gb, parse_memory_gb(value).map_err(bad)?, dup)?,
                "speedup" => set(&mut h.speedup, parse_speedup(value).map_err(bad)?, dup)?,
                "time-on" => set(&mut h.time_on, parse_base_kind(value).map_err(bad)?, dup)?,
                "due" => set(&mut h.due_min, parse_duration_min(value).map_err(bad)?, dup)?,
                "gpus" if value == super::request::AUTO_TYPE => set(&mut h.gpus_mig, true, dup)?,
                "gpus" => return Err(bad(format!("the only value is `{}`", super::request::AUTO_TYPE))),
                _ => return Err(HintError::UnknownKey(key.to_string())),
            }
        }
    }
    Ok(h)
}

fn set<T>(slot: &mut Option<T>, v: T, dup: impl Fn() -> HintError) -> Result<(), HintError> {
    if slot.is_some() {
        return Err(dup());
    }
    *slot = Some(v);
    Ok(())
}

fn positive_number(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

/// `12`, `12G`, `12GB`, `800M`, `800MB` → GB.
fn parse_memory_gb(s: &str) -> Result<f64, String> {
    let upper = s.to_ascii_uppercase();
    let (num, scale) = if let Some(n) = upper.strip_suffix("GB").or_else(|| upper.strip_suffix('G')) {
        (n, 1.0)
    } else if let Some(n) = upper.strip_suffix("MB").or_else(|| upper.strip_suffix('M')) {
        (n, 1.0 / 1024.0)
    } else {
        (upper.as_str(), 1.0)
    };
    positive_number(num).map(|v| v * scale)
}

/// Five speed-ups, normalised to the first.
fn parse_speedup(s: &str) -> Result<[f64; 5], String> {
    let values: Vec<f64> = s.split(',').map(positive_number).collect::<Result<_, _>>()?;
    let arr: [f64; 5] = values
        .try_into()
        .map_err(|v: Vec<f64>| format!("needs 5 values (1g,2g,3g,4g,7g), got {}", v.len()))?;
    let normalised = arr.map(|v| v / arr[0]);
    check_speedup(&normalised)?;
    Ok(normalised)
}

/// `90`, `90m`, `2h`, `1h30m`, `1d` → minutes.
fn parse_duration_min(s: &str) -> Result<f64, String> {
    let bad = || format!("`{s}` is not a duration like 90, 90m, 2h, 1h30m or 1d");
    if let Ok(v) = s.parse::<f64>() {
        return (v.is_finite() && v > 0.0).then_some(v).ok_or_else(bad);
    }
    let mut total = 0.0;
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let unit = match c {
            'd' => 1440.0,
            'h' => 60.0,
            'm' => 1.0,
            _ => return Err(bad()),
        };
        let v: f64 = num.parse().map_err(|_| bad())?;
        total += v * unit;
        num.clear();
    }
    if !(num.is_empty() && total.is_finite() && total > 0.0) {
        return Err(bad());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_without_the_prefix_are_the_users_own() {
        let h = parse_hints("nightly run smartmig:class=bert-train see ticket 42").unwrap();
        assert_eq!(h.class.as_deref(), Some("bert-train"));
        assert!(parse_hints("just a comment").unwrap().is_empty());
    }

    #[test]
    fn several_keys_in_one_word_or_several_words() {
        let a = parse_hints("smartmig:class=x;gpumem=12G;due=2h").unwrap();
        let b = parse_hints("smartmig:class=x smartmig:gpumem=12 smartmig:due=120").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.gpumem_gb, Some(12.0));
        assert_eq!(a.due_min, Some(120.0));
    }

    #[test]
    fn memory_units_convert_to_gb() {
        assert_eq!(
            parse_hints("smartmig:gpumem=2048MB").unwrap().gpumem_gb,
            Some(2.0)
        );
        assert_eq!(parse_hints("smartmig:gpumem=5gb").unwrap().gpumem_gb, Some(5.0));
        assert!(parse_hints("smartmig:gpumem=-3").is_err());
        assert!(parse_hints("smartmig:gpumem=lots").is_err());
    }

    #[test]
    fn speedups_are_normalised_and_checked() {
        let h = parse_hints("smartmig:speedup=2,3.8,5.2,6.4,9.6").unwrap();
        assert_eq!(h.speedup, Some([1.0, 1.9, 2.6, 3.2, 4.8]));
        let e = parse_hints("smartmig:speedup=1,2,3").unwrap_err();
        assert!(e.to_string().contains("needs 5 values"), "{e}");
        let e = parse_hints("smartmig:speedup=1,2,1.5,4,7").unwrap_err();
        assert!(e.to_string().contains("decrease"), "{e}");
    }

    #[test]
    fn time_on_takes_base_kinds_only() {
        assert_eq!(
            parse_hints("smartmig:time-on=1g").unwrap().time_on,
            Some(Kind::G1)
        );
        assert!(parse_hints("smartmig:time-on=1g*").is_err());
        assert!(parse_hints("smartmig:time-on=5g").is_err());
    }

    #[test]
    fn durations_accept_units() {
        assert_eq!(parse_hints("smartmig:due=1h30m").unwrap().due_min, Some(90.0));
        assert_eq!(parse_hints("smartmig:due=1d").unwrap().due_min, Some(1440.0));
        assert!(parse_hints("smartmig:due=1x").is_err());
        assert!(parse_hints("smartmig:due=h").is_err());
        assert!(parse_hints("smartmig:due=0").is_err());
    }

    #[test]
    fn typos_and_duplicates_are_errors() {
        assert_eq!(
            parse_hints("smartmig:clas=x").unwrap_err(),
            HintError::UnknownKey("clas".into())
        );
        assert_eq!(
            parse_hints("smartmig:class=x smartmig:class=y").unwrap_err(),
            HintError::Duplicate("class".into())
        );
        assert!(matches!(
            parse_hints("smartmig:class"),
            Err(HintError::NotKeyValue(_))
        ));
    }
}

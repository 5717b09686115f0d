//! Value checks used while deserialising, so errors carry the value's line.

use serde::{Deserialize, Deserializer};

/// A finite number greater than zero.
pub fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "must be a positive number, got {v}"
        )))
    }
}

/// A finite number, zero or more.
pub fn non_negative<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!("must be zero or more, got {v}")))
    }
}

/// The longest duration a config key may give: one year (a longer one is a typo, and
/// `Duration::from_secs_f64` must never see an unrepresentable value).
pub const MAX_SECONDS: f64 = 366.0 * 86_400.0;

/// A duration in seconds: finite, greater than zero, at most [`MAX_SECONDS`].
pub fn seconds<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = positive(d)?;
    if v <= MAX_SECONDS {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "must be at most {MAX_SECONDS} seconds (one year), got {v}"
        )))
    }
}

/// A duration in seconds that may be zero: finite, at most [`MAX_SECONDS`].
pub fn seconds_or_zero<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = non_negative(d)?;
    if v <= MAX_SECONDS {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "must be at most {MAX_SECONDS} seconds (one year), got {v}"
        )))
    }
}

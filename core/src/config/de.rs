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

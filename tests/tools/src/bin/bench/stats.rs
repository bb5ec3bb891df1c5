//! The figures every benchmark reports: nearest-rank quantiles, medians, and numbers
//! read back from a line of `key=value` fields.

use std::time::Duration;

/// The `q`-quantile of sorted samples, nearest rank, in milliseconds.
pub(super) fn quantile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1000.0
}

/// The number after `key=` in a line of `key=value` fields.
pub(super) fn number_in(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))?
        .parse()
        .ok()
}

/// The median of some figures.
pub(super) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

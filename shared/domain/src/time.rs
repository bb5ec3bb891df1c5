//! Time as the domain sees it: milliseconds since the Unix epoch. The decisions are
//! given the time; they never read a clock (the actors read theirs through a port).

use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An instant, in milliseconds since the Unix epoch.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// This instant moved forward by `duration` (saturating).
    #[must_use]
    pub fn plus(self, duration: Duration) -> Self {
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        Self(self.0.saturating_add(millis))
    }

    /// This instant moved back by `duration` (saturating).
    #[must_use]
    pub fn minus(self, duration: Duration) -> Self {
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        Self(self.0.saturating_sub(millis))
    }

    /// The time from `self` until `later`, zero if `later` is not after `self`.
    #[must_use]
    pub fn until(self, later: Self) -> Duration {
        Duration::from_millis(u64::try_from(later.0.saturating_sub(self.0)).unwrap_or(0))
    }

    /// The instant an RFC 3339 time names (`2026-11-23T10:00:00Z`, or with an offset,
    /// `2026-11-23T11:00:00+01:00`; with or without fractions of a second), if it is
    /// one.
    #[must_use]
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let (utc, offset_minutes) = match text.len().checked_sub(6).map(|at| text.split_at(at)) {
            Some((time, offset)) if offset.starts_with(['+', '-']) => {
                let (hours, minutes) = offset[1..].split_once(':')?;
                let (hours, minutes): (i64, i64) = (hours.parse().ok()?, minutes.parse().ok()?);
                if hours > 23 || minutes > 59 || hours < 0 || minutes < 0 {
                    return None;
                }
                let sign = if offset.starts_with('-') { -1 } else { 1 };
                (format!("{time}Z"), sign * (hours * 60 + minutes))
            }
            _ => (text.to_owned(), 0),
        };
        let time = humantime::parse_rfc3339(&utc).ok()?;
        let since = time.duration_since(UNIX_EPOCH).ok()?;
        let millis = i64::try_from(since.as_millis()).ok()?;
        Some(Self(millis - offset_minutes * 60_000))
    }

    /// RFC 3339 with milliseconds, in UTC.
    #[must_use]
    pub fn to_rfc3339(self) -> String {
        let time = UNIX_EPOCH + Duration::from_millis(u64::try_from(self.0).unwrap_or(0));
        humantime::format_rfc3339_millis(time).to_string()
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

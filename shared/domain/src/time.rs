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
    /// The last instant RFC 3339 can write: 9999-12-31T23:59:59.999Z.
    pub const LATEST: Self = Self(253_402_300_799_999);

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
    /// Refused where the instant is not between the epoch and [`Timestamp::LATEST`].
    #[must_use]
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let offset_at = text.len().checked_sub(6);
        let split = offset_at.and_then(|at| Some((text.get(..at)?, text.get(at..)?)));
        let (utc, offset_minutes) = match split {
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
            .filter(|at| (0..=Self::LATEST.0).contains(&at.0))
    }

    /// RFC 3339 with milliseconds, in UTC; an instant before the epoch or after
    /// [`Timestamp::LATEST`] (a sleep's end saturated, say) is written as the nearer
    /// of the two.
    #[must_use]
    pub fn to_rfc3339(self) -> String {
        let millis = self.0.clamp(0, Self::LATEST.0).unsigned_abs();
        let time = UNIX_EPOCH + Duration::from_millis(millis);
        humantime::format_rfc3339_millis(time).to_string()
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

#[cfg(test)]
mod tests {
    use super::Timestamp;

    #[test]
    fn a_time_with_a_character_of_several_bytes_where_the_offset_would_be_is_refused() {
        assert_eq!(Timestamp::parse_rfc3339("a€12345"), None);
        assert_eq!(Timestamp::parse_rfc3339("2026-11-23T10:00€:00"), None);
    }

    #[test]
    fn an_offset_that_moves_an_instant_past_the_year_9999_is_refused() {
        assert_eq!(Timestamp::parse_rfc3339("9999-12-31T23:00:00-05:00"), None);
        assert_eq!(Timestamp::parse_rfc3339("1970-01-01T00:30:00+01:00"), None);
        assert_eq!(
            Timestamp::parse_rfc3339("9999-12-31T23:59:59.999Z"),
            Some(Timestamp::LATEST)
        );
    }

    #[test]
    fn every_instant_renders_even_past_what_rfc_3339_can_write() {
        assert_eq!(Timestamp(i64::MAX).to_rfc3339(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp(i64::MIN).to_rfc3339(), "1970-01-01T00:00:00.000Z");
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_to_an_instant_that_renders_back_to_itself(text in proptest::prop_oneof![
            ".{0,40}",
            "[0-9]{4}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-6][0-9]:[0-6][0-9](\\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})",
        ]) {
            if let Some(at) = Timestamp::parse_rfc3339(&text) {
                proptest::prop_assert_eq!(Timestamp::parse_rfc3339(&at.to_rfc3339()), Some(at));
            }
        }

        #[test]
        fn any_instant_renders_to_text_that_parses_back(millis in 0..=Timestamp::LATEST.0) {
            let at = Timestamp(millis);
            proptest::prop_assert_eq!(Timestamp::parse_rfc3339(&at.to_rfc3339()), Some(at));
        }
    }
}

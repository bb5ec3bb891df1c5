//! When a schedule's runs fall: a cron expression in a time zone, or a fixed period
//! from an anchor; and the expression that wakes the engine for them on AWS.

use std::str::FromStr as _;
use std::time::Duration;

use chrono::{DateTime, TimeZone as _, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use super::ScheduleError;
use crate::time::Timestamp;

/// The shortest period of `every`.
const SHORTEST_PERIOD: Duration = Duration::from_secs(1);

/// The longest period of `every`, and the widest catch-up window.
pub(super) const LONGEST: Duration = Duration::from_secs(366 * 24 * 3600);

/// A schedule's cadence, read and checked.
#[derive(Debug, Clone)]
pub enum Cadence {
    /// A five-field cron expression (minute, hour, day of month, month, day of
    /// week), evaluated in a time zone.
    Cron {
        /// The expression as written.
        text: String,
        /// It parsed.
        cron: Box<Cron>,
        /// Its time zone.
        zone: Tz,
    },
    /// A run every `period` after `anchor`.
    Every {
        /// The period, a whole number of seconds.
        period_ms: i64,
        /// The instant periods are counted from.
        anchor: Timestamp,
    },
}

/// `text` read as a time zone's IANA name (`Europe/Paris`, `UTC`).
///
/// # Errors
/// [`ScheduleError::Invalid`] naming `time_zone`.
pub fn zone(text: &str) -> Result<Tz, ScheduleError> {
    Tz::from_str(text).map_err(|_| {
        ScheduleError::invalid(
            "time_zone",
            format!("'{text}' is not a time zone's IANA name (such as Europe/Paris or UTC)"),
        )
    })
}

/// `text` read as a five-field cron expression.
///
/// # Errors
/// [`ScheduleError::Invalid`] naming `cron`, with the parser's reason.
pub fn cron(text: &str) -> Result<Cron, ScheduleError> {
    let parser = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build();
    parser.parse(text).map_err(|error| {
        ScheduleError::invalid(
            "cron",
            format!(
                "'{text}' is not a cron expression of five fields (minute hour \
                 day-of-month month day-of-week): {error}"
            ),
        )
    })
}

/// `text` read as a duration (`30s`, `5m`, `1h 30m`) between `least` and [`LONGEST`].
///
/// # Errors
/// [`ScheduleError::Invalid`] naming `field`.
pub fn duration(
    field: &'static str,
    text: &str,
    least: Duration,
) -> Result<Duration, ScheduleError> {
    let parsed = humantime::parse_duration(text)
        .map_err(|e| ScheduleError::invalid(field, format!("'{text}' is not a duration: {e}")))?;
    if parsed < least || parsed > LONGEST {
        return Err(ScheduleError::invalid(
            field,
            format!("{text} is not between {least:?} and 366 days"),
        ));
    }
    Ok(parsed)
}

/// A period of `every`, a whole number of seconds of at least one.
///
/// # Errors
/// [`ScheduleError::Invalid`] naming `every`.
pub fn period(text: &str) -> Result<i64, ScheduleError> {
    let period = duration("every", text, SHORTEST_PERIOD)?;
    if period.subsec_nanos() != 0 {
        return Err(ScheduleError::invalid(
            "every",
            format!("{text} is not a whole number of seconds"),
        ));
    }
    Ok(i64::try_from(period.as_millis()).unwrap_or(i64::MAX))
}

fn utc(at: Timestamp) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(at.0).single().unwrap_or_default()
}

impl Cadence {
    /// The first instant strictly after `after`, if there is one before
    /// [`Timestamp::LATEST`].
    #[must_use]
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let next = match self {
            Self::Cron { cron, zone, .. } => {
                // Its instants fall on whole seconds: the search starts from one.
                let local = utc(super::to_second(after)).with_timezone(zone);
                Timestamp(
                    cron.find_next_occurrence(&local, false)
                        .ok()?
                        .timestamp_millis(),
                )
            }
            Self::Every { period_ms, anchor } => {
                let periods = if after < *anchor {
                    1
                } else {
                    (after.0 - anchor.0) / period_ms + 1
                };
                Timestamp(anchor.0.checked_add(periods.checked_mul(*period_ms)?)?)
            }
        };
        (next <= Timestamp::LATEST).then_some(next)
    }

    /// What wakes the engine for this cadence's runs on AWS, as EventBridge
    /// Scheduler writes it: each run falls on or before a wake-up, never between two
    /// without one. A cron expression keeps its minutes, hours, days of the month and
    /// months (EventBridge's `?` takes the day of the week, which the engine checks
    /// itself on waking); a period of whole minutes is a rate; anything finer wakes
    /// the engine every minute.
    #[must_use]
    pub fn wake_up(&self) -> String {
        match self {
            Self::Cron { text, .. } => {
                let fields: Vec<&str> = text.split_whitespace().collect();
                match fields.as_slice() {
                    [minute, hour, day, month, weekday] => {
                        let day = if *weekday == "*" { day } else { "*" };
                        format!("cron({minute} {hour} {day} {month} ? *)")
                    }
                    _ => "rate(1 minute)".to_owned(),
                }
            }
            Self::Every { period_ms, .. } => match period_ms / 60_000 {
                minutes if minutes > 1 && period_ms % 60_000 == 0 => {
                    format!("rate({minutes} minutes)")
                }
                _ => "rate(1 minute)".to_owned(),
            },
        }
    }
}

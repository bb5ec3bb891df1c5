//! Schedules: a workflow started with an input on a cron expression or a period, in a
//! time zone, each run a task whose id is derived from the schedule and the instant
//! (so a run fired twice is one task); with an overlap policy, a catch-up window
//! after downtime, and pause and resume.
//!
//! [`Schedule::fire`] is the whole decision: the schedule as it is, whether its last
//! run is still running, and the time in; the runs to start and the schedule as it
//! is once they are started out.

mod cadence;
#[cfg(test)]
mod tests;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use cadence::Cadence;

use crate::ids::TaskId;
use crate::time::Timestamp;

/// The longest name a schedule may have: its runs' ids are its name, a `-` and the
/// instant's sixteen characters, within a task id's 64.
pub const MAX_NAME: usize = 44;

/// The most runs one firing starts (under `allow_all`, after a long downtime): those
/// after them are the next firing's.
pub const MAX_RUNS_A_FIRING: usize = 100;

/// How many coming runs a schedule's view shows.
pub const NEXT_RUNS_SHOWN: usize = 5;

/// What happens to a run whose instant comes while the schedule's last run is still
/// running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// It is not run.
    #[default]
    Skip,
    /// It is kept and started once the running one has ended; one at most, those
    /// after it are skipped.
    BufferOne,
    /// It is started all the same.
    AllowAll,
}

/// A schedule as an operator writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// The workflow (or state machine) each run starts.
    pub workflow: String,
    /// Its version; the newest at each run where none is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// Each run's input.
    #[serde(default = "empty_input")]
    pub input: Value,
    /// A five-field cron expression, evaluated in `time_zone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// A period (`30s`, `5m`, `1h`), from the schedule's creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// The IANA time zone the cron expression is read in.
    #[serde(default = "utc")]
    pub time_zone: String,
    /// What happens to a run whose instant comes while the last is running.
    #[serde(default)]
    pub overlap: Overlap,
    /// How late a run may still start (after downtime, or a pause of the engine):
    /// runs older than this are passed over.
    #[serde(default = "default_catch_up")]
    pub catch_up_window: String,
}

fn empty_input() -> Value {
    Value::Object(serde_json::Map::new())
}

fn utc() -> String {
    "UTC".to_owned()
}

fn default_catch_up() -> String {
    "1m".to_owned()
}

/// A schedule's run: its task and its instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The task.
    pub id: TaskId,
    /// The instant it was scheduled for.
    pub at: Timestamp,
}

/// What the engine keeps of a schedule beside its spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleState {
    /// Paused: no run starts until it is resumed.
    pub paused: bool,
    /// When `every`'s periods are counted from (the creation, or the change of the
    /// cadence), to the second.
    pub anchor: Timestamp,
    /// Every instant up to this one has been run, skipped or passed over.
    pub through: Timestamp,
    /// The last run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<Run>,
    /// A run kept until the running one ends (`buffer_one`): its instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered: Option<Timestamp>,
    /// Runs started.
    pub started: u64,
    /// Runs not run because the last was running.
    pub skipped: u64,
    /// Runs passed over, older than the catch-up window when the engine came to them.
    pub missed: u64,
}

/// A schedule: what it runs and when, and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Its name.
    pub name: String,
    /// What the operator wrote.
    pub spec: ScheduleSpec,
    /// Where it stands.
    pub state: ScheduleState,
}

/// Why a schedule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// A field's value is not one a schedule takes.
    #[error("{field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

impl ScheduleError {
    fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            reason: reason.into(),
        }
    }

    /// The field refused.
    #[must_use]
    pub fn field(&self) -> &'static str {
        match self {
            Self::Invalid { field, .. } => field,
        }
    }
}

/// What one firing of a schedule does.
#[derive(Debug, Clone, PartialEq)]
pub struct Firing {
    /// The runs to start, in order.
    pub runs: Vec<Run>,
    /// The schedule once they are started.
    pub schedule: Schedule,
}

/// Whether `name` may name a schedule: 1 to [`MAX_NAME`] letters, digits, `-` and `_`.
///
/// # Errors
/// [`ScheduleError::Invalid`] naming `name`.
pub fn check_name(name: &str) -> Result<(), ScheduleError> {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain && (1..=MAX_NAME).contains(&name.len()) {
        Ok(())
    } else {
        Err(ScheduleError::invalid(
            "name",
            format!("a schedule's name is 1 to {MAX_NAME} letters, digits, '-' and '_'"),
        ))
    }
}

/// `at` to the second below it.
fn to_second(at: Timestamp) -> Timestamp {
    Timestamp(at.0 - at.0.rem_euclid(1000))
}

impl ScheduleSpec {
    /// Its cadence, with `anchor` for a period.
    ///
    /// # Errors
    /// [`ScheduleError`] naming the field that is wrong: neither or both of `cron`
    /// and `every`, an expression, a period or a time zone that does not read.
    pub fn cadence(&self, anchor: Timestamp) -> Result<Cadence, ScheduleError> {
        let zone = cadence::zone(&self.time_zone)?;
        match (&self.cron, &self.every) {
            (Some(text), None) => Ok(Cadence::Cron {
                text: text.clone(),
                cron: Box::new(cadence::cron(text)?),
                zone,
            }),
            (None, Some(every)) => Ok(Cadence::Every {
                period_ms: cadence::period(every)?,
                anchor,
            }),
            _ => Err(ScheduleError::invalid(
                "cron",
                "a schedule has either a cron expression (cron) or a period (every)",
            )),
        }
    }

    /// The catch-up window.
    ///
    /// # Errors
    /// [`ScheduleError`] naming `catch_up_window`.
    pub fn catch_up(&self) -> Result<Duration, ScheduleError> {
        cadence::duration("catch_up_window", &self.catch_up_window, Duration::ZERO)
    }

    /// Every field checked, as [`ScheduleSpec::cadence`] and
    /// [`ScheduleSpec::catch_up`] read them.
    ///
    /// # Errors
    /// The first field refused.
    pub fn check(&self) -> Result<(), ScheduleError> {
        if !self.input.is_object() {
            return Err(ScheduleError::invalid(
                "input",
                "a run's input is a JSON object",
            ));
        }
        self.cadence(Timestamp::default())?;
        self.catch_up().map(drop)
    }
}

impl Schedule {
    /// A new schedule `name`, created `now`: its first run is the first instant after.
    ///
    /// # Errors
    /// [`ScheduleError`] naming the field refused.
    pub fn new(name: &str, spec: ScheduleSpec, now: Timestamp) -> Result<Self, ScheduleError> {
        check_name(name)?;
        spec.check()?;
        Ok(Self {
            name: name.to_owned(),
            spec,
            state: ScheduleState {
                paused: false,
                anchor: to_second(now),
                through: now,
                last_run: None,
                buffered: None,
                started: 0,
                skipped: 0,
                missed: 0,
            },
        })
    }

    /// The schedule with `spec` in place of its own, from `now`: what it has run
    /// stays; a changed cadence counts its periods from `now`, and no instant before
    /// `now` is run under it.
    ///
    /// # Errors
    /// [`ScheduleError`] naming the field refused.
    pub fn respecified(&self, spec: ScheduleSpec, now: Timestamp) -> Result<Self, ScheduleError> {
        spec.check()?;
        let mut changed = self.clone();
        let cadence_changed = (&spec.cron, &spec.every, &spec.time_zone)
            != (&self.spec.cron, &self.spec.every, &self.spec.time_zone);
        if cadence_changed {
            changed.state.anchor = to_second(now);
            changed.state.through = changed.state.through.max(now);
        }
        changed.spec = spec;
        Ok(changed)
    }

    /// The schedule paused, or resumed: a resumed schedule's next run is the first
    /// instant after `now`, none of the pause's run late.
    #[must_use]
    pub fn paused(&self, paused: bool, now: Timestamp) -> Self {
        let mut changed = self.clone();
        if changed.state.paused && !paused {
            changed.state.through = changed.state.through.max(now);
        }
        changed.state.paused = paused;
        changed
    }

    /// Its cadence.
    ///
    /// # Errors
    /// [`ScheduleError`] where its spec no longer reads (a time zone dropped from the
    /// database, say).
    pub fn cadence(&self) -> Result<Cadence, ScheduleError> {
        self.spec.cadence(self.state.anchor)
    }

    /// The id of its run at `at`: its name, `-`, and the instant to the second in UTC
    /// (`nightly-20261204T090000Z`).
    #[must_use]
    pub fn run_id(&self, at: Timestamp) -> TaskId {
        let stamp = at.to_rfc3339();
        let compact: String = stamp
            .get(..19)
            .unwrap_or_default()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        // A checked name, `-` and 15 letters and digits and `Z` make a valid task id.
        TaskId::parse(format!("{}-{compact}Z", self.name)).expect("a checked name makes an id")
    }

    /// When its next run falls, if it is not paused: the one buffered, or the next
    /// instant of its cadence.
    #[must_use]
    pub fn next_run(&self) -> Option<Timestamp> {
        if self.state.paused {
            return None;
        }
        let next = self.cadence().ok()?.next_after(self.state.through);
        self.state.buffered.or(next)
    }

    /// Its next `count` instants after `now`.
    #[must_use]
    pub fn next_runs(&self, now: Timestamp, count: usize) -> Vec<Timestamp> {
        let Ok(cadence) = self.cadence() else {
            return Vec::new();
        };
        if self.state.paused {
            return Vec::new();
        }
        std::iter::successors(cadence.next_after(self.state.through.max(now)), |at| {
            cadence.next_after(*at)
        })
        .take(count)
        .collect()
    }

    /// One firing at `now`, its last run `running` or not: the runs whose instants
    /// have come, as its overlap policy and catch-up window allow, and the schedule
    /// once they are started. A buffered run starts first, once the last has ended.
    ///
    /// # Errors
    /// [`ScheduleError`] where its spec no longer reads.
    pub fn fire(&self, now: Timestamp, running: bool) -> Result<Firing, ScheduleError> {
        let mut schedule = self.clone();
        let mut instants = Vec::new();
        if self.state.paused {
            return Ok(Firing {
                runs: Vec::new(),
                schedule,
            });
        }
        let cadence = self.cadence()?;
        let window = i64::try_from(self.spec.catch_up()?.as_millis()).unwrap_or(i64::MAX);
        let oldest = Timestamp(now.0.saturating_sub(window));
        let state = &mut schedule.state;
        let mut busy = running;
        if let Some(at) = state.buffered.filter(|_| !busy) {
            state.buffered = None;
            instants.push(at);
            busy = true;
        }
        // Instants too old to run are passed over, counted a period at a time up to
        // a bound: a long downtime is then a jump, not a walk.
        let mut counted = 0usize;
        while let Some(at) = cadence.next_after(state.through).filter(|at| *at < oldest) {
            counted += 1;
            state.missed += 1;
            state.through = if counted < 10_000 { at } else { oldest };
        }
        while instants.len() < MAX_RUNS_A_FIRING {
            let Some(at) = cadence.next_after(state.through).filter(|at| *at <= now) else {
                break;
            };
            state.through = at;
            match self.spec.overlap {
                Overlap::AllowAll => instants.push(at),
                _ if !busy => {
                    instants.push(at);
                    busy = true;
                }
                Overlap::BufferOne if state.buffered.is_none() => state.buffered = Some(at),
                _ => state.skipped += 1,
            }
        }
        let runs: Vec<Run> = instants
            .into_iter()
            .map(|at| Run {
                id: schedule.run_id(at),
                at,
            })
            .collect();
        schedule.state.started += runs.len() as u64;
        if let Some(last) = runs.last() {
            schedule.state.last_run = Some(last.clone());
        }
        Ok(Firing { runs, schedule })
    }
}

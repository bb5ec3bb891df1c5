//! Steps that start child tasks: a child workflow,
//! `{"name": "ship", "workflow": "ship-parcel", "input": {"parcel": "input.parcel_id"}}`,
//! and a map, one child per item of an array,
//! `{"name": "deliver-each", "map": {"items": "input.parcels", "workflow": "ship-parcel",
//! "max_concurrency": 20, "tolerated_failures": "5%"}}`.
//!
//! A child is a task of its own, with an id derived from its parent's
//! ([`TaskId::child`](crate::ids::TaskId::child)); the step keeps counts of its
//! children, never a record of each, so that a map over many thousands of items fits
//! a task's record.

use std::collections::{BTreeMap, HashSet};

use serde::Deserialize;

use crate::workflow::file::{Fault, StepFile};
use crate::workflow::step::{FieldType, StepKind};
use crate::workflow::values::{FieldSource, Scope};

/// A map's children at once when its definition does not say.
pub const DEFAULT_MAX_CONCURRENCY: u32 = 10;

/// The most children a map runs at once: the items running are kept in its record.
pub const MAX_CONCURRENCY: u32 = 1000;

/// A step that starts child tasks: one (a child workflow) or one per item (a map).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildrenStep {
    /// The workflow each child runs (its version pinned when the task was submitted).
    pub workflow: String,
    /// Of a map: where its items are, an array in the input or an earlier result.
    /// `None` for a child workflow, which starts one child.
    pub items: Option<FieldSource>,
    /// The child's input, by field. Without it, a map's child takes its item (an
    /// object) and a child workflow's takes its parent's input.
    pub input: Option<BTreeMap<String, FieldSource>>,
    /// The most children running at once.
    pub max_concurrency: u32,
    /// The children that may fail without failing the step.
    pub tolerated_failures: Tolerance,
}

/// The children of a map that may fail without failing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tolerance {
    /// A count.
    Count(u32),
    /// A share of the items, in hundredths of a percent (`"2.5%"` is 250).
    Basis(u32),
}

impl Tolerance {
    /// The failures allowed among `total` children.
    #[must_use]
    pub fn allowed(self, total: u32) -> u32 {
        match self {
            Self::Count(count) => count,
            Self::Basis(basis) => {
                u32::try_from(u64::from(total) * u64::from(basis) / 10_000).unwrap_or(u32::MAX)
            }
        }
    }
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Count(count) => write!(f, "{count}"),
            Self::Basis(basis) => write!(f, "{}%", f64::from(*basis) / 100.0),
        }
    }
}

/// A map as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MapFile {
    items: String,
    workflow: String,
    max_concurrency: Option<u32>,
    tolerated_failures: Option<ToleranceFile>,
    input: Option<BTreeMap<String, String>>,
}

/// What a step that starts children names: a child workflow, or a map.
pub(super) enum Children {
    Workflow(String),
    Map(MapFile),
}

/// A tolerance as written: a count, or a percentage such as `"5%"`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum ToleranceFile {
    Count(u32),
    Text(String),
}

/// Resolves a child workflow's or a map's `step`, once the steps named `known` are
/// done: what it does. Whether the workflows it names exist, and start no cycle, is
/// for the registry to say once every definition is loaded.
pub(super) fn resolve(
    step: &StepFile,
    children: Children,
    input: &BTreeMap<String, FieldType>,
    known: &HashSet<String>,
) -> Result<StepKind, Fault> {
    let at = |field: &str, message: String| (Some(step.name.clone()), field.to_owned(), message);
    if let Some(field) = step.call_settings().first() {
        return Err(at(
            field,
            "a step that starts child tasks calls nothing itself: their steps do".into(),
        ));
    }
    if !step
        .name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        || step.name.len() > 64
    {
        return Err(at(
            "name",
            "a step that starts child tasks names them: at most 64 letters, digits, '-' and '_'"
                .into(),
        ));
    }
    let scope = |item| Scope {
        step: &step.name,
        input,
        earlier: known,
        item,
    };
    let mapping = |fields: Option<&BTreeMap<String, String>>, prefix: &str, item| {
        fields
            .map(|fields| {
                fields
                    .iter()
                    .map(|(field, source)| {
                        FieldSource::parse(source, &scope(item))
                            .map(|source| (field.clone(), source))
                            .map_err(|message| at(&format!("{prefix}input.{field}"), message))
                    })
                    .collect::<Result<BTreeMap<_, _>, _>>()
            })
            .transpose()
    };
    let map = match children {
        Children::Workflow(workflow) => {
            return Ok(StepKind::Children(ChildrenStep {
                workflow,
                items: None,
                input: mapping(step.input.as_ref(), "", false)?,
                max_concurrency: 1,
                tolerated_failures: Tolerance::Count(0),
            }));
        }
        Children::Map(map) => map,
    };
    if step.input.is_some() {
        return Err(at(
            "input",
            "a map's children's input is written in the map, beside items".into(),
        ));
    }
    let items = FieldSource::parse(&map.items, &scope(false))
        .map_err(|message| at("map.items", message))?;
    if let FieldSource::Input(field) = &items
        && let Some(kind) = input.get(field)
        && !kind.is_array()
    {
        return Err(at(
            "map.items",
            format!(
                "'{items}' is declared {}, which cannot be an array",
                serde_json::json!(kind)
            ),
        ));
    }
    let max_concurrency = map.max_concurrency.unwrap_or(DEFAULT_MAX_CONCURRENCY);
    if !(1..=MAX_CONCURRENCY).contains(&max_concurrency) {
        return Err(at(
            "map.max_concurrency",
            format!("must be from 1 to {MAX_CONCURRENCY}"),
        ));
    }
    let tolerated_failures = match map.tolerated_failures {
        None => Tolerance::Count(0),
        Some(ToleranceFile::Count(count)) => Tolerance::Count(count),
        Some(ToleranceFile::Text(text)) => parse_percentage(&text)
            .map(Tolerance::Basis)
            .ok_or_else(|| {
                at(
                    "map.tolerated_failures",
                    format!("'{text}' is neither a count nor a percentage such as \"5%\""),
                )
            })?,
    };
    Ok(StepKind::Children(ChildrenStep {
        workflow: map.workflow,
        items: Some(items),
        input: mapping(map.input.as_ref(), "map.", true)?,
        max_concurrency,
        tolerated_failures,
    }))
}

/// A percentage from 0 to 100 with at most two decimals (`"5%"`, `"2.5%"`), in
/// hundredths of a percent.
fn parse_percentage(text: &str) -> Option<u32> {
    let number = text.strip_suffix('%')?.trim();
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.len() > 2 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let basis = whole.parse::<u32>().ok()?.checked_mul(100)?
        + format!("{fraction:0<2}").parse::<u32>().ok()?;
    (basis <= 10_000).then_some(basis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_are_read_to_the_hundredth_and_bounded() {
        assert_eq!(parse_percentage("5%"), Some(500));
        assert_eq!(parse_percentage("2.5%"), Some(250));
        assert_eq!(parse_percentage("100%"), Some(10_000));
        for bad in ["5", "101%", "%", "1.234%", "-1%", "a%"] {
            assert_eq!(parse_percentage(bad), None, "{bad}");
        }
        assert_eq!(Tolerance::Basis(500).allowed(1000), 50);
        assert_eq!(Tolerance::Basis(250).allowed(10), 0);
        assert_eq!(Tolerance::Count(3).allowed(10), 3);
    }
}

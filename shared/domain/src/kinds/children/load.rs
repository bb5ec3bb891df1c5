//! A child workflow's or a map's step as written, checked and resolved.

use std::collections::{BTreeMap, HashSet};

use serde::Deserialize;

use super::{ChildrenStep, DEFAULT_MAX_CONCURRENCY, MAX_CONCURRENCY, Tolerance};
use crate::kinds::{StepKind, foreign_setting};
use crate::workflow::file::{Fault, StepFile};
use crate::workflow::values::Scope;
use crate::workflow::{FieldSource, FieldType};

/// A map as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MapFile {
    items: String,
    workflow: String,
    max_concurrency: Option<u32>,
    tolerated_failures: Option<ToleranceFile>,
    input: Option<BTreeMap<String, String>>,
}

/// What a step that starts children names: a child workflow, or a map.
pub(crate) enum Named {
    Workflow(String),
    Map(MapFile),
}

/// A tolerance as written: a count, or a percentage such as `"5%"`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum ToleranceFile {
    Count(u32),
    Text(String),
}

/// Resolves a child workflow's or a map's `step`, once the steps named `known` are
/// done: what it does. Whether the workflows it names exist, and start no cycle, is
/// for the registry to say once every definition is loaded.
pub(crate) fn resolve(
    step: &StepFile,
    named: Named,
    input: &BTreeMap<String, FieldType>,
    known: &HashSet<String>,
) -> Result<StepKind, Fault> {
    let at = |field: &str, message: String| step.fault(field, message);
    if let Some(field) = foreign_setting(step, &["workflow", "map", "input"]) {
        return Err(at(
            field,
            "a step that starts child tasks calls nothing and waits for nothing itself: their steps do".into(),
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
    let map = match named {
        Named::Workflow(workflow) => {
            return Ok(StepKind::Children(ChildrenStep {
                workflow,
                items: None,
                input: mapping(step.input.as_ref(), "", false)?,
                max_concurrency: 1,
                tolerated_failures: Tolerance::Count(0),
            }));
        }
        Named::Map(map) => map,
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
    use crate::workflow::{DEFAULT_MAX_CONCURRENCY, Registry, Results, Workflow};

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

    /// A workflow `w` with input `items` (of `items_type`) and `order`, whose one step is
    /// `step`.
    fn with_step(items_type: &str, step: &str) -> String {
        format!(
            r#"{{"name": "w", "version": 1, "input": {{"items": "{items_type}", "order": "string"}},
                "steps": [{step}]}}"#
        )
    }

    #[test]
    fn a_map_and_a_child_workflow_resolve_their_items_input_and_defaults() {
        let map = r#"{"name": "each", "map": {"items": "input.items", "workflow": "kid",
            "tolerated_failures": "2.5%", "input": {"n": "item.n", "all": "item", "o": "input.order"}}}"#;
        let workflow = Workflow::parse("w.json", &with_step("array<object>", map)).expect("valid");
        let children = workflow.steps[0].children().expect("a map");
        assert_eq!(children.workflow, "kid");
        assert_eq!(children.max_concurrency, DEFAULT_MAX_CONCURRENCY);
        assert_eq!(children.tolerated_failures, Tolerance::Basis(250));
        let item = serde_json::json!({"n": 4});
        let input = serde_json::json!({"order": "o-1"});
        let values: Vec<String> = children
            .input
            .as_ref()
            .expect("mapped")
            .values()
            .map(|source| {
                source
                    .value_for_item(&input, &Results::new(), Some(&item))
                    .to_string()
            })
            .collect();
        assert_eq!(values, [r#"{"n":4}"#, r#"4"#, r#""o-1""#]);
        let child = r#"{"name": "ship", "workflow": "kid", "input": {"o": "input.order"}}"#;
        let workflow = Workflow::parse("w.json", &with_step("array", child)).expect("valid");
        let children = workflow.steps[0].children().expect("a child workflow");
        assert_eq!(
            (children.items.as_ref(), children.max_concurrency),
            (None, 1)
        );
    }

    #[test]
    fn a_step_that_starts_children_is_refused_naming_the_step_and_the_field() {
        for (items_type, step, expected) in [
            (
                "string",
                r#"{"name": "each", "map": {"items": "input.items", "workflow": "kid"}}"#,
                "w.json: step 'each': map.items: 'input.items' is declared \"string\", which cannot be an array",
            ),
            (
                "array",
                r#"{"name": "each", "map": {"items": "input.items", "workflow": "kid", "max_concurrency": 0}}"#,
                "w.json: step 'each': map.max_concurrency: must be from 1 to 1000",
            ),
            (
                "array",
                r#"{"name": "each", "map": {"items": "input.items", "workflow": "kid", "tolerated_failures": "lots"}}"#,
                "w.json: step 'each': map.tolerated_failures: 'lots' is neither a count nor a percentage",
            ),
            (
                "array",
                r#"{"name": "each", "map": {"items": "item", "workflow": "kid"}}"#,
                "w.json: step 'each': map.items: 'item': must be input.<field> or results.<step>.<field>",
            ),
            (
                "array",
                r#"{"name": "ship", "workflow": "kid", "input": {"n": "item.n"}}"#,
                "w.json: step 'ship': input.n: 'item.n': must be input.<field>",
            ),
            (
                "array",
                r#"{"name": "ship it", "workflow": "kid"}"#,
                "w.json: step 'ship it': name: a step that starts child tasks names them",
            ),
            (
                "array",
                r#"{"name": "ship", "workflow": "kid", "agent": "s"}"#,
                "w.json: step 'ship': agent: a step that starts child tasks calls nothing and waits for nothing itself",
            ),
            (
                "array",
                r#"{"name": "ship", "workflow": "kid", "map": {"items": "input.items", "workflow": "kid"}}"#,
                "w.json: step 'ship': workflow: a step is a child workflow or a map, not both",
            ),
            (
                "array",
                r#"{"name": "call", "agent": "s", "call": "/c", "input": {"o": "input.order"}}"#,
                "w.json: step 'call': input: only a child workflow has an input",
            ),
        ] {
            let error = parse_error_of("w.json", &with_step(items_type, step));
            assert!(error.starts_with(expected), "{error}\nexpected: {expected}");
        }
    }

    fn parse_error_of(file: &str, text: &str) -> String {
        Workflow::parse(file, text)
            .expect_err("invalid")
            .to_string()
    }

    #[test]
    fn a_child_workflow_that_does_not_exist_or_starts_a_cycle_is_refused_when_loaded() {
        let kid = |name: &str, child: &str| {
            (
                format!("{name}.json"),
                format!(
                    r#"{{"name": "{name}", "version": 1, "steps": [
                        {{"name": "c", "agent": "s", "call": "/c"}},
                        {{"name": "down", "workflow": "{child}"}}]}}"#
                ),
            )
        };
        let error = Registry::with_files([kid("a", "nowhere")])
            .expect_err("refused")
            .to_string();
        assert_eq!(
            error,
            "a.json: step 'down': workflow: no workflow is named 'nowhere'"
        );
        let error = Registry::with_files([kid("a", "b"), kid("b", "c"), kid("c", "a")])
            .expect_err("refused")
            .to_string();
        assert_eq!(
            error,
            "a.json: step 'down': workflow: starts itself through its children: a -> b -> c -> a"
        );
        let registry =
            Registry::with_files([kid("a", "b"), kid("b", "parcel-order")]).expect("a tree");
        let a = registry.latest("a").expect("a");
        let pins: Vec<(String, u32)> = registry.pins(&a).into_iter().collect();
        assert_eq!(
            pins,
            [
                ("b".to_owned(), 1),
                ("parcel-order".to_owned(), 1),
                ("ship-parcel".to_owned(), 1)
            ]
        );
    }
}

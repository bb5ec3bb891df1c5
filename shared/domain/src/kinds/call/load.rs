//! A call as written, checked and resolved: its service, its operations, its budget,
//! its retries and its limit.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::CallStep;
use crate::flow::LimitFile;
use crate::kinds::callback;
use crate::workflow::file::{Fault, Resolver, StepFile, default_retry};
use crate::workflow::values::{PathPart, Scope};
use crate::workflow::{Endpoint, FieldSource};

/// Resolves a step that calls a service, once the steps named `known` are done
/// (their results there to name).
pub(crate) fn resolve(
    step: &StepFile,
    resolver: &Resolver<'_>,
    known: &HashSet<String>,
) -> Result<CallStep, Fault> {
    let at = |field: &str, message: &str| step.fault(field, message);
    let (Some(agent), Some(call)) = (&step.agent, &step.call) else {
        let missing = if step.agent.is_none() {
            "agent"
        } else {
            "call"
        };
        return Err(at(
            missing,
            "a step names the service it calls (agent, call), or is parallel branches, a child workflow or a map",
        ));
    };
    let scope = Scope {
        step: &step.name,
        input: resolver.input,
        earlier: known,
        item: false,
    };
    let fields = match &step.fields {
        None => None,
        Some(fields) => Some(
            fields
                .iter()
                .map(|(field, source)| {
                    FieldSource::parse(source, &scope)
                        .map(|source| (field.clone(), source))
                        .map_err(|message| at(&format!("fields.{field}"), &message))
                })
                .collect::<Result<BTreeMap<_, _>, _>>()?,
        ),
    };
    if agent.is_empty() {
        return Err(at("agent", "must not be empty"));
    }
    let call = Endpoint::parse(call, &scope).map_err(|message| at("call", &message))?;
    if let Some(own) = call.template.iter().find_map(|part| match part {
        PathPart::Value(source @ FieldSource::Result { step: of, .. }) if *of == step.name => {
            Some(source)
        }
        _ => None,
    }) {
        return Err(at(
            "call",
            &format!("{{{own}}}: a call has no result of its own yet (its compensation has)"),
        ));
    }
    let compensation = step
        .compensation
        .as_deref()
        .map(|text| Endpoint::parse(text, &scope))
        .transpose()
        .map_err(|message| at("compensation", &message))?;
    let read_only = step.read_only.unwrap_or(false);
    if read_only && compensation.is_some() {
        return Err(at(
            "compensation",
            "a read-only step changes nothing, so has nothing to undo",
        ));
    }
    if step.input.is_some() {
        return Err(at(
            "input",
            "only a child workflow has an input; a call sends its fields",
        ));
    }
    let complete_by = step
        .complete_by
        .or(resolver.defaults.complete_by)
        .unwrap_or(Duration::from_secs(30));
    if complete_by.is_zero() {
        return Err(at("complete_by", "must be more than zero"));
    }
    let retry = step
        .retry
        .clone()
        .or_else(|| resolver.defaults.retry.clone())
        .unwrap_or_else(default_retry);
    if retry.attempts == 0 {
        return Err(at("retry.attempts", "must be at least 1"));
    }
    if retry.max_backoff < retry.initial_backoff {
        return Err(at(
            "retry.max_backoff",
            "must not be less than initial_backoff",
        ));
    }
    let supervision = resolver.supervision(step)?;
    if let Some(callback) = &step.callback {
        callback::check(step, callback)?;
    }
    Ok(CallStep {
        agent: agent.clone(),
        call,
        compensation,
        read_only,
        complete_by,
        retry,
        supervision,
        fields,
        callback: step.callback.clone(),
        limit: step
            .limit
            .clone()
            .map(LimitFile::check)
            .transpose()
            .map_err(|(field, message)| at(&format!("limit.{field}"), &message))?,
        service_limit: None,
        endpoints: None,
    })
}

//! The operator's view of flow control ([`sas_domain::flow`]): per service, what
//! limits its calls (its settings' limit, and steps' narrower ones), and each limit's
//! gate now: the calls holding its slots, the calls in its line, its rate's tokens.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::ports::StoreError;
use sas_domain::flow::Limit;

use super::App;

/// The most calls of a line counted one by one; a longer line shows this many and
/// `more_waiting`.
pub const LINE_COUNTED: usize = 1000;

/// A service, and what limits its calls.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ServiceReport {
    /// Its name: the agent the workflows' steps call.
    pub service: String,
    /// Its limits: its own (from the deployment's settings) first, then its steps'.
    /// None: its calls go as fast as the agents take them.
    pub limits: Vec<LimitReport>,
}

/// A limit on calls, and its gate now.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct LimitReport {
    /// What it holds: `service:<service>`, or `step:<workflow>/<step>` for a step's.
    pub of: String,
    /// Calls in flight at once, at most.
    pub max_concurrency: Option<u32>,
    /// Calls started a second, at most, on average.
    pub per_second: Option<f64>,
    /// Calls started at once after a quiet while, at most.
    pub burst: Option<u32>,
    /// The input's field it is kept per value of (`input.customer_id`), if any.
    pub key: Option<String>,
    /// Its gate now; of a keyed limit, the gate of the key asked for (`?key=`), and
    /// none when no key was asked for.
    pub gate: Option<GateReport>,
}

/// A gate now.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct GateReport {
    /// Its name: what it limits, and the key's value when keyed.
    pub name: String,
    /// Calls holding a slot: sent, and not yet answered.
    pub in_flight: usize,
    /// Calls in its line, waiting for a slot or a token.
    pub waiting: usize,
    /// More than [`LINE_COUNTED`] wait: `waiting` counts the first of them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub more_waiting: bool,
    /// How long the longest waiter counted has waited, in milliseconds.
    pub longest_wait_ms: Option<u64>,
    /// Calls its rate lets start now, if it has a rate.
    pub tokens: Option<f64>,
}

impl App {
    /// Every service the known workflows call, with its limits and their gates now;
    /// a keyed limit's gate is the one of `key`, when given.
    ///
    /// # Errors
    /// [`StoreError`] when a gate cannot be read.
    pub async fn services(&self, key: Option<&str>) -> Result<Vec<ServiceReport>, StoreError> {
        // By service, each limit by what it holds; the newest version's step wins.
        let mut services: BTreeMap<String, BTreeMap<String, Limit>> = BTreeMap::new();
        let mut endpoints = Vec::new();
        let mut workflows = self.workflows().all();
        workflows.sort_by_key(|workflow| workflow.version);
        for workflow in &workflows {
            for step in &workflow.steps {
                let Some(call) = step.call() else { continue };
                let limits = services.entry(call.agent.clone()).or_default();
                if let Some(limit) = &call.service_limit {
                    limits.insert(format!("service:{}", call.agent), limit.clone());
                }
                if let Some(limit) = &call.limit {
                    let of = format!("step:{}/{}", workflow.name, step.name);
                    limits.insert(of, limit.clone());
                }
                // The services a call to an endpoint may be at (`http:invoke`).
                let at = call.endpoints.iter().flat_map(|d| &d.services);
                endpoints.extend(
                    at.filter_map(|(name, service)| Some((name.clone(), service.limit.clone()?))),
                );
            }
        }
        for (name, limit) in endpoints {
            let of = format!("service:{name}");
            services.entry(name).or_default().insert(of, limit);
        }
        let mut reports = Vec::new();
        for (service, limits) in services {
            let mut reported = Vec::new();
            for (of, limit) in limits {
                reported.push(self.limit_report(of, &limit, key).await?);
            }
            reports.push(ServiceReport {
                service,
                limits: reported,
            });
        }
        Ok(reports)
    }

    async fn limit_report(
        &self,
        of: String,
        limit: &Limit,
        key: Option<&str>,
    ) -> Result<LimitReport, StoreError> {
        let gate = match (&limit.key, key) {
            (None, _) => Some(limit.gate(&of, &Value::Null)),
            (Some(field), Some(key)) => {
                let input = Map::from_iter([(field.clone(), Value::String(key.to_owned()))]);
                Some(limit.gate(&of, &Value::Object(input)))
            }
            (Some(_), None) => None,
        };
        let gate = match gate {
            Some(name) => Some(self.gate_report(name, limit).await?),
            None => None,
        };
        Ok(LimitReport {
            of,
            max_concurrency: limit.max_concurrency,
            per_second: limit.rate.map(|rate| rate.per_second),
            burst: limit.rate.map(|rate| rate.burst),
            key: limit.key.as_ref().map(|field| format!("input.{field}")),
            gate,
        })
    }

    async fn gate_report(&self, name: String, limit: &Limit) -> Result<GateReport, StoreError> {
        let (mut gate, mut line) = self.store.gate(&name, LINE_COUNTED + 1).await?;
        let now = self.clock.now();
        // As a pass would find it now: lapsed slots gone, the bucket filled.
        gate.open(limit, now, 0);
        let more_waiting = line.len() > LINE_COUNTED;
        line.truncate(LINE_COUNTED);
        let longest = line.iter().map(|waiter| waiter.admission.since).min();
        Ok(GateReport {
            name,
            in_flight: gate.holders.len(),
            waiting: line.len(),
            more_waiting,
            longest_wait_ms: longest
                .map(|since| u64::try_from(since.until(now).as_millis()).unwrap_or(u64::MAX)),
            tokens: limit.rate.map(|_| gate.tokens),
        })
    }
}

//! Runs one recorded case's state machine through the language's transitions, in
//! memory, with the Lambda functions it calls played as the case describes them and a
//! virtual clock (waits and sleeps take no real time). The engine's own durable run of
//! the same transitions is what the deployed and embedded tests exercise; this is the
//! language's conformance.

use serde_json::{Map, Value, json};

use sas_asl::definition::{MapState, State, StateKind, StateMachine, Target};
use sas_asl::run::context::{self, Position};
use sas_asl::run::{self, Left, Recovery, Until, Visit, Work};
use sas_asl::{Failure, errors, lambda};

use super::cases::{self, Outcome};

const REGION_ACCOUNT: &str = "us-east-1:111111111111";
const MACHINE: &str = "conformance";
const EXECUTION: &str = "run-1";
const STARTED: &str = "2026-12-02T10:00:00.000Z";

pub struct Execution<'a> {
    lambdas: &'a Map<String, Value>,
    /// History events so far (Step Functions names a failing state by the event that
    /// entered it).
    events: u64,
    clock_seconds: f64,
    timeout_seconds: Option<u64>,
    execution: context::Execution,
}

impl<'a> Execution<'a> {
    pub fn run(machine: &StateMachine, input: Value, lambdas: &'a Map<String, Value>) -> Outcome {
        let mut execution = Execution {
            lambdas,
            events: 1,
            clock_seconds: 0.0,
            timeout_seconds: machine.timeout_seconds,
            execution: context::Execution {
                id: format!("arn:aws:states:{REGION_ACCOUNT}:execution:{MACHINE}:{EXECUTION}"),
                name: EXECUTION.to_owned(),
                input: input.clone(),
                role_arn: format!("arn:aws:iam::111111111111:role/{MACHINE}"),
                start_time: STARTED.to_owned(),
                redrive_count: 0,
                machine_id: format!("arn:aws:states:{REGION_ACCOUNT}:stateMachine:{MACHINE}"),
                machine_name: MACHINE.to_owned(),
            },
        };
        match execution.machine(machine, input, Map::new(), None) {
            Ok(output) => Outcome::Succeeded(output),
            Err(failure) if failure.error == TIMED_OUT => Outcome::TimedOut,
            Err(failure) => Outcome::Failed {
                error: failure.error,
                cause: failure.cause,
            },
        }
    }

    fn context(&self, state: &State, retry_count: u64, item: Option<&(usize, Value)>) -> Value {
        let position = Position {
            state: &state.name,
            entered_time: STARTED,
            retry_count: (!state.retry.is_empty()).then_some(retry_count),
            item: item.map(|(index, value)| (*index, value)),
            task_token: None,
        };
        context::context(&self.execution, &position)
    }

    fn advance(&mut self, seconds: f64) -> Result<(), Failure> {
        self.clock_seconds += seconds;
        match self.timeout_seconds {
            Some(limit) if self.clock_seconds > limit as f64 => Err(Failure::new(TIMED_OUT, "")),
            _ => Ok(()),
        }
    }

    fn machine(
        &mut self,
        machine: &StateMachine,
        mut input: Value,
        mut variables: Map<String, Value>,
        item: Option<(usize, Value)>,
    ) -> Result<Value, Failure> {
        let mut name = machine.start_at.clone();
        loop {
            let Some(state) = machine.state(&name) else {
                return Err(Failure::runtime(format!("no state named {name}")));
            };
            self.events += 1;
            let entered = self.events;
            let left = self.visit(state, &input, &variables, item.as_ref(), entered)?;
            variables.extend(left.assigned);
            self.events += 1;
            match left.next {
                Some(next) => {
                    name = next;
                    input = left.output;
                }
                None => return Ok(left.output),
            }
        }
    }

    /// One visit of a state, retried and caught as it says.
    fn visit(
        &mut self,
        state: &State,
        input: &Value,
        variables: &Map<String, Value>,
        item: Option<&(usize, Value)>,
        entered: u64,
    ) -> Result<Left, Failure> {
        let mut retries = vec![0; state.retry.len()];
        loop {
            let context = self.context(state, retries.iter().sum(), item);
            let visit = Visit {
                state,
                input,
                context: &context,
                variables,
            };
            let located = |failure| run::locate(failure, &state.name, entered);
            let work = run::enter(&visit).map_err(located)?;
            let result = match work {
                Work::Done(left) => return Ok(left),
                Work::Fail(failure) => return Err(failure),
                Work::Wait { until, result } => {
                    let seconds = match until {
                        Until::Seconds(seconds) => seconds as f64,
                        Until::At(_) => 0.0,
                    };
                    self.advance(seconds)?;
                    Ok(result)
                }
                Work::Call {
                    arguments,
                    timeout_seconds,
                    ..
                } => self.call(state, &arguments, timeout_seconds),
                Work::Branches { input } => self.branches(state, input, variables),
                // No recorded case reads its items from S3.
                Work::Read { .. } => Err(Failure::runtime("no S3 object to read here")),
                Work::Items {
                    items,
                    max_concurrency: _,
                    tolerated_count,
                    tolerated_percentage,
                } => self.items(&visit, items, tolerated_count, tolerated_percentage),
            };
            let failure = match result {
                Ok(result) => return run::leave(&visit, result).map_err(located),
                Err(failure) if failure.error == TIMED_OUT => return Err(failure),
                Err(failure) => failure,
            };
            match run::recover(&visit, failure, &retries) {
                Recovery::Retry {
                    retrier,
                    delay_seconds,
                    ..
                } => {
                    retries[retrier] += 1;
                    self.advance(delay_seconds)?;
                }
                Recovery::Caught { left, .. } => return Ok(left),
                Recovery::Raise(failure) => return Err(failure),
            }
        }
    }

    fn call(
        &mut self,
        state: &State,
        arguments: &Value,
        timeout_seconds: Option<u64>,
    ) -> Result<Value, Failure> {
        let StateKind::Task(task) = &state.kind else {
            return Err(Failure::runtime("not a task"));
        };
        self.events += 3;
        let target = &task.resource.target;
        if !matches!(target, Target::LambdaFunction { .. } | Target::LambdaInvoke) {
            return Err(Failure::runtime(format!(
                "{} is not played here",
                task.resource.arn
            )));
        }
        let request = lambda::request(target, arguments)?;
        // `Invoke` takes a name or an ARN; the played functions are kept by name.
        let function = match request.function.split(':').collect::<Vec<_>>()[..] {
            ["arn", _, "lambda", _, _, "function", name, ..] => name.to_owned(),
            _ => request.function.clone(),
        };
        let behaviour = self
            .lambdas
            .get(&function)
            .and_then(|lambda| lambda.get("behaviour"))
            .ok_or_else(|| {
                let arn = format!("arn:aws:lambda:{REGION_ACCOUNT}:function:{function}");
                lambda::not_found(&arn, "00000000-0000-4000-8000-000000000001")
            })?;
        if let Some(sleep) = behaviour.get("sleeps_seconds").and_then(Value::as_f64) {
            if timeout_seconds.is_some_and(|limit| sleep > limit as f64) {
                self.advance(timeout_seconds.unwrap_or(0) as f64)?;
                return Err(Failure::new(errors::TIMEOUT, ""));
            }
            self.advance(sleep)?;
        }
        let (payload, function_error) = cases::played(behaviour, &request.payload);
        let answer = lambda::Answer {
            payload: payload.as_bytes(),
            function_error,
            log_result: request.log_tail.then_some("bG9nIHRhaWw="),
        };
        lambda::task_result(target, &task.resource.arn, answer)
    }

    fn branches(
        &mut self,
        state: &State,
        input: Value,
        variables: &Map<String, Value>,
    ) -> Result<Value, Failure> {
        let StateKind::Parallel { branches } = &state.kind else {
            return Err(Failure::runtime("not a parallel"));
        };
        self.events += 1;
        let outputs = branches
            .iter()
            .map(|branch| self.machine(branch, input.clone(), variables.clone(), None))
            .collect::<Result<Vec<_>, _>>()?;
        self.events += 1;
        Ok(Value::Array(outputs))
    }

    fn items(
        &mut self,
        visit: &Visit,
        items: Vec<Value>,
        tolerated_count: Option<u64>,
        tolerated_percentage: Option<f64>,
    ) -> Result<Value, Failure> {
        let StateKind::Map(map) = &visit.state.kind else {
            return Err(Failure::runtime("not a map"));
        };
        let map: &MapState = map;
        self.events += 1;
        let total = items.len();
        let mut outputs = Vec::with_capacity(total);
        let mut failed = 0usize;
        let mut last_failure = None;
        for (index, item) in items.into_iter().enumerate() {
            let input = run::item_input(visit, map, index, &item)
                .map_err(|failure| run::locate(failure, &visit.state.name, self.events))?;
            self.events += 1;
            match self.machine(
                &map.processor,
                input,
                visit.variables.clone(),
                Some((index, item)),
            ) {
                Ok(output) => outputs.push(output),
                Err(failure) if failure.error == TIMED_OUT => return Err(failure),
                Err(failure) => {
                    failed += 1;
                    outputs.push(json!({"Error": failure.error, "Cause": failure.cause}));
                    last_failure = Some(failure);
                }
            }
            self.events += 1;
        }
        if let Some(failure) = last_failure {
            let tolerated = tolerated_count.is_some_and(|count| failed as u64 <= count)
                || tolerated_percentage
                    .is_some_and(|percentage| (failed as f64) * 100.0 <= percentage * total as f64);
            if !tolerated {
                if tolerated_count.is_some() || tolerated_percentage.is_some() {
                    return Err(Failure::new(
                        errors::EXCEED_TOLERATED_FAILURE_THRESHOLD,
                        "The specified tolerated failure threshold was exceeded",
                    ));
                }
                return Err(failure);
            }
        }
        self.events += 1;
        Ok(Value::Array(outputs))
    }
}

/// A failure that ends the execution as `TIMED_OUT` (its own `TimeoutSeconds`).
const TIMED_OUT: &str = "conformance.ExecutionTimedOut";

//! The simulation's waits: callbacks used by their tokens (twice, late, after their
//! step timed out and was retried, for a task cancelled or resubmitted), heartbeats
//! sent or lost, steps completed on the owner's route, tasks paused and resumed; and
//! the invariants: a token is used at most once, no wait ends by a dead token, a
//! timer never ends early, a paused task starts nothing.

use std::time::Duration;

use sas_core::clock::Clock;
use sas_domain::callback::Token;
use sas_domain::decide::CallbackOutcome;
use sas_domain::task::{Actor, Caller, StepState, Task, Waiting};
use sas_domain::workflow::Workflow;
use serde_json::json;

use super::Sim;

impl Sim {
    /// The tokens a holder may have now: those the services were sent with their
    /// calls, and those of the waits without a service, read off the tasks as their
    /// view shows them. All are kept, dead or alive, to be used late.
    fn refresh_tokens(&mut self) -> Vec<String> {
        for task in self.memory.tasks() {
            for (index, step) in task.steps.iter().enumerate() {
                let shown = match step.waiting {
                    Some(Waiting::Callback { after_call, .. })
                        if step.state == StepState::Processing =>
                    {
                        Some(after_call)
                    }
                    _ => None,
                };
                if let Some(token) =
                    shown.and_then(|after_call| Token::issue(&task, index, after_call))
                    && !self.tokens.contains(&token)
                {
                    self.tokens.push(token);
                }
            }
        }
        let sent = self.remote.tokens();
        for token in sent {
            if !self.tokens.contains(&token) {
                self.tokens.push(token);
            }
        }
        self.tokens.clone()
    }

    /// The token `text` is, and the task it names, if it is one and its task is there.
    fn task_of(&self, text: &str) -> Option<(Token, Task)> {
        let token = Token::parse(text)?;
        let task = self
            .memory
            .tasks()
            .into_iter()
            .find(|t| t.id == token.task)?;
        Some((token, task))
    }

    /// Whether `token`'s wait is on now: its task signed it, and its step waits for
    /// it (or may: its call is out), in time.
    fn is_live(&self, token: &str) -> bool {
        let now = self.clock.now();
        self.task_of(token).is_some_and(|(token, task)| {
            let step = &task.steps[token.step];
            token.is_signed_for(&task)
                && !task.state.is_final()
                && self.waits_for_callback(&task, token.step)
                && step.state == StepState::Processing
                && step.complete_by.is_none_or(|at| now < at)
                && step.called_back.is_none()
                && token.is_current(&task, self.calls_first(&task, token.step))
        })
    }

    /// The run its task is in now (0 for a token not of a token's shape, or of a task
    /// gone).
    fn run_of(&self, token: &str) -> u32 {
        self.task_of(token).map_or(0, |(_, task)| task.run)
    }

    fn waits_for_callback(&self, task: &Task, step: usize) -> bool {
        self.workflow_of(task)
            .is_some_and(|w| w.steps[step].callback().is_some())
    }

    /// Whether `task`'s step `step` calls its service before it waits.
    fn calls_first(&self, task: &Task, step: usize) -> bool {
        self.workflow_of(task)
            .is_some_and(|w| w.steps[step].call().is_some())
    }

    fn workflow_of(&self, task: &Task) -> Option<std::sync::Arc<Workflow>> {
        self.workflows
            .version(&task.workflow.name, task.workflow.version)
    }

    /// A token used: a callback (an output, or an error that undoes the task), at
    /// times twice at once, or a heartbeat. An answer that took a dead token, or a
    /// second that took the same one, breaks an invariant.
    pub(super) async fn use_a_token(&mut self, chaos: bool) {
        let tokens = self.refresh_tokens();
        // Mostly the newest (a live wait); else any, dead ones among them.
        let pick = if self.world.chance(0.6) {
            tokens.len().saturating_sub(1 + self.world.below(3))
        } else {
            self.world.below(tokens.len())
        };
        let Some(token) = tokens.get(pick).cloned() else {
            return;
        };
        let live = self.is_live(&token);
        let scheduler = self.schedulers[self.world.below(self.schedulers.len())].clone();
        if chaos && self.world.chance(0.3) {
            *self.world.world().faults.entry("heartbeat").or_default() += 1;
            let answer = scheduler.heartbeat(&token).await;
            self.world.note(format!(
                "heartbeat {} (live: {live}) -> {}",
                short(&token),
                answer
                    .as_ref()
                    .map_or_else(|e| e.to_string(), |_| "ok".into())
            ));
            if answer.is_ok() && !live {
                self.world
                    .violation(format!("a heartbeat of dead token {token} was taken"));
            }
            return;
        }
        let outcome = if chaos && self.world.chance(0.2) {
            CallbackOutcome::Error("refused by the holder".into())
        } else {
            CallbackOutcome::Output(json!({ "by": "holder" }))
        };
        let copies = if chaos && self.world.fault("callback twice at once", 0.2) {
            2
        } else {
            1
        };
        *self.world.world().faults.entry("callback").or_default() += 1;
        let answers = futures_util::future::join_all(
            (0..copies).map(|_| scheduler.use_callback(&token, outcome.clone())),
        )
        .await;
        for answer in answers {
            self.world.note(format!(
                "callback {} (live: {live}) -> {}",
                short(&token),
                answer
                    .as_ref()
                    .map_or_else(|e| e.to_string(), |_| "ok".into())
            ));
            if answer.is_err() {
                continue;
            }
            if !live {
                self.world
                    .violation(format!("dead token {token} ended its step's wait"));
            }
            // A call's token stays its step's for every run that keeps the call's
            // idempotency key (the service keeps the first token it took under it): a
            // wait is the token's in one run of its task.
            let run = self.run_of(&token);
            let uses = {
                let mut world = self.world.world();
                let uses = world.token_uses.entry((token.clone(), run)).or_default();
                *uses += 1;
                *uses
            };
            if uses > 1 {
                self.world
                    .violation(format!("token {token} was used {uses} times"));
            }
        }
    }

    /// A worker polls the generated machine's activity, as `GetActivityTask` does:
    /// an activity task is given to one poll only, while its visit waits, and its
    /// worker holds its token from then on (to use it, or to let it time out).
    pub(super) async fn poll_an_activity(&mut self) {
        let scheduler = self.schedulers[self.world.below(self.schedulers.len())].clone();
        *self
            .world
            .world()
            .faults
            .entry("activity poll")
            .or_default() += 1;
        let polled = scheduler
            .poll_activity(super::machine::ACTIVITY, "sim-worker", Duration::ZERO)
            .await;
        let given = match polled {
            Ok(Some(given)) => given,
            answer => {
                let said = answer.map_or_else(|e| e.to_string(), |_| "none".into());
                return self
                    .world
                    .note(format!("poll {} -> {said}", super::machine::ACTIVITY));
            }
        };
        let live = self.is_live(&given.token);
        self.world.note(format!(
            "poll {} -> {} (live: {live})",
            super::machine::ACTIVITY,
            short(&given.token)
        ));
        if !live {
            self.world.violation(format!(
                "activity task {} given while its visit waits not",
                given.token
            ));
        }
        let given_times = {
            let mut world = self.world.world();
            let times = world.activity_given.entry(given.token.clone()).or_default();
            *times += 1;
            *times
        };
        if given_times > 1 {
            self.world.violation(format!(
                "activity task {} given {given_times} times",
                given.token
            ));
        }
        if !self.tokens.contains(&given.token) {
            self.tokens.push(given.token);
        }
    }

    /// The owner or an operator ends a waiting step without its token (as the console
    /// offers it: once the step waits, its call, if any, taken).
    pub(super) async fn complete_a_step(&mut self) {
        let waiting: Vec<(Task, usize)> = self
            .memory
            .tasks()
            .into_iter()
            .flat_map(|task| {
                (0..task.steps.len())
                    .filter(|&i| {
                        let step = &task.steps[i];
                        matches!(step.waiting, Some(Waiting::Callback { .. }))
                            && step.state == StepState::Processing
                    })
                    .map(|i| (task.clone(), i))
                    .collect::<Vec<_>>()
            })
            .collect();
        let Some((task, index)) = waiting.get(self.world.below(waiting.len())).cloned() else {
            return;
        };
        *self
            .world
            .world()
            .faults
            .entry("step completed")
            .or_default() += 1;
        let by = if self.world.chance(0.5) {
            Caller::Owner
        } else {
            Caller::Operator
        };
        let name = &task.steps[index].name;
        let answer = self.schedulers[0]
            .complete_step(&task.id, name, by, CallbackOutcome::Output(json!({})))
            .await;
        self.world.note(format!(
            "complete {} {name} ({by:?}) -> {}",
            task.id,
            answer.map_or_else(|e| e.to_string(), |_| "ok".into())
        ));
    }

    /// The owner or an operator pauses a task, or resumes a paused one.
    pub(super) async fn pause_or_resume_one(&mut self) {
        let Some((task, by)) = self.any_task_and_actor() else {
            return;
        };
        let scheduler = &self.schedulers[0];
        let (what, answer) = if task.paused.is_some() {
            ("resume", scheduler.resume(&task.id, self.request(by)).await)
        } else {
            ("pause", scheduler.pause(&task.id, self.request(by)).await)
        };
        *self.world.world().faults.entry(what).or_default() += 1;
        self.world.note(format!(
            "{what} {} ({:?}) -> {}",
            task.id,
            task.state,
            answer.map_or_else(|e| e.to_string(), |t| format!("{:?}", t.state))
        ));
    }

    /// Once the chaos is over: an operator resumes every paused task, and holders use
    /// some of the live tokens (the others' waits time out).
    pub(super) async fn settle_waits(&mut self) {
        let paused: Vec<Task> = self
            .memory
            .tasks()
            .into_iter()
            .filter(|t| t.paused.is_some() && !t.state.is_final())
            .collect();
        for task in paused {
            let answer = self.schedulers[0]
                .resume(&task.id, self.request(Actor::Operator))
                .await;
            self.world.note(format!(
                "resume {} -> {}",
                task.id,
                answer.map_or_else(|e| e.to_string(), |t| format!("{:?}", t.state))
            ));
        }
        if self.world.chance(0.3) {
            self.poll_an_activity().await;
        }
        if self.world.chance(0.3) {
            self.use_a_token(false).await;
        }
    }
}

/// The wait a token names, for the trace (its signature differs from run to run: a
/// task's secret is random).
fn short(token: &str) -> String {
    Token::parse(token).map_or_else(
        || "a malformed token".to_owned(),
        |t| format!("{}/{}/{}/{}", t.task, t.run, t.step, t.attempt),
    )
}

/// The invariants of the waits in one transition of a task, from `old` to `new` at
/// `now`: a timer ends no sooner than its time; a paused task, or one whose start is
/// to come, starts no step.
pub(super) fn check_transition(
    old: &Task,
    new: &Task,
    now: sas_domain::time::Timestamp,
) -> Vec<String> {
    let mut broken = Vec::new();
    for (was, is) in old.steps.iter().zip(&new.steps) {
        let ended = was.state == StepState::Processing && is.state == StepState::Processed;
        if ended
            && was.waiting == Some(Waiting::Timer)
            && was.complete_by.is_some_and(|end| now < end)
        {
            broken.push(format!(
                "task {} timer {} ended at {now}, before its time {:?}",
                new.id, is.name, was.complete_by
            ));
        }
        let started = was.state != StepState::Processing && is.state == StepState::Processing;
        if started && old.paused.is_some() && new.paused.is_some() {
            broken.push(format!("task {} started {} while paused", new.id, is.name));
        }
        // A task starts at its time, or within the second before it, as a retry.
        if started
            && new
                .start_at
                .is_some_and(|at| now.plus(Duration::from_secs(1)) < at)
        {
            broken.push(format!(
                "task {} started {} before its start at {:?}",
                new.id, is.name, new.start_at
            ));
        }
    }
    broken
}

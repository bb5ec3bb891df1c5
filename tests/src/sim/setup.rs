//! The simulated system assembled for a seed: its world, its queues, its ports with
//! their faults, its schedulers, supervisors and agents.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sas_core::app::{App, Ports};
use sas_core::ports::NoMetrics;
use sas_core::step_caller::StepCaller;
use sas_domain::ids::QueueName;
use sas_domain::resilience::BreakerSettings;
use sas_domain::time::Timestamp;
use sas_domain::workflow::Registry;
use sas_testkit::ManualClock;
use serde_json::json;

use super::generated::{generated_workflows, service_limits};
use super::machine::generated_machine;
use super::queues::{FaultyAlerts, FaultyQueues};
use super::remote::SimRemote;
use super::store::FaultyStore;
use super::world::{Shared, World};
use super::{CALLERS, SETTLE_BOUND, Sim};
use crate::in_memory;

impl Sim {
    pub(super) fn new(seed: u64) -> Self {
        let start = Timestamp(1_800_000_000_000);
        let clock = Arc::new(ManualClock::new(start));
        let world = Shared(Arc::new(Mutex::new(World {
            random: fastrand::Rng::with_seed(seed),
            chaos: true,
            clock: Arc::clone(&clock),
            start,
            faults: BTreeMap::new(),
            trace: Vec::new(),
            violations: Vec::new(),
            completions: HashMap::new(),
            reached_error: BTreeSet::new(),
            acted_on: BTreeSet::new(),
            owed: BTreeSet::new(),
            token_uses: HashMap::new(),
            activity_given: HashMap::new(),
        })));
        let (memory, names) = in_memory(&clock, Some(5));
        let callers = QueueName::parse(CALLERS).expect("name");
        memory.create_queue(&callers, Duration::from_secs(30), None);
        let ingest = (seed % 2 == 1).then(|| {
            let name = |n: &str| QueueName::parse(n).expect("name");
            let (ingest, dead_letter) = (name("ingest"), name("ingest-dlq"));
            memory.create_queue(
                &ingest,
                Duration::from_secs(30),
                Some((5, dead_letter.clone())),
            );
            (ingest, dead_letter)
        });
        let workflows = Arc::new(Registry::built_in());
        let (generated, sleeps) = generated_workflows(&mut world.world().random);
        for generated in generated {
            world.note(format!("generated workflow: {}", generated.source));
            workflows.add(generated).expect("a new workflow");
        }
        let machine = generated_machine(&mut world.world().random);
        world.note(format!(
            "generated state machine: {}",
            machine.workflow.source
        ));
        workflows.add(machine.workflow).expect("a new workflow");
        let limits = service_limits(&mut world.world().random);
        world.note(format!("services limited to calls at once: {limits:?}"));
        let settings: HashMap<String, sas_domain::services::Service> = limits
            .iter()
            .map(|(service, max)| {
                let json = json!({ service: { "url": "sim", "max_concurrency": max } });
                let parsed = sas_domain::services::parse(&json.to_string()).expect("valid");
                (service.clone(), parsed[service].clone())
            })
            .collect();
        workflows.limit_services(sas_domain::services::Directory {
            services: settings,
            fallback: None,
        });
        let queues: Arc<FaultyQueues> = Arc::new(FaultyQueues {
            inner: Arc::clone(&memory),
            world: world.clone(),
        });
        let ports = Ports {
            store: Arc::new(FaultyStore {
                inner: Arc::clone(&memory),
                world: world.clone(),
                workflows: Arc::clone(&workflows),
                written: Mutex::default(),
            }),
            queues: Arc::clone(&queues) as _,
            alerts: Arc::new(FaultyAlerts {
                inner: Arc::clone(&memory),
                world: world.clone(),
            }),
            metrics: Arc::new(NoMetrics),
            clock: Arc::clone(&clock) as _,
        };
        let remote = Arc::new(SimRemote {
            world: world.clone(),
            clock: Arc::clone(&clock),
            applied: Mutex::new(BTreeMap::new()),
            doomed: Mutex::new(BTreeSet::new()),
            refused: Mutex::new(BTreeSet::new()),
            outages: Mutex::new(HashMap::new()),
            tokens: Mutex::new(Vec::new()),
            limits: limits.into_iter().collect(),
            in_flight: Mutex::new(HashMap::new()),
        });
        let step_caller = Arc::new(StepCaller::new(
            Arc::clone(&remote) as _,
            queues,
            Arc::clone(&clock) as _,
            names.agent_responses.clone(),
            BreakerSettings::default(),
            seed,
        ));
        let mut sim = Self {
            world,
            clock,
            memory,
            remote,
            ports,
            workflows,
            names,
            ingest,
            schedulers: Vec::new(),
            supervisors: Vec::new(),
            step_caller,
            restarts: 0,
            submitted: Vec::new(),
            accepted: BTreeSet::new(),
            resubmitted: BTreeSet::new(),
            tokens: Vec::new(),
            machine: machine.expected,
            settle_bound: SETTLE_BOUND + sleeps + machine.sleeps,
        };
        for _ in 0..2 {
            let scheduler = sim.app();
            sim.schedulers.push(scheduler);
            let supervisor = sim.app();
            sim.supervisors.push(supervisor);
        }
        sim
    }

    pub(super) fn app(&mut self) -> Arc<App> {
        self.restarts += 1;
        let instance = format!("instance-{}", self.restarts);
        let app = App::new(
            self.ports.clone(),
            Arc::clone(&self.workflows),
            self.names.clone(),
            instance,
        )
        .with_deadline_messages(true)
        // As on Lambda: requests carry their tasks sealed, responses give them back.
        .with_sealed_tasks(true);
        Arc::new(match &self.ingest {
            Some((ingest, _)) => app.with_ingestion(ingest.clone()),
            None => app,
        })
    }
}

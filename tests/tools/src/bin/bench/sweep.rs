//! `bench sweep`: the supervisor's sweep of a store of many tasks, some expired, on
//! the embedded backend in process or on DynamoDB on moto.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::ValueEnum;

use sas_tools::recording::Recorded;

use super::server::{DRONE, delivery};

/// The store a benchmark of the supervisor's sweep or of a search runs on.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum BenchStore {
    /// The embedded backend, in process: the time taken.
    Embedded,
    /// DynamoDB on moto: the requests made (moto's recorder), and the records and
    /// entries they read.
    Dynamodb,
}

/// Names the scheduler's queues, for an app the sweep runs over.
pub(super) fn queue_names() -> anyhow::Result<sas_core::app::QueueNames> {
    let name = |n: &str| sas_domain::ids::QueueName::parse(n).context("queue");
    Ok(sas_core::app::QueueNames {
        scheduler: name("scheduler")?,
        agent_requests: name("agent-requests")?,
        agent_responses: name("agent-responses")?,
    })
}

/// Writes `tasks` drone deliveries to `store`, `at_once` at a time, `expired_percent`
/// of them with a lease expired at `now`, the others' running an hour; returns how
/// long it took.
async fn load_leases(
    store: &Arc<dyn sas_core::ports::StateStore>,
    tasks: usize,
    expired_percent: usize,
    now: sas_domain::time::Timestamp,
    at_once: usize,
) -> anyhow::Result<Duration> {
    use sas_domain::decide::submit;
    use sas_domain::ids::TaskId;
    use sas_domain::submission::Submission;
    use sas_domain::workflow::Registry;

    let drone = Registry::built_in()
        .latest("drone-delivery")
        .context("drone delivery")?;
    let expired_every = 100 / expired_percent.clamp(1, 100);
    let loading = Instant::now();
    let mut writes = Vec::new();
    for i in 0..tasks {
        let submission = Submission::new(
            TaskId::parse(format!("t{i}"))?,
            delivery(DRONE, i)["input"].clone(),
        );
        let (mut task, order, _) = submit(&drone, submission, now);
        task.complete_by = Some(if i % expired_every == 0 {
            now.plus(Duration::ZERO)
        } else {
            now.plus(Duration::from_secs(3600))
        });
        let store = Arc::clone(store);
        writes.push(tokio::spawn(
            async move { store.create(&task, &order).await },
        ));
        if writes.len() == at_once {
            for write in writes.drain(..) {
                write.await??;
            }
        }
    }
    for write in writes {
        write.await??;
    }
    Ok(loading.elapsed())
}

/// A store of `tasks` drone deliveries, `expired_percent` of them with an expired
/// lease, then the supervisor's sweeps until none is left expired.
pub(super) async fn sweep(
    tasks: usize,
    expired_percent: usize,
    store: BenchStore,
) -> anyhow::Result<()> {
    use sas_core::app::{App, Ports};
    use sas_core::clock::{Clock, WallClock};
    use sas_core::ports::{ExpiredCursor, LeaseIndex};
    use sas_domain::workflow::Registry;
    use sas_embedded::Embedded;

    let data = tempfile::tempdir()?;
    let path = data.path().join("state.db");
    let embedded = Arc::new(Embedded::open(
        &path,
        Arc::new(WallClock),
        sas_embedded::Durability::Process,
    )?);
    if store == BenchStore::Dynamodb {
        return sweep_on_moto(tasks, expired_percent, embedded).await;
    }
    let now = WallClock.now();
    let loaded = load_leases(
        &(Arc::clone(&embedded) as _),
        tasks,
        expired_percent,
        now,
        512,
    )
    .await?;
    let ports = Ports::of(&embedded, Arc::new(WallClock));
    let app = App::new(
        ports,
        Arc::new(Registry::built_in()),
        queue_names()?,
        "bench".into(),
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    let started = Instant::now();
    let probe = Instant::now();
    let found = embedded
        .expired(WallClock.now(), usize::MAX, &ExpiredCursor::default())
        .await?
        .tasks
        .len();
    let query = probe.elapsed();
    let recovered: usize = app.sweep(100).await?.values().sum();
    let swept = started.elapsed();
    // Opened again, the store reads its leases back (through the index on `leased`).
    drop((app, embedded));
    let opening = Instant::now();
    drop(Embedded::open(
        &path,
        Arc::new(WallClock),
        sas_embedded::Durability::Process,
    )?);
    let reopened = opening.elapsed();
    println!(
        "engine=sas-local mode=sweep tasks={tasks} expired={found} recovered={recovered} expiry_query_ms={:.2} sweep_ms={:.1} \
         load_s={:.1} reopen_ms={:.1}",
        query.as_secs_f64() * 1000.0,
        swept.as_secs_f64() * 1000.0,
        loaded.as_secs_f64(),
        reopened.as_secs_f64() * 1000.0,
    );
    Ok(())
}

/// DynamoDB on moto for a benchmark: a store over a table of its own with the
/// deployment's defaults (8 lease shards, 60 s buckets), and moto's recorder.
pub(super) struct OnMoto {
    moto: sas_tests::aws::Moto,
    recording: tempfile::NamedTempFile,
    pub(super) store: Arc<dyn sas_core::ports::StateStore>,
}

impl OnMoto {
    pub(super) async fn start(table: &str) -> anyhow::Result<Self> {
        use sas_aws::store::DynamoStore;
        use sas_lambda::config::TableSettings;
        use sas_tests::aws::{Moto, create_table, emulator};

        let recording = tempfile::NamedTempFile::new()?;
        let path = recording.path().to_str().context("path")?.to_owned();
        let moto = Moto::start_with(&[("MOTO_RECORDER_FILEPATH", path.as_str())]);
        let sdk = emulator::sdk(&moto.endpoint);
        create_table(&aws_sdk_dynamodb::Client::new(&sdk), table).await;
        let settings = TableSettings {
            table: table.into(),
            lease_shards: 8,
            lease_bucket: Duration::from_secs(60),
            retention: Duration::from_secs(30 * 86_400),
        };
        Ok(Self {
            moto,
            recording,
            store: Arc::new(DynamoStore::new(&sdk, settings)),
        })
    }

    /// An app over the store, with `embedded`'s queues and alerts.
    pub(super) fn app(
        &self,
        embedded: Arc<sas_embedded::Embedded>,
    ) -> anyhow::Result<sas_core::app::App> {
        use sas_core::app::{App, Ports};
        use sas_core::clock::WallClock;
        use sas_core::ports::NoMetrics;
        use sas_domain::workflow::Registry;

        let ports = Ports {
            store: Arc::clone(&self.store),
            queues: Arc::clone(&embedded) as _,
            alerts: embedded,
            metrics: Arc::new(NoMetrics),
            clock: Arc::new(WallClock),
        };
        Ok(App::new(
            ports,
            Arc::new(Registry::built_in()),
            queue_names()?,
            "bench".into(),
        ))
    }

    /// `work`'s result, and the requests moto recorded while it ran.
    pub(super) async fn recorded<T>(
        &self,
        work: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<(T, Vec<Recorded>)> {
        let recorder = |action: &'static str| {
            let url = format!("{}/moto-api/recorder/{action}", self.moto.endpoint);
            async move { reqwest::Client::new().post(url).send().await }
        };
        recorder("start-recording").await?;
        let result = work.await;
        recorder("stop-recording").await?;
        let recording = std::fs::read_to_string(self.recording.path())?;
        Ok((result?, sas_tools::recording::requests(&recording)))
    }
}

/// The requests of `recorded` by operation (`dynamodb:Query`: 2), and the task
/// records they read consistently (the keys of consistent `BatchGetItem`s).
pub(super) fn requests_and_record_reads(
    recorded: &[Recorded],
) -> (std::collections::BTreeMap<&str, usize>, usize) {
    let mut requests = std::collections::BTreeMap::new();
    let mut consistent_reads = 0;
    for recorded in recorded {
        let tables = recorded.request["RequestItems"].as_object();
        for table in tables.into_iter().flat_map(|tables| tables.values()) {
            if table["ConsistentRead"] == true {
                consistent_reads += table["Keys"].as_array().map_or(0, Vec::len);
            }
        }
        *requests.entry(recorded.operation.as_str()).or_default() += 1;
    }
    (requests, consistent_reads)
}

/// The sweep over DynamoDB on moto, batches of 100, the queues in `embedded`: the
/// DynamoDB requests of one pass, as moto's recorder saw them.
async fn sweep_on_moto(
    tasks: usize,
    expired_percent: usize,
    embedded: Arc<sas_embedded::Embedded>,
) -> anyhow::Result<()> {
    use sas_core::clock::{Clock, WallClock};

    let on_moto = OnMoto::start("sweep").await?;
    // One at a time: moto's transactions at once fail ("dictionary changed size
    // during iteration").
    let loaded = load_leases(&on_moto.store, tasks, expired_percent, WallClock.now(), 1).await?;
    let app = on_moto.app(embedded)?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let started = Instant::now();
    let (report, recorded) = on_moto
        .recorded(async { Ok(app.sweep(100).await?) })
        .await?;
    let swept = started.elapsed();
    let expiry_queries = (recorded.iter())
        .filter(|r| r.request["IndexName"] == "expiry")
        .count();
    let (requests, consistent_reads) = requests_and_record_reads(&recorded);
    println!(
        "engine=dynamodb-moto mode=sweep tasks={tasks} recovered={} sweep_s={:.1} load_s={:.1} \
         expiry_queries={expiry_queries} consistent_record_reads={consistent_reads} requests={requests:?}",
        report.values().sum::<usize>(),
        swept.as_secs_f64(),
        loaded.as_secs_f64(),
    );
    Ok(())
}

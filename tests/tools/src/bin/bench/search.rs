//! `bench search`: tasks found by two search attributes among many, on the embedded
//! backend in process (what the index examined, and how long each page took) or on
//! DynamoDB on moto (the requests and reads of the whole search).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;

use sas_core::app::{App, Search};
use sas_core::ports::StateStore;

use super::server::{DRONE, delivery};
use super::sweep::{BenchStore, OnMoto, queue_names, requests_and_record_reads};

/// A store of `tasks` drone deliveries, each with the attributes `customer` (one of
/// `customers`, in turn) and `region` (`eu` or `us`, a round of the customers each);
/// then every page of the search for customer `c-7` in the `eu`, 100 a page: half of
/// c-7's.
pub(super) async fn search(
    tasks: usize,
    customers: usize,
    store: BenchStore,
) -> anyhow::Result<()> {
    use sas_core::app::Ports;
    use sas_core::clock::WallClock;
    use sas_domain::workflow::Registry;
    use sas_embedded::Embedded;

    let data = tempfile::tempdir()?;
    let embedded = Arc::new(Embedded::open(
        &data.path().join("state.db"),
        Arc::new(WallClock),
        sas_embedded::Durability::Process,
    )?);
    if store == BenchStore::Dynamodb {
        let on_moto = OnMoto::start("search").await?;
        // One at a time: moto's transactions at once fail.
        let loaded = load(&on_moto.store, tasks, customers, 1).await?;
        let app = on_moto.app(embedded)?;
        let (pages, recorded) = on_moto.recorded(every_page(&app)).await?;
        let (requests, record_reads) = requests_and_record_reads(&recorded);
        println!(
            "engine=dynamodb-moto mode=search tasks={tasks} customers={customers} {pages} \
             load_s={:.1} record_reads={record_reads} requests={requests:?}",
            loaded.as_secs_f64(),
        );
        return Ok(());
    }
    let loaded = load(&(Arc::clone(&embedded) as _), tasks, customers, 512).await?;
    let app = App::new(
        Ports::of(&embedded, Arc::new(WallClock)),
        Arc::new(Registry::built_in()),
        queue_names()?,
        "bench".into(),
    );
    let pages = every_page(&app).await?;
    println!(
        "engine=sas-local mode=search tasks={tasks} customers={customers} {pages} load_s={:.1}",
        loaded.as_secs_f64(),
    );
    Ok(())
}

/// Writes the store's `tasks`, `at_once` at a time, each indexed under its
/// attributes first (as the app does: a store that indexes them in the record's
/// transaction has nothing to do then); returns how long it took.
async fn load(
    store: &Arc<dyn StateStore>,
    tasks: usize,
    customers: usize,
    at_once: usize,
) -> anyhow::Result<Duration> {
    use sas_core::clock::{Clock, WallClock};
    use sas_domain::decide::submit;
    use sas_domain::ids::TaskId;
    use sas_domain::submission::Submission;
    use sas_domain::workflow::Registry;

    let drone = Registry::built_in()
        .latest("drone-delivery")
        .context("drone delivery")?;
    let loading = Instant::now();
    let mut writes = Vec::new();
    for i in 0..tasks {
        let id = TaskId::parse(format!("t{i}"))?;
        let submission = Submission::new(id, delivery(DRONE, i)["input"].clone());
        let (mut task, order, _) = submit(&drone, submission, WallClock.now());
        let customer = format!("c-{}", i % customers);
        let region = ["eu", "us"][(i / customers) % 2];
        task.attributes.insert("customer".into(), json!(customer));
        task.attributes.insert("region".into(), json!(region));
        let changed = [
            ("customer".to_owned(), customer),
            ("region".to_owned(), region.to_owned()),
        ];
        let store = Arc::clone(store);
        writes.push(tokio::spawn(async move {
            store.index_attributes(&task, &changed).await?;
            store.create(&task, &order).await
        }));
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

/// Every page of the search for customer `c-7` in the `eu`, 100 a page: what was
/// found and examined, in how many pages and how long (`key=value` fields).
async fn every_page(app: &App) -> anyhow::Result<String> {
    let search = Search {
        attributes: vec![
            ("customer".into(), "c-7".into()),
            ("region".into(), "eu".into()),
        ],
        ..Search::default()
    };
    let (mut found, mut examined, mut pages, mut slowest) = (0, 0, 0, Duration::ZERO);
    let started = Instant::now();
    let mut after = None;
    loop {
        let page_started = Instant::now();
        let page = app.search(&search, 100, after.as_deref()).await?;
        slowest = slowest.max(page_started.elapsed());
        (found, examined, pages) = (
            found + page.tasks.len(),
            examined + page.examined,
            pages + 1,
        );
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(format!(
        "found={found} examined={examined} pages={pages} search_ms={:.2} slowest_page_ms={:.2}",
        started.elapsed().as_secs_f64() * 1000.0,
        slowest.as_secs_f64() * 1000.0,
    ))
}

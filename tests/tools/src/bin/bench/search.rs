//! `bench search`: tasks found by two search attributes among many, on the embedded
//! backend in process: what the index examined, and how long each page took.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;

use super::server::{DRONE, delivery};

/// A store of `tasks` drone deliveries, each with the attributes `customer` (one of
/// `customers`, in turn) and `region` (`eu` or `us`, a round of the customers each);
/// then every page of the search for customer `c-7` in the `eu`, 100 a page: half of
/// c-7's.
pub(super) async fn search(tasks: usize, customers: usize) -> anyhow::Result<()> {
    use sas_core::app::{App, Ports, Search};
    use sas_core::clock::{Clock, WallClock};
    use sas_core::ports::TaskStore as _;
    use sas_domain::decide::submit;
    use sas_domain::ids::TaskId;
    use sas_domain::submission::Submission;
    use sas_domain::workflow::Registry;
    use sas_embedded::Embedded;

    let data = tempfile::tempdir()?;
    let embedded = Arc::new(Embedded::open(
        &data.path().join("state.db"),
        Arc::new(WallClock),
        sas_embedded::Durability::Process,
    )?);
    let drone = Registry::built_in()
        .latest("drone-delivery")
        .context("drone delivery")?;
    let loading = Instant::now();
    let mut writes = Vec::new();
    for i in 0..tasks {
        let id = TaskId::parse(format!("t{i}"))?;
        let submission = Submission::new(id, delivery(DRONE, i)["input"].clone());
        let (mut task, order, _) = submit(&drone, submission, WallClock.now());
        task.attributes
            .insert("customer".into(), json!(format!("c-{}", i % customers)));
        task.attributes
            .insert("region".into(), json!(["eu", "us"][(i / customers) % 2]));
        let store = Arc::clone(&embedded);
        writes.push(tokio::spawn(
            async move { store.create(&task, &order).await },
        ));
        if writes.len() == 512 {
            for write in writes.drain(..) {
                write.await??;
            }
        }
    }
    for write in writes {
        write.await??;
    }
    let loaded = loading.elapsed();
    let app = App::new(
        Ports::of(&embedded, Arc::new(WallClock)),
        Arc::new(Registry::built_in()),
        super::sweep::queue_names()?,
        "bench".into(),
    );
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
    println!(
        "engine=sas-local mode=search tasks={tasks} customers={customers} found={found} examined={examined} \
         pages={pages} search_ms={:.2} slowest_page_ms={:.2} load_s={:.1}",
        started.elapsed().as_secs_f64() * 1000.0,
        slowest.as_secs_f64() * 1000.0,
        loaded.as_secs_f64(),
    );
    Ok(())
}

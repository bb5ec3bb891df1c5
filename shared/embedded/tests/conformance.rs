//! The embedded backend passes the ports' conformance suite.

use std::sync::Arc;
use std::time::Duration;

use sas_core::clock::WallClock;
use sas_domain::ids::QueueName;
use sas_embedded::{Durability, Embedded, QueueSettings};
use sas_testkit::conformance;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_backend_conforms() {
    let dir = tempfile::tempdir().expect("directory");
    let backend = Arc::new(
        Embedded::open(
            &dir.path().join("state.db"),
            Arc::new(WallClock),
            Durability::Full,
        )
        .expect("open"),
    );
    let work = QueueName::parse("work").expect("name");
    let dead_letters = QueueName::parse("work-dlq").expect("name");
    let settings = QueueSettings {
        visibility_timeout: Duration::from_secs(1),
        max_receive_count: Some(2),
        dead_letter: Some(dead_letters.clone()),
        committed_sends: false,
    };
    backend.create_queue(&work, settings).await.expect("queue");
    conformance::backend(backend, work, dead_letters).await;
}

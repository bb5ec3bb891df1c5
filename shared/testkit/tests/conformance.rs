//! The in-memory backend of the simulator passes the ports' conformance suite.

use std::sync::Arc;
use std::time::Duration;

use sas_core::clock::WallClock;
use sas_domain::ids::QueueName;
use sas_testkit::conformance;
use sas_testkit::memory::Memory;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_memory_backend_conforms() {
    let backend = Arc::new(Memory::new(Arc::new(WallClock)));
    let work = QueueName::parse("work").expect("name");
    let dead_letters = QueueName::parse("work-dlq").expect("name");
    backend.create_queue(
        &work,
        Duration::from_secs(1),
        Some((2, dead_letters.clone())),
    );
    conformance::backend(backend, work, dead_letters).await;
}

//! SQS, on moto, passes the ports' conformance suite for queues.

use std::sync::Arc;

use sas_testkit::conformance::{self, WorkQueue};
use sas_testkit::moto::Moto;

use crate::emulator::{self, QueuePolicy, create_queue};
use crate::sqs::{Sqs, queue_name};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_on_moto_conforms() {
    let moto = Moto::start();
    let sdk = emulator::sdk(&moto.endpoint);
    let policy = QueuePolicy {
        visibility_seconds: 1,
        max_receive_count: 2,
    };
    let (work_url, dead_letter_url) =
        create_queue(&aws_sdk_sqs::Client::new(&sdk), "work", policy).await;
    let work = queue_name(&work_url).expect("name");
    let dead_letters = queue_name(&dead_letter_url).expect("name");
    let sqs = Arc::new(Sqs::new(
        &sdk,
        [
            (work.clone(), work_url),
            (dead_letters.clone(), dead_letter_url),
        ],
    ));
    conformance::queues(&WorkQueue {
        queues: Arc::clone(&sqs) as _,
        consumer: sqs,
        work,
        dead_letters,
    })
    .await;
}

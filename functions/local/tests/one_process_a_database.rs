//! One `sas-local` at a time on a data directory: its queues and its leases are kept
//! in memory from its own commits, so a second process writing the same database
//! would go unseen by the first (and take message ids the first has reserved). The
//! second is refused at once, with an error that says why, and the first goes on;
//! once the first has stopped, the directory opens again.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_second_process_on_the_same_data_is_refused_and_the_first_goes_on() {
    let data = tempfile::tempdir().expect("data directory");
    let (mut first, api, _) = common::spawn_with(data.path(), &[]);

    let mut second = common::command(data.path(), &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the second sas-local starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = second.try_wait().expect("the second's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = second.kill();
            let _ = first.kill();
            panic!("a second sas-local runs on the data directory the first is using");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let stderr = std::io::read_to_string(second.stderr.take().expect("stderr")).expect("stderr");
    assert!(!status.success(), "the second process fails: {stderr}");
    assert!(
        stderr.contains("is in use by another process"),
        "its error says why: {stderr}"
    );

    let listed = reqwest::get(format!("{api}/tasks?state=Pending"))
        .await
        .expect("the first answers");
    assert_eq!(listed.status(), 200, "the first still reads its store");

    first.kill().expect("stop the first");
    first.wait().expect("the first stopped");
    let (mut again, _, _) = common::spawn_with(data.path(), &[]);
    again.kill().expect("stop it");
    again.wait().expect("stopped");
}

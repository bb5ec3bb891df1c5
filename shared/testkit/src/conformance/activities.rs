//! The index of the visits offered to activities' workers ([`TaskListing::offered`]).

use sas_core::ports::StateStore;
use sas_domain::decide::{on_run, submit};
use sas_domain::ids::TaskId;
use sas_domain::machine::activities::take;
use sas_domain::submission::Submission;
use sas_domain::task::Task;
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;
use serde_json::json;

/// A task that waits in a Task on the activity `review`, offered since `at`.
async fn offering(store: &dyn StateStore, workflow: &Workflow, id: &str, at: i64) -> Task {
    let submission = Submission::new(TaskId::parse(id).expect("id"), json!({}));
    let (task, order, _) = submit(workflow, submission, Timestamp(at));
    store.create(&task, &order).await.expect("created");
    let claimed = on_run(&task, workflow, &order, "s1", Timestamp(at))
        .next
        .expect("claimed");
    store.update(&claimed).await.expect("claimed, written");
    claimed
}

/// A visit is listed under its activity, longest offered first, from the write that
/// offers it to the write that takes it.
pub(super) async fn offered_visits_are_listed_until_taken(store: &dyn StateStore) {
    let machine = json!({
        "StartAt": "Review",
        "States": {"Review": {"Type": "Task", "End": true,
                              "Resource": "arn:aws:states:us-east-1:123456789012:activity:review"}}
    });
    let workflow = Workflow::parse("offers.asl.json", &machine.to_string()).expect("a machine");
    offering(store, &workflow, "offer-later", 2_000).await;
    let sooner = offering(store, &workflow, "offer-sooner", 1_000).await;
    let ids = |ids: Vec<TaskId>| ids.iter().map(ToString::to_string).collect::<Vec<_>>();
    let offered = store.offered("review", 10).await.expect("offered");
    assert_eq!(ids(offered), ["offer-sooner", "offer-later"]);
    assert_eq!(
        ids(store.offered("review", 1).await.expect("one")),
        ["offer-sooner"]
    );
    assert!(store.offered("other", 10).await.expect("none").is_empty());

    let taken = take(&sooner, &workflow, "review", ("w", "p"), Timestamp(3_000)).expect("taken");
    store
        .update(&taken.next.expect("written"))
        .await
        .expect("taken, written");
    let offered = store.offered("review", 10).await.expect("offered");
    assert_eq!(
        ids(offered),
        ["offer-later"],
        "a taken visit is offered no more"
    );
}

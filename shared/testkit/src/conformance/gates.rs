//! The gates' conformance ([`GateStore`]): versioned states, ordered lines.

use std::time::Duration;

use sas_core::ports::{GateStore, StoreError};
use sas_domain::flow::{Admission, CallRef, Gate, GateRef, Limit, Waiter};
use sas_domain::ids::TaskId;
use sas_domain::messages::Operation;
use sas_domain::time::Timestamp;
use sas_domain::trace::TraceContext;

/// A gate's state is written on condition of its version; its line is read in the
/// order of positions (then calls), a call put in it twice is there once, and the
/// calls a write takes leave it in the same transaction.
pub(super) async fn gates_are_versioned_and_their_lines_ordered(store: &dyn GateStore) {
    let gate = "service:conformance/c-1";
    let (fresh, line) = store.gate(gate, 10).await.expect("a gate never written");
    assert_eq!(fresh, Gate::default());
    assert!(line.is_empty());
    let limit: Limit =
        serde_json::from_value(serde_json::json!({"max_concurrency": 2})).expect("a limit");
    let waiter = |task: &str, position: i64| waiter_at(gate, &limit, task, position);
    let (late, early, tied) = (
        waiter("late", 3_000),
        waiter("early", 1_000),
        waiter("tied", 3_000),
    );
    for queued in [&late, &early, &tied, &late] {
        store.enqueue(queued).await.expect("in line");
    }
    let (_, line) = store.gate(gate, 10).await.expect("read");
    assert_eq!(
        line,
        [early.clone(), late.clone(), tied.clone()],
        "by position, then call"
    );
    let (_, first) = store.gate(gate, 1).await.expect("read");
    assert_eq!(first, std::slice::from_ref(&early));

    let mut state = Gate::default();
    state
        .holders
        .insert(early.admission.call.id(), Timestamp(16_000));
    store
        .update_gate(gate, &state, std::slice::from_ref(&early))
        .await
        .expect("the first write");
    assert!(
        matches!(
            store.update_gate(gate, &state, &[]).await,
            Err(StoreError::Conflict)
        ),
        "a write from the same version read loses"
    );
    let (written, line) = store.gate(gate, 10).await.expect("read");
    assert_eq!(written.version, 1);
    assert_eq!(written.holders, state.holders);
    assert_eq!(
        line,
        [late.clone(), tied.clone()],
        "the call taken has left the line"
    );
    let mut next = written.clone();
    next.holders.clear();
    store
        .update_gate(gate, &next, &[late, tied])
        .await
        .expect("a write from the version read");
    let (last, line) = store.gate(gate, 10).await.expect("read");
    assert_eq!((last.version, last.holders.len(), line.len()), (2, 0, 0));
}

/// The gate of a keyed limit whose key's value is longer than a DynamoDB key takes
/// (2,048 bytes) is kept all the same: its line, and its state written on condition.
pub(super) async fn a_gate_keyed_by_a_long_value_is_kept(store: &dyn GateStore) {
    let limit: Limit = serde_json::from_value(
        serde_json::json!({"max_concurrency": 1, "key": "input.customer_id"}),
    )
    .expect("a limit");
    let input = serde_json::json!({"customer_id": "c".repeat(3_000)});
    let gate = limit.gate("service:conformance", &input);
    let waiter = waiter_at(&gate, &limit, "long-key", 1_000);
    store.enqueue(&waiter).await.expect("in line");
    let (_, line) = store.gate(&gate, 10).await.expect("read");
    assert_eq!(line, std::slice::from_ref(&waiter));
    let mut state = Gate::default();
    state
        .holders
        .insert(waiter.admission.call.id(), Timestamp(16_000));
    store
        .update_gate(&gate, &state, std::slice::from_ref(&waiter))
        .await
        .expect("written");
    let (written, line) = store.gate(&gate, 10).await.expect("read");
    assert_eq!(
        (written.version, written.holders, line),
        (1, state.holders, vec![])
    );
}

/// A call of task `task` waiting at `position` in the line of `gate`, its only
/// gate, under `limit`.
fn waiter_at(gate: &str, limit: &Limit, task: &str, position: i64) -> Waiter {
    Waiter {
        admission: Admission {
            call: CallRef {
                task_id: TaskId::parse(task).expect("id"),
                run: 1,
                step: 3,
                attempt: 1,
                operation: Operation::Call,
            },
            gates: vec![GateRef {
                name: gate.to_owned(),
                limit: limit.clone(),
            }],
            service: "conformance".to_owned(),
            since: Timestamp(position),
            position: Timestamp(position),
            hold: Duration::from_secs(15),
            // Kept in the line, for its grant.
            trace: TraceContext::of_headers(
                Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
                Some("vendor=1"),
            ),
        },
        at: 0,
        held_until: None,
    }
}

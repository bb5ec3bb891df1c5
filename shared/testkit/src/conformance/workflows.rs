//! The workflow definitions' and registrations' conformance ([`WorkflowStore`]).

use sas_core::ports::{Registration, StoreError, WorkflowStore};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;

use super::drone;

pub(super) async fn workflow_versions_are_kept(store: &dyn WorkflowStore) {
    let workflow = drone();
    store.save_workflow(&workflow).await.expect("saved");
    store
        .save_workflow(&workflow)
        .await
        .expect("the same again");
    let changed = Workflow {
        source: workflow.source.replace("drone", "drones"),
        ..(*workflow).clone()
    };
    assert!(matches!(
        store.save_workflow(&changed).await,
        Err(StoreError::Conflict)
    ));
    assert_eq!(
        store
            .load_workflow(&workflow.name, workflow.version)
            .await
            .expect("load"),
        Some(workflow.source.clone())
    );
    assert_eq!(
        store.load_workflow(&workflow.name, 99).await.expect("load"),
        None
    );
}

/// A registration is written only over the version its writer read, or where there
/// is none; it is read back by name, and listed with the others by name.
pub(super) async fn registrations_are_written_on_condition(store: &dyn WorkflowStore) {
    let first = Registration {
        name: "created".to_owned(),
        version: 1,
        created_at: Timestamp(1_000),
        updated_at: Timestamp(1_000),
        deleted: false,
        details: None,
    };
    store.put_registration(&first, None).await.expect("created");
    assert!(matches!(
        store.put_registration(&first, None).await,
        Err(StoreError::Conflict)
    ));
    let updated = Registration {
        version: 2,
        updated_at: Timestamp(2_000),
        details: Some(r#"{"tags":{"team":"drones"}}"#.to_owned()),
        ..first.clone()
    };
    assert!(matches!(
        store.put_registration(&updated, Some(3)).await,
        Err(StoreError::Conflict)
    ));
    store
        .put_registration(&updated, Some(1))
        .await
        .expect("updated over the version read");
    let deleted = Registration {
        deleted: true,
        ..updated.clone()
    };
    store
        .put_registration(&deleted, Some(2))
        .await
        .expect("deleted");
    let other = Registration {
        name: "another".to_owned(),
        ..first.clone()
    };
    store.put_registration(&other, None).await.expect("another");
    assert_eq!(
        store.registration("created").await.expect("read"),
        Some(deleted.clone())
    );
    assert_eq!(store.registration("nobody").await.expect("read"), None);
    assert_eq!(
        store.registrations().await.expect("listed"),
        vec![other, deleted]
    );
}

//! The workflow definitions' conformance ([`WorkflowStore`]).

use sas_core::ports::{StoreError, WorkflowStore};
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

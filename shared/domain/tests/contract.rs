//! The agent queues' messages are a published contract, for agents in any language:
//! JSON Schemas in `shared/domain/schemas`, generated from the Rust types. This test
//! fails when a type changes and its schema was not written again
//! (`SAS_WRITE_SCHEMAS=1 cargo test -p sas-domain --test contract`); a change that an
//! agent of the previous version could not read or write takes a new version.

use std::path::PathBuf;

use sas_domain::ids::TaskId;
use sas_domain::messages::{AgentMessage, AgentRequest, AgentResponse, Operation, Outcome};
use serde_json::{Value, json};

fn contracts() -> [(&'static str, Value); 2] {
    [
        (
            "agent-request.v1.schema.json",
            json!(schemars::schema_for!(AgentRequest)),
        ),
        (
            "agent-response.v1.schema.json",
            json!(schemars::schema_for!(AgentMessage)),
        ),
    ]
}

fn schemas() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schemas")
}

#[test]
fn the_published_schemas_are_the_types_schemas() {
    for (file, mut schema) in contracts() {
        // Written with its keys in their names' order, whatever order the types give.
        schema.sort_all_objects();
        let path = schemas().join(file);
        let text = serde_json::to_string_pretty(&schema).expect("json") + "\n";
        if std::env::var_os("SAS_WRITE_SCHEMAS").is_some() {
            std::fs::write(&path, &text).expect("written");
        }
        let published = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            published == text,
            "{} differs from the types' schema: write it again with \
             SAS_WRITE_SCHEMAS=1 cargo test -p sas-domain --test contract, \
             and bump its version if an agent of this one could not read or write the new",
            path.display()
        );
    }
}

#[test]
fn a_response_is_read_as_the_scheduler_reads_it() {
    let response = AgentMessage::Response(AgentResponse {
        task_id: TaskId::parse("t-1").expect("id"),
        run: 1,
        step: 0,
        attempt: 2,
        operation: Operation::Call,
        outcome: Outcome::Succeeded {
            output: json!({"ok": true}),
        },
        sealed_task: None,
        task_created_at: None,
        output_apart: false,
    });
    let text = json!(response);
    assert_eq!(text["type"], "response");
    assert_eq!(text["outcome"]["status"], "succeeded");
    let read: sas_domain::messages::SchedulerMessage =
        serde_json::from_value(text).expect("the scheduler reads it");
    assert!(matches!(read, sas_domain::messages::SchedulerMessage::Response(r) if r.attempt == 2));
}

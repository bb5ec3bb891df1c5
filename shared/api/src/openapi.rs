//! `GET /openapi.json`: the OpenAPI 3.1 document of [`ROUTES`], its schemas
//! generated (JSON Schema 2020-12, as OpenAPI 3.1 has it) from the types the
//! handler reads and answers.

use sas_domain::decide::{MovePlan, RepairPlan};
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

use super::execution::ExecutionView;
use super::operator::PlanView;
use super::payloads::{UploadRequestBody, UploadRequestView, UploadedView};
use super::routes::Action;
use super::schedules::{DeletedView, ScheduleAction, ScheduleView, SchedulesView};
use super::search::FoundView;
use super::tasks::LISTED;
use super::view::{
    AcceptedView, BatchView, BulkView, CallbackView, ChildrenView, DeadLetterQueuesView,
    DeadLettersView, MeView, PageView, RedriveView, ServicesView, TaskView, WorkflowsView,
};
use super::{
    BatchBody, BulkBody, CallbackBody, EmptyBody, ErrorView, MAX_PAGE, MoveBody, ROUTES,
    RedriveBody, RepairBody, ResubmitBody, Route, SubmitBody,
};
use sas_domain::schedule::ScheduleSpec;

/// The document: every route of [`ROUTES`], and nothing else.
#[must_use]
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas/".into())
        .into_generator();
    let error = generator.subschema_for::<ErrorView>();
    let mut paths = Map::new();
    for route in ROUTES {
        let operation = operation(route, &mut generator, &error);
        let item = paths
            .entry(route.path)
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .map(|item| item.insert(route.method.to_lowercase(), operation));
        debug_assert!(item.is_some());
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Scheduler Agent Supervisor",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Submit multi-step tasks that finish or are undone; operators \
                see and act on every caller's tasks under /operator.",
        },
        "paths": paths,
        "components": {
            "schemas": generator.take_definitions(true),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "A deployment with AuthMode=JWT, or sas-local with \
                        SAS_AUTH_JWKS or SAS_AUTH_DEV_KEY",
                },
                "sigv4": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "A deployment with AuthMode=IAM: AWS Signature Version 4",
                },
            },
        },
    })
}

/// An answer that is the task, or `T`.
fn task_or<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let answer = json!({"oneOf": [
        generator.subschema_for::<TaskView>(),
        generator.subschema_for::<T>(),
    ]});
    Schema::try_from(answer).unwrap_or_else(|_| Schema::from(true))
}

fn operation(route: &Route, generator: &mut SchemaGenerator, error: &Schema) -> Value {
    let (status, answer, body) = match route.action {
        // In buffered ingestion, a submission is only accepted.
        Action::Submit => (
            202,
            task_or::<AcceptedView>(generator),
            Some(generator.subschema_for::<SubmitBody>()),
        ),
        Action::SubmitBatch => (
            200,
            generator.subschema_for::<BatchView>(),
            Some(generator.subschema_for::<BatchBody>()),
        ),
        Action::List => (200, generator.subschema_for::<PageView>(), None),
        Action::Get => (200, generator.subschema_for::<TaskView>(), None),
        Action::Children => (200, generator.subschema_for::<ChildrenView>(), None),
        Action::Execution => (200, generator.subschema_for::<ExecutionView>(), None),
        Action::Resubmit => (
            202,
            generator.subschema_for::<TaskView>(),
            Some(generator.subschema_for::<ResubmitBody>()),
        ),
        // A dry run answers what would be done.
        Action::Repair => (
            202,
            task_or::<PlanView<RepairPlan>>(generator),
            Some(generator.subschema_for::<RepairBody>()),
        ),
        // A dry run answers what would be done.
        Action::Move => (
            202,
            task_or::<PlanView<MovePlan>>(generator),
            Some(generator.subschema_for::<MoveBody>()),
        ),
        Action::Cancel | Action::Pause | Action::Resume => (
            202,
            generator.subschema_for::<TaskView>(),
            Some(generator.subschema_for::<EmptyBody>()),
        ),
        Action::Complete => (
            202,
            generator.subschema_for::<TaskView>(),
            Some(generator.subschema_for::<CallbackBody>()),
        ),
        Action::Callback => (
            200,
            generator.subschema_for::<CallbackView>(),
            Some(generator.subschema_for::<CallbackBody>()),
        ),
        Action::Heartbeat => (
            200,
            generator.subschema_for::<CallbackView>(),
            Some(generator.subschema_for::<EmptyBody>()),
        ),
        Action::Bulk(_) => (
            200,
            generator.subschema_for::<BulkView>(),
            Some(generator.subschema_for::<BulkBody>()),
        ),
        Action::Workflows => (200, generator.subschema_for::<WorkflowsView>(), None),
        Action::Me => (200, generator.subschema_for::<MeView>(), None),
        Action::Services => (200, generator.subschema_for::<ServicesView>(), None),
        Action::DeadLetterQueues => (200, generator.subschema_for::<DeadLetterQueuesView>(), None),
        Action::DeadLetters => (200, generator.subschema_for::<DeadLettersView>(), None),
        Action::Redrive => (
            200,
            generator.subschema_for::<RedriveView>(),
            Some(generator.subschema_for::<RedriveBody>()),
        ),
        Action::Schedules(action) => match action {
            ScheduleAction::List => (200, generator.subschema_for::<SchedulesView>(), None),
            ScheduleAction::Get => (200, generator.subschema_for::<ScheduleView>(), None),
            ScheduleAction::Put => (
                201,
                generator.subschema_for::<ScheduleView>(),
                Some(generator.subschema_for::<ScheduleSpec>()),
            ),
            ScheduleAction::Pause | ScheduleAction::Resume => (
                200,
                generator.subschema_for::<ScheduleView>(),
                Some(generator.subschema_for::<EmptyBody>()),
            ),
            ScheduleAction::Delete => (200, generator.subschema_for::<DeletedView>(), None),
        },
        Action::Search => (200, generator.subschema_for::<FoundView>(), None),
        Action::Upload => (
            201,
            generator.subschema_for::<UploadedView>(),
            Some(Schema::from(true)),
        ),
        Action::StoredValue => (200, Schema::from(true), None),
        Action::UploadRequest => (
            201,
            generator.subschema_for::<UploadRequestView>(),
            Some(generator.subschema_for::<UploadRequestBody>()),
        ),
        Action::OpenApi | Action::Console => (200, Schema::from(true), None),
        Action::StepFunctions => (200, Schema::from(true), Some(Schema::from(true))),
    };
    let mut parameters = Vec::new();
    if route.path.contains("{id}") {
        let description = if route.is_operators() {
            "the task's full id, with its owner's tag"
        } else {
            "the task's id, as the caller named it"
        };
        parameters.push(json!({
            "name": "id", "in": "path", "required": true,
            "description": description, "schema": {"type": "string"},
        }));
    }
    if route.path.contains("{step}") {
        parameters.push(json!({
            "name": "step", "in": "path", "required": true,
            "description": "the step's name in the task's workflow", "schema": {"type": "string"},
        }));
    }
    if route.path.contains("{token}") {
        parameters.push(json!({
            "name": "token", "in": "path", "required": true,
            "description": "the step's callback token, from the call's payload, the task's view or its notification",
            "schema": {"type": "string"},
        }));
    }
    if route.path.contains("{name}") {
        parameters.push(json!({
            "name": "name", "in": "path", "required": true,
            "description": "the schedule's name: 1 to 44 letters, digits, '-' and '_'",
            "schema": {"type": "string"},
        }));
    }
    if route.path.contains("{sha256}") {
        parameters.push(json!({
            "name": "sha256", "in": "path", "required": true,
            "description": "the SHA-256 (hex) of the value's JSON, as the body sends it",
            "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        }));
    }
    if route.path.contains("{queue}") {
        parameters.push(json!({
            "name": "queue", "in": "path", "required": true,
            "description": "the role of the queue whose dead letters they are",
            "schema": {"enum": ["scheduler", "agent-requests", "agent-responses", "ingest"]},
        }));
    }
    match route.action {
        Action::List => {
            let states: Vec<_> = LISTED.iter().map(|s| s.as_str()).collect();
            parameters.push(json!({"name": "state", "in": "query", "required": true,
                "schema": {"enum": states}}));
            parameters.push(json!({"name": "limit", "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 50}}));
            parameters.push(json!({"name": "after", "in": "query",
                "description": "the `next` of the page before, as it was given (a caller's is sealed: good for its own listing of that state only)",
                "schema": {"type": "string"}}));
        }
        Action::Children => {
            parameters.push(json!({"name": "step", "in": "query",
                "description": "the step that started them; may be left out when one step of the task did",
                "schema": {"type": "string"}}));
            parameters.push(json!({"name": "limit", "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 50}}));
            parameters.push(json!({"name": "after", "in": "query",
                "description": "the `next` of the page before: the last item it showed",
                "schema": {"type": "string"}}));
        }
        Action::Services => parameters.push(json!({"name": "key", "in": "query",
            "description": "the key (e.g. a customer's id) whose gates the limits kept per key show",
            "schema": {"type": "string"}})),
        Action::Get => parameters.push(json!({"name": "wait", "in": "query",
            "description": "wait up to this long (at most 20s) for the task to be final, e.g. 10s",
            "schema": {"type": "string"}})),
        Action::Submit => parameters.push(json!({"name": "wait", "in": "query",
            "description": "then wait up to this long (at most 20s) for the task to be final, e.g. 10s: 200 with the task if it is, else the answer without the wait",
            "schema": {"type": "string"}})),
        _ => {}
    }
    let mut operation = json!({
        "operationId": operation_id(route),
        "summary": route.summary,
        "tags": [if route.is_operators() { "operator" } else if route.is_public() { "api" } else { "caller" }],
        "responses": {
            status.to_string(): {
                "description": "done",
                "content": if route.action == Action::Console {
                    json!({"text/html": {"schema": {"type": "string"}}})
                } else {
                    json!({"application/json": {"schema": answer}})
                },
            },
            "default": {
                "description": "an error: 4xx for the request's fault, 503 to retry",
                "content": {"application/json": {"schema": error}},
            },
        },
    });
    if route.action == Action::Submit {
        operation["responses"]["200"] = json!({
            "description": "with `wait`: the task, final within the wait, as `GET /tasks/{id}` shows it",
            "content": {"application/json": {"schema": generator.subschema_for::<TaskView>()}},
        });
    }
    if !parameters.is_empty() {
        operation["parameters"] = json!(parameters);
    }
    if let Some(body) = body {
        operation["requestBody"] = json!({
            "required": matches!(
                route.action,
                Action::Submit
                    | Action::SubmitBatch
                    | Action::Bulk(_)
                    | Action::Complete
                    | Action::Callback
                    | Action::Upload
                    | Action::UploadRequest
            ),
            "content": {"application/json": {"schema": body}},
        });
    }
    if route.is_public() {
        operation["security"] = json!([]);
    } else {
        operation["security"] = json!([{"bearer": []}, {"sigv4": []}]);
    }
    operation
}

/// `get_operator_tasks_id_cancel`-like: the method and the path's words.
fn operation_id(route: &Route) -> String {
    let words = route
        .path
        .split(['/', '.'])
        .filter(|w| !w.is_empty())
        .map(|w| w.trim_matches(['{', '}']).replace('-', "_"));
    std::iter::once(route.method.to_lowercase())
        .chain(words)
        .collect::<Vec<_>>()
        .join("_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_a_unique_id_and_its_schemas_resolve() {
        let document = document();
        let mut ids = std::collections::HashSet::new();
        for item in document["paths"].as_object().expect("paths").values() {
            for operation in item.as_object().expect("item").values() {
                let id = operation["operationId"].as_str().expect("id");
                assert!(ids.insert(id.to_owned()), "{id} twice");
            }
        }
        let text = document.to_string();
        let schemas = document["components"]["schemas"]
            .as_object()
            .expect("schemas");
        for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = reference.split('"').next().expect("name");
            assert!(
                schemas.contains_key(name),
                "{name} is referenced and not defined"
            );
        }
        assert!(schemas.contains_key("TaskView") && schemas.contains_key("BulkBody"));
    }
}

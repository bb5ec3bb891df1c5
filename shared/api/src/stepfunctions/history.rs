//! `GetExecutionHistory`: an execution's events, a page at a time, in Step
//! Functions' shapes ([`sas_domain::machine::history`]).

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::ports::HistoryPage;
use sas_domain::machine::history::HistoryEvent;

use super::{SfnError, body, executions, seconds};
use crate::MAX_ANSWER_BYTES;
use crate::scope::Scope;

/// A page's events when a request names no `maxResults`, and the most it may name.
const DEFAULT_PAGE: usize = 100;
const LARGEST_PAGE: usize = 1000;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HistoryRequest {
    execution_arn: Option<String>,
    max_results: Option<usize>,
    next_token: Option<String>,
    #[serde(default)]
    reverse_order: bool,
    include_execution_data: Option<bool>,
}

/// An event as the operation gives it: its id, the one before it, its time, its type
/// and details, without the input and output where they are not asked for.
pub(crate) fn shown(event: &HistoryEvent, previous: u64, with_data: bool) -> Value {
    let mut shown = event.event.clone();
    if let Value::Object(fields) = &mut shown {
        if !with_data {
            for details in fields.values_mut().filter_map(Value::as_object_mut) {
                details.retain(|name, _| !matches!(name.as_str(), "input" | "output"));
            }
        }
        fields.insert("id".to_owned(), json!(event.id));
        fields.insert("previousEventId".to_owned(), json!(previous));
        fields.insert("timestamp".to_owned(), seconds(event.at));
    }
    shown
}

/// `GetExecutionHistory`: up to `maxResults` events (100 by default, 1,000 at most)
/// after `nextToken`, the earliest first or (`reverseOrder`) the latest; fewer where
/// they would be over 4 MiB, the rest on the next page.
pub(super) async fn get(
    app: &sas_core::app::App,
    scope: Scope<'_>,
    bytes: &[u8],
) -> Result<Value, SfnError> {
    let request: HistoryRequest = body(bytes)?;
    let arn = request
        .execution_arn
        .ok_or_else(|| SfnError::invalid("executionArn", "Member must not be null"))?;
    let limit = match request.max_results {
        None | Some(0) => DEFAULT_PAGE,
        Some(size) if size <= LARGEST_PAGE => size,
        Some(_) => {
            return Err(SfnError::invalid(
                "maxResults",
                "Member must have value less than or equal to 1000",
            ));
        }
    };
    let after = match request.next_token.as_deref() {
        None => None,
        Some(token) => Some(
            token
                .parse::<u64>()
                .map_err(|_| SfnError::invalid_token(token))?,
        ),
    };
    let (task, _, _) = executions::named(app, scope, &arn).await?;
    // One more than a page: whether there is a next one, and the event before the
    // last of a page read in reverse.
    let page = HistoryPage {
        after,
        limit: limit + 1,
        reverse: request.reverse_order,
    };
    let mut events = app
        .execution_history(&task.id, page)
        .await
        .map_err(|e| SfnError::unavailable(&e))?;
    let beyond = (events.len() > limit).then(|| events.remove(limit));
    let with_data = request.include_execution_data.unwrap_or(true);
    let mut shown_events = Vec::with_capacity(events.len());
    for (index, event) in events.iter().enumerate() {
        let previous = if request.reverse_order {
            events
                .get(index + 1)
                .or(beyond.as_ref())
                .map_or(0, |e| e.id)
        } else {
            index
                .checked_sub(1)
                .map_or(after.unwrap_or(0), |before| events[before].id)
        };
        shown_events.push(shown(event, previous, with_data));
    }
    // No more events than an answer carries (a Lambda function answers at most 6 MB;
    // an event's input and output are each up to 256 KiB): the rest on the next page.
    let mut bytes = 0;
    let fitting = shown_events
        .iter()
        .take_while(|event| {
            bytes += event.to_string().len();
            bytes <= MAX_ANSWER_BYTES
        })
        .count()
        .max(1);
    let cut = fitting < shown_events.len();
    shown_events.truncate(fitting);
    events.truncate(fitting);
    let mut answer = json!({ "events": shown_events });
    if let (true, Some(last)) = (beyond.is_some() || cut, events.last()) {
        answer["nextToken"] = json!(last.id.to_string());
    }
    Ok(answer)
}

//! `GET /operator/search`: tasks found by their search attributes
//! (`attribute.<name>=<value>`), workflow and version, state, creation time and error
//! text, a page at a time.

use schemars::JsonSchema;
use serde::Serialize;

use sas_core::app::{App, Search, SearchError};
use sas_domain::task::TaskState;
use sas_domain::time::Timestamp;
use sas_domain::workflow::is_attribute_name;

use crate::error::{ApiError, ErrorCode, decoded, query_pairs, unknown_parameter};
use crate::tasks::{fitted, invalid_cursor, parse_state};
use crate::view::{TaskView, View};
use crate::{ApiResponse, MAX_PAGE};

/// A page of a search.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FoundView<'a> {
    /// The tasks found.
    pub tasks: Vec<TaskView<'a>>,
    /// The cursor of the next page (`after=`), if there is one.
    pub next: Option<String>,
    /// The index entries this page examined (at most 1,000): what it cost.
    pub examined: usize,
}

fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidQuery, message).on(field)
}

fn instant(field: &str, value: &str) -> Result<Timestamp, ApiError> {
    Timestamp::parse_rfc3339(value).ok_or_else(|| {
        invalid(
            field,
            format!("{field}: '{value}' is not an RFC 3339 instant"),
        )
    })
}

/// The search a query asks for, its page's size and cursor.
fn parse(query: Option<&str>) -> Result<(Search, usize, Option<String>), ApiError> {
    let (mut search, mut limit, mut after) = (Search::default(), 50, None);
    for (key, value) in query_pairs(query) {
        let text = || decoded(key, value).map(std::borrow::Cow::into_owned);
        match key {
            "workflow" => search.workflow = Some(text()?),
            "version" => {
                let version = value
                    .parse()
                    .map_err(|_| invalid(key, "version: a number"))?;
                search.version = Some(version);
            }
            "state" => search.state = Some(parse_state(value, key, &TaskState::ALL, "")?),
            "from" => search.created_from = Some(instant(key, &text()?)?),
            "to" => search.created_before = Some(instant(key, &text()?)?),
            "error" => search.error = Some(text()?),
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=MAX_PAGE).contains(&n) => limit = n,
                _ => return Err(invalid(key, format!("limit: must be 1 to {MAX_PAGE}"))),
            },
            "after" => after = Some(text()?),
            _ => match key.strip_prefix("attribute.") {
                Some(name) if is_attribute_name(name) => {
                    search.attributes.push((name.to_owned(), text()?));
                }
                Some(_) => return Err(invalid(key, format!("{key}: not an attribute's name"))),
                None => return Err(unknown_parameter(key)),
            },
        }
    }
    Ok((search, limit, after))
}

/// `GET /operator/search`.
pub(crate) async fn search(app: &App, query: Option<&str>) -> Result<ApiResponse, ApiError> {
    let (search, limit, after) = parse(query)?;
    let found = match app.search(&search, limit, after.as_deref()).await {
        Ok(found) => found,
        Err(SearchError::Unbounded) => {
            let message = "name an attribute (attribute.<name>=<value>) or a state (state=Error)";
            return Err(invalid("attribute", message));
        }
        Err(SearchError::Store(error)) => return Err(invalid_cursor(error)),
    };
    let cursor = |shown: usize| {
        Ok(if shown == found.tasks.len() {
            found.next.clone()
        } else {
            found.after.get(shown.wrapping_sub(1)).cloned()
        })
    };
    fitted(&found.tasks, cursor, |tasks, next| {
        let tasks = tasks
            .iter()
            .map(|t| TaskView::of(t, View::Operator))
            .collect();
        let examined = found.examined;
        ApiResponse::ok(
            200,
            &FoundView {
                tasks,
                next,
                examined,
            },
        )
    })
}

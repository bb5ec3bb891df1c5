//! A Task that calls an HTTPS API (`arn:aws:states:::http:invoke`): its request read as
//! Step Functions reads it (`ApiEndpoint`, `Method`, `Headers`, `QueryParameters`,
//! `RequestBody`, `Transform`), and the answer shaped as its result
//! (`{Headers, ResponseBody, StatusCode, StatusText}`), a status outside 2xx failing
//! the Task with `States.Http.StatusCode.NNN`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::Failure;

const FIELDS: [&str; 7] = [
    "ApiEndpoint",
    "Method",
    "Authentication",
    "Headers",
    "QueryParameters",
    "RequestBody",
    "Transform",
];

const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"];

/// The HTTP request a Task asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// `ApiEndpoint`: the URL, without its query.
    pub endpoint: String,
    pub method: String,
    /// `Headers`, each value as its text.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// `QueryParameters`, each value as its text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<(String, String)>,
    /// `RequestBody` as it is sent: JSON, or form-encoded (`URL_ENCODED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// The HTTP request of a Task's arguments: refused, as Step Functions refuses it,
/// for a field it does not take, an endpoint that is no URL, or a method it does not
/// know.
pub fn request(arguments: &Value) -> Result<Request, Failure> {
    let fields = crate::request_fields(arguments, "http:invoke", &FIELDS)?;
    let text = |field: &str| fields.get(field).and_then(Value::as_str);
    let endpoint = text("ApiEndpoint")
        .filter(|url| url.starts_with("https://") || url.starts_with("http://"))
        .ok_or_else(|| {
            Failure::runtime("The field 'ApiEndpoint' must be an http(s) URL for http:invoke")
        })?;
    let method = text("Method")
        .map(str::to_ascii_uppercase)
        .filter(|method| METHODS.contains(&method.as_str()))
        .ok_or_else(|| {
            Failure::runtime(format!(
                "The field 'Method' must be one of {} for http:invoke",
                METHODS.join(", ")
            ))
        })?;
    let mut headers: BTreeMap<String, String> = pairs(fields.get("Headers"), "Headers")?
        .into_iter()
        .collect();
    let query = pairs(fields.get("QueryParameters"), "QueryParameters")?;
    let url_encoded =
        arguments.pointer("/Transform/RequestBodyEncoding") == Some(&json!("URL_ENCODED"));
    let body = match fields.get("RequestBody") {
        None => None,
        Some(body) if url_encoded => {
            let format = arguments
                .pointer("/Transform/RequestEncodingOptions/ArrayFormat")
                .and_then(Value::as_str)
                .unwrap_or("INDICES");
            headers
                .entry("content-type".to_owned())
                .or_insert_with(|| "application/x-www-form-urlencoded".to_owned());
            Some(form(body, format)?)
        }
        Some(Value::String(text)) => Some(text.clone()),
        Some(body) => {
            headers
                .entry("content-type".to_owned())
                .or_insert_with(|| "application/json".to_owned());
            Some(crate::json_text(body))
        }
    };
    Ok(Request {
        endpoint: endpoint.to_owned(),
        method,
        headers,
        query,
        body,
    })
}

/// An object's fields, each value as its text (`Headers`, `QueryParameters`).
fn pairs(value: Option<&Value>, field: &str) -> Result<Vec<(String, String)>, Failure> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::Object(fields)) => Ok(fields
            .iter()
            .map(|(name, value)| (name.clone(), text_of(value)))
            .collect()),
        Some(_) => Err(Failure::runtime(format!(
            "The field '{field}' must be a JSON object for http:invoke"
        ))),
    }
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => crate::json_text(other),
    }
}

/// A flat `RequestBody` form-encoded, its arrays written as `format` says
/// (`INDICES`: `a[0]=x`, `REPEAT`: `a=x&a=y`, `COMMAS`: `a=x,y`, `BRACKETS`:
/// `a[]=x`).
fn form(body: &Value, format: &str) -> Result<String, Failure> {
    let Value::Object(fields) = body else {
        return Err(Failure::runtime(
            "A URL_ENCODED RequestBody must be a JSON object",
        ));
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (name, value) in fields {
        match value {
            Value::Array(items) if format == "COMMAS" => {
                let joined: Vec<String> = items.iter().map(text_of).collect();
                pairs.push((name.clone(), joined.join(",")));
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    let key = match format {
                        "REPEAT" => name.clone(),
                        "BRACKETS" => format!("{name}[]"),
                        _ => format!("{name}[{index}]"),
                    };
                    pairs.push((key, text_of(item)));
                }
            }
            value => pairs.push((name.clone(), text_of(value))),
        }
    }
    Ok(pairs
        .iter()
        .map(|(name, value)| format!("{}={}", encoded(name), encoded(value)))
        .collect::<Vec<_>>()
        .join("&"))
}

/// `text` form-encoded (`application/x-www-form-urlencoded`).
pub fn encoded(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                char::from(byte).to_string()
            }
            b' ' => "+".to_owned(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// What the API answered: its status, its reason phrase, its headers and its body's
/// text.
#[derive(Clone, Copy, Debug)]
pub struct Answer<'a> {
    pub status: u16,
    pub status_text: &'a str,
    pub headers: &'a BTreeMap<String, String>,
    pub body: &'a str,
}

/// The Task's result: `{Headers, ResponseBody, StatusCode, StatusText}` (each header's
/// value in a list, the body as JSON where it reads as JSON); outside 2xx its failure,
/// `States.Http.StatusCode.NNN` with that result as the cause.
pub fn task_result(answer: Answer) -> Result<Value, Failure> {
    let headers: Map<String, Value> = answer
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), json!([value])))
        .collect();
    let body = serde_json::from_str::<Value>(answer.body)
        .unwrap_or_else(|_| Value::String(answer.body.to_owned()));
    // Built by hand: `json!` would copy the headers and the body through `to_value`.
    let result = Value::Object(Map::from_iter([
        ("Headers".to_owned(), Value::Object(headers)),
        ("ResponseBody".to_owned(), body),
        (
            "StatusCode".to_owned(),
            Value::String(answer.status.to_string()),
        ),
        (
            "StatusText".to_owned(),
            Value::String(answer.status_text.to_owned()),
        ),
    ]));
    if (200..300).contains(&answer.status) {
        Ok(result)
    } else {
        Err(Failure::new(
            format!("States.Http.StatusCode.{}", answer.status),
            crate::json_text(&result),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_read_as_step_functions_reads_it() {
        let asked = request(&json!({
            "ApiEndpoint": "https://api.example.com/orders",
            "Method": "post",
            "Authentication": {"ConnectionArn": "arn:aws:events:us-east-1:1:connection/c/1"},
            "Headers": {"X-Trace": 7},
            "QueryParameters": {"dry": true},
            "RequestBody": {"id": "o-1"}
        }))
        .expect("a request");
        assert_eq!(asked.method, "POST");
        assert_eq!(asked.body.as_deref(), Some("{\"id\":\"o-1\"}"));
        assert_eq!(asked.headers["X-Trace"], "7");
        assert_eq!(asked.headers["content-type"], "application/json");
        assert_eq!(asked.query, [("dry".to_owned(), "true".to_owned())]);
        let form_body = |format: &str| {
            request(&json!({
                "ApiEndpoint": "https://api.example.com", "Method": "PUT",
                "RequestBody": {"a b": "x&y", "n": [1, 2]},
                "Transform": {"RequestBodyEncoding": "URL_ENCODED",
                              "RequestEncodingOptions": {"ArrayFormat": format}}
            }))
            .expect("a request")
            .body
            .expect("a body")
        };
        assert_eq!(form_body("INDICES"), "a+b=x%26y&n%5B0%5D=1&n%5B1%5D=2");
        assert_eq!(form_body("REPEAT"), "a+b=x%26y&n=1&n=2");
        assert_eq!(form_body("COMMAS"), "a+b=x%26y&n=1%2C2");
        assert_eq!(form_body("BRACKETS"), "a+b=x%26y&n%5B%5D=1&n%5B%5D=2");
        for refused in [
            json!({"ApiEndpoint": "ftp://x", "Method": "GET"}),
            json!({"ApiEndpoint": "https://x", "Method": "FETCH"}),
            json!({"ApiEndpoint": "https://x", "Method": "GET", "Body": {}}),
        ] {
            assert!(request(&refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn an_answer_is_the_result_and_a_status_outside_2xx_its_failure() {
        let headers = BTreeMap::from([("content-type".to_owned(), "application/json".to_owned())]);
        let answer = |status, body| Answer {
            status,
            status_text: if status == 200 { "OK" } else { "Not Found" },
            headers: &headers,
            body,
        };
        let result = task_result(answer(200, "{\"ok\": true}")).expect("2xx");
        assert_eq!(result["ResponseBody"], json!({"ok": true}));
        assert_eq!(result["StatusCode"], json!("200"));
        assert_eq!(
            result["Headers"]["content-type"],
            json!(["application/json"])
        );
        let failure = task_result(answer(404, "no such order")).expect_err("404");
        assert_eq!(failure.error, "States.Http.StatusCode.404");
        let cause: Value = serde_json::from_str(&failure.cause).expect("JSON");
        assert_eq!(cause["ResponseBody"], json!("no such order"));
    }
}

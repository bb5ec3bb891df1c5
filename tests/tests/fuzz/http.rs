//! The fuzz targets of HTTP: requests to the API (paths, query strings, bodies near a
//! valid submission, batches, any caller) and raw bytes over TCP to the local server.

use proptest::prelude::*;
use sas_api::Caller;
use sas_domain::ids::Owner;
use serde_json::{Value, json};

use super::run::{any_json, fuzz};
use super::{answered_by_the_rules, subject};

/// Text near an RFC 3339 instant: any date and time, fractions, offsets up to a day
/// either way, the edges of the years it can write, and characters of several bytes.
fn instant() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{4}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9](\\.[0-9]{1,9})?(Z|[+-][0-2][0-9]:[0-5][0-9])",
        "(0000|1969|1970|9999)-(01-01|12-31)T(00:00:00|23:59:59)(Z|[+-](00|23):(00|59))",
        ".{0,3}[€é\u{10FFFF}].{0,8}",
    ]
}

/// Submission bodies near the valid one: fields dropped, replaced or added.
fn submission_body() -> impl Strategy<Value = Vec<u8>> {
    let valid = json!({
        "workflow": "drone-delivery",
        "input": {"customer_id": "c", "pickup": "a", "dropoff": "b", "weight_kg": 1},
        "notify": "q1",
    });
    (
        any_json(),
        "[a-z_.]{1,20}",
        any::<u8>(),
        prop::collection::vec(any::<u8>(), 0..64),
        instant(),
    )
        .prop_map(move |(value, field, how, bytes, instant)| {
            let mut body = valid.clone();
            match how % 6 {
                0 => body[field.as_str()] = value,
                5 => body["start_at"] = Value::from(instant.clone()),
                1 => body["input"][field.as_str()] = value,
                2 => {
                    body.as_object_mut()
                        .expect("object")
                        .remove(field.split('.').next().unwrap_or_default());
                }
                3 => return bytes,
                _ => body = value,
            }
            body.to_string().into_bytes()
        })
}

/// A submission's body, or a batch of them (`POST /tasks/batch`), of 0 to 30.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let batch = prop::collection::vec(submission_body(), 0..30).prop_map(|bodies| {
        let tasks: Vec<serde_json::Value> = bodies
            .iter()
            .map(|b| serde_json::from_slice(b).unwrap_or(json!(String::from_utf8_lossy(b))))
            .collect();
        json!({ "tasks": tasks }).to_string().into_bytes()
    });
    prop_oneof![submission_body(), batch]
}

/// Anyone, an unauthenticated caller, or a client or operator named by any text.
fn caller() -> impl Strategy<Value = Caller> {
    prop_oneof![
        Just(Caller::Anyone),
        Just(Caller::Unauthenticated),
        (".{0,20}", any::<bool>()).prop_map(|(name, operator)| {
            Owner::new(name).map_or(Caller::Unauthenticated, |owner| Caller::Known {
                owner,
                operator,
            })
        }),
    ]
}

fn request() -> impl Strategy<Value = (String, String, Option<String>, Vec<u8>)> {
    let method = prop_oneof![
        Just("GET".to_owned()),
        Just("POST".to_owned()),
        Just("PUT".to_owned()),
        Just("DELETE".to_owned()),
        "[A-Z]{1,7}",
    ];
    let segment = prop_oneof![
        prop::sample::select(
            &[
                "tasks",
                "batch",
                "resubmit",
                "cancel",
                "pause",
                "resume",
                "steps",
                "complete",
                "children",
                "callbacks",
                "heartbeat",
                "workflows",
                "operator",
                "bulk",
                "services",
                "dead-letters",
                "redrive",
                "me",
                "openapi.json",
                "scheduler",
                "ingest",
                "schedules",
            ][..]
        )
        .prop_map(str::to_owned),
        "[a-zA-Z0-9_.%~-]{0,70}",
        ".{0,8}"
    ];
    let path = prop_oneof![
        3 => prop::collection::vec(segment, 0..5).prop_map(|s| format!("/{}", s.join("/"))),
        1 => Just("/tasks/batch".to_owned()),
    ];
    let query = prop::option::of(prop_oneof![
        "state=[A-Za-z]{0,12}",
        "limit=[0-9-]{0,4}",
        "after=.{0,40}",
        "wait=[0-9]{0,25}(ns|ms|s|m|h|d|y)?",
        "wait=.{0,12}",
        "step=.{0,12}&after=[0-9-]{0,12}",
        "key=.{0,20}",
        ".{0,30}"
    ]);
    (method, path, query, body())
}

#[test]
fn no_request_panics_and_every_refusal_is_a_named_4xx() {
    let strategy = (request(), caller());
    fuzz(
        "http requests",
        2_000,
        strategy,
        |((method, path, query, body), caller)| {
            let subject = subject();
            let response = subject.call(&caller, &method, &path, query.as_deref(), &body);
            answered_by_the_rules(&format!("{method} {path}"), &response)
        },
    );
}

/// Schedule bodies near a valid one: a cron expression, a period, a time zone and a
/// window of any text near theirs, fields dropped, replaced or added.
fn schedule_body() -> impl Strategy<Value = Vec<u8>> {
    let cron = prop_oneof![
        "([0-9*/,L#W?-]{1,6} ){4}[0-9A-Z*/,L#W?-]{1,8}",
        "@[a-z]{0,10}",
        ".{0,20}",
    ];
    let duration = prop_oneof!["[0-9]{0,25} ?(ns|ms|s|m|h|d|y|days)?", ".{0,12}"];
    let zone = prop_oneof!["[A-Z][a-z]{2,8}/[A-Z][a-z_]{2,12}", "UTC", ".{0,12}"];
    (
        cron,
        duration.clone(),
        duration,
        zone,
        any_json(),
        "[a-z_]{1,16}",
        any::<u8>(),
    )
        .prop_map(|(cron, every, window, zone, value, field, how)| {
            let overlap = ["skip", "buffer_one", "allow_all"][usize::from(how % 3)];
            let mut body = json!({
                "workflow": "drone-delivery",
                "input": {"customer_id": "c", "pickup": "a", "dropoff": "b", "weight_kg": 1},
                "time_zone": zone,
                "catch_up_window": window,
                "overlap": overlap,
            });
            match how % 5 {
                0 => body["cron"] = json!(cron),
                1 => body["every"] = json!(every),
                2 => body[field.as_str()] = value,
                3 => {
                    body["cron"] = json!(cron);
                    body["every"] = json!(every);
                }
                _ => body = value,
            }
            body.to_string().into_bytes()
        })
}

#[test]
fn no_schedule_panics_and_every_refusal_is_a_named_4xx() {
    let name = prop_oneof!["[a-zA-Z0-9_-]{1,50}", ".{0,10}"];
    fuzz(
        "schedules",
        1_000,
        (name, schedule_body()),
        |(name, body)| {
            let subject = subject();
            let path = format!("/operator/schedules/{name}");
            let response = subject.call(&Caller::Anyone, "PUT", &path, None, &body);
            answered_by_the_rules(&format!("PUT {path}"), &response)?;
            if response.status < 300 {
                // What was kept reads back, and fires, whatever it says.
                let read = subject.call(&Caller::Anyone, "GET", &path, None, b"");
                prop_assert_eq!(read.status, 200, "{}", read.body);
                let fired = subject.runtime.block_on(subject.app.fire_schedule(&name));
                prop_assert!(fired.is_ok(), "{:?}", fired);
            }
            Ok(())
        },
    );
}

/// An HTTP/1.1 request as bytes: a request line, headers and a body, each near what
/// the API takes or anything, or bytes of any kind.
fn raw_request(host: String) -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        prop::sample::select(&["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD"][..])
            .prop_map(str::to_owned),
        "[A-Za-z]{0,10}"
    ];
    let target = prop_oneof![
        (request(), any::<bool>()).prop_map(|((_, path, query, _), _)| match query {
            Some(query) => format!("{path}?{query}"),
            None => path,
        }),
        "[ -~]{0,60}",
    ];
    let header = prop_oneof![
        Just(format!("Host: {host}")),
        Just("Content-Type: application/json".to_owned()),
        "Content-Length: [0-9]{0,20}",
        "Transfer-Encoding: (chunked|gzip|identity)",
        "(Authorization|Origin|Host|Content-Type|Accept): [ -~]{0,40}",
        "[ -~]{0,40}",
    ];
    let request = (method, target, prop::collection::vec(header, 0..6), body()).prop_map(
        |(method, target, headers, body)| {
            let mut bytes = format!(
                "{method} {target} HTTP/1.1\r\n{}\r\n",
                headers
                    .iter()
                    .map(|h| format!("{h}\r\n"))
                    .collect::<String>()
            )
            .into_bytes();
            bytes.extend(body);
            bytes
        },
    );
    prop_oneof![4 => request, 1 => prop::collection::vec(any::<u8>(), 0..300)]
}

#[test]
fn the_local_server_answers_any_bytes_under_500_and_goes_on() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let harness = runtime.block_on(sas_tests::Harness::start(5));
    let address = harness.running.api;
    // The answer's status line, or nothing when none came within a second (a request
    // still waiting for the rest of its body): the server may keep the connection
    // open, so only the line is read.
    let exchange = |bytes: Vec<u8>| {
        runtime.block_on(async {
            let mut stream = tokio::net::TcpStream::connect(address)
                .await
                .expect("connected");
            let _ = stream.write_all(&bytes).await;
            let mut answer = Vec::new();
            let status_line = async {
                let mut chunk = [0_u8; 1024];
                while !answer.windows(2).any(|w| w == b"\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => answer.extend_from_slice(&chunk[..n]),
                    }
                }
            };
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), status_line).await;
            String::from_utf8_lossy(&answer)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
    };
    fuzz(
        "raw HTTP to the local server",
        300,
        raw_request(address.to_string()),
        |bytes| {
            let answer = exchange(bytes.clone());
            let status = answer.split(' ').nth(1).unwrap_or_default();
            prop_assert!(
                !status.starts_with('5'),
                "{}\n-> {answer}",
                String::from_utf8_lossy(&bytes)
            );
            let after = exchange(
                format!("GET /openapi.json HTTP/1.1\r\nHost: {address}\r\n\r\n").into_bytes(),
            );
            prop_assert!(
                after.starts_with("HTTP/1.1 200"),
                "after {}: {after}",
                String::from_utf8_lossy(&bytes)
            );
            Ok(())
        },
    );
}

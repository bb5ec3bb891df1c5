//! The fuzz targets of what a caller is given back: callback tokens and listing
//! cursors, changed, refused without a read or naming the parameter.

use proptest::prelude::*;
use sas_api::Caller;
use sas_domain::ids::Owner;
use serde_json::{Value, json};

use super::run::{any_json, fuzz};
use super::{Subject, answered_by_the_rules, subject};

/// A subject where alice has three tasks waiting for a person's approval, with a
/// genuine callback token of one and the cursor of her listing's first page.
fn issued() -> (Subject, String, String) {
    let subject = subject();
    for id in ["a", "b", "c"] {
        let body = json!({ "workflow": "refund", "input": { "order_id": "o-1", "customer_id": "c-1", "amount": 500 } });
        let answer = subject.call(
            &alice(),
            "PUT",
            &format!("/tasks/{id}"),
            None,
            body.to_string().as_bytes(),
        );
        assert_eq!(answer.status, 202, "{}", answer.body);
    }
    let listed = subject.call(
        &alice(),
        "GET",
        "/tasks",
        Some("state=Pending&limit=1"),
        b"",
    );
    let listed: Value = serde_json::from_str(&listed.body).expect("a page");
    let cursor = listed["next"].as_str().expect("a cursor").to_owned();
    let task = subject.memory.tasks().pop().expect("a task");
    let token = sas_domain::callback::Token::issue(&task, 1, false).expect("a token");
    (subject, token, cursor)
}

fn alice() -> Caller {
    Caller::Known {
        owner: Owner::new("alice").expect("owner"),
        operator: false,
    }
}

/// Changes to a text: characters replaced, cut or added (each at a place taken modulo
/// its length), or another text altogether.
#[derive(Debug, Clone)]
enum Edits {
    Characters(Vec<(usize, char, u8)>),
    Instead(String),
}

fn edits() -> impl Strategy<Value = Edits> {
    prop_oneof![
        4 => prop::collection::vec((any::<usize>(), any::<char>(), 0_u8..3), 1..4).prop_map(Edits::Characters),
        1 => ".{0,120}".prop_map(Edits::Instead),
    ]
}

fn edited(real: &str, edits: &Edits) -> String {
    let edits = match edits {
        Edits::Instead(text) => return text.clone(),
        Edits::Characters(edits) => edits,
    };
    let mut chars: Vec<char> = real.chars().collect();
    for &(at, with, how) in edits {
        let at = at % (chars.len() + 1);
        match how {
            0 if at < chars.len() => chars[at] = with,
            1 if at < chars.len() => {
                chars.remove(at);
            }
            _ => chars.insert(at, with),
        }
    }
    chars.into_iter().collect()
}

fn encoded(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[test]
fn a_callback_token_not_of_a_tokens_shape_is_refused_without_a_read() {
    let strategy = (edits(), any_json(), any::<bool>());
    fuzz(
        "callback tokens",
        500,
        strategy,
        |(edits, body, heartbeat)| {
            let (subject, token, _) = issued();
            let token = edited(&token, &edits);
            // Reads fail from now on: a request that reads is answered 503, one that
            // does not 404.
            subject.memory.refuse_reads(true);
            let path = format!(
                "/callbacks/{}{}",
                encoded(&token),
                if heartbeat { "/heartbeat" } else { "" }
            );
            let answer = subject.call(
                &Caller::Unauthenticated,
                "POST",
                &path,
                None,
                body.to_string().as_bytes(),
            );
            answered_by_the_rules(&path, &answer)?;
            // A body refused (400) is not read either; no token at all is no
            // callback's route.
            if !token.is_empty() && sas_domain::callback::Token::parse(&token).is_none() {
                prop_assert!(
                    matches!(answer.status, 400 | 404),
                    "{}: {}",
                    path,
                    answer.body
                );
            }
            Ok(())
        },
    );
}

#[test]
fn a_listing_cursor_changed_is_refused_naming_it() {
    fuzz("listing cursors", 500, edits(), |edits| {
        let (subject, _, cursor) = issued();
        let query = format!("state=Pending&after={}", encoded(&edited(&cursor, &edits)));
        let answer = subject.call(&alice(), "GET", "/tasks", Some(&query), b"");
        answered_by_the_rules(&query, &answer)?;
        if answer.status != 200 {
            let body: Value = serde_json::from_str(&answer.body).unwrap_or_default();
            prop_assert_eq!(&body["error"]["field"], "after", "{}", answer.body);
        }
        Ok(())
    });
}

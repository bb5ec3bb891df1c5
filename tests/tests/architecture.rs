//! The crates' boundaries, checked over `cargo tree`: the core does no I/O, each
//! adapter crate brings only its own service's client, and each Lambda function
//! links only what it runs. A dependency added across a boundary fails here with
//! the path by which it came in.

use std::collections::BTreeSet;
use std::process::Command;

/// The crates `package` depends on in a build of it alone (normal dependencies,
/// its own features), by name.
fn dependencies(package: &str) -> BTreeSet<String> {
    let output = cargo_tree(&[
        "-p", package, "-e", "normal", "--prefix", "none", "--format", "{p}",
    ]);
    output
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != package)
        .map(str::to_owned)
        .collect()
}

fn cargo_tree(arguments: &[&str]) -> String {
    let output = Command::new(env!("CARGO"))
        .arg("tree")
        .args(arguments)
        .args(["--locked", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree {arguments:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// Asserts that `package` depends on none of `forbidden` (a name, or a prefix
/// ending in `*`), naming the path of each that it does.
fn assert_free_of(package: &str, forbidden: &[&str], why: &str) {
    let found: Vec<_> = dependencies(package)
        .into_iter()
        .filter(|name| {
            forbidden.iter().any(|rule| match rule.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == rule,
            })
        })
        .collect();
    let paths: Vec<_> = found
        .iter()
        .map(|name| cargo_tree(&["-p", package, "-e", "normal", "-i", name]))
        .collect();
    assert!(
        found.is_empty(),
        "{package} must not depend on {found:?} ({why}); they come in by:\n{}",
        paths.join("\n")
    );
}

const SQLITE: [&str; 2] = ["rusqlite", "libsqlite3-sys"];

/// The AWS SDK and the Lambda runtime (not `aws-lc-rs`, the TLS stack's cryptography).
const NOT_AWS: [&str; 5] = [
    "aws-sdk-*",
    "aws-smithy-*",
    "aws-types",
    "aws_lambda_events",
    "lambda_runtime",
];

#[test]
fn the_core_does_no_io() {
    assert_free_of(
        "sas-core",
        &[
            SQLITE[0], SQLITE[1], "reqwest", "hyper", "mio", "socket2", "aws-*", "sas-*",
        ],
        "it holds the domain, the ports and the actors; adapters depend on it, not it on them",
    );
}

#[test]
fn each_adapter_crate_brings_only_its_own_service() {
    let not_aws = NOT_AWS;
    assert_free_of(
        "sas-embedded",
        &[&not_aws[..], &["reqwest", "sas-lambda", "sas-aws"]].concat(),
        "the embedded backend is SQLite alone",
    );
    assert_free_of(
        "sas-http-remote",
        &[&not_aws[..], &SQLITE[..], &["sas-lambda", "sas-aws"]].concat(),
        "the HTTP remote is reqwest alone",
    );
    assert_free_of(
        "sas-testkit",
        &[&not_aws[..], &SQLITE[..], &["reqwest"]].concat(),
        "the test kit holds test doubles over the core",
    );
    assert_free_of(
        "sas-lambda",
        &[&SQLITE[..], &["reqwest", "aws-sdk-dynamodb", "aws-sdk-sns"]].concat(),
        "what every function runs on holds no state store and no alerts",
    );
    assert_free_of(
        "sas-aws",
        &[&SQLITE[..], &["reqwest"]].concat(),
        "the task state on AWS calls no remote service",
    );
}

#[test]
fn each_lambda_function_links_only_what_it_runs() {
    for function in ["sas-submission", "sas-scheduler", "sas-supervisor"] {
        assert_free_of(
            function,
            &[&SQLITE[..], &["reqwest", "sas-http-remote", "sas-embedded"]].concat(),
            "it keeps task state in DynamoDB and calls no remote service",
        );
    }
    assert_free_of(
        "sas-agent",
        &[
            &SQLITE[..],
            &["aws-sdk-dynamodb", "aws-sdk-sns", "sas-aws", "sas-embedded"],
        ]
        .concat(),
        "the agent keeps no state and raises no alerts",
    );
}

#[test]
fn the_check_sees_what_a_function_does_depend_on() {
    let agent = dependencies("sas-agent");
    for expected in [
        "sas-core",
        "sas-lambda",
        "sas-http-remote",
        "reqwest",
        "aws-sdk-sqs",
    ] {
        assert!(
            agent.contains(expected),
            "{expected} missing from {agent:?}"
        );
    }
    let scheduler = dependencies("sas-scheduler");
    for expected in ["sas-aws", "aws-sdk-dynamodb", "aws-sdk-sns", "aws-sdk-sqs"] {
        assert!(
            scheduler.contains(expected),
            "{expected} missing from {scheduler:?}"
        );
    }
}

//! The crates' boundaries, checked over `cargo tree`: the core does no I/O, each
//! adapter crate brings only its own service's client, and each Lambda function
//! links only what it runs. A dependency added across a boundary fails here with
//! the path by which it came in. The sources' own shape is checked in `sources`.

use std::collections::BTreeSet;
use std::process::Command;

#[path = "architecture/circles.rs"]
mod circles;
#[path = "architecture/sources.rs"]
mod sources;

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
    cargo(&[&["tree"], arguments].concat())
}

/// What `cargo` prints with `arguments`, in the workspace, offline and locked.
fn cargo(arguments: &[&str]) -> String {
    let output = Command::new(env!("CARGO"))
        .args(arguments)
        .args(["--locked", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo {arguments:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The workspace's own packages as `cargo metadata` describes them.
fn workspace_metadata() -> serde_json::Value {
    let text = cargo(&["metadata", "--format-version", "1", "--no-deps"]);
    serde_json::from_str(&text).expect("cargo metadata's JSON")
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

/// Crates that do I/O, or drive it: a database, an HTTP stack, sockets, the AWS SDK.
const IO: [&str; 7] = [
    SQLITE[0], SQLITE[1], "reqwest", "hyper", "mio", "socket2", "aws-*",
];

#[test]
fn the_domain_is_pure() {
    assert_free_of(
        "sas-domain",
        &[&IO[..], &["tokio", "async-trait", "futures-*"]].concat(),
        "it holds the state, the workflow language and the decisions: functions of a task and an event, with no I/O, no runtime and no clock",
    );
    assert_eq!(
        project_crates("sas-domain"),
        ["sas-asl"],
        "sas-domain: the project's crates it links (the state language, pure as it is)"
    );
    assert_free_of(
        "sas-asl",
        &[&IO[..], &["tokio", "async-trait", "futures-*", "sas-*"]].concat(),
        "it is the Amazon States Language: a definition and a state's input in, what happens next out, with no I/O, no runtime and no clock",
    );
}

#[test]
fn the_actors_and_the_api_do_no_io() {
    assert_free_of(
        "sas-core",
        &IO,
        "it holds the ports and the actors; adapters depend on it, not it on them",
    );
    assert_eq!(
        project_crates("sas-core"),
        ["sas-asl", "sas-domain"],
        "sas-core: the project's crates it links"
    );
    assert_free_of(
        "sas-api",
        &IO,
        "it is the HTTP API without a transport, served by the local server and the API Gateway function",
    );
    assert_eq!(
        project_crates("sas-api"),
        ["sas-asl", "sas-core", "sas-domain"],
        "sas-api: the project's crates it links"
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
        &[
            &not_aws[..],
            &SQLITE[..],
            &["reqwest", "sas-lambda", "sas-aws"],
        ]
        .concat(),
        "the HTTP remote is hyper's client alone, with no layer above it",
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
        &[
            &SQLITE[..],
            &["reqwest", "aws-sdk-secretsmanager", "aws-sdk-ssm"],
        ]
        .concat(),
        "the task state on AWS calls no remote service and reads no credential",
    );
    assert_free_of(
        "sas-credentials",
        &[
            &SQLITE[..],
            &[
                "reqwest",
                "aws-sdk-dynamodb",
                "aws-sdk-sns",
                "aws-sdk-sqs",
                "sas-lambda",
                "sas-aws",
            ],
        ]
        .concat(),
        "the credentials are Secrets Manager, Parameter Store and SigV4 alone",
    );
}

#[test]
fn the_local_process_links_of_aws_only_what_a_task_calls_and_the_mock_services_nothing() {
    // Of AWS, only what a state machine's Task calls (Lambda's and SNS's clients, and
    // the signer of the JSON APIs' requests), at AWS_ENDPOINT_URL_<SERVICE> as Step
    // Functions calls them: the state is the embedded backend's.
    assert_free_of(
        "sas-local",
        &[
            "aws-sdk-dynamodb",
            "aws-sdk-sqs",
            "aws_lambda_events",
            "lambda_runtime",
            "sas-lambda",
            "sas-aws",
        ],
        "it runs on the embedded backend",
    );
    assert_free_of(
        "sas-mock-services",
        &[&NOT_AWS[..], &["sas-lambda", "sas-aws", "sas-embedded"]].concat(),
        "they stand in for remote services, over HTTP",
    );
}

#[test]
fn the_command_line_speaks_only_http_to_the_api() {
    assert_free_of(
        "sas-cli",
        &[
            &SQLITE[..],
            &[
                "sas-embedded",
                "sas-aws",
                "sas-lambda",
                "aws-sdk-dynamodb",
                "aws-sdk-sqs",
                "aws-sdk-sns",
            ],
        ]
        .concat(),
        "it reaches the system through its API alone",
    );
}

#[test]
fn each_lambda_function_links_only_what_it_runs() {
    for function in ["sas-submission", "sas-scheduler", "sas-supervisor"] {
        assert_free_of(
            function,
            &[&SQLITE[..], &["reqwest", "axum"]].concat(),
            "it keeps task state in DynamoDB and calls no remote service",
        );
        assert_eq!(
            project_crates(function),
            [
                "sas-api",
                "sas-asl",
                "sas-aws",
                "sas-core",
                "sas-domain",
                "sas-lambda",
                "sas-telemetry"
            ],
            "{function}: the project's crates it links"
        );
    }
    assert_free_of(
        "sas-agent",
        &[&SQLITE[..], &["aws-sdk-dynamodb", "axum"]].concat(),
        "the agent keeps no state (a Task's DynamoDB call is a signed request of its own)",
    );
    assert_eq!(
        project_crates("sas-agent"),
        [
            "sas-api",
            "sas-asl",
            "sas-aws-tasks",
            "sas-core",
            "sas-credentials",
            "sas-domain",
            "sas-http-remote",
            "sas-lambda",
            "sas-telemetry",
        ],
        "sas-agent: the project's crates it links"
    );
    for function in FUNCTIONS {
        let features = cargo_tree(&["-p", function, "-e", "features", "--prefix", "none"]);
        assert!(
            !features.contains("feature \"test-util\""),
            "{function} must not enable a crate's test-util feature"
        );
    }
}

const FUNCTIONS: [&str; 4] = [
    "sas-submission",
    "sas-scheduler",
    "sas-supervisor",
    "sas-agent",
];

/// The project's crates `package` depends on, by name.
fn project_crates(package: &str) -> Vec<String> {
    dependencies(package)
        .into_iter()
        .filter(|name| name.starts_with("sas-"))
        .collect()
}

#[test]
fn the_check_sees_what_a_function_does_depend_on() {
    let core = dependencies("sas-core");
    assert!(
        core.contains("serde") && core.contains("tokio"),
        "the core's dependencies read: {core:?}"
    );
    let domain = dependencies("sas-domain");
    assert!(
        domain.contains("serde_json") && !domain.contains("tokio"),
        "the domain's dependencies read: {domain:?}"
    );
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

//! Every operation of Step Functions' API through the AWS CLI, as a person types it
//! against `sas-local`, each checked by what it prints.

#[path = "common/aws_cli.rs"]
mod aws_cli;
mod common;

use aws_cli::{aws, ended, repository};
use serde_json::{Value, json};

/// Every operation of the API through the AWS CLI, as a person types it, each
/// checked by what it prints: machines, versions, aliases and tags; executions
/// started, listed, read, stopped and redriven; an activity's worker; a state tested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_cli_drives_every_operation_through_its_output() {
    let workflows = tempfile::tempdir().expect("a workflows directory");
    std::fs::copy(
        repository().join("tests/workflows/greet.asl.json"),
        workflows.path().join("greet.asl.json"),
    )
    .expect("copied");
    let data = tempfile::tempdir().expect("a data directory");
    let directory = [(
        "SAS_WORKFLOWS_DIR",
        workflows.path().to_str().expect("a path"),
    )];
    let (mut child, api, _) = common::spawn_with(data.path(), &directory);
    let api = api.as_str();
    let arn =
        |kind: &str, name: &str| format!("arn:aws:states:us-east-1:000000000000:{kind}:{name}");
    let said = |text: &str| {
        json!({"StartAt": "Say", "States": {"Say": {"Type": "Pass", "Result": text, "End": true}}})
            .to_string()
    };
    let (greet, machine) = (arn("stateMachine", "greet"), arn("stateMachine", "cli"));

    let listed = aws(api, &["list-state-machines"]);
    assert!(
        listed["stateMachines"]
            .as_array()
            .expect("machines")
            .iter()
            .any(|m| m["name"] == "greet")
    );
    let described = aws(
        api,
        &["describe-state-machine", "--state-machine-arn", &greet],
    );
    let definition = described["definition"].as_str().expect("a definition");
    let valid = aws(
        api,
        &[
            "validate-state-machine-definition",
            "--definition",
            definition,
        ],
    );
    assert_eq!(valid["result"], "OK");

    // A machine, two versions, an alias moved from one to the other, tags.
    let create = [
        "create-state-machine",
        "--name",
        "cli",
        "--role-arn",
        "r",
        "--publish",
    ];
    let made = aws(
        api,
        &[&create[..], &["--definition", &said("one")]].concat(),
    );
    assert_eq!(made["stateMachineVersionArn"], format!("{machine}:1"));
    let update = [
        "update-state-machine",
        "--state-machine-arn",
        &machine,
        "--publish",
    ];
    let updated = aws(
        api,
        &[&update[..], &["--definition", &said("two")]].concat(),
    );
    assert_eq!(updated["stateMachineVersionArn"], format!("{machine}:2"));
    let published = aws(
        api,
        &[
            "publish-state-machine-version",
            "--state-machine-arn",
            &machine,
        ],
    );
    assert_eq!(
        published["stateMachineVersionArn"],
        format!("{machine}:2"),
        "the same revision"
    );
    let versions = aws(
        api,
        &[
            "list-state-machine-versions",
            "--state-machine-arn",
            &machine,
        ],
    );
    assert_eq!(
        versions["stateMachineVersions"].as_array().map(Vec::len),
        Some(2)
    );
    let route = |version: u32| {
        json!([{"stateMachineVersionArn": format!("{machine}:{version}"), "weight": 100}])
            .to_string()
    };
    let alias = aws(
        api,
        &[
            "create-state-machine-alias",
            "--name",
            "live",
            "--routing-configuration",
            &route(1),
        ],
    );
    let alias_arn = alias["stateMachineAliasArn"]
        .as_str()
        .expect("an alias")
        .to_owned();
    aws(
        api,
        &[
            "update-state-machine-alias",
            "--state-machine-alias-arn",
            &alias_arn,
            "--routing-configuration",
            &route(2),
        ],
    );
    let routed = aws(
        api,
        &[
            "describe-state-machine-alias",
            "--state-machine-alias-arn",
            &alias_arn,
        ],
    );
    assert_eq!(
        routed["routingConfiguration"][0]["stateMachineVersionArn"],
        format!("{machine}:2")
    );
    let aliases = aws(
        api,
        &[
            "list-state-machine-aliases",
            "--state-machine-arn",
            &machine,
        ],
    );
    assert_eq!(
        aliases["stateMachineAliases"][0]["stateMachineAliasArn"],
        alias_arn
    );
    aws(
        api,
        &[
            "tag-resource",
            "--resource-arn",
            &machine,
            "--tags",
            r#"[{"key": "team", "value": "drones"}]"#,
        ],
    );
    let tags = aws(api, &["list-tags-for-resource", "--resource-arn", &machine]);
    assert_eq!(tags["tags"], json!([{"key": "team", "value": "drones"}]));
    aws(
        api,
        &[
            "untag-resource",
            "--resource-arn",
            &machine,
            "--tag-keys",
            "team",
        ],
    );
    let tags = aws(api, &["list-tags-for-resource", "--resource-arn", &machine]);
    assert_eq!(tags["tags"], json!([]));

    // Executions: through the alias, synchronously, listed, their histories.
    let started = aws(
        api,
        &[
            "start-execution",
            "--state-machine-arn",
            &alias_arn,
            "--name",
            "run-1",
        ],
    );
    let run = started["executionArn"]
        .as_str()
        .expect("an execution")
        .to_owned();
    let done = ended(api, &run).await;
    assert_eq!(
        (&done["output"], &done["stateMachineAliasArn"]),
        (&json!("\"two\""), &json!(alias_arn))
    );
    let ran = aws(
        api,
        &[
            "describe-state-machine-for-execution",
            "--execution-arn",
            &run,
        ],
    );
    assert_eq!(ran["definition"], said("two"));
    let synced = aws(
        api,
        &[
            "start-sync-execution",
            "--state-machine-arn",
            &greet,
            "--input",
            r#"{"name": "cy"}"#,
        ],
    );
    assert_eq!(synced["output"], r#"{"greeting":"HELLO, CY!"}"#);
    let runs = aws(api, &["list-executions", "--state-machine-arn", &machine]);
    assert_eq!(runs["executions"][0]["name"], "run-1");
    let history = aws(
        api,
        &[
            "get-execution-history",
            "--execution-arn",
            &run,
            "--reverse-order",
        ],
    );
    assert_eq!(history["events"][0]["type"], "ExecutionSucceeded");

    // A failed execution redriven; an activity's worker ends one, another is stopped.
    let nameless = aws(
        api,
        &[
            "start-execution",
            "--state-machine-arn",
            &greet,
            "--name",
            "nobody",
        ],
    );
    let nameless = nameless["executionArn"]
        .as_str()
        .expect("an execution")
        .to_owned();
    assert_eq!(ended(api, &nameless).await["status"], "FAILED");
    let redriven = aws(api, &["redrive-execution", "--execution-arn", &nameless]);
    assert!(redriven["redriveDate"].is_number(), "{redriven}");
    assert_eq!(ended(api, &nameless).await["redriveCount"], 1);
    let activity = aws(api, &["create-activity", "--name", "cli-work"]);
    let activity = activity["activityArn"]
        .as_str()
        .expect("an activity")
        .to_owned();
    assert_eq!(
        aws(api, &["describe-activity", "--activity-arn", &activity])["name"],
        "cli-work"
    );
    let activities = aws(api, &["list-activities"]);
    assert_eq!(activities["activities"][0]["activityArn"], activity);
    let worked = json!({"StartAt": "Work", "States": {"Work": {"Type": "Task", "Resource": activity, "End": true}}});
    aws(
        api,
        &[
            "create-state-machine",
            "--name",
            "worked",
            "--role-arn",
            "r",
            "--definition",
            &worked.to_string(),
        ],
    );
    let worked = arn("stateMachine", "worked");
    let mut ends = Vec::new();
    for (name, how) in [("w-1", "success"), ("w-2", "failure"), ("w-3", "stop")] {
        let started = aws(
            api,
            &[
                "start-execution",
                "--state-machine-arn",
                &worked,
                "--name",
                name,
            ],
        );
        let execution = started["executionArn"]
            .as_str()
            .expect("an execution")
            .to_owned();
        let given = aws(
            api,
            &[
                "get-activity-task",
                "--activity-arn",
                &activity,
                "--worker-name",
                "cli",
            ],
        );
        let token = given["taskToken"].as_str().expect("a task").to_owned();
        aws(api, &["send-task-heartbeat", "--task-token", &token]);
        match how {
            "success" => aws(
                api,
                &[
                    "send-task-success",
                    "--task-token",
                    &token,
                    "--task-output",
                    r#"{"done": true}"#,
                ],
            ),
            "failure" => aws(
                api,
                &[
                    "send-task-failure",
                    "--task-token",
                    &token,
                    "--error",
                    "Refused",
                    "--cause",
                    "by cli",
                ],
            ),
            _ => aws(
                api,
                &[
                    "stop-execution",
                    "--execution-arn",
                    &execution,
                    "--error",
                    "Withdrawn",
                    "--cause",
                    "by cli",
                ],
            ),
        };
        let done = ended(api, &execution).await;
        ends.push((done["status"].clone(), done["error"].clone()));
    }
    assert_eq!(
        ends,
        [
            (json!("SUCCEEDED"), Value::Null),
            (json!("FAILED"), json!("Refused")),
            (json!("ABORTED"), json!("Withdrawn")),
        ]
    );

    // A state tested with its answer mocked.
    let task = json!({"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "End": true,
                      "Parameters": {"FunctionName": "price"}, "ResultSelector": {"price.$": "$.Payload.price"}});
    let mock = json!({"result": r#"{"Payload": {"price": 12}}"#}).to_string();
    let tested = aws(
        api,
        &[
            "test-state",
            "--definition",
            &task.to_string(),
            "--mock",
            &mock,
        ],
    );
    assert_eq!(
        (&tested["status"], &tested["output"]),
        (&json!("SUCCEEDED"), &json!(r#"{"price":12}"#))
    );

    // And each removed.
    aws(api, &["delete-activity", "--activity-arn", &activity]);
    aws(
        api,
        &[
            "delete-state-machine-alias",
            "--state-machine-alias-arn",
            &alias_arn,
        ],
    );
    aws(
        api,
        &[
            "delete-state-machine-version",
            "--state-machine-version-arn",
            &format!("{machine}:1"),
        ],
    );
    aws(
        api,
        &["delete-state-machine", "--state-machine-arn", &machine],
    );
    let listed = aws(api, &["list-state-machines"]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !listed["stateMachines"]
            .as_array()
            .expect("machines")
            .iter()
            .any(|m| m["name"] == "cli")
    );
}

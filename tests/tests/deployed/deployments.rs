//! The stack deployed as its users deploy it: with `infra/localstack/deploy.sh` and its
//! signed smoke test, and the CDK app with `cdk deploy`.

use std::time::Duration;

use sas_domain::ids::{Owner, TaskId};
use sas_tests::aws::{Remote, free_port, repository};
use sas_tests::ministack::{
    Client, Deployment, MiniStack, emulator_template, lay_out_as_cargo_lambda, sam_cli,
};
use sas_tests::{UNDONE_AFTER_THE_DELIVERY_FAILED, step_states};
use serde_json::{Value, json};

use super::{drain, operators_inbox, readme_delivery, sns_message};

/// `infra/localstack/deploy.sh`, the script a LocalStack user runs, run as it is against
/// MiniStack with IAM enforced: it deploys the stack with the template's default
/// AuthMode, IAM, its mock services being those of the `sas-local` it starts, and ends
/// with `infra/localstack/smoke.sh`, whose requests it signs as the deployer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_localstack_script_deploys_the_stack_with_iam_and_its_signed_smoke_test_passes() {
    let ministack = MiniStack::start();
    let build = tempfile::tempdir().expect("a directory");
    let lambda = build.path().join("lambda");
    lay_out_as_cargo_lambda(&lambda);
    // The template less what MiniStack cannot deploy (LocalStack takes it as it is).
    let source = std::fs::read_to_string(repository().join("infra/template.yaml"))
        .expect("infra/template.yaml");
    let template = build.path().join("template.yaml");
    std::fs::write(&template, emulator_template(&source, &[])).expect("the template");
    let started = std::time::Instant::now();
    let script = tokio::task::block_in_place(|| {
        std::process::Command::new(repository().join("infra/localstack/deploy.sh"))
            .env("AWS_ENDPOINT_URL", &ministack.endpoint)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env_remove("TOKEN")
            .env("SAM", sam_cli())
            .env("LAMBDA_DIR", &lambda)
            .env("SAS_LOCAL", sas_tests::function_binary("sas-local"))
            .env("MOCK_HOST", "127.0.0.1")
            .env("MOCK_PORT", free_port().to_string())
            .env(
                "API_URL",
                format!("{}/_aws/execute-api/%s", ministack.endpoint),
            )
            .env("TEMPLATE", &template)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("deploy.sh runs")
    });
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&script.stdout),
        String::from_utf8_lossy(&script.stderr)
    );
    assert!(
        script.status.success(),
        "deploy.sh exited with {} after {:?}:\n{output}\nMiniStack's log:\n{}",
        script.status,
        started.elapsed(),
        ministack.log_tail()
    );
    assert!(
        output.contains("Processed"),
        "the smoke test's delivery Processed:\n{output}"
    );

    // What made it pass is its signature: the same request unsigned is refused.
    let client = Client::new(&ministack.endpoint);
    let apis = client
        .rest("GET", "apigateway", "/v2/apis", &Value::Null)
        .await;
    let api = apis["items"][0]["apiId"].as_str().expect("the API's id");
    let unsigned = client
        .send(
            "PUT",
            &format!(
                "{}/_aws/execute-api/{api}/tasks/unsigned",
                ministack.endpoint
            ),
            None,
            &[("content-type", "application/json")],
            readme_delivery().to_string().as_bytes(),
        )
        .await;
    assert_eq!(unsigned.status, 403, "{}", unsigned.body);
}

/// The CDK app (`infra/cdk`) deployed as its users deploy it, `cdk bootstrap` and `cdk
/// deploy` (its assets, the functions' zipped code and the template, uploaded to the
/// bootstrap's bucket), with the app's defaults but for the services' URLs: the
/// construct's stack runs the README's delivery to Processed, and a delivery refused for
/// good is compensated and its alert reaches the operators through the encrypted topic.
/// IAM is the construct's default: an unsigned request is refused, the root's signed
/// ones taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cdk_app_deployed_runs_the_readme_delivery_and_compensates_a_refused_one_with_an_alert()
{
    let remote = Remote::start(true).await;
    let services = json!(sas_tests::aws::service_urls(&remote.url)).to_string();
    let stack = Deployment::deploy_cdk(&[("serviceUrls", &services)]).await;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let sns = aws_sdk_sns::Client::new(&stack.sdk);
    let inbox = operators_inbox(&stack, &sqs, &sns).await;
    let signed_task = |id: &'static str, state: &'static str| {
        let stack = &stack;
        async move {
            stack
                .wait(
                    &format!("task {id} {state}"),
                    Duration::from_secs(90),
                    Duration::from_millis(250),
                    || async {
                        let answer = stack.call("GET", &format!("/tasks/{id}"), None, true).await;
                        let task = answer.json();
                        if answer.status == 200 && task["state"] == state {
                            Ok(task)
                        } else {
                            Err(format!("{} {}", answer.status, answer.body))
                        }
                    },
                )
                .await
        }
    };

    let unsigned = stack
        .call("PUT", "/tasks/delivery-1", Some(&readme_delivery()), false)
        .await;
    assert_eq!(unsigned.status, 403, "{}", unsigned.body);
    let put = stack
        .call("PUT", "/tasks/delivery-1", Some(&readme_delivery()), true)
        .await;
    assert_eq!(put.status, 202, "{}", put.body);
    let task = signed_task("delivery-1", "Processed").await;
    assert_eq!(step_states(&task), ["Processed"; 5], "{task:#}");
    // The services see a task by its full id, its owner's (the root's ARN) and its own.
    let me = stack.call("GET", "/me", None, true).await.json();
    let owner = Owner::new(me["owner"].as_str().expect("an owner").to_owned()).expect("an owner");
    let full = |id: &str| TaskId::scoped(&owner, &TaskId::parse(id).expect("an id")).to_string();
    assert_eq!(
        remote.effects(&full("delivery-1")).len(),
        5,
        "one effect per step"
    );

    remote.mocks.set_faults(
        "delivery",
        serde_json::from_value(json!({"permanent_error_rate": 1.0})).expect("faults"),
    );
    let put = stack
        .call("PUT", "/tasks/refused", Some(&readme_delivery()), true)
        .await;
    assert_eq!(put.status, 202, "{}", put.body);
    let task = signed_task("refused", "Error").await;
    assert_eq!(
        step_states(&task),
        UNDONE_AFTER_THE_DELIVERY_FAILED,
        "{task:#}"
    );
    let alert = stack
        .wait(
            "the alert in the operators' inbox",
            Duration::from_secs(60),
            Duration::from_millis(500),
            || async {
                let received: Vec<Value> = drain(&sqs, &inbox)
                    .await
                    .iter()
                    .map(|m| sns_message(m))
                    .collect();
                received
                    .into_iter()
                    .find(|m| m["task_id"] == full("refused"))
                    .ok_or_else(|| "not yet".to_owned())
            },
        )
        .await;
    assert_eq!(alert["task_id"], full("refused"), "{alert:#}");
    // Each function logs to the group the construct gives it, which the harness reads.
    let logs = stack.logs("SchedulerFunction").await;
    assert!(
        logs.iter().any(|line| line.contains(&full("refused"))),
        "the scheduler's log group: {logs:?}"
    );
}

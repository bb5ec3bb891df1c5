//! The real stack on [MiniStack](https://pypi.org/project/ministack/): `infra/template.yaml`
//! deployed with `sam deploy`, the functions' debug binaries laid out as `sam build`
//! lays them out, run by the emulator as Lambda functions through their real triggers
//! (the HTTP API, the SQS event-source mappings, the EventBridge schedule), each under
//! its execution role with IAM enforced (`AUTH=true`).
//!
//! Where MiniStack is wrong and AWS right, the harness works around it, never the
//! template (README, "The stack deployed on MiniStack"); the deployed copy of the
//! template ([`emulator_template`], for SAM's and the CDK app's alike):
//! - leaves out the alarms on metric math (`Metrics:`), which make the stack roll back;
//! - leaves out the topic's and the queues' TLS-only denials: MiniStack is served over
//!   plain HTTP here, and it evaluates `aws:SecureTransport`;
//! - grants `sqs:SendMessageBatch` wherever the template grants `sqs:SendMessage`, on
//!   the same resources: MiniStack asks for the one where AWS authorises a batch send as
//!   the other;
//! - writes an event-source mapping's `ScalingConfig.MaximumConcurrency` given by a
//!   `!Ref` as the parameter's number: MiniStack stores it as a string, which stops
//!   every SQS poller.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use aws_types::SdkConfig;
use sas_lambda::sdk;
use serde_json::{Value, json};
use serde_norway::Value as Yaml;

use crate::aws::{free_port, repository};

/// The region the stack is deployed in.
pub const REGION: &str = "us-east-1";
/// The credentials of the emulator's account root, which deploys and drives the stack.
const ACCESS_KEY: &str = "test";

/// The functions deployed: their logical id in the template and their binary (the
/// submission's twice, its reads a function of their own).
pub const FUNCTIONS: [(&str, &str); 5] = [
    ("SubmissionFunction", "sas-submission"),
    ("ReadFunction", "sas-submission"),
    ("SchedulerFunction", "sas-scheduler"),
    ("AgentFunction", "sas-agent"),
    ("SupervisorFunction", "sas-supervisor"),
];

/// A MiniStack server on a free port of 127.0.0.1 with IAM enforced, its temporary files
/// (and the functions' code) under a directory of its own; stopped, with every function
/// it started, when dropped.
pub struct MiniStack {
    child: Child,
    /// Its URL, for `AWS_ENDPOINT_URL`.
    pub endpoint: String,
    dir: tempfile::TempDir,
}

impl MiniStack {
    /// Starts MiniStack: `$SAS_MINISTACK`, or the `ministack` of the repository's
    /// `.venv-ministack` that `./tests/run` installs.
    ///
    /// # Panics
    /// With instructions, when MiniStack is not installed or does not start.
    #[must_use]
    pub fn start() -> Self {
        let binary = std::env::var("SAS_MINISTACK").map_or_else(
            |_| repository().join(".venv-ministack/bin/ministack"),
            PathBuf::from,
        );
        assert!(
            binary.exists(),
            "MiniStack is not installed at {}: run ./tests/run, which installs it into \
             .venv-ministack, or `python3 -m venv .venv-ministack && .venv-ministack/bin/pip \
             install -r tests/requirements-ministack.txt`, or set SAS_MINISTACK to a ministack binary",
            binary.display()
        );
        let port = free_port();
        let endpoint = format!("http://127.0.0.1:{port}");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).expect("MiniStack's TMPDIR");
        let log = std::fs::File::create(dir.path().join("ministack.log")).expect("a log file");
        let child = Command::new(&binary)
            .env("GATEWAY_PORT", port.to_string())
            .env("BIND_HOST", "127.0.0.1")
            .env("MINISTACK_HOST", "127.0.0.1")
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env("AUTH", "true")
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            // Its own process group, so that dropping it stops the functions it started.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let ministack = Self {
            child,
            endpoint,
            dir,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "MiniStack did not listen on port {port} within 60 s: {}",
                ministack.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        ministack
    }

    /// The last lines MiniStack logged, for failure messages.
    #[must_use]
    pub fn log_tail(&self) -> String {
        tail(&self.dir.path().join("ministack.log"), 40)
    }

    /// An SDK configuration pointed at MiniStack with the root's credentials, built as
    /// the functions build theirs.
    ///
    /// # Panics
    /// Never: the configuration is complete.
    #[must_use]
    pub fn sdk(&self) -> SdkConfig {
        sdk::sdk_config(|name| match name {
            "AWS_REGION" => Some(REGION.into()),
            "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" => Some(ACCESS_KEY.into()),
            "AWS_ENDPOINT_URL" => Some(self.endpoint.clone()),
            _ => None,
        })
        .expect("a complete SDK configuration")
    }
}

impl Drop for MiniStack {
    fn drop(&mut self) {
        // The whole group: MiniStack and the functions' processes it started.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A response: its status and body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

impl Answer {
    /// The body as JSON (`null` when it is not JSON).
    #[must_use]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// An IAM access key: who signs a request.
#[derive(Debug, Clone)]
pub struct AccessKey {
    /// The key's id.
    pub id: String,
    /// Its secret.
    pub secret: String,
}

impl AccessKey {
    /// The emulator's account root.
    #[must_use]
    pub fn root() -> Self {
        Self {
            id: ACCESS_KEY.to_owned(),
            secret: ACCESS_KEY.to_owned(),
        }
    }
}

/// Sends HTTP requests to MiniStack, signed with SigV4 as the root when asked: the
/// operator's requests to the API, and the harness's calls of the AWS APIs it has no SDK
/// crate for (API Gateway, Lambda, CloudWatch and its logs), in their JSON protocols.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    endpoint: String,
}

impl Client {
    /// A client of the MiniStack at `endpoint`.
    #[must_use]
    pub fn new(endpoint: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            endpoint: endpoint.to_owned(),
        }
    }

    /// Sends a request to `url`; with `service`, signed for it.
    ///
    /// # Panics
    /// When the request cannot be signed or sent.
    pub async fn send(
        &self,
        method: &str,
        url: &str,
        service: Option<&str>,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        let signer = service.map(|service| (service, AccessKey::root()));
        self.send_as(method, url, signer, headers, body).await
    }

    /// Sends a request to `url`; with a service and a key, signed for the service with
    /// the key.
    ///
    /// # Panics
    /// When the request cannot be signed or sent.
    pub async fn send_as(
        &self,
        method: &str,
        url: &str,
        signer: Option<(&str, AccessKey)>,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        let method_name = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self.http.request(method_name, url).body(body.to_vec());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some((service, key)) = signer {
            let identity: Identity =
                Credentials::new(key.id, key.secret, None, None, "ministack").into();
            let params = v4::SigningParams::builder()
                .identity(&identity)
                .region(REGION)
                .name(service)
                .time(SystemTime::now())
                .settings(SigningSettings::default())
                .build()
                .expect("signing parameters")
                .into();
            let signable = SignableRequest::new(
                method,
                url,
                headers.iter().copied(),
                SignableBody::Bytes(body),
            )
            .expect("a signable request");
            let (instructions, _) = sign(signable, &params).expect("signed").into_parts();
            for (name, value) in instructions.headers() {
                request = request.header(name, value);
            }
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        Answer {
            status: response.status().as_u16(),
            body: response.text().await.unwrap_or_default(),
        }
    }

    /// Calls a REST-JSON API (API Gateway, Lambda) as the root; panics unless it succeeds.
    ///
    /// # Panics
    /// When the call fails.
    pub async fn rest(&self, method: &str, service: &str, path: &str, body: &Value) -> Value {
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let url = format!("{}{path}", self.endpoint);
        let answer = self
            .send(
                method,
                &url,
                Some(service),
                &[("content-type", "application/json")],
                &body,
            )
            .await;
        assert!(
            (200..300).contains(&answer.status),
            "{method} {path} ({service}) answered {}: {}",
            answer.status,
            answer.body
        );
        answer.json()
    }

    /// Calls a JSON-RPC API (CloudWatch, CloudWatch Logs) as the root; panics unless it
    /// succeeds.
    ///
    /// # Panics
    /// When the call fails.
    pub async fn rpc(&self, service: &str, version: &str, target: &str, body: &Value) -> Value {
        let content_type = format!("application/x-amz-json-{version}");
        let answer = self
            .send(
                "POST",
                &format!("{}/", self.endpoint),
                Some(service),
                &[("content-type", &content_type), ("x-amz-target", target)],
                body.to_string().as_bytes(),
            )
            .await;
        assert!(
            (200..300).contains(&answer.status),
            "{target} answered {}: {}",
            answer.status,
            answer.body
        );
        answer.json()
    }
}

/// A template as MiniStack can deploy it, SAM's (`infra/template.yaml`), the CDK app's
/// synthesized one and the CDK's bootstrap template alike: less what MiniStack cannot deploy and plus what it
/// wrongly asks for (the module's comment), each `MaximumConcurrency` given by a `!Ref`
/// written as the number `parameters` give it (or the parameter's default).
///
/// # Panics
/// When the template is not what the harness expects.
#[must_use]
pub fn emulator_template(source: &str, parameters: &[(&str, &str)]) -> String {
    serde_norway::to_string(&for_the_emulator(source, parameters)).expect("YAML")
}

/// [`emulator_template`] of a JSON template, as JSON (what the CDK's CLI reads).
///
/// # Panics
/// As [`emulator_template`].
#[must_use]
pub fn emulator_template_json(source: &str) -> String {
    serde_json::to_string_pretty(&for_the_emulator(source, &[])).expect("JSON")
}

fn for_the_emulator(source: &str, parameters: &[(&str, &str)]) -> Yaml {
    let mut template: Yaml = serde_norway::from_str(source).expect("the template's YAML");
    let defaults = template.get("Parameters").cloned().unwrap_or_default();
    let resources = template["Resources"]
        .as_mapping_mut()
        .expect("the template's resources");
    // MiniStack: "metric math is not supported", and the stack rolls back.
    resources.retain(|_, resource| {
        resource
            .get("Properties")
            .and_then(|p| p.get("Metrics"))
            .is_none()
    });
    // MiniStack is served over plain HTTP here: the policies' TLS-only denials would
    // refuse every call the functions make (MiniStack evaluates aws:SecureTransport).
    for resource in resources.values_mut() {
        let kind = resource["Type"].as_str().unwrap_or_default();
        let policies = [
            "AWS::SNS::TopicPolicy",
            "AWS::SQS::QueuePolicy",
            "AWS::S3::BucketPolicy",
        ];
        if !policies.contains(&kind) {
            continue;
        }
        let statements = resource["Properties"]["PolicyDocument"]["Statement"]
            .as_sequence_mut()
            .expect("a policy's statements");
        statements.retain(|s| {
            s.get("Condition")
                .and_then(|c| c.get("Bool"))
                .and_then(|b| b.get("aws:SecureTransport"))
                .is_none()
        });
    }
    resources.retain(|_, resource| {
        resource
            .get("Properties")
            .and_then(|p| p.get("PolicyDocument"))
            .is_none_or(|d| d["Statement"].as_sequence().is_some_and(|s| !s.is_empty()))
    });
    for resource in resources.values_mut() {
        emulator_fixes(resource, &defaults, parameters);
    }
    template
}

/// Within a resource: each policy statement allowing `sqs:SendMessage` allows
/// `sqs:SendMessageBatch` too (MiniStack asks for it; AWS authorises a batch send as
/// `sqs:SendMessage`); a `MaximumConcurrency: !Ref P` becomes P's number (MiniStack
/// stores a `!Ref`'s value as a string, which stops every SQS poller).
fn emulator_fixes(value: &mut Yaml, defaults: &Yaml, parameters: &[(&str, &str)]) {
    match value {
        Yaml::Mapping(mapping) => {
            if mapping.contains_key("Effect") {
                let actions = match mapping.get("Action") {
                    Some(Yaml::String(action)) => vec![action.clone()],
                    Some(Yaml::Sequence(actions)) => actions
                        .iter()
                        .map(|a| a.as_str().expect("an action").to_owned())
                        .collect(),
                    _ => Vec::new(),
                };
                if actions.iter().any(|a| a == "sqs:SendMessage")
                    && !actions.iter().any(|a| a == "sqs:SendMessageBatch")
                {
                    let mut with_batch: Vec<Yaml> = actions.into_iter().map(Yaml::String).collect();
                    with_batch.push(Yaml::String("sqs:SendMessageBatch".into()));
                    mapping.insert("Action".into(), Yaml::Sequence(with_batch));
                }
            }
            if let Some(Yaml::Tagged(reference)) = mapping.get("MaximumConcurrency")
                && reference.tag == "Ref"
            {
                let name = reference.value.as_str().expect("a parameter's name");
                let number = parameters
                    .iter()
                    .find(|(given, _)| *given == name)
                    .map(|(_, value)| serde_norway::from_str(value).expect("a number"))
                    .unwrap_or_else(|| defaults[name]["Default"].clone());
                assert!(
                    number.is_number(),
                    "{name}'s value is no number: {number:?}"
                );
                mapping.insert("MaximumConcurrency".into(), number);
            }
            for nested in mapping.values_mut() {
                emulator_fixes(nested, defaults, parameters);
            }
        }
        Yaml::Sequence(items) => {
            for item in items {
                emulator_fixes(item, defaults, parameters);
            }
        }
        Yaml::Tagged(tagged) => emulator_fixes(&mut tagged.value, defaults, parameters),
        _ => {}
    }
}

/// `infra/template.yaml` as deployed to MiniStack: as `sam build` writes it (each
/// function's `CodeUri` its build directory, named by its logical id) and as
/// [`emulator_template`] adjusts it.
///
/// # Panics
/// When the template is not what the harness expects.
#[must_use]
pub fn deployable_template(source: &str, parameters: &[(&str, &str)]) -> String {
    let mut template = for_the_emulator(source, parameters);
    let resources = template["Resources"]
        .as_mapping_mut()
        .expect("the template's resources");
    for (name, resource) in resources.iter_mut() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let name = name.as_str().expect("a logical id").to_owned();
        let resource = resource.as_mapping_mut().expect("a function");
        resource.remove("Metadata");
        let properties = resource
            .get_mut("Properties")
            .and_then(Yaml::as_mapping_mut)
            .expect("a function's properties");
        properties.insert("CodeUri".into(), Yaml::String(name));
    }
    serde_norway::to_string(&template).expect("YAML")
}

/// The SAM CLI: `$SAS_SAM`, or the `sam` of the repository's `.venv` that
/// `./tests/run` installs.
///
/// # Panics
/// With instructions, when it is not installed.
#[must_use]
pub fn sam_cli() -> PathBuf {
    let sam =
        std::env::var("SAS_SAM").map_or_else(|_| repository().join(".venv/bin/sam"), PathBuf::from);
    assert!(
        sam.exists(),
        "the SAM CLI is not installed at {}: run ./tests/run, which installs it into .venv, \
         or `.venv/bin/pip install -r tests/requirements.txt`, or set SAS_SAM",
        sam.display()
    );
    sam
}

/// Lays the functions' binaries out under `root` as `cargo lambda build` does
/// (`sas-<name>/bootstrap`, what `infra/localstack/deploy.sh`'s `LAMBDA_DIR` and the CDK
/// app's `SAS_LAMBDA_DIR` take), the tests' workflows beside each.
///
/// # Panics
/// When a file cannot be written.
pub fn lay_out_as_cargo_lambda(root: &Path) {
    lay_out(root, |_, binary| binary);
}

/// Lays the functions' binaries out under `root`, each in the directory `name`
/// gives it from its logical id and its binary, as `bootstrap`, with the tests'
/// workflows beside it in `workflows/`, packaged as a deployment's own are.
fn lay_out(root: &Path, name: impl Fn(&'static str, &'static str) -> &'static str) {
    let mut laid_out = HashSet::new();
    for ((logical_id, binary), built) in FUNCTIONS.iter().zip(built_binaries()) {
        let dir = root.join(name(logical_id, binary));
        // Two functions of one binary share its directory where it is named by the
        // binary: laid out once, as a copy onto its own hard link would empty the
        // binary.
        if !laid_out.insert(dir.clone()) {
            continue;
        }
        std::fs::create_dir_all(&dir).expect("a function's build directory");
        let bootstrap = dir.join("bootstrap");
        if std::fs::hard_link(&built, &bootstrap).is_err() {
            std::fs::copy(&built, &bootstrap).expect("the function's binary copied");
        }
        let workflows = dir.join("workflows");
        std::fs::create_dir_all(&workflows).expect("a workflows directory");
        for file in
            std::fs::read_dir(repository().join("tests/workflows")).expect("tests/workflows")
        {
            let file = file.expect("a workflow file").path();
            std::fs::copy(&file, workflows.join(file.file_name().expect("a name")))
                .expect("a workflow copied");
        }
    }
}

/// Runs a deployment tool with the root's credentials for `ministack`, its output into
/// `log`; panics with the output and MiniStack's log unless it succeeds.
fn run_tool(command: &mut Command, what: &str, ministack: &MiniStack, log: &Path) {
    let output = std::fs::File::create(log).expect("a log file");
    let status = tokio::task::block_in_place(|| {
        command
            .env("AWS_ENDPOINT_URL", &ministack.endpoint)
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", ACCESS_KEY)
            .env("AWS_DEFAULT_REGION", REGION)
            .env("AWS_REGION", REGION)
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env("SAM_CLI_TELEMETRY", "0")
            .env("CDK_DISABLE_CLI_TELEMETRY", "1")
            .stdin(Stdio::null())
            .stdout(output.try_clone().expect("log"))
            .stderr(output)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {what}: {e}"))
    });
    assert!(
        status.success(),
        "{what} failed:\n{}\nMiniStack's log:\n{}",
        tail(log, 80),
        ministack.log_tail()
    );
}

/// The stack deployed on its own MiniStack.
pub struct Deployment {
    /// The API's base URL (no trailing slash).
    pub api: String,
    /// The stack's outputs, by key.
    pub outputs: HashMap<String, String>,
    /// The deployed functions' names, by logical id.
    pub functions: HashMap<String, String>,
    /// The deployed functions' log groups, by logical id.
    log_groups: HashMap<String, String>,
    /// Requests to MiniStack.
    pub client: Client,
    /// The SDK's configuration for MiniStack, as the root.
    pub sdk: SdkConfig,
    /// The build directory, as `sam build` or `cdk synth` would have left it.
    _build: tempfile::TempDir,
    /// The emulator, stopped last.
    pub ministack: MiniStack,
}

impl Deployment {
    /// The stack with the remote services at `remote`'s mock services: leases found as
    /// soon as they end (no bucket), the supervisor every minute (the shortest rate AWS
    /// and MiniStack take).
    ///
    /// # Panics
    /// As [`Deployment::deploy`].
    pub async fn with_services(remote: &crate::aws::Remote) -> Self {
        Self::with_services_and(remote, &[("AuthMode", "NONE")]).await
    }

    /// [`Deployment::with_services`], with more `parameters`, which replace its own
    /// of the same name.
    ///
    /// # Panics
    /// As [`Deployment::deploy`].
    pub async fn with_services_and(
        remote: &crate::aws::Remote,
        parameters: &[(&str, &str)],
    ) -> Self {
        let services = json!(crate::aws::service_urls(&remote.url)).to_string();
        let mut all = vec![
            ("ServiceUrls", services.as_str()),
            ("SupervisorRate", "rate(1 minute)"),
            ("LeaseBucketSeconds", "0"),
            ("AgentMaxConcurrency", "10"),
        ];
        all.retain(|(name, _)| parameters.iter().all(|(given, _)| given != name));
        all.extend_from_slice(parameters);
        Self::deploy(&all).await
    }

    /// Starts MiniStack and deploys `infra/template.yaml` to it with `sam deploy`, the
    /// functions being this workspace's debug binaries, with these parameters (the
    /// template's defaults for the others).
    ///
    /// # Panics
    /// With instructions, when a binary or a tool is missing, or the deployment fails;
    /// on a current-thread runtime (`sam` runs in a blocking section).
    pub async fn deploy(parameters: &[(&str, &str)]) -> Self {
        let sam = sam_cli();
        let ministack = MiniStack::start();
        let source = std::fs::read_to_string(repository().join("infra/template.yaml"))
            .expect("infra/template.yaml");

        // As `sam build` lays it out: .aws-sam/build/<LogicalId>/bootstrap and the template.
        let build = tempfile::tempdir().expect("a build directory");
        let built = build.path().join(".aws-sam/build");
        lay_out(&built, |logical_id, _| logical_id);
        std::fs::write(
            built.join("template.yaml"),
            deployable_template(&source, parameters),
        )
        .expect("the built template");

        // Quoted each: SAM's CLI cuts an unquoted value at its first space or brace.
        let overrides: Vec<String> = parameters
            .iter()
            .map(|(key, value)| format!("{key}='{value}'"))
            .collect();
        let sam_run = |args: &[&str], log: &str| {
            run_tool(
                Command::new(&sam).args(args).current_dir(build.path()),
                &format!("sam {}", args[0]),
                &ministack,
                &build.path().join(log),
            );
        };
        let mut deploy = vec![
            "deploy",
            "--stack-name",
            "sas",
            "--resolve-s3",
            "--capabilities",
            "CAPABILITY_IAM",
            "--no-confirm-changeset",
            "--no-progressbar",
            "--parameter-overrides",
        ];
        deploy.extend(overrides.iter().map(String::as_str));
        sam_run(&deploy, "sam.log");
        sam_run(
            &[
                "list",
                "stack-outputs",
                "--stack-name",
                "sas",
                "--output",
                "json",
            ],
            "outputs.json",
        );
        let text = std::fs::read_to_string(build.path().join("outputs.json")).unwrap_or_default();
        let listed: Value = serde_json::from_str(&text).expect("the outputs' JSON");
        let outputs: HashMap<String, String> = listed
            .as_array()
            .expect("outputs")
            .iter()
            .map(|o| {
                (
                    o["OutputKey"].as_str().expect("key").to_owned(),
                    o["OutputValue"].as_str().expect("value").to_owned(),
                )
            })
            .collect();
        Self::found(ministack, build, outputs).await
    }

    /// Starts MiniStack and deploys the CDK app (`infra/cdk`) to it as its users deploy
    /// it, with its context `context` (`-c name=value`; the app's defaults for the rest,
    /// IAM authentication among them): compiled with `tsc` and synthesized with `cdk
    /// synth` from this workspace's debug binaries laid out as `cargo lambda build` lays
    /// them out (`SAS_LAMBDA_DIR`), the environment bootstrapped with `cdk bootstrap`,
    /// then `cdk deploy` of the cloud assembly, which zips each function's directory and
    /// uploads it and the template to the bootstrap's bucket, then creates the stack.
    /// The synthesized template and the bootstrap's are MiniStack's copies
    /// ([`emulator_template`]: the bootstrap bucket's policy is its TLS-only denial).
    ///
    /// # Panics
    /// With instructions, when a binary or the CDK app's packages are missing
    /// (`npm ci` in `infra/cdk`, which `infra/check` runs), or the deployment fails; on a
    /// current-thread runtime (the tools run in a blocking section).
    pub async fn deploy_cdk(context: &[(&str, &str)]) -> Self {
        let app = repository().join("infra/cdk");
        let (cdk, tsc) = (
            app.join("node_modules/.bin/cdk"),
            app.join("node_modules/.bin/tsc"),
        );
        assert!(
            cdk.exists() && tsc.exists(),
            "the CDK app's packages are not installed in {}: run ./tests/run (infra/check \
             installs them) or `npm ci` there",
            app.display()
        );
        let ministack = MiniStack::start();
        let build = tempfile::tempdir().expect("a build directory");
        let lambda = build.path().join("lambda");
        lay_out_as_cargo_lambda(&lambda);

        // The app compiled out of the source tree, its packages found through a link.
        std::os::unix::fs::symlink(app.join("node_modules"), build.path().join("node_modules"))
            .expect("node_modules linked");
        let compiled = build.path().join("app");
        let cdk_run = |program: &Path, args: &[&str], log: &str| {
            run_tool(
                Command::new(program)
                    .args(args)
                    .current_dir(build.path())
                    .env("SAS_LAMBDA_DIR", &lambda),
                &format!(
                    "{} {}",
                    program.file_name().unwrap_or_default().display(),
                    args[0]
                ),
                &ministack,
                &build.path().join(log),
            );
        };
        let project = app.join("tsconfig.json");
        cdk_run(
            &tsc,
            &[
                "--project",
                &project.display().to_string(),
                "--outDir",
                &compiled.display().to_string(),
            ],
            "tsc.log",
        );
        let assembly = build.path().join("cdk.out");
        let node_app = format!("node {}", compiled.join("bin/app.js").display());
        let mut synth = vec![
            "synth".to_owned(),
            "--quiet".into(),
            "--no-notices".into(),
            "--app".into(),
            node_app,
            "--output".into(),
            assembly.display().to_string(),
        ];
        for (name, value) in context {
            synth.extend(["-c".into(), format!("{name}={value}")]);
        }
        let synth: Vec<&str> = synth.iter().map(String::as_str).collect();
        cdk_run(&cdk, &synth, "synth.log");
        let template = assembly.join("SchedulerAgentSupervisor.template.json");
        let source = std::fs::read_to_string(&template).expect("the synthesized template");
        std::fs::write(&template, emulator_template_json(&source)).expect("the template");

        let shown = tokio::task::block_in_place(|| {
            Command::new(&cdk)
                .args(["bootstrap", "--show-template", "--no-notices"])
                .current_dir(build.path())
                .env("CDK_DISABLE_CLI_TELEMETRY", "1")
                .stdin(Stdio::null())
                .output()
                .expect("cdk bootstrap --show-template")
        });
        assert!(
            shown.status.success(),
            "cdk bootstrap --show-template: {}",
            String::from_utf8_lossy(&shown.stderr)
        );
        let shown = String::from_utf8(shown.stdout).expect("the bootstrap template");
        let bootstrap = build.path().join("bootstrap-emulator.yaml");
        std::fs::write(&bootstrap, emulator_template(&shown, &[])).expect("a template");
        let assembly = assembly.display().to_string();
        let environment = format!("aws://{}/{REGION}", "000000000000");
        cdk_run(
            &cdk,
            &[
                "bootstrap",
                &environment,
                "--app",
                &assembly,
                "--template",
                &bootstrap.display().to_string(),
                "--no-notices",
            ],
            "bootstrap.log",
        );
        let outputs_file = build.path().join("outputs.json");
        cdk_run(
            &cdk,
            &[
                "deploy",
                "--app",
                &assembly,
                "--require-approval",
                "never",
                "--progress",
                "events",
                "--no-notices",
                "--outputs-file",
                &outputs_file.display().to_string(),
            ],
            "deploy.log",
        );
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&outputs_file).expect("the outputs"))
                .expect("the outputs' JSON");
        let outputs = written["SchedulerAgentSupervisor"]
            .as_object()
            .expect("the stack's outputs")
            .iter()
            .map(|(key, value)| (key.clone(), value.as_str().expect("a value").to_owned()))
            .collect();
        Self::found(ministack, build, outputs).await
    }

    /// The deployment whose stack has these `outputs`: its functions found by logical id
    /// (a deployed function's name holds it, SAM's and the CDK's alike), their log
    /// groups, and its API's URL on MiniStack.
    async fn found(
        ministack: MiniStack,
        build: tempfile::TempDir,
        outputs: HashMap<String, String>,
    ) -> Self {
        let client = Client::new(&ministack.endpoint);
        let listed = client
            .rest("GET", "lambda", "/2015-03-31/functions/", &Value::Null)
            .await;
        let (mut functions, mut log_groups) = (HashMap::new(), HashMap::new());
        for function in listed["Functions"].as_array().expect("functions") {
            let name = function["FunctionName"].as_str().expect("a name");
            for (logical_id, _) in FUNCTIONS {
                if name.contains(logical_id) {
                    functions.insert(logical_id.to_owned(), name.to_owned());
                    // Its own group when the stack names one (the CDK construct's), else
                    // Lambda's default (SAM's, whose group is named so).
                    let group = function["LoggingConfig"]["LogGroup"]
                        .as_str()
                        .map_or_else(|| format!("/aws/lambda/{name}"), str::to_owned);
                    log_groups.insert(logical_id.to_owned(), group);
                }
            }
        }
        assert_eq!(
            functions.len(),
            FUNCTIONS.len(),
            "every function deployed: {listed}"
        );

        // The API id is the first label of the ApiUrl output's host.
        let api_id = outputs["ApiUrl"]
            .split("://")
            .last()
            .and_then(|host| host.split('.').next())
            .expect("an API id")
            .to_owned();
        Self {
            api: format!("{}/_aws/execute-api/{api_id}", ministack.endpoint),
            outputs,
            functions,
            log_groups,
            client,
            sdk: ministack.sdk(),
            _build: build,
            ministack,
        }
    }

    /// A request to the API; signed as the root when `signed`.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        signed: bool,
    ) -> Answer {
        self.send(method, path, body, signed.then(AccessKey::root), None)
            .await
    }

    /// A request to the API signed with `key`.
    pub async fn call_signed_as(
        &self,
        key: &AccessKey,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Answer {
        self.send(method, path, body, Some(key.clone()), None).await
    }

    /// An IAM user of the emulator's account named `name`, with `policy` and an access
    /// key: the key.
    ///
    /// # Panics
    /// When IAM refuses.
    pub async fn iam_user(&self, name: &str, policy: &Value) -> AccessKey {
        let iam = |body: String| {
            let client = &self.client;
            async move {
                let answer = client
                    .send(
                        "POST",
                        &format!("{}/", self.ministack.endpoint),
                        Some("iam"),
                        &[("content-type", "application/x-www-form-urlencoded")],
                        body.as_bytes(),
                    )
                    .await;
                assert_eq!(answer.status, 200, "{body}: {}", answer.body);
                answer.body
            }
        };
        iam(format!(
            "Action=CreateUser&UserName={name}&Version=2010-05-08"
        ))
        .await;
        let document = percent_encoding::utf8_percent_encode(
            &policy.to_string(),
            percent_encoding::NON_ALPHANUMERIC,
        )
        .to_string();
        iam(format!(
            "Action=PutUserPolicy&UserName={name}&PolicyName=api&PolicyDocument={document}&Version=2010-05-08"
        ))
        .await;
        let created = iam(format!(
            "Action=CreateAccessKey&UserName={name}&Version=2010-05-08"
        ))
        .await;
        let element = |tag: &str| {
            let start = created.find(&format!("<{tag}>")).expect(tag) + tag.len() + 2;
            let end = created[start..].find('<').expect("its end") + start;
            created[start..end].to_owned()
        };
        AccessKey {
            id: element("AccessKeyId"),
            secret: element("SecretAccessKey"),
        }
    }

    /// A request to the API with `token` as its bearer token.
    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Answer {
        self.send(method, path, body, None, token).await
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        signer: Option<AccessKey>,
        token: Option<&str>,
    ) -> Answer {
        let body = body.map(Value::to_string).unwrap_or_default();
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = Vec::new();
        if !body.is_empty() {
            headers.push(("content-type", "application/json"));
        }
        if let Some(bearer) = &bearer {
            headers.push(("authorization", bearer.as_str()));
        }
        self.client
            .send_as(
                method,
                &format!("{}{path}", self.api),
                signer.map(|key| ("execute-api", key)),
                &headers,
                body.as_bytes(),
            )
            .await
    }

    /// Invokes a function (by logical id) with `payload`, as the root; returns its answer.
    pub async fn invoke(&self, function: &str, payload: &Value) -> Value {
        self.client
            .rest(
                "POST",
                "lambda",
                &format!(
                    "/2015-03-31/functions/{}/invocations",
                    self.functions[function]
                ),
                payload,
            )
            .await
    }

    /// The lines a function (by logical id) has logged so far.
    pub async fn logs(&self, function: &str) -> Vec<String> {
        let group = &self.log_groups[function];
        let mut lines = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut request = json!({"logGroupName": group});
            if let Some(token) = &token {
                request["nextToken"] = json!(token);
            }
            let page = self
                .client
                .rpc("logs", "1.1", "Logs_20140328.FilterLogEvents", &request)
                .await;
            for event in page["events"].as_array().into_iter().flatten() {
                lines.push(event["message"].as_str().unwrap_or_default().to_owned());
            }
            match page["nextToken"].as_str() {
                Some(next) if token.as_deref() != Some(next) => token = Some(next.to_owned()),
                _ => return lines,
            }
        }
    }

    /// Waits until `check` gives a value, polling every `every`; panics after `patience`,
    /// saying what was awaited and showing the last thing seen.
    pub async fn wait<T, F, Fut>(
        &self,
        what: &str,
        patience: Duration,
        every: Duration,
        check: F,
    ) -> T
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            match check().await {
                Ok(value) => return value,
                Err(last) => {
                    if tokio::time::Instant::now() >= deadline {
                        panic!(
                            "{what}: not within {patience:?}; last seen: {last}\n{}\nMiniStack's log:\n{}",
                            self.all_logs().await,
                            self.ministack.log_tail()
                        );
                    }
                }
            }
            tokio::time::sleep(every).await;
        }
    }

    /// What the functions logged, for failure messages.
    pub async fn all_logs(&self) -> String {
        let mut text = String::new();
        for (function, _) in FUNCTIONS {
            let _ = writeln!(text, "--- {function}");
            for line in self.logs(function).await {
                let _ = writeln!(text, "{line}");
            }
        }
        text
    }
}

/// The functions' binaries, built by cargo for this machine into the test's
/// own target directory (cargo decides whether they are up to date: a check of file
/// times found them stale when only the lock file had changed).
fn built_binaries() -> Vec<PathBuf> {
    FUNCTIONS
        .iter()
        .map(|(_, binary)| crate::function_binary(binary))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> String {
        std::fs::read_to_string(repository().join("infra/template.yaml")).expect("template")
    }

    #[test]
    fn the_deployed_template_is_the_template_less_metric_math_and_tls_denials_plus_batch_sends() {
        let source = template();
        let deployed: Yaml = serde_norway::from_str(&deployable_template(
            &source,
            &[("AgentMaxConcurrency", "7")],
        ))
        .expect("YAML");
        let original: Yaml = serde_norway::from_str(&source).expect("YAML");
        let resources = deployed["Resources"].as_mapping().expect("resources");
        let removed: Vec<&str> = original["Resources"]
            .as_mapping()
            .expect("resources")
            .keys()
            .filter(|k| !resources.contains_key(*k))
            .map(|k| k.as_str().expect("id"))
            .collect();
        assert_eq!(
            removed,
            [
                "QueuesTlsOnly",
                "IngestQueuesTlsOnly",
                "OldestMessageAlarm",
                "PanicsAlarm",
                "FunctionErrorsAlarm",
                "FunctionThrottlesAlarm"
            ]
        );
        let topic_policy = serde_json::to_string(
            &resources["AlertTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"],
        )
        .expect("json");
        assert!(
            !topic_policy.contains("SecureTransport") && topic_policy.contains("cloudwatch"),
            "the topic's policy less its TLS-only denial: {topic_policy}"
        );
        for (logical_id, _) in FUNCTIONS {
            let properties = &resources[logical_id]["Properties"];
            assert_eq!(properties["CodeUri"].as_str(), Some(logical_id));
            for statement in properties["Policies"][0]["Statement"]
                .as_sequence()
                .expect("statements")
            {
                let actions = serde_json::to_string(&statement["Action"]).expect("json");
                assert_eq!(
                    actions.contains("\"sqs:SendMessage\""),
                    actions.contains("sqs:SendMessageBatch"),
                    "{logical_id}: {actions}"
                );
            }
        }
        assert_eq!(
            deployed["Resources"]["AlertTopic"], original["Resources"]["AlertTopic"],
            "tags such as !GetAtt survive"
        );
        // Numbers, the one given and the other's default.
        let concurrency = |value: &Yaml| serde_json::to_value(value).expect("JSON");
        assert_eq!(
            concurrency(
                &resources["AgentFunction"]["Properties"]["Events"]["Requests"]["Properties"]["ScalingConfig"]
                    ["MaximumConcurrency"]
            ),
            json!(7)
        );
        assert_eq!(
            concurrency(
                &resources["IngestEvents"]["Properties"]["ScalingConfig"]["MaximumConcurrency"]
            ),
            json!(2)
        );
    }
}

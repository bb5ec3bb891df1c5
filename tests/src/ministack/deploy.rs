//! The stack deployed on a MiniStack of its own, with `sam deploy` or the CDK app's
//! `cdk deploy`, the functions' binaries laid out as the tools lay them out.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use aws_types::SdkConfig;
use serde_json::{Value, json};

use super::client::Client;
use super::template::{deployable_template, emulator_template, emulator_template_json};
use super::{ACCESS_KEY, FUNCTIONS, MiniStack, REGION, tail};
use crate::aws::repository;

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
    pub(super) log_groups: HashMap<String, String>,
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

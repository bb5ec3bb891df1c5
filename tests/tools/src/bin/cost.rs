//! Counts the AWS requests a workflow's task costs on the Lambda path, on moto (a drone
//! delivery unless told): the four functions fed real-shaped events, moto recording
//! every request they make, the remote services answering every call at once.
//! Prints the requests per task by service and operation, DynamoDB write and read
//! units (from the items' sizes, as DynamoDB bills them, indexes included), Lambda
//! invocations and batch sizes, and dollars per million tasks at list prices, beside
//! Step Functions.
//!
//! ```text
//! cargo run -p sas-tools --bin cost -- [--tasks 100] [--lease-bucket-seconds 60] [--waves 6] [--ingestion direct|buffered] [--batch 1..25] [--limits '{"drone": {"max_concurrency": 50}}']
//!     [--workflow drone-delivery] [--input '{...}'] [--workflows DIR] [--notify]
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use clap::Parser;
use sas_tests::aws::{Moto, QueuePolicy, Remote, Stack, StackOptions};
use sas_tests::delivery_input;
use sas_tools::Ingestion;
use sas_tools::recording::{self, Recorded};
use serde_json::{Value, json};

/// Counts the AWS requests a workflow's task costs on the Lambda path, on moto, and
/// prints them per task, with dollars per million tasks at list prices.
#[derive(Parser)]
struct Args {
    /// Tasks run.
    #[arg(long, default_value_t = 100)]
    tasks: usize,
    /// The stack's lease bucket, in seconds; the tasks run in waves spread over one.
    #[arg(long, default_value_t = 60)]
    lease_bucket_seconds: u64,
    /// Waves the tasks are submitted in (at least 1, at most one a task).
    #[arg(long, default_value_t = 6)]
    waves: usize,
    /// How the stack takes a submission (`IngestionMode`): the task written by the
    /// API function, or the request queued and the task created by the scheduler.
    #[arg(long, value_enum, default_value_t = Ingestion::Direct)]
    ingestion: Ingestion,
    /// Submissions per request: 1 is `PUT /tasks/{id}`; more, `POST /tasks/batch`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=25))]
    batch: u16,
    /// Services' limits, as in their settings: `{"drone": {"max_concurrency": 50}}`.
    #[arg(long, value_parser = limits)]
    limits: Option<Value>,
    /// The workflow the tasks run: a built-in one, or one of `--workflows`. Every
    /// task must end Processed with the remote services answering at once.
    #[arg(long, default_value = "drone-delivery")]
    workflow: String,
    /// The tasks' input, as JSON [default: a drone delivery's].
    #[arg(long, value_parser = json_object)]
    input: Option<Value>,
    /// A directory of workflow definitions, as `SAS_WORKFLOWS_DIR`: each agent they
    /// name is answered by the mock services.
    #[arg(long)]
    workflows: Option<PathBuf>,
    /// Each task names a notification queue (`notify`), created first: its status
    /// notifications, and the writes that clear them once sent, are counted too.
    #[arg(long)]
    notify: bool,
    /// Every service answers this many bytes of JSON (a step's answer of 1 MB:
    /// 1048576), which the stack keeps apart in S3: its puts, gets and bytes counted.
    #[arg(long)]
    answer_bytes: Option<usize>,
}

/// The notification queue of `--notify`.
const NOTIFICATIONS: &str = "cost-notifications";

/// `--limits`: a JSON object of services' settings.
fn limits(text: &str) -> Result<Value, String> {
    json_object(text).map_err(|error| format!("services' settings: {error}"))
}

/// A JSON object.
fn json_object(text: &str) -> Result<Value, String> {
    match serde_json::from_str(text) {
        Ok(Value::Object(object)) => Ok(Value::Object(object)),
        Ok(_) => Err("must be a JSON object".into()),
        Err(error) => Err(error.to_string()),
    }
}

/// Every agent the workflow definitions in `dir` name, at any depth (a branch's,
/// a map's or a child's steps too).
fn agents_in(dir: &Path) -> Result<Vec<String>, String> {
    fn collect(value: &Value, agents: &mut BTreeSet<String>) {
        match value {
            Value::Object(fields) => {
                for (name, field) in fields {
                    match (name.as_str(), field) {
                        ("agent", Value::String(agent)) => {
                            agents.insert(agent.clone());
                        }
                        _ => collect(field, agents),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| collect(item, agents)),
            _ => {}
        }
    }
    let mut agents = BTreeSet::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let definition: Value =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            collect(&definition, &mut agents);
        }
    }
    Ok(agents.into_iter().collect())
}

/// us-east-1 list prices, November 2026.
mod price {
    pub const DYNAMODB_WRITE_UNIT: f64 = 0.625 / 1e6;
    pub const DYNAMODB_READ_UNIT: f64 = 0.125 / 1e6;
    /// Provisioned capacity, per unit-hour.
    pub const DYNAMODB_WCU_HOUR: f64 = 0.000_65;
    pub const DYNAMODB_RCU_HOUR: f64 = 0.000_13;
    /// The share of provisioned capacity used, at auto scaling's target.
    pub const AUTO_SCALING_TARGET: f64 = 0.7;
    pub const SQS_REQUEST: f64 = 0.40 / 1e6;
    pub const SNS_PUBLISH: f64 = 0.50 / 1e6;
    pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
    pub const LAMBDA_ARM_GB_SECOND: f64 = 0.000_013_333_4;
    pub const HTTP_API_REQUEST: f64 = 1.00 / 1e6;
    pub const STEP_FUNCTIONS_STANDARD_TRANSITION: f64 = 0.025 / 1e3;
    pub const STEP_FUNCTIONS_EXPRESS_REQUEST: f64 = 1.00 / 1e6;
    pub const STEP_FUNCTIONS_EXPRESS_GB_SECOND: f64 = 0.000_016_67;
    pub const S3_PUT: f64 = 0.005 / 1e3;
    pub const S3_GET: f64 = 0.0004 / 1e3;
    /// S3 Standard, per GB-month.
    pub const S3_GB_MONTH: f64 = 0.023;
}

/// The size of a DynamoDB item as DynamoDB bills it: names and values.
fn item_size(item: &Value) -> usize {
    item.as_object().map_or(0, |attributes| {
        attributes
            .iter()
            .map(|(name, value)| {
                name.len()
                    + value.as_object().map_or(0, |typed| {
                        typed
                            .iter()
                            .map(|(kind, v)| match (kind.as_str(), v.as_str()) {
                                // Binary values are recorded in base64; billed as bytes.
                                ("B", Some(text)) => text.len() / 4 * 3,
                                (_, Some(text)) => text.len(),
                                _ => 8,
                            })
                            .sum::<usize>()
                    })
            })
            .sum()
    })
}

fn units(bytes: usize, unit: usize) -> u64 {
    bytes.div_ceil(unit).max(1) as u64
}

/// Index keys of an item: (index, partition, sort) when the item is in the index.
fn index_entries(item: &Value) -> Vec<(&'static str, String)> {
    [
        ("expiry", "lease_shard", "lease_expires"),
        ("listing", "listed_state", "listed_key"),
    ]
    .into_iter()
    .filter_map(|(index, partition, sort)| {
        let key = format!("{}|{}", item.get(partition)?, item.get(sort)?);
        Some((index, key))
    })
    .collect()
}

#[derive(Default)]
struct Tally {
    requests: BTreeMap<String, u64>,
    /// The bytes of the values put in S3.
    stored_bytes: usize,
    write_units: u64,
    /// The table's write units by the kind of item written: its key's prefix.
    write_units_by_kind: BTreeMap<String, u64>,
    index_write_units: u64,
    written_bytes: usize,
    writes: usize,
    /// Read units, in halves: an eventually consistent read costs half a unit per 4 KB.
    read_half_units: u64,
    /// The last version of every item written, for the index writes of the next.
    items: HashMap<String, Value>,
    /// The client request tokens of the transactions written.
    transactions: HashSet<String>,
    /// Transactions sent again with their token (the SDK's retry of one whose answer
    /// was lost): DynamoDB does not apply them again, and bills the reads of their
    /// items rather than their writes; moto applies neither.
    repeated_transactions: u64,
}

impl Tally {
    fn write(&mut self, item: &Value, transactional: bool) {
        self.write_billed(item, item_size(item), transactional);
    }

    /// An UpdateItem: billed by the larger of the item before and after it, as
    /// DynamoDB bills one. Reads the `SET #a = :a, ... REMOVE #b, ...` expressions the
    /// store writes.
    fn update(&mut self, update: &Value, transactional: bool) {
        let key = &update["Key"];
        let before = self
            .items
            .get(&format!("{}|{}", key["pk"], key["sk"]))
            .cloned()
            .unwrap_or_else(|| key.clone());
        let mut after = before.clone();
        let expression = update["UpdateExpression"].as_str().unwrap_or_default();
        let (set, remove) = expression.split_once("REMOVE ").unwrap_or((expression, ""));
        let name = |placeholder: &str| {
            update["ExpressionAttributeNames"][placeholder.trim()]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        for assignment in set.trim().trim_start_matches("SET ").split(", ") {
            if let Some((attribute, value)) = assignment.split_once(" = ") {
                after[name(attribute)] = update["ExpressionAttributeValues"][value.trim()].clone();
            }
        }
        for attribute in remove.split(", ").filter(|a| !a.trim().is_empty()) {
            if let Some(attributes) = after.as_object_mut() {
                attributes.remove(&name(attribute));
            }
        }
        let billed = item_size(&before).max(item_size(&after));
        self.write_billed(&after, billed, transactional);
    }

    fn write_billed(&mut self, item: &Value, billed: usize, transactional: bool) {
        let factor = if transactional { 2 } else { 1 };
        self.count_write(&item["pk"], factor * units(billed, 1024));
        self.written_bytes += item_size(item);
        self.writes += 1;
        let key = format!("{}|{}", item["pk"], item["sk"]);
        let before: Vec<_> = self.items.get(&key).map(index_entries).unwrap_or_default();
        let after = index_entries(item);
        // A keys-only index entry costs a unit to write and one to remove; a changed key both.
        for (index, entry) in &after {
            if !before.contains(&(index, entry.clone())) {
                self.index_write_units += 1;
            }
        }
        for (index, entry) in &before {
            if !after.contains(&(index, entry.clone())) {
                self.index_write_units += 1;
            }
        }
        self.items.insert(key, item.clone());
    }

    fn count_write(&mut self, pk: &Value, units: u64) {
        let pk = pk["S"].as_str().unwrap_or_default();
        let kind = pk.split_once('#').map_or(pk, |(kind, _)| kind);
        *self.write_units_by_kind.entry(kind.to_owned()).or_default() += units;
        self.write_units += units;
    }

    fn delete(&mut self, key: &Value, transactional: bool) {
        let key = format!("{}|{}", key["pk"], key["sk"]);
        let removed = self.items.remove(&key).unwrap_or(Value::Null);
        let factor = if transactional { 2 } else { 1 };
        self.count_write(&removed["pk"], factor * units(item_size(&removed), 1024));
        self.writes += 1;
    }

    fn read(&mut self, items: &[Value], consistent: bool) {
        let bytes: usize = items.iter().map(item_size).sum();
        self.read_half_units += units(bytes, 4096) * if consistent { 2 } else { 1 };
    }

    fn read_units(&self) -> f64 {
        self.read_half_units as f64 / 2.0
    }

    fn record(&mut self, recorded: &Recorded) {
        let Recorded {
            operation,
            request,
            bytes,
        } = recorded;
        *self.requests.entry(operation.clone()).or_default() += 1;
        if operation == "s3:PutObject" {
            self.stored_bytes += bytes;
        }
        let consistent = request["ConsistentRead"].as_bool() == Some(true);
        match operation.as_str() {
            "dynamodb:PutItem" => self.write(&request["Item"], false),
            "dynamodb:UpdateItem" => self.update(request, false),
            "dynamodb:TransactWriteItems" => {
                let items = request["TransactItems"].as_array().into_iter().flatten();
                let token = request["ClientRequestToken"].as_str().unwrap_or_default();
                if token.is_empty() || self.transactions.insert(token.to_owned()) {
                    for item in items {
                        if let Some(delete) = item.get("Delete") {
                            // A delete is billed by the size of the item it removes.
                            self.delete(&delete["Key"], true);
                        } else if let Some(update) = item.get("Update") {
                            self.update(update, true);
                        } else {
                            self.write(&item["Put"]["Item"], true);
                        }
                    }
                } else {
                    self.repeated_transactions += 1;
                    for item in items {
                        // A transactional read: two units per 4 KB, four halves.
                        self.read_half_units += 4 * units(item_size(&item["Put"]["Item"]), 4096);
                    }
                }
            }
            // Reads are billed by the size of what they return; the stored items stand in.
            "dynamodb:GetItem" => {
                let key = format!("{}|{}", request["Key"]["pk"], request["Key"]["sk"]);
                let item = self.items.get(&key).cloned().unwrap_or(Value::Null);
                self.read(&[item], consistent);
            }
            "dynamodb:Query" => {
                let pk = &request["ExpressionAttributeValues"][":pk"];
                let items: Vec<Value> = self
                    .items
                    .values()
                    .filter(|i| !pk.is_null() && &i["pk"] == pk)
                    .cloned()
                    .collect();
                self.read(&items, consistent);
            }
            "dynamodb:BatchGetItem" => {
                let keys: Vec<Value> = request["RequestItems"]
                    .as_object()
                    .into_iter()
                    .flat_map(|t| t.values())
                    .flat_map(|t| t["Keys"].as_array().cloned().unwrap_or_default())
                    .collect();
                for key in keys {
                    let item = self
                        .items
                        .get(&format!("{}|{}", key["pk"], key["sk"]))
                        .cloned()
                        .unwrap_or(Value::Null);
                    self.read(&[item], consistent);
                }
            }
            _ => {}
        }
    }
}

/// Submits tasks `cost-{i}` of `workflow` for each `i`: alone, or in one batch.
///
/// # Errors
/// The API's answer, when it does not take one.
async fn submit(
    stack: &Stack,
    workflow: &str,
    input: &Value,
    notify: bool,
    ids: &[usize],
) -> Result<(), Value> {
    let body = |i: &usize| {
        let mut body = json!({ "id": format!("cost-{i}"), "workflow": workflow, "input": input });
        if notify {
            body["notify"] = json!(NOTIFICATIONS);
        }
        body
    };
    if let [i] = ids {
        let (status, answer) = stack
            .http("PUT", &format!("/tasks/cost-{i}"), Some(&body(i)))
            .await;
        return if status == 202 { Ok(()) } else { Err(answer) };
    }
    let batch = json!({ "tasks": ids.iter().map(body).collect::<Vec<_>>() });
    let (status, answer) = stack.http("POST", "/tasks/batch", Some(&batch)).await;
    let taken = |results: &Vec<Value>| results.iter().all(|r| r["status"] == 202);
    if status == 200 && answer["results"].as_array().is_some_and(taken) {
        Ok(())
    } else {
        Err(answer)
    }
}

/// Stops the tool with `message`, as a refusal of its arguments.
fn refuse(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(2);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Args {
        tasks,
        lease_bucket_seconds,
        waves,
        ingestion,
        batch,
        limits,
        workflow,
        input,
        workflows,
        notify,
        answer_bytes,
    } = Args::parse();
    let input = input.unwrap_or_else(delivery_input);
    let agents = match workflows.as_deref().map(agents_in).transpose() {
        Ok(agents) => agents.unwrap_or_default(),
        Err(error) => refuse(&format!("--workflows: {error}")),
    };
    println!("{}", sas_tools::provenance());
    let waves = waves.clamp(1, tasks.max(1));
    let recording = tempfile::NamedTempFile::new().expect("recording file");
    let path = recording.path().to_str().expect("path").to_owned();
    let moto = Moto::start_with(&[("MOTO_RECORDER_FILEPATH", path.as_str())]);
    let endpoint = moto.endpoint.clone();
    let remote = Remote::start(false).await;
    if let Some(bytes) = answer_bytes {
        let services = sas_tests::aws::service_urls(&remote.url).into_keys();
        for service in services.chain(agents.iter().cloned()) {
            let padded = serde_json::from_value(json!({"answer_bytes": bytes}));
            remote.mocks.set_faults(&service, padded.expect("faults"));
        }
    }
    let options = StackOptions {
        lease_bucket_seconds,
        buffered: ingestion == Ingestion::Buffered,
        limits: limits.clone().unwrap_or_default(),
        workflows,
        agents,
    };
    let policy = QueuePolicy {
        visibility_seconds: 30,
        max_receive_count: 5,
    };
    let stack = Stack::with(moto, &remote.url, policy, &options).await;
    if notify {
        aws_sdk_sqs::Client::new(&stack.sdk)
            .create_queue()
            .queue_name(NOTIFICATIONS)
            .send()
            .await
            .expect("the notification queue");
    }
    let http = reqwest::Client::new();
    http.post(format!("{endpoint}/moto-api/recorder/start-recording"))
        .send()
        .await
        .expect("recording");
    let before = stack.invocations();
    let mut submissions = 0_u64;

    // Waves spread over one lease bucket: whether a task's lease crosses into another
    // bucket (an index write) depends on when in the bucket it runs.
    let wave_gap = std::time::Duration::from_secs(lease_bucket_seconds) / waves as u32;
    for wave in 0..waves {
        let started = std::time::Instant::now();
        let wave_tasks: Vec<usize> = (wave..tasks).step_by(waves).collect();
        for chunk in wave_tasks.chunks(usize::from(batch)) {
            if let Err(answer) = submit(&stack, &workflow, &input, notify, chunk).await {
                drop(stack); // stops moto, which exiting would leave running
                refuse(&format!("the API refused a task of {workflow}: {answer}"));
            }
            submissions += 1;
        }
        // Until the queues are empty twice running (a task's next message may be on its way).
        let mut idle = 0;
        while idle < 2 {
            idle = if stack.pump(false).await == 0 {
                idle + 1
            } else {
                0
            };
        }
        if wave + 1 < waves {
            tokio::time::sleep(wave_gap.saturating_sub(started.elapsed())).await;
        }
    }
    // The deadline messages come when their leases end, the latest a pickup lease
    // (30 s) after the last step: they are part of what a task costs.
    let drained = std::time::Instant::now() + std::time::Duration::from_secs(31);
    while std::time::Instant::now() < drained {
        if stack.pump(false).await == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    stack.supervise().await;
    http.post(format!("{endpoint}/moto-api/recorder/stop-recording"))
        .send()
        .await
        .expect("recording");
    // Before the reads that check the tasks, which the API's read function serves.
    let after = stack.invocations();
    let mut steps_run = 0;
    for i in 0..tasks {
        let (_, task) = stack.http("GET", &format!("/tasks/cost-{i}"), None).await;
        if task["state"] != "Processed" {
            drop(stack); // stops moto, which exiting would leave running
            eprintln!(
                "error: task cost-{i} is {}, not Processed: only tasks that finish with the services answering at once are counted\n{task:#}",
                task["state"]
            );
            std::process::exit(1);
        }
        steps_run += task["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|step| step["state"] == "Processed")
            .count();
    }
    #[allow(clippy::cast_precision_loss)]
    let steps_per_task = steps_run as f64 / tasks as f64;

    let mut tally = Tally::default();
    let recorded = std::fs::read_to_string(recording.path()).expect("recording");
    for request in recording::requests(&recorded) {
        tally.record(&request);
    }
    let per_task = |n: u64| n as f64 / tasks as f64;
    println!(
        "{tasks} tasks of {workflow} ({steps_per_task:.1} steps run each) through the four functions on moto 5.2.5, {} ingestion, {batch} a request\n",
        ingestion.name()
    );
    if let Some(limits) = &limits {
        println!("services limited: {limits}\n");
    }
    println!(
        "requests per task, by operation (what the functions call; the event-source mappings' receives and deletes are the harness's):"
    );
    let mut sqs_requests = 0;
    let mut sns_requests = 0;
    let mut s3_dollars = 0.0;
    for (operation, count) in &tally.requests {
        let harness = matches!(
            operation.as_str(),
            "sqs:ReceiveMessage" | "sqs:DeleteMessage" | "sqs:GetQueueUrl"
        );
        println!(
            "  {operation:<34} {:>7.2}{}",
            per_task(*count),
            if harness { "  (harness)" } else { "" }
        );
        if operation.starts_with("sqs:") && !harness {
            sqs_requests += count;
        }
        if operation.starts_with("sns:") {
            sns_requests += count;
        }
        s3_dollars += *count as f64
            * match operation.as_str() {
                "s3:PutObject" => price::S3_PUT,
                "s3:GetObject" => price::S3_GET,
                _ => 0.0,
            };
    }
    let invocations: BTreeMap<_, _> = after
        .into_iter()
        .map(|(f, mut i)| {
            if let Some(b) = before.get(f) {
                i.invocations -= b.invocations;
                i.records -= b.records;
                i.time -= b.time;
            }
            (f, i)
        })
        .collect();
    if tally.repeated_transactions > 0 {
        println!(
            "({} TransactWriteItems were sent again by the SDK with their ClientRequestToken, its answer lost: on DynamoDB not applied again, their items' reads billed, not writes)\n",
            tally.repeated_transactions
        );
    }
    println!(
        "\nLambda invocations per task (records per invocation, handler time per invocation):"
    );
    let mut lambda_requests = 0;
    let mut gb_seconds = 0.0;
    let mut handled_records = 0;
    for (function, i) in &invocations {
        // The supervisor runs every minute, whatever the load: not a task's cost.
        if *function == "supervisor" {
            continue;
        }
        lambda_requests += i.invocations;
        handled_records += i.records;
        gb_seconds += i.time.as_secs_f64() * 0.25;
        println!(
            "  {function:<12} {:>6.2} ({:.1} records, {:.1} ms)",
            per_task(i.invocations),
            i.records as f64 / i.invocations.max(1) as f64,
            i.time.as_secs_f64() * 1000.0 / i.invocations.max(1) as f64
        );
    }
    // The event-source mapping receives a batch and deletes it in one call each.
    let batches = invocations
        .iter()
        .filter(|(f, _)| ["scheduler", "agent"].contains(f))
        .map(|(_, i)| i.invocations)
        .sum::<u64>();
    let mapping_requests = 2 * batches;
    println!(
        "\nDynamoDB per task: {:.1} write units on the table (items of {} bytes on average), {:.1} on the indexes, {:.1} read units",
        per_task(tally.write_units),
        tally.written_bytes / tally.writes.max(1),
        per_task(tally.index_write_units),
        tally.read_units() / tasks as f64
    );
    let kinds: Vec<String> = tally
        .write_units_by_kind
        .iter()
        .map(|(kind, units)| format!("{kind} {:.1}", per_task(*units)))
        .collect();
    println!(
        "  the table's write units per task by item: {}",
        kinds.join(", ")
    );
    let millions = 1e6 / tasks as f64;
    let dynamodb = ((tally.write_units + tally.index_write_units) as f64
        * price::DYNAMODB_WRITE_UNIT
        + tally.read_units() * price::DYNAMODB_READ_UNIT)
        * millions;
    // A unit of provisioned capacity serves one request unit a second; at the auto
    // scaling target, each unit used pays for 1/target units.
    let provisioned = |units: f64, unit_hour: f64| {
        units * unit_hour / 3600.0 / price::AUTO_SCALING_TARGET * millions
    };
    let dynamodb_provisioned = provisioned(
        (tally.write_units + tally.index_write_units) as f64,
        price::DYNAMODB_WCU_HOUR,
    ) + provisioned(tally.read_units(), price::DYNAMODB_RCU_HOUR);
    let sqs = (sqs_requests + mapping_requests) as f64 * price::SQS_REQUEST * millions;
    let sns = sns_requests as f64 * price::SNS_PUBLISH * millions;
    let lambda = lambda_requests as f64 * price::LAMBDA_REQUEST * millions
        + gb_seconds * price::LAMBDA_ARM_GB_SECOND * millions;
    let api = submissions as f64 * price::HTTP_API_REQUEST * millions;
    let s3 = s3_dollars * millions;
    let rest = sqs + sns + lambda + api + s3;
    println!("\ndollars per million tasks of {workflow}, us-east-1 list prices:");
    println!("  DynamoDB on demand           {dynamodb:>8.2}");
    println!(
        "  (DynamoDB provisioned, auto scaled at {:.0}% of capacity under a steady load: {dynamodb_provisioned:.2})",
        price::AUTO_SCALING_TARGET * 100.0
    );
    println!(
        "  SQS (sends, and the event-source mappings' {:.1} receive and delete calls per task) {sqs:>8.2}",
        per_task(mapping_requests)
    );
    println!("  SNS                          {sns:>8.2}");
    println!(
        "  Lambda (requests, and {:.3} GB-s per task at 256 MB as measured here) {lambda:>8.2}",
        gb_seconds / tasks as f64
    );
    println!("  API Gateway HTTP API         {api:>8.2}");
    let stored = tally.stored_bytes as f64 / tasks as f64;
    println!(
        "  S3 (values kept apart: puts and gets) {s3:>8.2}; and {:.2} a month kept, {:.2} MB stored per task",
        stored * 1e6 / 1e9 * price::S3_GB_MONTH,
        stored / 1e6
    );
    println!(
        "  total                        {:>8.2}  ({handled_records} records handled)",
        dynamodb + rest
    );
    println!(
        "  total, DynamoDB provisioned  {:>8.2}",
        dynamodb_provisioned + rest
    );
    // A state machine of the same steps enters a state for each, and its start and end.
    let transitions = steps_per_task + 2.0;
    let standard = transitions * price::STEP_FUNCTIONS_STANDARD_TRANSITION * 1e6;
    let express = price::STEP_FUNCTIONS_EXPRESS_REQUEST * 1e6
        + 0.064 * 0.5 * price::STEP_FUNCTIONS_EXPRESS_GB_SECOND * 1e6;
    println!(
        "  Step Functions Standard, {transitions:.1} transitions per task, the orchestration alone: {standard:.2}"
    );
    println!(
        "  Step Functions Express, 64 MB for 0.5 s per task, the orchestration alone: {express:.2}"
    );
}

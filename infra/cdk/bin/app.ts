// The app that deploys the construct as one stack. The functions' code is the
// output of `cargo lambda build --release --arm64` (target/lambda/sas-<name>/), or
// the directory in SAS_LAMBDA_DIR.

import * as path from "path";
import { App, Duration, Stack } from "aws-cdk-lib";
import * as lambda from "aws-cdk-lib/aws-lambda";
import { SchedulerAgentSupervisor } from "../lib/scheduler-agent-supervisor";

const app = new App();
const batchingWindow = app.node.tryGetContext("queueBatchingWindowSeconds");
const built = process.env.SAS_LAMBDA_DIR ?? path.join(__dirname, "..", "..", "..", "..", "target", "lambda");
const stack = new Stack(app, "SchedulerAgentSupervisor", {
  description: "Scheduler Agent Supervisor: Rust Lambda functions over DynamoDB, SQS and SNS",
});
new SchedulerAgentSupervisor(stack, "Sas", {
  code: (name) => lambda.Code.fromAsset(path.join(built, `sas-${name}`)),
  alertEmail: app.node.tryGetContext("alertEmail"),
  serviceUrls: JSON.parse(app.node.tryGetContext("serviceUrls") ?? "{}"),
  // -c provisionedCapacity='{"min":5,"max":1000}' for a provisioned table.
  provisionedCapacity: JSON.parse(app.node.tryGetContext("provisionedCapacity") ?? "null") ?? undefined,
  // -c queueBatchingWindowSeconds=5 to let queue messages gather before an invocation.
  queueBatchingWindow: batchingWindow === undefined ? undefined : Duration.seconds(Number(batchingWindow)),
  // -c ingestion=BUFFERED to queue submissions and create their tasks at a steady rate.
  ingestion: app.node.tryGetContext("ingestion"),
  // -c secretsKmsKeyArn=<key ARN> when the services' secrets are under a key of your own.
  secretsKmsKeyArn: app.node.tryGetContext("secretsKmsKeyArn"),
  // -c lambdaFunctionArns='["arn:aws:lambda:..."]' for the functions your state machines invoke.
  lambdaFunctionArns: JSON.parse(app.node.tryGetContext("lambdaFunctionArns") ?? "[]"),
  // -c stateMachineQueueArns='["arn:aws:sqs:..."]', and the same for topics, tables and
  // event buses, for what your state machines' Task states send, publish, read and put.
  stateMachineQueueArns: JSON.parse(app.node.tryGetContext("stateMachineQueueArns") ?? "[]"),
  stateMachineTopicArns: JSON.parse(app.node.tryGetContext("stateMachineTopicArns") ?? "[]"),
  stateMachineTableArns: JSON.parse(app.node.tryGetContext("stateMachineTableArns") ?? "[]"),
  stateMachineEventBusArns: JSON.parse(app.node.tryGetContext("stateMachineEventBusArns") ?? "[]"),
  stateMachineObjectArns: JSON.parse(app.node.tryGetContext("stateMachineObjectArns") ?? "[]"),
  stateMachineResultArns: JSON.parse(app.node.tryGetContext("stateMachineResultArns") ?? "[]"),
  stateMachineBucketArns: JSON.parse(app.node.tryGetContext("stateMachineBucketArns") ?? "[]"),
});

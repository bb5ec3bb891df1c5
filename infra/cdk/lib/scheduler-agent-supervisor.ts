// The Scheduler Agent Supervisor stack as one construct: the same resources,
// permissions, alarms and outputs as infra/template.yaml, to embed in a team's own app.

import { CfnOutput, CfnResource, Duration, RemovalPolicy, Stack } from "aws-cdk-lib";
import * as apigw from "aws-cdk-lib/aws-apigatewayv2";
import { HttpIamAuthorizer, HttpJwtAuthorizer } from "aws-cdk-lib/aws-apigatewayv2-authorizers";
import { HttpLambdaIntegration } from "aws-cdk-lib/aws-apigatewayv2-integrations";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as actions from "aws-cdk-lib/aws-cloudwatch-actions";
import * as dynamodb from "aws-cdk-lib/aws-dynamodb";
import * as iam from "aws-cdk-lib/aws-iam";
import * as kms from "aws-cdk-lib/aws-kms";
import * as lambda from "aws-cdk-lib/aws-lambda";
import { DynamoEventSource, SqsDlq, SqsEventSource } from "aws-cdk-lib/aws-lambda-event-sources";
import * as logs from "aws-cdk-lib/aws-logs";
import * as s3 from "aws-cdk-lib/aws-s3";
import * as scheduler from "aws-cdk-lib/aws-scheduler";
import * as targets from "aws-cdk-lib/aws-scheduler-targets";
import * as sns from "aws-cdk-lib/aws-sns";
import * as subscriptions from "aws-cdk-lib/aws-sns-subscriptions";
import * as sqs from "aws-cdk-lib/aws-sqs";
import { Construct } from "constructs";

/**
 * Who may call the API. JWT: a bearer token of `issuer` for one of `audience` (a
 * Cognito user pool or any OIDC provider), the owner of a task being its `sub`, with
 * one of `clientScopes` on the callers' routes when given, and `operatorScope`
 * (default `sas/operator`) on the operator's. IAM: SigV4-signed requests, the owner
 * being the principal. NONE: anyone who can reach the URL, every task open to
 * everyone: only for a stack with no real effects. With IAM and NONE the operator
 * routes need IAM.
 */
export type Authentication =
  | {
      readonly mode: "JWT";
      readonly issuer: string;
      readonly audience: string[];
      readonly clientScopes?: string[];
      readonly operatorScope?: string;
    }
  | { readonly mode: "IAM" }
  | { readonly mode: "NONE" };

/**
 * A remote service: its base URL, or the URL with headers sent with every call, a
 * timeout (`"5s"`) and a credential (`secretsmanager:<name>` or `ssm:<parameter>`,
 * sent in `header`, `Authorization` by default, after `prefix`).
 */
export type ServiceSettings =
  | string
  | {
      readonly url: string;
      readonly headers?: Record<string, string>;
      readonly timeout?: string;
      readonly credential?: { readonly secret: string; readonly header?: string; readonly prefix?: string };
      readonly sigv4?: { readonly service: string; readonly region: string };
    };

/** The four functions' binaries, by their name without the `sas-` prefix. */
export type FunctionName = "submission" | "scheduler" | "agent" | "supervisor";

/**
 * The functions deployed: each binary, the submission's twice, once as `read` for the
 * routes that only read, with a role that only reads and a concurrency of its own.
 */
export type DeployedFunction = FunctionName | "read";

export interface SchedulerAgentSupervisorProps {
  /** The code of each function: a directory with its `bootstrap` (cargo lambda build's output). */
  readonly code: (name: FunctionName) => lambda.Code;
  /** How often the supervisor sweeps. Default: every minute. */
  readonly supervisorRate?: Duration;
  /** Agent invocations at once, to level the load on the remote services. Default: 10. */
  readonly agentMaxConcurrency?: number;
  /**
   * DIRECT writes a submission's task before the API answers. BUFFERED checks the
   * request and queues it before answering 202; the scheduler creates the tasks,
   * `ingestMaxConcurrency` invocations at once, so that a burst waits in the queue
   * instead of being throttled by the table. Default: DIRECT. The ingest queue exists,
   * drained by the scheduler, in both modes: switching to DIRECT creates the tasks
   * already accepted.
   */
  readonly ingestion?: "DIRECT" | "BUFFERED";
  /** Scheduler invocations creating tasks from the ingest queue at once. Default: 2. */
  readonly ingestMaxConcurrency?: number;
  /** An address subscribed to the alert topic. Default: none. */
  readonly alertEmail?: string;
  /** The remote services by agent name: base URLs, or settings with credentials. Default: none. */
  readonly serviceUrls?: Record<string, ServiceSettings>;
  /** Callers' notification queues must have this prefix. Default: `sas-notify-`. */
  readonly notificationQueuePrefix?: string;
  /** Partitions of the expiry index. Default: 8. */
  readonly leaseShards?: number;
  /** Lease ends in the expiry index are rounded up to this many seconds. Default: 60. */
  readonly leaseBucketSeconds?: number;
  /** Days finished tasks are kept. Default: 30. */
  readonly taskRetentionDays?: number;
  /**
   * Days a value stored apart (an input, output or message too large for a record or
   * a queue) is kept after it was stored: more than the longest a task runs plus
   * taskRetentionDays. Default: 400.
   */
  readonly payloadRetentionDays?: number;
  /** The agent's timeout; more than the longest complete-by of any step. Default: 60 s. */
  readonly agentTimeout?: Duration;
  /**
   * Provisioned capacity for the table and its indexes, auto scaled at 70% between
   * `min` and `max` units per second: less than half the on-demand cost per task
   * under a steady load. Default: on demand.
   */
  readonly provisionedCapacity?: { readonly min: number; readonly max: number };
  /**
   * How long the scheduler's and agents' queue sources gather messages before an
   * invocation: under a light load, messages then share receives, deletes and
   * invocations, at up to that much more time per step. Default: none.
   */
  readonly queueBatchingWindow?: Duration;
  /**
   * The services' credentials the agents may read (see `serviceUrls`): Secrets Manager
   * secrets and Parameter Store parameters, by ARN. Default: none.
   */
  readonly serviceSecretArns?: string[];
  readonly serviceParameterArns?: string[];
  /**
   * The customer-managed KMS key that encrypts those secrets and SecureString
   * parameters, by ARN: the agents may decrypt with it, through Secrets Manager and
   * Parameter Store only. Default: none (they are under the AWS-managed keys).
   */
  readonly secretsKmsKeyArn?: string;
  /** The API Gateway APIs the agents may call signed with SigV4, as execute-api ARNs. Default: none. */
  readonly serviceApiArns?: string[];
  /**
   * The Lambda functions the Task states of your state machines may invoke, by ARN:
   * the agents' `lambda:InvokeFunction`, on these alone. Default: none.
   */
  readonly lambdaFunctionArns?: string[];
  /** The SQS queues your state machines' Task states may send to, by ARN. Default: none. */
  readonly stateMachineQueueArns?: string[];
  /** The SNS topics your state machines' Task states may publish to, by ARN. Default: none. */
  readonly stateMachineTopicArns?: string[];
  /**
   * The DynamoDB tables your state machines' Task states may read and write items of,
   * by ARN. Default: none.
   */
  readonly stateMachineTableArns?: string[];
  /** The EventBridge buses your state machines' Task states may put events on, by ARN. Default: none. */
  readonly stateMachineEventBusArns?: string[];
  /**
   * The S3 objects your state machines' distributed Maps may read their items from, by
   * ARN, wildcards allowed (`arn:aws:s3:::BUCKET/PREFIX*`). Default: none.
   */
  readonly stateMachineObjectArns?: string[];
  /**
   * The S3 objects your state machines' distributed Maps may write their results to
   * (`ResultWriter`), by ARN, wildcards allowed (`arn:aws:s3:::BUCKET/PREFIX*`).
   * Default: none.
   */
  readonly stateMachineResultArns?: string[];
  /**
   * The S3 buckets your state machines' distributed Maps may list their items from
   * (`ItemReader` on `s3:listObjectsV2`), by ARN (`arn:aws:s3:::BUCKET`). Default: none.
   */
  readonly stateMachineBucketArns?: string[];
  /**
   * A layer holding your workflow definitions in `workflows/`, run beside the built-in
   * ones. Default: the built-in ones alone.
   */
  readonly workflowsLayer?: lambda.ILayerVersion;
  /**
   * Where the functions export tasks' traces over OTLP/HTTP
   * (`OTEL_EXPORTER_OTLP_ENDPOINT`): `http://localhost:4318` with the ADOT Lambda
   * layer, or a collector of your own. Default: none, no export.
   */
  readonly traceExportEndpoint?: string;
  /** How the traces are encoded for their collector. Default: `http/protobuf`. */
  readonly traceExportProtocol?: "http/protobuf" | "http/json";
  /** Who may call the API. Default: IAM. */
  readonly authentication?: Authentication;
  /**
   * Submission invocations at once, reserved and capped, so that callers (whose
   * submissions may wait up to 20 s for their task's end) cannot take the other
   * functions' concurrency. 0 reserves none. Default: 100.
   */
  readonly submissionReservedConcurrency?: number;
  /**
   * Invocations of the read function (the routes that only read: a task, whose read
   * may wait up to 20 s for its end, and the listings) at once, reserved and capped
   * apart from the submission function's, so that waiting readers take neither the
   * concurrency submissions need nor the other functions'. 0 reserves none. Default: 100.
   */
  readonly readReservedConcurrency?: number;
  /**
   * The stage's throttling: requests per second and at once, per second to each
   * reading route (a task, which may wait, and listings) and to the console's page and
   * the API's description, and per second to each callback route, which anyone may
   * call. Default: 10000, 5000, 25 and 100.
   */
  readonly apiThrottling?: { readonly rate: number; readonly burst: number; readonly readRate: number; readonly callbackRate: number };
}

const NAMESPACE = "SchedulerAgentSupervisor";

/** Tells cfn-lint (and cfn-lint-serverless) which of its rules do not apply here, and why. */
function waive(scope: Construct, reasons: Record<string, string>) {
  const resource = scope instanceof CfnResource ? scope : (scope.node.defaultChild as CfnResource);
  resource.addMetadata("cfn-lint", { config: { ignore_checks: Object.keys(reasons) } });
  resource.addMetadata("cfn-lint-waivers", reasons);
}

/** The ingestion mode asked for, checked: the functions refuse to start with any other. */
function ingestion(mode: string | undefined): "DIRECT" | "BUFFERED" {
  if (mode === undefined || mode === "DIRECT" || mode === "BUFFERED") {
    return mode ?? "DIRECT";
  }
  throw new Error(`ingestion: '${mode}' is not DIRECT or BUFFERED`);
}

export class SchedulerAgentSupervisor extends Construct {
  readonly table: dynamodb.Table;
  /** The values too large for a task's record or a message, each an object payloads/<scope>/<SHA-256>. */
  readonly payloadBucket: s3.Bucket;
  /** The batches of deleted tasks whose values the supervisor could not delete. */
  readonly valueDeletionFailureQueue: sqs.Queue;
  readonly api: apigw.HttpApi;
  readonly alertTopic: sns.Topic;
  readonly alertKey: kms.Key;
  readonly queues: Record<"scheduler" | "agentRequests" | "agentResponses", sqs.Queue>;
  readonly deadLetterQueues: sqs.Queue[] = [];
  /** The accepted submissions of BUFFERED ingestion, drained by the scheduler in either mode, and their dead-letter queue. */
  readonly ingestQueue: sqs.Queue;
  readonly ingestDeadLetterQueue: sqs.Queue;
  readonly functions: Record<DeployedFunction, lambda.Function>;
  /** Where the API sets the schedules' wake-ups, and the role they invoke the supervisor under. */
  readonly wakeupGroup: scheduler.CfnScheduleGroup;
  readonly wakeupRole: iam.Role;

  constructor(scope: Construct, id: string, props: SchedulerAgentSupervisorProps) {
    super(scope, id);
    const stack = Stack.of(this);
    const agentTimeout = props.agentTimeout ?? Duration.seconds(60);
    const capacity = props.provisionedCapacity;
    const indexCapacity = capacity ? { readCapacity: capacity.min, writeCapacity: capacity.min } : {};
    const authentication = props.authentication ?? { mode: "IAM" };
    const operatorScope = (authentication.mode === "JWT" && authentication.operatorScope) || "sas/operator";
    const notificationQueuePrefix = props.notificationQueuePrefix ?? "sas-notify-";
    const reserved = (concurrency = 100) => (concurrency === 0 ? undefined : concurrency);

    this.table = new dynamodb.Table(this, "StateTable", {
      partitionKey: { name: "pk", type: dynamodb.AttributeType.STRING },
      sortKey: { name: "sk", type: dynamodb.AttributeType.STRING },
      ...(capacity
        ? { billingMode: dynamodb.BillingMode.PROVISIONED, readCapacity: capacity.min, writeCapacity: capacity.min }
        : { billingMode: dynamodb.BillingMode.PAY_PER_REQUEST }),
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      encryption: dynamodb.TableEncryption.AWS_MANAGED,
      timeToLiveAttribute: "expires_at",
      // A task's deletion (its TTL) tells the supervisor to delete its values stored
      // apart: the old image carries its creation, which names them.
      stream: dynamodb.StreamViewType.OLD_IMAGE,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    this.table.addGlobalSecondaryIndex({
      indexName: "expiry",
      partitionKey: { name: "lease_shard", type: dynamodb.AttributeType.STRING },
      sortKey: { name: "lease_expires", type: dynamodb.AttributeType.NUMBER },
      projectionType: dynamodb.ProjectionType.KEYS_ONLY,
      ...indexCapacity,
    });
    this.table.addGlobalSecondaryIndex({
      indexName: "listing",
      partitionKey: { name: "listed_state", type: dynamodb.AttributeType.STRING },
      sortKey: { name: "listed_key", type: dynamodb.AttributeType.STRING },
      projectionType: dynamodb.ProjectionType.KEYS_ONLY,
      ...indexCapacity,
    });
    if (capacity) {
      // The table's reads and writes and the indexes' writes follow the load; the
      // indexes' reads (a query per shard a minute, and listings) stay at the minimum.
      const range = { minCapacity: capacity.min, maxCapacity: capacity.max };
      const utilization = { targetUtilizationPercent: 70 };
      this.table.autoScaleReadCapacity(range).scaleOnUtilization(utilization);
      this.table.autoScaleWriteCapacity(range).scaleOnUtilization(utilization);
      for (const index of ["expiry", "listing"]) {
        this.table.autoScaleGlobalSecondaryIndexWriteCapacity(index, range).scaleOnUtilization(utilization);
      }
    }

    const queue = (name: string, visibilityTimeout: Duration) => {
      const deadLetters = new sqs.Queue(this, `${name}DeadLetterQueue`, {
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        retentionPeriod: Duration.days(14),
        enforceSSL: true,
      });
      this.deadLetterQueues.push(deadLetters);
      waive(deadLetters, { ES6000: "a dead-letter queue is the end of the line: it has no dead-letter queue of its own" });
      return new sqs.Queue(this, `${name}Queue`, {
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        visibilityTimeout,
        deadLetterQueue: { queue: deadLetters, maxReceiveCount: 5 },
        enforceSSL: true,
      });
    };
    // Six times the consuming function's timeout, as Lambda advises; the agent's
    // requests at least its longest timeout.
    this.queues = {
      scheduler: queue("Scheduler", Duration.seconds(180)),
      agentRequests: queue("AgentRequest", Duration.seconds(900)),
      agentResponses: queue("AgentResponse", Duration.seconds(180)),
    };
    // Buffered ingestion: accepted submissions, for the scheduler to create. Kept, and
    // drained, in both modes: an update from BUFFERED to DIRECT must not delete the
    // submissions already accepted.
    this.ingestDeadLetterQueue = new sqs.Queue(this, "IngestDeadLetterQueue", {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      retentionPeriod: Duration.days(14),
      enforceSSL: true,
    });
    waive(this.ingestDeadLetterQueue, { ES6000: "a dead-letter queue is the end of the line: it has no dead-letter queue of its own" });
    // The values stored apart: encrypted, private, taken only over TLS. A task's are
    // deleted with the task (the supervisor, on the table's stream), and by the
    // lifecycle payloadRetentionDays after they were stored if that failed; the
    // messages' once no queue can hold the message; the uploads' a week after.
    this.payloadBucket = new s3.Bucket(this, "PayloadBucket", {
      encryption: s3.BucketEncryption.S3_MANAGED,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      enforceSSL: true,
      removalPolicy: RemovalPolicy.RETAIN,
      lifecycleRules: [
        // Every value, whatever else deletes it first (and those stored under
        // payloads/<sha256> before values had scopes).
        {
          id: "ValuesExpire",
          prefix: "payloads/",
          expiration: Duration.days(props.payloadRetentionDays ?? 400),
          abortIncompleteMultipartUploadAfter: Duration.days(1),
        },
        // SQS keeps a message 14 days at most.
        { id: "MessagesExpire", prefix: "payloads/messages/", expiration: Duration.days(15) },
        {
          id: "UploadsExpire",
          prefix: "payloads/uploads/",
          expiration: Duration.days(7),
          abortIncompleteMultipartUploadAfter: Duration.days(1),
        },
      ],
    });
    // The batches of deleted tasks whose values could not be deleted for a day: what
    // they were (the stream's positions), for a person.
    this.valueDeletionFailureQueue = new sqs.Queue(this, "ValueDeletionFailureQueue", {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      retentionPeriod: Duration.days(14),
      enforceSSL: true,
    });
    waive(this.valueDeletionFailureQueue, { ES6000: "a failure destination is the end of the line: it has no dead-letter queue of its own" });
    this.ingestQueue = new sqs.Queue(this, "IngestQueue", {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      visibilityTimeout: Duration.seconds(180),
      retentionPeriod: Duration.days(14),
      deadLetterQueue: { queue: this.ingestDeadLetterQueue, maxReceiveCount: 5 },
      enforceSSL: true,
    });

    // The topic is encrypted with a key of the stack's own: CloudWatch alarms cannot
    // publish to a topic under the AWS-managed alias/aws/sns key, whose policy no one
    // can change. The account administers the key (CDK's default key policy), so IAM
    // policies may grant its use (the functions that publish have it in theirs);
    // CloudWatch may use it for this account's alarms only.
    this.alertKey = new kms.Key(this, "AlertKey", {
      description: "Encrypts the Scheduler Agent Supervisor's alert topic.",
      enableKeyRotation: true,
    });
    this.alertKey.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: "AlarmsPublish",
        principals: [new iam.ServicePrincipal("cloudwatch.amazonaws.com")],
        actions: ["kms:Decrypt", "kms:GenerateDataKey*"],
        resources: ["*"],
        conditions: {
          StringEquals: { "aws:SourceAccount": stack.account },
          ArnLike: { "aws:SourceArn": `arn:${stack.partition}:cloudwatch:${stack.region}:${stack.account}:alarm:*` },
        },
      }),
    );
    this.alertTopic = new sns.Topic(this, "AlertTopic", { enforceSSL: true, masterKey: this.alertKey });
    // The topic's policy (enforceSSL's) replaces its default one, which let CloudWatch
    // publish: it must say so itself.
    this.alertTopic.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: "AlarmsPublish",
        principals: [new iam.ServicePrincipal("cloudwatch.amazonaws.com")],
        actions: ["sns:Publish"],
        resources: [this.alertTopic.topicArn],
        conditions: {
          StringEquals: { "aws:SourceAccount": stack.account },
          ArnLike: { "aws:SourceArn": `arn:${stack.partition}:cloudwatch:${stack.region}:${stack.account}:alarm:*` },
        },
      }),
    );
    if (props.alertEmail) {
      this.alertTopic.addSubscription(new subscriptions.EmailSubscription(props.alertEmail));
    }

    // Schedules' wake-ups: an EventBridge Scheduler schedule each, in the stack's group,
    // invoking the supervisor (named after the stack, so that its own environment can
    // name it) under a role that may do nothing else.
    const supervisorName = `${stack.stackName}-SupervisorFunction`;
    const supervisorArn = `arn:${stack.partition}:lambda:${stack.region}:${stack.account}:function:${supervisorName}`;
    this.wakeupGroup = new scheduler.CfnScheduleGroup(this, "WakeupGroup", { name: `${stack.stackName}-schedules` });
    this.wakeupRole = new iam.Role(this, "WakeupRole", {
      assumedBy: new iam.ServicePrincipal("scheduler.amazonaws.com", {
        conditions: { StringEquals: { "aws:SourceAccount": stack.account } },
      }),
      inlinePolicies: {
        WakeSupervisor: new iam.PolicyDocument({
          statements: [new iam.PolicyStatement({ actions: ["lambda:InvokeFunction"], resources: [supervisorArn] })],
        }),
      },
    });
    const environment: Record<string, string> = {
      TABLE_NAME: this.table.tableName,
      SCHEDULER_QUEUE_URL: this.queues.scheduler.queueUrl,
      AGENT_REQUEST_QUEUE_URL: this.queues.agentRequests.queueUrl,
      AGENT_RESPONSE_QUEUE_URL: this.queues.agentResponses.queueUrl,
      INGEST_QUEUE_URL: this.ingestQueue.queueUrl,
      INGESTION: ingestion(props.ingestion),
      ALERT_TOPIC_ARN: this.alertTopic.topicArn,
      PAYLOAD_BUCKET: this.payloadBucket.bucketName,
      NOTIFICATION_QUEUE_PREFIX: notificationQueuePrefix,
      SERVICE_URLS: JSON.stringify(props.serviceUrls ?? {}),
      LEASE_SHARDS: String(props.leaseShards ?? 8),
      LEASE_BUCKET_SECONDS: String(props.leaseBucketSeconds ?? 60),
      TASK_RETENTION_DAYS: String(props.taskRetentionDays ?? 30),
      SUPERVISOR_BATCH: "100",
      METRICS_NAMESPACE: NAMESPACE,
      OTEL_EXPORTER_OTLP_ENDPOINT: props.traceExportEndpoint ?? "",
      OTEL_EXPORTER_OTLP_PROTOCOL: props.traceExportProtocol ?? "http/protobuf",
      AUTH_MODE: authentication.mode,
      OPERATOR_SCOPE: operatorScope,
      SCHEDULE_GROUP: this.wakeupGroup.ref,
      SCHEDULE_TARGET_ARN: supervisorArn,
      SCHEDULE_ROLE_ARN: this.wakeupRole.roleArn,
    };
    const fn = (name: DeployedFunction, description: string, extra: Partial<lambda.FunctionProps> = {}) =>
      new lambda.Function(this, `${name[0].toUpperCase()}${name.slice(1)}Function`, {
        runtime: lambda.Runtime.PROVIDED_AL2023,
        architecture: lambda.Architecture.ARM_64,
        handler: "bootstrap",
        code: props.code(name === "read" ? "submission" : name),
        description,
        memorySize: 256,
        timeout: Duration.seconds(30),
        tracing: lambda.Tracing.ACTIVE,
        loggingFormat: lambda.LoggingFormat.JSON,
        logGroup: new logs.LogGroup(this, `${name}Logs`, { retention: logs.RetentionDays.ONE_MONTH }),
        environment,
        ...extra,
      });
    // Only the API reads workflow files: the other functions run each task by the
    // definition stored when it was submitted.
    const layers = props.workflowsLayer ? [props.workflowsLayer] : undefined;
    this.functions = {
      submission: fn("submission", "The API's writes - submits, resubmits, cancels, pauses and resumes tasks, takes callbacks, keeps schedules, and shows and redrives the dead letters.", {
        layers,
        reservedConcurrentExecutions: reserved(props.submissionReservedConcurrency),
      }),
      read: fn("read", "The API's reads - a task or a wait for its end, the listings, the workflows, the services' limits and the console's page. The submission function's code, with a role that only reads.", {
        layers,
        reservedConcurrentExecutions: reserved(props.readReservedConcurrency),
      }),
      scheduler: fn("scheduler", "Claims tasks, records step results, dispatches steps and compensations."),
      agent: fn("agent", "Calls the remote services, with retries and a circuit breaker, before complete-by.", {
        timeout: agentTimeout,
      }),
      supervisor: fn("supervisor", "Recovers the tasks whose complete-by has passed.", {
        functionName: supervisorName,
        timeout: Duration.seconds(60),
        // One sweep at a time; two at once would still be safe (conditional writes), only wasteful.
        reservedConcurrentExecutions: 1,
      }),
    };

    for (const f of Object.values(this.functions)) {
      waive(f, {
        WS1004: "each function logs to its own log group, kept 30 days, through LoggingConfig, which the rule does not read",
        W3005: "the DependsOn on the role is CDK's own",
      });
    }
    this.grant(notificationQueuePrefix);
    // The services' credentials: exactly the secrets and parameters named.
    if (props.serviceSecretArns?.length) {
      this.functions.agent.addToRolePolicy(
        new iam.PolicyStatement({ actions: ["secretsmanager:GetSecretValue"], resources: props.serviceSecretArns }),
      );
    }
    if (props.serviceParameterArns?.length) {
      this.functions.agent.addToRolePolicy(
        new iam.PolicyStatement({ actions: ["ssm:GetParameter"], resources: props.serviceParameterArns }),
      );
    }
    if (props.secretsKmsKeyArn) {
      this.functions.agent.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ["kms:Decrypt"],
          resources: [props.secretsKmsKeyArn],
          conditions: {
            StringEquals: { "kms:ViaService": ["secretsmanager", "ssm"].map((service) => `${service}.${stack.region}.amazonaws.com`) },
          },
        }),
      );
    }
    if (props.serviceApiArns?.length) {
      this.functions.agent.addToRolePolicy(
        new iam.PolicyStatement({ actions: ["execute-api:Invoke"], resources: props.serviceApiArns }),
      );
    }
    // What your state machines' Task states call: each action on the resources named alone.
    const taskCalls: [string[] | undefined, string[]][] = [
      [props.lambdaFunctionArns, ["lambda:InvokeFunction"]],
      [props.stateMachineQueueArns, ["sqs:SendMessage"]],
      [props.stateMachineTopicArns, ["sns:Publish"]],
      [props.stateMachineTableArns, ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"]],
      [props.stateMachineEventBusArns, ["events:PutEvents"]],
      [props.stateMachineObjectArns, ["s3:GetObject"]],
      [props.stateMachineResultArns, ["s3:PutObject"]],
      [props.stateMachineBucketArns, ["s3:ListBucket"]],
    ];
    for (const [resources, actions] of taskCalls) {
      if (resources?.length) {
        this.functions.agent.addToRolePolicy(new iam.PolicyStatement({ actions, resources }));
      }
    }
    this.connect(
      props.agentMaxConcurrency ?? 10,
      props.supervisorRate ?? Duration.minutes(1),
      props.queueBatchingWindow,
      props.ingestMaxConcurrency ?? 2,
    );
    this.api = this.routes(authentication, operatorScope, props.apiThrottling);
    this.alarms();

    const outputs: Record<string, string> = {
      ApiUrl: this.api.apiEndpoint,
      StateTableName: this.table.tableName,
      SchedulerQueueUrl: this.queues.scheduler.queueUrl,
      AgentRequestQueueUrl: this.queues.agentRequests.queueUrl,
      AgentResponseQueueUrl: this.queues.agentResponses.queueUrl,
      AlertTopicArn: this.alertTopic.topicArn,
    };
    for (const [name, value] of Object.entries(outputs)) {
      new CfnOutput(stack, name, { value });
    }
  }

  /** Least privilege: each function may do only what it does, on what it does it to. */
  private grant(notificationQueuePrefix: string) {
    const { submission, read, scheduler, agent, supervisor } = this.functions;
    const table = this.table.tableArn;
    const allow = (target: lambda.Function, actions: string[], resources: string[]) =>
      target.addToRolePolicy(new iam.PolicyStatement({ actions, resources }));
    const notifications = `arn:${Stack.of(this).partition}:sqs:${Stack.of(this).region}:${Stack.of(this).account}:${notificationQueuePrefix}*`;

    // Explicit statements rather than the constructs' grants, which give more than is
    // used (a queue's grantSendMessages adds GetQueueAttributes and GetQueueUrl).
    // UpdateItem: a task's item rewritten in place (its order data, when small, kept in it).
    allow(
      submission,
      ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem"],
      [table],
    );
    allow(read, ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem"], [table]);
    // Listings: the tasks in Error from the listing index, those in flight from the expiry index.
    for (const target of [submission, read]) {
      allow(target, ["dynamodb:Query"], [`${table}/index/listing`, `${table}/index/expiry`]);
    }
    // The key that seals owners' listing cursors, drawn by the first process that
    // lists; the read function writes nothing else.
    read.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ["dynamodb:PutItem"],
        resources: [table],
        conditions: { "ForAllValues:StringEquals": { "dynamodb:LeadingKeys": ["SECRET#cursor"] } },
      }),
    );
    // UpdateItem: a task's item rewritten in place at each step, and order data of its
    // own, whose expiry moves with the task when it finishes late or needs a person;
    // and, for the supervisor, a task that cannot be read taken off the expiry index.
    allow(scheduler, ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"], [table]);
    allow(
      supervisor,
      ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem"],
      [table],
    );
    allow(supervisor, ["dynamodb:Query"], [`${table}/index/expiry`]);
    // DeleteItem: a call taken off its gate's line as it is given its slot (flow
    // control), in the transaction that writes the gate; nothing else.
    for (const target of [submission, scheduler, supervisor]) {
      target.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ["dynamodb:DeleteItem"],
          resources: [table],
          conditions: { "ForAllValues:StringLike": { "dynamodb:LeadingKeys": ["GATE#*"] } },
        }),
      );
    }
    // The values stored apart: read, and written where the function writes them.
    const values = this.payloadBucket.arnForObjects("payloads/*");
    allow(read, ["s3:GetObject"], [values]);
    for (const target of [submission, scheduler, agent, supervisor]) {
      allow(target, ["s3:GetObject", "s3:PutObject"], [values]);
    }
    // A deleted task's values: listed, and deleted; no other object.
    allow(supervisor, ["s3:DeleteObject"], [this.payloadBucket.arnForObjects("payloads/tasks/*")]);
    supervisor.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ["s3:ListBucket"],
        resources: [this.payloadBucket.bucketArn],
        conditions: { StringLike: { "s3:prefix": ["payloads/tasks/*"] } },
      }),
    );
    // Runs, and the deadline messages of the leases taken (the scheduler's to itself).
    for (const target of [submission, scheduler, supervisor]) {
      allow(target, ["sqs:SendMessage"], [this.queues.scheduler.queueArn]);
    }
    allow(scheduler, ["sqs:SendMessage"], [this.queues.agentRequests.queueArn]);
    allow(agent, ["sqs:SendMessage"], [this.queues.agentResponses.queueArn]);
    for (const target of [submission, scheduler, supervisor]) {
      allow(target, ["sqs:SendMessage", "sqs:GetQueueUrl"], [notifications]);
    }
    // The operator's dead letters: found from each queue's redrive policy, looked at,
    // and sent back to their queue; the ingest queue's too, to which buffered ingestion
    // sends the accepted submissions.
    allow(
      submission,
      ["sqs:GetQueueUrl", "sqs:GetQueueAttributes", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"],
      this.allDeadLetterQueues().map((q) => q.queueArn),
    );
    allow(
      submission,
      ["sqs:GetQueueAttributes", "sqs:SendMessage"],
      [...Object.values(this.queues), this.ingestQueue].map((q) => q.queueArn),
    );
    // A schedule's wake-ups, in the stack's group only, handed the wake-up role.
    const stack = Stack.of(this);
    allow(
      submission,
      ["scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule"],
      [`arn:${stack.partition}:scheduler:${stack.region}:${stack.account}:schedule/${this.wakeupGroup.ref}/*`],
    );
    submission.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ["iam:PassRole"],
        resources: [this.wakeupRole.roleArn],
        conditions: { StringEquals: { "iam:PassedToService": "scheduler.amazonaws.com" } },
      }),
    );
    // The scheduler creates the accepted submissions' tasks, in both modes.
    allow(scheduler, ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"], [this.ingestQueue.queueArn]);
    // The scheduler raises alerts; the supervisor raises again those whose publication failed.
    for (const target of [scheduler, supervisor]) {
      allow(target, ["sns:Publish"], [this.alertTopic.topicArn]);
      allow(target, ["kms:Decrypt", "kms:GenerateDataKey*"], [this.alertKey.keyArn]);
    }
  }

  /** The dead-letter queues of the pattern's queues, and of the ingest queue. */
  private allDeadLetterQueues(): sqs.Queue[] {
    return [...this.deadLetterQueues, this.ingestDeadLetterQueue];
  }

  private connect(agentMaxConcurrency: number, supervisorRate: Duration, batchingWindow: Duration | undefined, ingestMaxConcurrency: number) {
    const sqsSource = (queue: sqs.Queue, maxConcurrency?: number) =>
      new SqsEventSource(queue, {
        batchSize: 10,
        maxBatchingWindow: batchingWindow,
        reportBatchItemFailures: true,
        maxConcurrency,
      });
    this.functions.scheduler.addEventSource(sqsSource(this.queues.scheduler));
    this.functions.scheduler.addEventSource(sqsSource(this.queues.agentResponses));
    this.functions.agent.addEventSource(sqsSource(this.queues.agentRequests, agentMaxConcurrency));
    this.functions.scheduler.addEventSource(sqsSource(this.ingestQueue, ingestMaxConcurrency));
    for (const f of [this.functions.scheduler, this.functions.agent]) {
      for (const mapping of f.node.findAll().filter((c) => c instanceof lambda.CfnEventSourceMapping)) {
        waive(mapping, { ES1001: "an SQS source's failures go to the queue's dead-letter queue; OnFailure destinations are for streams" });
      }
    }
    // Tasks deleted by the TTL: their values deleted. A batch that fails is retried for
    // the day the stream keeps it; past that, the bucket's lifecycle deletes them.
    this.functions.supervisor.addEventSource(
      new DynamoEventSource(this.table, {
        startingPosition: lambda.StartingPosition.TRIM_HORIZON,
        batchSize: 10,
        maxRecordAge: Duration.days(1),
        bisectBatchOnError: true,
        filters: [
          lambda.FilterCriteria.filter({
            eventName: lambda.FilterRule.isEqual("REMOVE"),
            dynamodb: { Keys: { sk: { S: lambda.FilterRule.isEqual("TASK") } } },
          }),
        ],
        onFailure: new SqsDlq(this.valueDeletionFailureQueue),
      }),
    );
    new scheduler.Schedule(this, "SupervisorSchedule", {
      schedule: scheduler.ScheduleExpression.rate(supervisorRate),
      target: new targets.LambdaInvoke(this.functions.supervisor, { retryAttempts: 0 }),
    });
  }

  /** The callers' routes and the operator's, authorized as `authentication` says. */
  private routes(
    authentication: Authentication,
    operatorScope: string,
    throttling = { rate: 10000, burst: 5000, readRate: 25, callbackRate: 100 },
  ): apigw.HttpApi {
    const { GET, POST, PUT, DELETE } = apigw.HttpMethod;
    const api = new apigw.HttpApi(this, "Api", { createDefaultStage: true });
    const writes = new HttpLambdaIntegration("Submission", this.functions.submission);
    // The routes that only read, waits for a task's end among them, go to a function of
    // their own, so that waiting readers cannot take the concurrency submissions need:
    // every GET but the dead letters', whose look receives the messages.
    const reads = new HttpLambdaIntegration("Read", this.functions.read);
    const jwt =
      authentication.mode === "JWT"
        ? new HttpJwtAuthorizer("Jwt", authentication.issuer, { jwtAudience: authentication.audience })
        : undefined;
    const iam = new HttpIamAuthorizer();
    const caller = jwt ?? (authentication.mode === "IAM" ? iam : new apigw.HttpNoneAuthorizer());
    const callerScopes = authentication.mode === "JWT" ? authentication.clientScopes : undefined;
    const route = (
      method: apigw.HttpMethod,
      path: string,
      authorizer: apigw.IHttpRouteAuthorizer,
      authorizationScopes?: string[],
    ) => {
      const onlyReads = method === GET && !path.startsWith("/operator/dead-letters");
      api.addRoutes({ path, methods: [method], integration: onlyReads ? reads : writes, authorizer, authorizationScopes });
    };
    route(POST, "/tasks", caller, callerScopes);
    route(POST, "/tasks/batch", caller, callerScopes);
    route(PUT, "/tasks/{id}", caller, callerScopes);
    route(GET, "/tasks/{id}", caller, callerScopes);
    route(GET, "/tasks/{id}/children", caller, callerScopes);
    route(GET, "/tasks/{id}/execution", caller, callerScopes);
    route(GET, "/tasks/{id}/payloads/{sha256}", caller, callerScopes);
    route(GET, "/tasks", caller, callerScopes);
    route(POST, "/tasks/{id}/resubmit", caller, callerScopes);
    route(POST, "/tasks/{id}/cancel", caller, callerScopes);
    route(POST, "/tasks/{id}/pause", caller, callerScopes);
    route(POST, "/tasks/{id}/resume", caller, callerScopes);
    route(POST, "/tasks/{id}/steps/{step}/complete", caller, callerScopes);
    route(POST, "/payloads", caller, callerScopes);
    route(POST, "/payloads/uploads", caller, callerScopes);
    route(PUT, "/payloads/{sha256}", caller, callerScopes);
    route(GET, "/workflows", caller, callerScopes);
    route(GET, "/me", caller, callerScopes);
    // Step Functions' own API: a caller's operations on the root, an operator's apart.
    route(POST, "/", caller, callerScopes);
    const operator = jwt ?? iam;
    const operatorScopes = jwt ? [operatorScope] : undefined;
    route(GET, "/operator/tasks", operator, operatorScopes);
    route(GET, "/operator/tasks/{id}", operator, operatorScopes);
    route(GET, "/operator/tasks/{id}/children", operator, operatorScopes);
    route(GET, "/operator/tasks/{id}/execution", operator, operatorScopes);
    route(GET, "/operator/tasks/{id}/payloads/{sha256}", operator, operatorScopes);
    route(POST, "/operator/tasks/{id}/resubmit", operator, operatorScopes);
    route(POST, "/operator/tasks/{id}/repair", operator, operatorScopes);
    route(POST, "/operator/tasks/{id}/move", operator, operatorScopes);
    route(POST, "/operator/tasks/{id}/cancel", operator, operatorScopes);
    route(POST, "/operator/tasks/{id}/pause", operator, operatorScopes);
    route(POST, "/operator/tasks/{id}/resume", operator, operatorScopes);
    route(POST, "/operator/tasks/{id}/steps/{step}/complete", operator, operatorScopes);
    route(POST, "/operator/bulk/resubmit", operator, operatorScopes);
    route(POST, "/operator/bulk/cancel", operator, operatorScopes);
    route(POST, "/operator/bulk/pause", operator, operatorScopes);
    route(POST, "/operator/bulk/resume", operator, operatorScopes);
    route(POST, "/operator/bulk/repair", operator, operatorScopes);
    route(POST, "/operator/bulk/move", operator, operatorScopes);
    route(GET, "/operator/services", operator, operatorScopes);
    route(GET, "/operator/dead-letters", operator, operatorScopes);
    route(GET, "/operator/dead-letters/{queue}", operator, operatorScopes);
    route(POST, "/operator/dead-letters/{queue}/redrive", operator, operatorScopes);
    route(GET, "/operator/search", operator, operatorScopes);
    route(GET, "/operator/schedules", operator, operatorScopes);
    route(GET, "/operator/schedules/{name}", operator, operatorScopes);
    route(PUT, "/operator/schedules/{name}", operator, operatorScopes);
    route(DELETE, "/operator/schedules/{name}", operator, operatorScopes);
    route(POST, "/operator/schedules/{name}/pause", operator, operatorScopes);
    route(POST, "/operator/schedules/{name}/resume", operator, operatorScopes);
    route(POST, "/operator/stepfunctions", operator, operatorScopes);
    // The API's description and the console's page, for anyone: neither holds data
    // (the console asks the operator's routes for it, as its operator).
    const anyone = new apigw.HttpNoneAuthorizer();
    route(GET, "/openapi.json", anyone);
    // A callback's use, for whoever holds its token: the token is the capability.
    route(POST, "/callbacks/{token}", anyone);
    route(POST, "/callbacks/{token}/heartbeat", anyone);
    route(GET, "/", anyone);
    const stage = api.defaultStage?.node.defaultChild as apigw.CfnStage;
    stage.defaultRouteSettings = { throttlingBurstLimit: throttling.burst, throttlingRateLimit: throttling.rate };
    // RouteSettings is JSON to CDK, written into the template as it is: CloudFormation's names.
    const read = { ThrottlingBurstLimit: throttling.readRate, ThrottlingRateLimit: throttling.readRate };
    const callback = { ThrottlingBurstLimit: throttling.callbackRate, ThrottlingRateLimit: throttling.callbackRate };
    stage.routeSettings = Object.fromEntries([
      ...[
        "GET /tasks/{id}",
        "GET /tasks",
        "GET /operator/tasks/{id}",
        "GET /operator/tasks",
        "GET /tasks/{id}/children",
        "GET /operator/tasks/{id}/children",
        "GET /tasks/{id}/execution",
        "GET /operator/tasks/{id}/execution",
        "GET /operator/search",
        // The routes anyone may call, each an invocation: bounded apart from the rest.
        "GET /",
        "GET /openapi.json",
      ].map((key) => [key, read]),
      ...["POST /callbacks/{token}", "POST /callbacks/{token}/heartbeat"].map((key) => [key, callback]),
    ]);
    const accessLogs = new logs.LogGroup(this, "ApiAccessLogs", { retention: logs.RetentionDays.ONE_MONTH });
    stage.accessLogSettings = {
      destinationArn: accessLogs.logGroupArn,
      format: JSON.stringify({
        requestId: "$context.requestId",
        ip: "$context.identity.sourceIp",
        route: "$context.routeKey",
        status: "$context.status",
        latency: "$context.responseLatency",
        error: "$context.authorizer.error",
      }),
    };
    return api;
  }

  /** What needs a person: each alarm notifies the alert topic. */
  private alarms() {
    const notify = new actions.SnsAction(this.alertTopic);
    const alarm = (id: string, description: string, metric: cloudwatch.Metric | cloudwatch.MathExpression, options: Partial<cloudwatch.CreateAlarmOptions> = {}) =>
      metric
        .createAlarm(this, id, {
          alarmDescription: description,
          threshold: 1,
          evaluationPeriods: 1,
          comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          ...options,
        })
        .addAlarmAction(notify);
    const minute = Duration.minutes(1);
    // What a function counts, a minute's sum.
    const counted = (metricName: string, functionName: FunctionName) =>
      new cloudwatch.Metric({ namespace: NAMESPACE, metricName, dimensionsMap: { Function: functionName }, statistic: "Sum", period: minute });
    alarm("TasksInErrorAlarm", "A task ended in Error after compensation; its alert names it.", counted("TasksInError", "scheduler"));
    const panics = (["submission", "scheduler", "agent"] as const).map((f) => counted("Panics", f));
    alarm(
      "PanicsAlarm",
      "A function caught a panic while handling one request (answered 500) or one SQS record (delivered again, then dead-lettered): a defect met by some input, which the logs name.",
      new cloudwatch.MathExpression({ expression: "SUM([p0, p1, p2])", usingMetrics: { p0: panics[0], p1: panics[1], p2: panics[2] }, period: minute }),
    );
    alarm(
      "QuarantinedTasksAlarm",
      "The supervisor found task records it cannot read (garbled, or of a newer version's shape after a rollback) and took them off the expiry index; they wait, marked quarantined, for a person.",
      counted("QuarantinedTasks", "supervisor"),
    );
    // The longest wait of the calls the supervisor found still waiting for a limit's
    // slots, at its five-minute checks.
    alarm(
      "SlotWaitAlarm",
      "Calls have waited over ten minutes for a service's or a step's limit, two checks running: the line keeps growing (the service is slow or down, or its limit too low for its load).",
      new cloudwatch.Metric({ namespace: NAMESPACE, metricName: "SlotWait", dimensionsMap: { Function: "supervisor" }, statistic: "Maximum", period: Duration.minutes(5) }),
      { threshold: 600_000, evaluationPeriods: 2, comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD },
    );
    alarm(
      "ValueDeletionFailuresAlarm",
      "Deleted tasks' values could not be deleted for a day; the batch waits in ValueDeletionFailureQueue, and the bucket's lifecycle deletes the values payloadRetentionDays after they were stored.",
      this.valueDeletionFailureQueue.metricApproximateNumberOfMessagesVisible({ statistic: "Maximum", period: minute }),
    );
    for (const deadLetters of this.allDeadLetterQueues()) {
      alarm(
        `${deadLetters.node.id}Alarm`,
        "A message failed maxReceiveCount times and waits in a dead-letter queue.",
        deadLetters.metricApproximateNumberOfMessagesVisible({ statistic: "Maximum", period: minute }),
      );
    }
    const age = (q: sqs.Queue) => q.metricApproximateAgeOfOldestMessage({ statistic: "Maximum", period: minute });
    const ages = Object.values(this.queues).map(age);
    const overFiveMinutes = { threshold: 300, evaluationPeriods: 3, comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD };
    alarm(
      "OldestMessageAlarm",
      "A message has waited over 5 minutes in one of the pattern's queues; its consumer is behind or failing.",
      new cloudwatch.MathExpression({ expression: "MAX([a0, a1, a2])", usingMetrics: { a0: ages[0], a1: ages[1], a2: ages[2] }, period: minute }),
      overFiveMinutes,
    );
    alarm(
      "IngestOldestMessageAlarm",
      "An accepted submission has waited over 5 minutes in the ingest queue; its task is not created yet, the scheduler behind or failing.",
      age(this.ingestQueue),
      overFiveMinutes,
    );
    const functions = Object.values(this.functions);
    const fiveMinutes = Duration.minutes(5);
    const sum = (metric: (f: lambda.Function) => cloudwatch.Metric) =>
      new cloudwatch.MathExpression({
        expression: `SUM([${functions.map((_, i) => `f${i}`).join(", ")}])`,
        usingMetrics: Object.fromEntries(functions.map((f, i) => [`f${i}`, metric(f)])),
        period: fiveMinutes,
      });
    alarm("FunctionErrorsAlarm", "A function failed; the dashboard shows which.", sum((f) => f.metricErrors({ period: fiveMinutes, statistic: "Sum" })));
    alarm("FunctionThrottlesAlarm", "A function was throttled.", sum((f) => f.metricThrottles({ period: fiveMinutes, statistic: "Sum" })));
    alarm(
      "SupervisorStoppedAlarm",
      "The supervisor has not run for 15 minutes; expired leases are not being recovered.",
      this.functions.supervisor.metricInvocations({ period: fiveMinutes, statistic: "Sum" }),
      {
        evaluationPeriods: 3,
        comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        treatMissingData: cloudwatch.TreatMissingData.BREACHING,
      },
    );

    const dashboard = new cloudwatch.Dashboard(this, "Dashboard");
    dashboard.addWidgets(
      new cloudwatch.GraphWidget({
        title: "Tasks",
        left: [counted("TasksSubmitted", "submission"), counted("TasksInError", "scheduler")],
      }),
      new cloudwatch.GraphWidget({
        title: "Decisions by verdict",
        left: [new cloudwatch.MathExpression({ expression: `SEARCH('{${NAMESPACE},Function,Verdict} MetricName="Decisions"', 'Sum', 60)`, period: minute })],
      }),
      new cloudwatch.GraphWidget({
        title: "Queue depth",
        left: [...Object.values(this.queues), ...this.deadLetterQueues].map((q) => q.metricApproximateNumberOfMessagesVisible({ statistic: "Maximum", period: minute })),
      }),
      new cloudwatch.GraphWidget({ title: "Age of the oldest message (s)", left: ages }),
      new cloudwatch.GraphWidget({
        title: "Functions: errors, throttles, duration p99",
        width: 24,
        left: functions.flatMap((f) => [f.metricErrors({ statistic: "Sum", period: minute }), f.metricThrottles({ statistic: "Sum", period: minute })]),
        right: [this.functions.scheduler, this.functions.agent].map((f) => f.metricDuration({ statistic: "p99", period: minute })),
      }),
      new cloudwatch.GraphWidget({
        title: "Waits for a limit's slots by service (ms)",
        width: 24,
        left: [new cloudwatch.MathExpression({ expression: `SEARCH('{${NAMESPACE},Function,Service} MetricName="SlotWait"', 'Maximum', 60)`, period: minute })],
      }),
      new cloudwatch.GraphWidget({
        title: "Call latency p99 by service and outcome (ms)",
        left: [new cloudwatch.MathExpression({ expression: `SEARCH('{${NAMESPACE},Function,Service,Outcome} MetricName="CallLatency"', 'p99', 60)`, period: minute })],
      }),
      new cloudwatch.GraphWidget({
        title: "Step duration p99 by workflow, step and outcome (ms)",
        left: [new cloudwatch.MathExpression({ expression: `SEARCH('{${NAMESPACE},Function,Workflow,Step,Outcome} MetricName="StepDuration"', 'p99', 60)`, period: minute })],
      }),
    );
  }
}

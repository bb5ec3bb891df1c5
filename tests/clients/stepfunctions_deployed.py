"""boto3's `stepfunctions` client against the deployed stack's API Gateway with IAM
auth, as the book shows it: requests signed for `execute-api` (API Gateway's IAM
checks that service's signatures, where the SDK signs for `states`), a caller's
client on the API's root, an operator's on `/operator/stepfunctions`.

Run by tests/tests/deployed/callers.rs. Prints one JSON line per check; exits
non-zero on the first that fails.
"""

import argparse
import json
import time

import boto3
from botocore.config import Config

from checks import check, refused

parser = argparse.ArgumentParser()
parser.add_argument("--api", required=True)
parser.add_argument("--region", required=True)
parser.add_argument("--caller-key", required=True, help="ID:SECRET")
parser.add_argument("--operator-key", required=True, help="ID:SECRET")
args = parser.parse_args()


def sign_for_api_gateway(context, **_):
    context.setdefault("signing", {})["signing_name"] = "execute-api"


def client(key, path="/"):
    """A client on the API's `path`. The root ends in '/': MiniStack's path-style
    address (`/_aws/execute-api/ID`) names no route without it, where AWS's own
    (`https://ID.execute-api.REGION.amazonaws.com`) needs nothing after the host."""
    key_id, secret = key.split(":", 1)
    # No `sync-` before the host of StartSyncExecution and TestState: API Gateway's
    # address is the same for every operation.
    sfn = boto3.client("stepfunctions", endpoint_url=args.api.rstrip("/") + path, region_name=args.region,
                       aws_access_key_id=key_id, aws_secret_access_key=secret,
                       config=Config(inject_host_prefix=False))
    sfn.meta.events.register("before-call.sfn", sign_for_api_gateway)
    return sfn


operator = client(args.operator_key, "/operator/stepfunctions")
caller = client(args.caller_key)

greeting = {"QueryLanguage": "JSONata", "StartAt": "Greet", "States": {
    "Greet": {"Type": "Pass", "Output": "{% 'hello, ' & $states.input.name %}", "End": True}}}
made = operator.create_state_machine(name="greeted", definition=json.dumps(greeting),
                                     roleArn="arn:aws:iam::000000000000:role/any", publish=True)
check("an operator creates and publishes a machine", made["stateMachineVersionArn"].endswith(":greeted:1"), made)
live = operator.create_state_machine_alias(name="live", routingConfiguration=[
    {"stateMachineVersionArn": made["stateMachineVersionArn"], "weight": 100}])["stateMachineAliasArn"]

listed = [m["name"] for m in caller.list_state_machines()["stateMachines"]]
check("a caller lists the machines", {"greeted", "drone-delivery"} <= set(listed), listed)
started = caller.start_execution(stateMachineArn=live, name="hello-1", input='{"name": "ana"}')
for _ in range(240):
    described = caller.describe_execution(executionArn=started["executionArn"])
    if described["status"] != "RUNNING":
        break
    time.sleep(0.25)
check("a caller's execution through the alias succeeds on its version",
      (described["status"], described["output"], described["stateMachineVersionArn"])
      == ("SUCCEEDED", '"hello, ana"', made["stateMachineVersionArn"]), described)
succeeded = caller.list_executions(stateMachineArn=made["stateMachineArn"], statusFilter="SUCCEEDED")["executions"]
check("a caller lists its succeeded executions, from the index of attributes",
      [e["name"] for e in succeeded] == ["hello-1"], succeeded)
every = caller.list_executions(stateMachineArn=made["stateMachineArn"])["executions"]
check("and every one, whatever its status", [e["name"] for e in every] == ["hello-1"], every)
events = [e["type"] for e in caller.get_execution_history(executionArn=started["executionArn"])["events"]]
check("its history", events[0] == "ExecutionStarted" and events[-1] == "ExecutionSucceeded", events)
refusing = operator.create_state_machine(
    name="refusing", roleArn="r",
    definition=json.dumps({"StartAt": "No", "States": {"No": {"Type": "Fail", "Error": "Refused"}}}))
refused_run = caller.start_execution(stateMachineArn=refusing["stateMachineArn"], name="no-1")
for _ in range(240):
    if caller.describe_execution(executionArn=refused_run["executionArn"])["status"] != "RUNNING":
        break
    time.sleep(0.25)
failed = caller.list_executions(stateMachineArn=refusing["stateMachineArn"], statusFilter="FAILED")["executions"]
check("a caller lists its failed executions", [e["name"] for e in failed] == ["no-1"], failed)
greet_state = json.dumps(greeting["States"]["Greet"] | {"QueryLanguage": "JSONata"})
tried = operator.test_state(definition=greet_state, input='{"name": "bo"}')
check("an operator tests a state", (tried["status"], tried["output"]) == ("SUCCEEDED", '"hello, bo"'), tried)
refused("a caller does not: it would run any definition", "AccessDeniedException",
        lambda: caller.test_state(definition=greet_state, input="{}"))
refused("a caller does not change machines on the root", "AccessDeniedException",
        lambda: caller.create_state_machine(name="mine", definition=json.dumps(greeting), roleArn="r"))
refused("nor reaches the operator's route, which IAM guards", 403,
        lambda: client(args.caller_key, "/operator/stepfunctions").list_state_machines())
operator.delete_state_machine(stateMachineArn=made["stateMachineArn"])
refused("a deleted machine starts nothing", "StateMachineDoesNotExist",
        lambda: caller.start_execution(stateMachineArn=live, input="{}"))

"""A Step Functions client as a team runs one: boto3's `stepfunctions` client,
pointed at this engine by its endpoint alone, with any credentials.

Run by functions/local/tests/stepfunctions_api.rs against a sas-local whose
workflows hold `greet.asl.json` and `approval.asl.json` (whose Lambda function
`ask` is given the task token; the test's stand-in lists the tokens it was given
at --tokens). Prints one JSON line per check; exits non-zero on the first that
fails.
"""

import argparse
import json
import threading
import time
import urllib.request

import boto3
from botocore.config import Config

from checks import check, refused

parser = argparse.ArgumentParser()
parser.add_argument("--endpoint", required=True)
parser.add_argument("--tokens", required=True)
args = parser.parse_args()



def client(**config):
    return boto3.client(
        "stepfunctions",
        endpoint_url=args.endpoint,
        region_name="us-east-1",
        aws_access_key_id="any",
        aws_secret_access_key="any",
        config=Config(**config),
    )


sfn = client()


def ended(arn):
    for _ in range(200):
        described = sfn.describe_execution(executionArn=arn)
        if described["status"] != "RUNNING":
            return described
        time.sleep(0.05)
    raise SystemExit(f"{arn} did not end")


machines = {m["name"]: m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"]}
check("listed", {"greet", "approval"} <= machines.keys(), sorted(machines))
greet = machines["greet"]
described = sfn.describe_state_machine(stateMachineArn=greet)
check("described", json.loads(described["definition"])["StartAt"] == "Named?", described["name"])

started = sfn.start_execution(stateMachineArn=greet, name="greet-1", input='{"name": "ana"}')
again = sfn.start_execution(stateMachineArn=greet, name="greet-1", input='{"name": "ana"}')
check("a name again is the same execution", again["executionArn"] == started["executionArn"], again)
refused("a name again with another input", "ExecutionAlreadyExists",
        lambda: sfn.start_execution(stateMachineArn=greet, name="greet-1", input='{"name": "bo"}'))
done = ended(started["executionArn"])
check("succeeded", done["status"] == "SUCCEEDED" and json.loads(done["output"]) == {"greeting": "HELLO, ANA!"}, done)
history = sfn.get_execution_history(executionArn=started["executionArn"])["events"]
check("an execution's history, as Step Functions writes it",
      [e["type"] for e in history] == ["ExecutionStarted", "ChoiceStateEntered", "ChoiceStateExited",
                                       "PassStateEntered", "PassStateExited", "PassStateEntered",
                                       "PassStateExited", "ExecutionSucceeded"]
      and [e["id"] for e in history] == list(range(1, 9))
      and history[3]["stateEnteredEventDetails"]["name"] == "Greet"
      and json.loads(history[7]["executionSucceededEventDetails"]["output"]) == {"greeting": "HELLO, ANA!"},
      history)
pages = sfn.get_paginator("get_execution_history").paginate(
    executionArn=started["executionArn"], reverseOrder=True, PaginationConfig={"PageSize": 3})
paged = [(e["id"], e["previousEventId"]) for page in pages for e in page["events"]]
check("its history in pages, the latest first", paged == [(n, n - 1) for n in range(8, 0, -1)], paged)
failed = ended(sfn.start_execution(stateMachineArn=greet, input="{}")["executionArn"])
check("failed", (failed["status"], failed["error"], failed["cause"]) == ("FAILED", "NoName", "the input names nobody"), failed)

# StartSyncExecution's endpoint is `sync-` and the host: at an address, a client
# must be told not to prefix it, as with Step Functions Local.
unprefixed = client(inject_host_prefix=False)
synced = unprefixed.start_sync_execution(stateMachineArn=greet, input='{"name": "bo"}')
check("a sync execution answers its end", (synced["status"], synced["output"]) == ("SUCCEEDED", '{"greeting":"HELLO, BO!"}'), synced)
ran = sfn.describe_state_machine_for_execution(executionArn=started["executionArn"])
check("the machine an execution runs", ran["definition"] == described["definition"], ran["stateMachineArn"])
valid = sfn.validate_state_machine_definition(definition=described["definition"])
broken = sfn.validate_state_machine_definition(
    definition='{"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "arn:aws:states:::nothing", "End": true}}}')
diagnostic = (broken["diagnostics"] or [{}])[0]
check("a definition validated", (valid["result"], broken["result"]) == ("OK", "FAIL")
      and diagnostic.get("location", "").startswith("/States/A"), broken)

missing = greet.replace(":greet", ":nobody")
refused("no such machine", "StateMachineDoesNotExist", lambda: sfn.start_execution(stateMachineArn=missing))
refused("not an ARN", "InvalidArn", lambda: sfn.describe_state_machine(stateMachineArn="greet"))
refused("no such execution", "ExecutionDoesNotExist",
        lambda: sfn.describe_execution(executionArn=started["executionArn"].replace("greet-1", "greet-9")))
refused("input not JSON", "InvalidExecutionInput", lambda: sfn.start_execution(stateMachineArn=greet, input="{"))
refused("a forged token", "InvalidToken", lambda: sfn.send_task_success(taskToken="forged", output="{}"))

approval = machines["approval"]
asked = {kg: sfn.start_execution(stateMachineArn=approval, name=f"ask-{kg}", input=json.dumps({"kg": kg}))
         for kg in (2, 40, 7)}
for _ in range(200):
    tokens = dict(json.load(urllib.request.urlopen(args.tokens)))
    if len(tokens) == 3:
        break
    time.sleep(0.05)
tokens = {int(kg): token for kg, token in tokens.items()}
sfn.send_task_heartbeat(taskToken=tokens[2])
sfn.send_task_success(taskToken=tokens[2], output='{"approved_by": "ana"}')
sfn.send_task_failure(taskToken=tokens[40], error="TooHeavy", cause="40 kg is over 25")
refused("a token used", "TaskTimedOut", lambda: sfn.send_task_success(taskToken=tokens[2], output="{}"))
light = ended(asked[2]["executionArn"])
check("approved", json.loads(light["output"]) == {"kg": 2, "approval": {"approved_by": "ana"}}, light)
heavy = ended(asked[40]["executionArn"])
check("refused", (heavy["status"], heavy["error"], heavy["cause"]) == ("FAILED", "TooHeavy", "40 kg is over 25"), heavy)
# The refused one redriven: it runs again from the state where it stopped, whose
# function is given a new token.
heavy_arn = asked[40]["executionArn"]
check("a failed execution is redrivable", heavy["redriveStatus"] == "REDRIVABLE", heavy)
redriven_at = sfn.redrive_execution(executionArn=heavy_arn)
for _ in range(200):
    again = [token for kg, token in json.load(urllib.request.urlopen(args.tokens)) if int(kg) == 40]
    if len(again) == 2:
        break
    time.sleep(0.05)
sfn.send_task_success(taskToken=again[-1], output='{"approved_by": "bo"}')
redriven = ended(heavy_arn)
check("a redriven execution runs again from where it stopped",
      (redriven["status"], redriven["redriveCount"], json.loads(redriven["output"]))
      == ("SUCCEEDED", 1, {"kg": 40, "approval": {"approved_by": "bo"}})
      and redriven["redriveDate"] == redriven_at["redriveDate"], redriven)
types = [e["type"] for e in sfn.get_execution_history(executionArn=heavy_arn)["events"]]
check("its history goes on after its failure",
      types.index("ExecutionFailed") < types.index("ExecutionRedriven") and types[-1] == "ExecutionSucceeded"
      and types.count("ExecutionStarted") == 1, types)
refused("a succeeded execution is not redrivable", "ExecutionNotRedrivable",
        lambda: sfn.redrive_execution(executionArn=heavy_arn))
stopped = sfn.stop_execution(executionArn=asked[7]["executionArn"], error="Withdrawn", cause="the order was cancelled")
aborted = ended(asked[7]["executionArn"])
check("stopped, with an error and a cause", "stopDate" in stopped
      and (aborted["status"], aborted["error"], aborted["cause"]) == ("ABORTED", "Withdrawn", "the order was cancelled"), aborted)

# Executions listed, as a team's scripts find them: by machine and status, paged.
def names(**request):
    pages = sfn.get_paginator("list_executions").paginate(**request, PaginationConfig={"PageSize": 1})
    return sorted(e["name"] for page in pages for e in page["executions"])


everyone = names(stateMachineArn=approval)
check("a machine's executions listed, page by page", everyone == ["ask-2", "ask-40", "ask-7"], everyone)
by_status = {status: names(stateMachineArn=approval, statusFilter=status) for status in ("SUCCEEDED", "ABORTED", "RUNNING")}
check("by status", by_status == {"SUCCEEDED": ["ask-2", "ask-40"], "ABORTED": ["ask-7"], "RUNNING": []}, by_status)
redriven = names(stateMachineArn=approval, redriveFilter="REDRIVEN")
check("the redriven ones", redriven == ["ask-40"], redriven)
listed = sfn.list_executions(stateMachineArn=greet, statusFilter="FAILED")["executions"]
check("a listed execution as Step Functions lists it",
      [(e["executionArn"], e["status"], e["stateMachineArn"]) for e in listed]
      == [(failed["executionArn"], "FAILED", greet)] and listed[0]["stopDate"] >= listed[0]["startDate"], listed)
refused("a status no execution has", "ValidationException",
        lambda: sfn.list_executions(stateMachineArn=greet, statusFilter="LOST"))
refused("a token no listing gave", "InvalidToken",
        lambda: sfn.list_executions(stateMachineArn=greet, nextToken="7:nothing"))
refused("a token whose cursor no store gave", "InvalidToken",
        lambda: sfn.list_executions(stateMachineArn=greet, nextToken="0:garbage"))
refused("the executions of no machine", "StateMachineDoesNotExist",
        lambda: sfn.list_executions(stateMachineArn=missing))

# Definitions at run time: created, started, updated (a running execution keeps its
# version), deleted; and one kept for the test to find after a restart.
counted = {"QueryLanguage": "JSONata", "StartAt": "Count",
           "States": {"Count": {"Type": "Pass", "Output": "{% $states.input.n + 1 %}", "End": True}}}
doubled = {"QueryLanguage": "JSONata", "StartAt": "Double",
           "States": {"Double": {"Type": "Pass", "Output": "{% $states.input.n * 2 %}", "End": True}}}
created = sfn.create_state_machine(name="counter", definition=json.dumps(counted), roleArn="arn:aws:iam::000000000000:role/any")
same = sfn.create_state_machine(name="counter", definition=json.dumps(counted), roleArn="arn:aws:iam::000000000000:role/any")
check("created, and the same again", same["stateMachineArn"] == created["stateMachineArn"], created)
refused("a name taken by another definition", "StateMachineAlreadyExists",
        lambda: sfn.create_state_machine(name="counter", definition=json.dumps(doubled), roleArn="r"))
refused("a name shipped with the deployment", "StateMachineAlreadyExists",
        lambda: sfn.create_state_machine(name="greet", definition=json.dumps(doubled), roleArn="r"))
refused("a definition this engine does not run", "InvalidDefinition",
        lambda: sfn.create_state_machine(name="broken", definition='{"StartAt": "Nowhere", "States": {}}', roleArn="r"))
first = ended(sfn.start_execution(stateMachineArn=created["stateMachineArn"], input='{"n": 20}')["executionArn"])
check("a created machine runs", first["output"] == "21", first)
sfn.update_state_machine(stateMachineArn=created["stateMachineArn"], definition=json.dumps(doubled))
second = ended(sfn.start_execution(stateMachineArn=created["stateMachineArn"], input='{"n": 20}')["executionArn"])
check("an updated machine runs its new version", second["output"] == "40", second)
kept = sfn.describe_state_machine_for_execution(executionArn=first["executionArn"])
check("an execution keeps the version it started on", json.loads(kept["definition"]) == counted, kept["definition"])
listed = [m["name"] for m in sfn.list_state_machines()["stateMachines"]]
check("a created machine is listed", "counter" in listed, listed)
sfn.delete_state_machine(stateMachineArn=created["stateMachineArn"])
refused("a deleted machine starts nothing", "StateMachineDoesNotExist",
        lambda: sfn.start_execution(stateMachineArn=created["stateMachineArn"], input="{}"))
listed = [m["name"] for m in sfn.list_state_machines()["stateMachines"]]
check("a deleted machine is not listed", "counter" not in listed, listed)
fast = sfn.create_state_machine(name="fast", definition=json.dumps(counted), roleArn="r", type="EXPRESS")
types = (sfn.describe_state_machine(stateMachineArn=fast["stateMachineArn"])["type"],
         {m["name"]: m["type"] for m in sfn.list_state_machines()["stateMachines"]}["fast"])
check("an express machine is described and listed as created", types == ("EXPRESS", "EXPRESS"), types)
kept = sfn.create_state_machine(name="kept", definition=json.dumps(doubled), roleArn="r", publish=True)
sfn.create_state_machine_alias(name="live", routingConfiguration=[
    {"stateMachineVersionArn": kept["stateMachineVersionArn"], "weight": 100}])

# Versions and aliases, as a team shifts its executions to a new version: published on
# create and on update, an alias at version 1, then 80/20 between 1 and 2; and tags.
def said(text):
    return {"StartAt": "Say", "States": {"Say": {"Type": "Pass", "Result": text, "End": True}}}


made = sfn.create_state_machine(name="shifted", definition=json.dumps(said("v1")), roleArn="r", publish=True,
                                versionDescription="first", tags=[{"key": "team", "value": "drones"}])
shifted, v1 = made["stateMachineArn"], made["stateMachineVersionArn"]
check("a create that publishes answers its version", v1 == shifted + ":1", made)
again = sfn.publish_state_machine_version(stateMachineArn=shifted)
check("a publish of the same revision is the same version", again["stateMachineVersionArn"] == v1, again)
updated = sfn.update_state_machine(stateMachineArn=shifted, definition=json.dumps(said("v2")), publish=True)
v2 = updated["stateMachineVersionArn"]
check("an update that publishes answers the next version", v2 == shifted + ":2", updated)
refused("a publish of a revision no longer current", "ConflictException",
        lambda: sfn.publish_state_machine_version(stateMachineArn=shifted, revisionId="1"))
versions = [v["stateMachineVersionArn"] for v in sfn.list_state_machine_versions(stateMachineArn=shifted)["stateMachineVersions"]]
check("versions listed, newest first", versions == [v2, v1], versions)
first = sfn.describe_state_machine(stateMachineArn=v1)
check("a version described as it was published",
      (json.loads(first["definition"]), first["description"], first["stateMachineArn"]) == (said("v1"), "first", v1), first)
live = sfn.create_state_machine_alias(name="live", description="what clients start",
                                      routingConfiguration=[{"stateMachineVersionArn": v1, "weight": 100}])["stateMachineAliasArn"]
check("an alias", live == shifted + ":live", live)
on_v1 = ended(sfn.start_execution(stateMachineArn=live, input="{}")["executionArn"])
check("an alias's execution runs its version", (on_v1["output"], on_v1["stateMachineVersionArn"]) == ('"v1"', v1), on_v1)
on_v2 = ended(sfn.start_execution(stateMachineArn=v2, input="{}")["executionArn"])
check("a version's execution runs it", on_v2["output"] == '"v2"', on_v2)
starter = {"StartAt": "Start", "States": {"Start": {
    "Type": "Task", "Resource": "arn:aws:states:::states:startExecution.sync:2",
    "Parameters": {"StateMachineArn": live}, "OutputPath": "$.Output", "End": True}}}
started_by = sfn.create_state_machine(name="starter", definition=json.dumps(starter), roleArn="r")
by_task = ended(sfn.start_execution(stateMachineArn=started_by["stateMachineArn"], input="{}")["executionArn"])
check("a Task starts its child on the version the child's alias routes to", by_task["output"] == '"v1"', by_task)
check("an execution started through an alias names it", on_v1["stateMachineAliasArn"] == live, on_v1)
refused("a version an alias routes to is not deleted", "ConflictException",
        lambda: sfn.delete_state_machine_version(stateMachineVersionArn=v1))
sfn.update_state_machine_alias(stateMachineAliasArn=live, routingConfiguration=[
    {"stateMachineVersionArn": v1, "weight": 80}, {"stateMachineVersionArn": v2, "weight": 20}])
routed = [ended(sfn.start_execution(stateMachineArn=live, name=f"shift-{n}", input="{}")["executionArn"])["output"]
          for n in range(40)]
check("an alias's weights shift some executions", 0 < routed.count('"v2"') < 20 and set(routed) == {'"v1"', '"v2"'}, routed)
through_alias = names(stateMachineArn=live)
check("the executions started through an alias, a Task's child among them",
      len(through_alias) == 42 and on_v1["name"] in through_alias
      and {f"shift-{n}" for n in range(40)} <= set(through_alias), through_alias)
on_version_2 = names(stateMachineArn=v2)
check("the executions of a version",
      on_v2["name"] in on_version_2 and len(on_version_2) == 1 + routed.count('"v2"'), on_version_2)
alias = sfn.describe_state_machine_alias(stateMachineAliasArn=live)
check("an alias described with its routes",
      [(r["stateMachineVersionArn"], r["weight"]) for r in alias["routingConfiguration"]] == [(v1, 80), (v2, 20)]
      and alias["description"] == "what clients start", alias)
aliases = [a["stateMachineAliasArn"] for a in sfn.list_state_machine_aliases(stateMachineArn=shifted)["stateMachineAliases"]]
check("aliases listed", aliases == [live], aliases)
refused("an alias to a version not published", "ResourceNotFound",
        lambda: sfn.create_state_machine_alias(name="next", routingConfiguration=[
            {"stateMachineVersionArn": shifted + ":9", "weight": 100}]))
refused("an alias whose weights are not 100", "ValidationException",
        lambda: sfn.update_state_machine_alias(stateMachineAliasArn=live, routingConfiguration=[
            {"stateMachineVersionArn": v1, "weight": 50}]))
sfn.delete_state_machine_alias(stateMachineAliasArn=live)
refused("a deleted alias", "ResourceNotFound", lambda: sfn.describe_state_machine_alias(stateMachineAliasArn=live))
sfn.delete_state_machine_version(stateMachineVersionArn=v1)
refused("a deleted version starts nothing", "StateMachineDoesNotExist",
        lambda: sfn.start_execution(stateMachineArn=v1, input="{}"))
tags = sfn.list_tags_for_resource(resourceArn=shifted)["tags"]
check("tags given at creation", tags == [{"key": "team", "value": "drones"}], tags)
sfn.tag_resource(resourceArn=shifted, tags=[{"key": "tier", "value": "gold"}])
sfn.untag_resource(resourceArn=shifted, tagKeys=["team"])
tags = sfn.list_tags_for_resource(resourceArn=shifted)["tags"]
check("tags added and removed", tags == [{"key": "tier", "value": "gold"}], tags)
refused("tags of a machine not there", "ResourceNotFound",
        lambda: sfn.list_tags_for_resource(resourceArn=shifted + "-not-there"))
sfn.delete_state_machine(stateMachineArn=shifted)
sfn.create_state_machine(name="shifted", definition=json.dumps(said("anew")), roleArn="r")
anew = (sfn.list_state_machine_versions(stateMachineArn=shifted)["stateMachineVersions"],
        sfn.list_tags_for_resource(resourceArn=shifted)["tags"])
check("a machine created again has none of its namesake's versions or tags", anew == ([], []), anew)

# TestState: one state run on its own, a Task's answer mocked, as a team tests a
# state before it ships it.
lookup = {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
          "Parameters": {"FunctionName": "price", "Payload": {"sku.$": "$.sku"}},
          "ResultSelector": {"price.$": "$.Payload.price"}, "ResultPath": "$.quote", "Next": "Charge",
          "Retry": [{"ErrorEquals": ["Throttled"], "MaxAttempts": 2, "IntervalSeconds": 3, "BackoffRate": 2}],
          "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.failure", "Next": "Sorry"}]}
tried = unprefixed.test_state(definition=json.dumps(lookup), input='{"sku": "k-1"}', inspectionLevel="DEBUG",
                       mock={"result": '{"StatusCode": 200, "Payload": {"price": 12}}'})
data = tried["inspectionData"]
check("a Task tested with its answer mocked",
      (tried["status"], json.loads(tried["output"]), tried["nextState"]) == ("SUCCEEDED", {"sku": "k-1", "quote": {"price": 12}}, "Charge")
      and json.loads(data["afterParameters"]) == {"FunctionName": "price", "Payload": {"sku": "k-1"}}
      and json.loads(data["afterResultSelector"]) == {"price": 12}
      and json.loads(data["afterResultPath"]) == {"sku": "k-1", "quote": {"price": 12}}, tried)
throttled = {"errorOutput": {"error": "Throttled", "cause": "slow down"}}
retried = unprefixed.test_state(definition=json.dumps(lookup), input='{"sku": "k-1"}', mock=throttled, inspectionLevel="DEBUG",
                         stateConfiguration={"retrierRetryCount": 1})
check("an error its retrier takes", (retried["status"], retried["error"]) == ("RETRIABLE", "Throttled")
      and retried["inspectionData"]["errorDetails"] == {"retryIndex": 0, "retryBackoffIntervalSeconds": 6}, retried)
caught = unprefixed.test_state(definition=json.dumps(lookup), input='{"sku": "k-1"}', mock=throttled, inspectionLevel="DEBUG",
                        stateConfiguration={"retrierRetryCount": 2})
check("an error its retrier no longer takes, caught",
      (caught["status"], caught["nextState"], json.loads(caught["output"])["failure"]["Cause"]) == ("CAUGHT_ERROR", "Sorry", "slow down")
      and caught["inspectionData"]["errorDetails"] == {"catchIndex": 0}, caught)
weigh = {"QueryLanguage": "JSONata", "StartAt": "Weigh", "States": {
    "Weigh": {"Type": "Choice", "Choices": [{"Condition": "{% $states.input.kg > $limit %}", "Next": "Heavy"}],
              "Default": "Light", "Assign": {"weighed": "{% $states.input.kg %}"}},
    "Heavy": {"Type": "Fail", "Error": "TooHeavy"}, "Light": {"Type": "Succeed"}}}
chosen = unprefixed.test_state(definition=json.dumps(weigh), stateName="Weigh", input='{"kg": 30}', variables='{"limit": 25}',
                        inspectionLevel="DEBUG")
check("a machine's state tested by its name, with variables",
      (chosen["status"], chosen["nextState"]) == ("SUCCEEDED", "Heavy")
      and json.loads(chosen["inspectionData"]["variables"]) == {"limit": 25, "weighed": 30}, chosen)
failed_state = unprefixed.test_state(definition=json.dumps(weigh), stateName="Heavy")
check("a Fail state fails", (failed_state["status"], failed_state["error"]) == ("FAILED", "TooHeavy")
      and "inspectionData" not in failed_state, failed_state)
refused("a Task with no mock makes no call", "ValidationException",
        lambda: unprefixed.test_state(definition=json.dumps(lookup), input='{"sku": "k-1"}'))
refused("a state this engine refuses", "InvalidDefinition",
        lambda: unprefixed.test_state(definition='{"Type": "Teleport"}'))

# Activities: workers poll as Step Functions' own examples do, three at once, and end
# each task with its token; every task is given to one worker only.
activity = sfn.create_activity(name="review")
check("an activity created, and the same again",
      sfn.create_activity(name="review")["activityArn"] == activity["activityArn"]
      and activity["activityArn"].endswith(":activity:review"), activity)
check("an activity described", sfn.describe_activity(activityArn=activity["activityArn"])["name"] == "review", activity)
sfn.tag_resource(resourceArn=activity["activityArn"], tags=[{"key": "queue", "value": "reviews"}])
tags = sfn.list_tags_for_resource(resourceArn=activity["activityArn"])["tags"]
check("an activity's tags", tags == [{"key": "queue", "value": "reviews"}], tags)
listed = [a["name"] for a in sfn.list_activities()["activities"]]
check("an activity listed, and no machine", "review" in listed and "greet" not in listed, listed)
refused("an activity not created", "ActivityDoesNotExist",
        lambda: sfn.get_activity_task(activityArn=activity["activityArn"].replace(":review", ":nobody")))
reviewed = {"StartAt": "Review", "States": {
    "Review": {"Type": "Task", "Resource": activity["activityArn"], "HeartbeatSeconds": 30,
               "Parameters": {"order.$": "$.order"}, "ResultPath": "$.review",
               "Catch": [{"ErrorEquals": ["Rejected"], "ResultPath": "$.rejected", "Next": "Rejected"}],
               "End": True},
    "Rejected": {"Type": "Pass", "End": True}}}
review = sfn.create_state_machine(name="reviewed", definition=json.dumps(reviewed), roleArn="r")
orders = [f"o-{n}" for n in range(6)]
runs = {order: sfn.start_execution(stateMachineArn=review["stateMachineArn"], input=json.dumps({"order": order}))
        for order in orders}
taken = []


def worker(name):
    while True:
        task = sfn.get_activity_task(activityArn=activity["activityArn"], workerName=name)
        if "taskToken" not in task:
            continue
        order = json.loads(task["input"])["order"]
        sfn.send_task_heartbeat(taskToken=task["taskToken"])
        if order == "stop":
            sfn.send_task_success(taskToken=task["taskToken"], output="{}")
            return
        taken.append((order, name))
        if order.endswith(("1", "3")):
            sfn.send_task_failure(taskToken=task["taskToken"], error="Rejected", cause=f"{order} by {name}")
        else:
            sfn.send_task_success(taskToken=task["taskToken"], output=json.dumps({"by": name}))


workers = [threading.Thread(target=worker, args=(f"w-{n}",)) for n in range(3)]
for thread in workers:
    thread.start()
results = {order: ended(run["executionArn"]) for order, run in runs.items()}
# Once every order is reviewed, a task each tells the workers to stop.
for n in range(len(workers)):
    sfn.start_execution(stateMachineArn=review["stateMachineArn"], input=json.dumps({"order": "stop"}))
for thread in workers:
    thread.join(timeout=30)
check("every task given to one worker only", sorted(order for order, _ in taken) == orders, taken)
by = dict(taken)
outputs = {order: json.loads(result["output"]) for order, result in results.items()}
check("a worker's success is the Task's result",
      all(outputs[o]["review"] == {"by": by[o]} for o in ("o-0", "o-2", "o-4", "o-5")), outputs)
check("a worker's failure is the Task's error",
      outputs["o-1"]["rejected"] == {"Error": "Rejected", "Cause": f"o-1 by {by['o-1']}"}, outputs["o-1"])
check("the workers stopped", not any(thread.is_alive() for thread in workers), [t.name for t in workers])
events = sfn.get_execution_history(executionArn=runs["o-0"]["executionArn"], includeExecutionData=False)["events"]
activity_events = [e for e in events if e["type"].startswith("Activity")]
check("an activity's task in the history, with its worker",
      [e["type"] for e in activity_events] == ["ActivityScheduled", "ActivityStarted", "ActivitySucceeded"]
      and activity_events[1]["activityStartedEventDetails"]["workerName"] == by["o-0"]
      and "output" not in activity_events[2]["activitySucceededEventDetails"], events)
sfn.delete_activity(activityArn=activity["activityArn"])
refused("a deleted activity", "ActivityDoesNotExist", lambda: sfn.describe_activity(activityArn=activity["activityArn"]))

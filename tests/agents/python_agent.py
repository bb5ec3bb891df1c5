"""An agent written in Python: the contract of the agent queues, kept by another language.

It receives the scheduler's requests from the agent-request queue, checks each against
the published schema (shared/domain/schemas/agent-request.v1.schema.json), runs the step
with the service it wraps (here, in process, the order service of the order-processing
workflow), and answers on the agent-response queue with a message it checks against
agent-response.v1.schema.json. It stays silent once a request's complete_by has passed,
and uses the request's idempotency_key so that a request delivered twice is done once.

    python_agent.py --endpoint URL --requests QUEUE_URL --responses QUEUE_URL --count N
"""

import argparse
import json
import pathlib
import sys
import time

import boto3
import jsonschema

SCHEMAS = pathlib.Path(__file__).resolve().parents[2] / "shared" / "domain" / "schemas"


def schema(name):
    return json.loads((SCHEMAS / name).read_text())


def serve(request, done):
    """The service this agent wraps: processes an order, once per idempotency key."""
    key = request["idempotency_key"]
    if key not in done:
        if request["operation"] == "call":
            done[key] = {"order_id": request["payload"]["input"]["order_id"], "processed_by": "python"}
        else:
            done[key] = {"undone": True}
    return done[key]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True, help="the SQS endpoint URL")
    parser.add_argument("--requests", required=True, help="the agent-request queue's URL")
    parser.add_argument("--responses", required=True, help="the agent-response queue's URL")
    parser.add_argument("--count", type=int, default=1, help="requests to answer, then stop")
    parser.add_argument("--seconds", type=float, default=60, help="the longest to run")
    arguments = parser.parse_args()

    sqs = boto3.client(
        "sqs",
        endpoint_url=arguments.endpoint,
        region_name="eu-west-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    requests, responses = schema("agent-request.v1.schema.json"), schema("agent-response.v1.schema.json")
    done, answered = {}, 0
    deadline = time.monotonic() + arguments.seconds
    while answered < arguments.count and time.monotonic() < deadline:
        received = sqs.receive_message(
            QueueUrl=arguments.requests, MaxNumberOfMessages=10, WaitTimeSeconds=1
        )
        for message in received.get("Messages", []):
            request = json.loads(message["Body"])
            jsonschema.validate(request, requests)
            if time.time() * 1000 < request["complete_by"]:
                response = {
                    "type": "response",
                    "task_id": request["task_id"],
                    "run": request["run"],
                    "step": request["step"],
                    "attempt": request["attempt"],
                    "operation": request["operation"],
                    "outcome": {"status": "succeeded", "output": serve(request, done)},
                }
                for given_back in ("sealed_task", "task_created_at"):
                    if given_back in request:
                        response[given_back] = request[given_back]
                jsonschema.validate(response, responses)
                sqs.send_message(QueueUrl=arguments.responses, MessageBody=json.dumps(response))
                answered += 1
                print(json.dumps({"answered": request["idempotency_key"]}), flush=True)
            sqs.delete_message(QueueUrl=arguments.requests, ReceiptHandle=message["ReceiptHandle"])
    return 0 if answered >= arguments.count else 1


if __name__ == "__main__":
    sys.exit(main())

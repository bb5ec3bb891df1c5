#!/usr/bin/env bash
# A drone-delivery smoke test through an API URL: submits a delivery, waits until it
# is Processed, and shows it. Usage: smoke.sh API_URL [TIMEOUT_SECONDS]
# Works on a deployed stack, on LocalStack, and on `cargo run -p sas-local` alike.
#
# Who it calls as: with TOKEN set, its requests carry `Authorization: Bearer $TOKEN`
# (AuthMode=JWT; sas-local with tokens); otherwise, with AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY set (and AWS_SESSION_TOKEN if any), they are signed with SigV4
# for execute-api in AWS_REGION or AWS_DEFAULT_REGION (us-east-1 by default): the
# template's default AuthMode, IAM, which refuses an unsigned request with 403; else
# they are sent unsigned (AuthMode=NONE; sas-local, which ignores a signature).
set -euo pipefail
api=${1:?usage: smoke.sh API_URL [TIMEOUT_SECONDS]}
api=${api%/}
timeout=${2:-120}
id="smoke-$(date +%s)-$$"

auth=()
if [ -n "${TOKEN:-}" ]; then
    auth=(-H "authorization: Bearer $TOKEN")
elif [ -n "${AWS_ACCESS_KEY_ID:-}" ] && [ -n "${AWS_SECRET_ACCESS_KEY:-}" ]; then
    region=${AWS_REGION:-${AWS_DEFAULT_REGION:-us-east-1}}
    auth=(--aws-sigv4 "aws:amz:$region:execute-api" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY")
    if [ -n "${AWS_SESSION_TOKEN:-}" ]; then
        auth+=(-H "x-amz-security-token: $AWS_SESSION_TOKEN")
    fi
fi

answer=$(mktemp)
trap 'rm -f "$answer"' EXIT
status=$(curl -sS -o "$answer" -w '%{http_code}' "${auth[@]}" -X PUT "$api/tasks/$id" \
    -H 'content-type: application/json' \
    -d '{"workflow":"drone-delivery","input":{"customer_id":"smoke","pickup":"Sydney","dropoff":"Bondi","weight_kg":1.2}}')
if [ "$status" != 202 ]; then
    echo "smoke: PUT /tasks/$id answered $status, not 202: $(cat "$answer")" >&2
    exit 1
fi

deadline=$(( $(date +%s) + timeout ))
while :; do
    task=$(curl -sS "${auth[@]}" "$api/tasks/$id")
    state=$(printf '%s' "$task" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null || echo "unreadable")
    case "$state" in
        Processed)
            echo "smoke: task $id Processed"
            printf '%s\n' "$task"
            exit 0 ;;
        Error)
            echo "smoke: task $id ended in Error: $task" >&2
            exit 1 ;;
    esac
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "smoke: task $id still $state after ${timeout}s: $task" >&2
        exit 1
    fi
    sleep 1
done

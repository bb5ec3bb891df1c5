#!/usr/bin/env bash
# A drone-delivery smoke test through an API URL: submits a delivery, waits until it
# is Processed, and shows it. Usage: smoke.sh API_URL [TIMEOUT_SECONDS]
# Works on a deployed stack, on LocalStack, and on `cargo run -p sas-local` alike.
set -euo pipefail
api=${1:?usage: smoke.sh API_URL [TIMEOUT_SECONDS]}
api=${api%/}
timeout=${2:-120}
id="smoke-$(date +%s)-$$"

status=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT "$api/tasks/$id" \
    -H 'content-type: application/json' \
    -d '{"workflow":"drone-delivery","input":{"customer_id":"smoke","pickup":"Sydney","dropoff":"Bondi","weight_kg":1.2}}')
if [ "$status" != 202 ]; then
    echo "smoke: PUT /tasks/$id answered $status, not 202" >&2
    exit 1
fi

deadline=$(( $(date +%s) + timeout ))
while :; do
    task=$(curl -sS "$api/tasks/$id")
    state=$(printf '%s' "$task" | python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])')
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

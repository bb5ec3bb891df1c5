#!/usr/bin/env bash
# Deploys the SAM stack to LocalStack and runs the drone-delivery smoke test through
# its API URL. Needs Docker with LocalStack running (`localstack start -d`), and
# `pip install aws-sam-cli-local cargo-lambda`. The agents call the mock services of
# sas-local, which this script starts on the host for the Lambda containers to reach.
set -euo pipefail
cd "$(dirname "$0")/../.."
stack=${STACK:-sas-local-stack}
region=${AWS_DEFAULT_REGION:-us-east-1}
mock_port=${MOCK_PORT:-8081}
export AWS_DEFAULT_REGION=$region AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}
export SAM_CLI_TELEMETRY=0

# LocalStack runs the functions in containers of the host's architecture.
case "$(uname -m)" in
    arm64|aarch64) arch=--arm64 ;;
    *) arch=--x86-64 ;;
esac
cargo lambda build --release "$arch" --bin sas-submission --bin sas-scheduler --bin sas-agent --bin sas-supervisor

# The remote services: sas-local's mocks, listening where the containers can reach them.
cargo build -p sas-local
SAS_API_ADDR=127.0.0.1:0 SAS_MOCK_ADDR="0.0.0.0:$mock_port" SAS_DATA_DIR="$(mktemp -d)" ./target/debug/sas-local > /dev/null &
mocks=$!
trap 'kill $mocks' EXIT
services=$(python3 -c "import json; print(json.dumps({a: 'http://host.docker.internal:$mock_port/' + a for a in ['account','package','transport','drone','delivery','order']}))")

# Package the binaries cargo lambda built, then deploy the template with them.
build=$(mktemp -d)
python3 - "$build" <<'PY'
import pathlib, re, sys
build = pathlib.Path(sys.argv[1])
template = pathlib.Path("infra/template.yaml").read_text()
for name in ["submission", "scheduler", "agent", "supervisor"]:
    template = template.replace(f"CodeUri: ../functions/{name}", f"CodeUri: {pathlib.Path('target/lambda/sas-' + name).resolve()}")
template = re.sub(r"\n    Metadata:\n      BuildMethod: rust-cargolambda\n      BuildProperties:\n        Binary: sas-\w+", "", template)
(build / "template.yaml").write_text(template)
PY
samlocal deploy --template-file "$build/template.yaml" --stack-name "$stack" --resolve-s3 \
    --capabilities CAPABILITY_IAM --no-confirm-changeset --no-fail-on-empty-changeset \
    --parameter-overrides "ServiceUrls=$services" "SupervisorRate=rate(1 minute)"

api=$(awslocal cloudformation describe-stacks --stack-name "$stack" \
    --query "Stacks[0].Outputs[?OutputKey=='ApiUrl'].OutputValue" --output text)
# LocalStack serves API Gateway under its own host.
api=$(printf '%s' "$api" | sed -E 's#https://([a-z0-9]+)\.execute-api\.[^/]+#http://\1.execute-api.localhost.localstack.cloud:4566#')
infra/localstack/smoke.sh "$api" 180

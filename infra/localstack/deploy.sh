#!/usr/bin/env bash
# Deploys the SAM stack to LocalStack and runs the drone-delivery smoke test through
# its API URL. Needs Docker with LocalStack running (`localstack start -d`), and
# `pip install aws-sam-cli-local cargo-lambda`. The agents call the mock services of
# sas-local, which this script starts on the host for the Lambda containers to reach.
# The stack takes the template's default AuthMode, IAM: the smoke test signs its
# requests with SigV4 as the deployer (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
#
# Settings, all optional: AWS_ENDPOINT_URL (the emulator; LocalStack's
# http://localhost:4566 by default), SAM (the SAM CLI: samlocal), LAMBDA_DIR (a directory
# of sas-<function>/bootstrap already built, for the build to be skipped), SAS_LOCAL (a
# sas-local binary already built, for its build to be skipped), MOCK_HOST (where the
# functions reach this host: host.docker.internal from LocalStack's containers),
# API_URL (the API's URL, %s for its id: LocalStack's own host by default), TEMPLATE
# (the template deployed: infra/template.yaml by default; a copy of it adjusted for an
# emulator that cannot take all of it), STACK, AWS_DEFAULT_REGION, MOCK_PORT.
set -euo pipefail
cd "$(dirname "$0")/../.."
stack=${STACK:-sas-local-stack}
region=${AWS_DEFAULT_REGION:-us-east-1}
mock_port=${MOCK_PORT:-8081}
mock_host=${MOCK_HOST:-host.docker.internal}
sam=${SAM:-samlocal}
export AWS_ENDPOINT_URL=${AWS_ENDPOINT_URL:-http://localhost:4566}
export AWS_DEFAULT_REGION=$region AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}
export SAM_CLI_TELEMETRY=0

# LocalStack runs the functions in containers of the host's architecture.
lambda_dir=${LAMBDA_DIR:-target/lambda}
if [ -z "${LAMBDA_DIR:-}" ]; then
    case "$(uname -m)" in
        arm64|aarch64) arch=--arm64 ;;
        *) arch=--x86-64 ;;
    esac
    cargo lambda build --release "$arch" --bin sas-submission --bin sas-scheduler --bin sas-agent --bin sas-supervisor
fi

# The remote services: sas-local's mocks, listening where the functions can reach them.
sas_local=${SAS_LOCAL:-}
if [ -z "$sas_local" ]; then
    cargo build -p sas-local
    sas_local=${CARGO_TARGET_DIR:-target}/debug/sas-local
fi
data=$(mktemp -d)
SAS_API_ADDR=127.0.0.1:0 SAS_MOCK_ADDR="0.0.0.0:$mock_port" SAS_DATA_DIR="$data" "$sas_local" > /dev/null &
mocks=$!
trap 'kill $mocks 2>/dev/null || true; rm -rf "$data" "${build:-}"' EXIT
services=$(python3 -c "import json; print(json.dumps({a: 'http://$mock_host:$mock_port/' + a for a in ['account','package','transport','drone','delivery','order']}))")

# Package the binaries cargo lambda built, then deploy the template with them.
build=$(mktemp -d)
python3 - "$build" "$lambda_dir" "${TEMPLATE:-infra/template.yaml}" <<'PY'
import pathlib, re, sys
build, built, source = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
template = source.read_text()
for name in ["submission", "scheduler", "agent", "supervisor"]:
    code = f"CodeUri: {(built / ('sas-' + name)).resolve()}"
    template, found = re.subn(rf"CodeUri: ['\"]?\.\./functions/{name}['\"]?(?=\n)", code, template)
    # The submission's binary serves two functions: its writes and its reads.
    if found == 0:
        sys.exit(f"deploy.sh: {source} has no CodeUri ../functions/{name}")
# sam build's instructions, which sam deploy of built code does not take.
template = re.sub(r"\n( +)Metadata:\n\1  BuildMethod: rust-cargolambda\n\1  BuildProperties:\n\1    Binary: sas-\w+", "", template)
(build / "template.yaml").write_text(template)
PY
# Each parameter quoted whole: the SAM CLI cuts an unquoted value at its first brace or
# space (ServiceUrls arrived as `{`, SupervisorRate as `rate(1`).
"$sam" deploy --template-file "$build/template.yaml" --stack-name "$stack" --resolve-s3 \
    --capabilities CAPABILITY_IAM --no-confirm-changeset --no-fail-on-empty-changeset \
    --parameter-overrides "ServiceUrls='$services'" "SupervisorRate='rate(1 minute)'"

api_id=$("$sam" list stack-outputs --stack-name "$stack" --output json | python3 -c \
    'import json, sys; url = next(o["OutputValue"] for o in json.load(sys.stdin) if o["OutputKey"] == "ApiUrl"); print(url.split("//")[1].split(".")[0])')
# LocalStack serves API Gateway under its own host.
# shellcheck disable=SC2059 # the format is the setting
api_url=$(printf "${API_URL:-http://%s.execute-api.localhost.localstack.cloud:4566}" "$api_id")
infra/localstack/smoke.sh "$api_url" 180

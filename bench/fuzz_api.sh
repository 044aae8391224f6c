#!/usr/bin/env bash
# Fuzzes the server's API from its own OpenAPI document with schemathesis (PyPI): every
# operation, positive and negative inputs, with a member's and an admin's token, checking that
# nothing answers 5xx. Exits non-zero if schemathesis finds a server error.
#
#   bench/fuzz_api.sh                  # 200 examples per operation and token
#   EXAMPLES=50 bench/fuzz_api.sh
#
# Needs python3 (a venv with schemathesis is made once in target/schemathesis-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
EXAMPLES=${EXAMPLES:-200}
SEED=${SEED:-1515}
VENV=$(realpath -m "${VENV:-target/schemathesis-venv}")
if [ ! -x "$VENV/bin/st" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q schemathesis
fi
cargo build --workspace -q
BIN=${CARGO_TARGET_DIR:-$PWD/target}/debug/sluice
WORK=$(mktemp -d)
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
export SLUICE_HOME=$WORK/home
MEMBER=$("$BIN" token create --team vision --role member --name fuzz)
ADMIN=$("$BIN" token create --team '*' --role admin --name fuzz-admin)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN" server --listen "127.0.0.1:$PORT" --rate 100000 2> "$WORK/server.log" &
SERVER=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.1; done
# A run of the member's team, so that routes about a run reach their logic (not only 404):
# one pass fuzzes with its id and step given, the other with generated ones. Its step is
# short, so that a log followed to the run's end ends within the request timeout.
RUN=$(curl -sf -X POST "http://127.0.0.1:$PORT/api/v1/runs" -H "Authorization: Bearer $MEMBER" \
    -H 'Content-Type: application/json' \
    -d '{"source": "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: fuzzed}\nspec:\n  steps:\n    - name: work\n      run: sleep 2\n"}' \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
TOKEN_ID=$("$BIN" token list --output json | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["id"])')
cat > "$WORK/schemathesis.toml" <<TOML
[parameters]
run = "$RUN"
step = "work"
id = "$TOKEN_ID"
TOML
status=0
# schemathesis keeps a cache in the folder it runs in: the throwaway one.
cd "$WORK"
for token in "$MEMBER" "$ADMIN"; do
    "$VENV/bin/st" --config-file "$WORK/schemathesis.toml" run "http://127.0.0.1:$PORT/api/v1/openapi.json" \
        --url "http://127.0.0.1:$PORT" \
        -H "Authorization: Bearer $token" \
        --checks not_a_server_error \
        --max-examples "$EXAMPLES" --seed "$SEED" \
        --workers 1 --request-timeout 10 \
        --exclude-path-regex '/logs$' \
        || status=$?
    "$VENV/bin/st" run "http://127.0.0.1:$PORT/api/v1/openapi.json" \
        --url "http://127.0.0.1:$PORT" \
        -H "Authorization: Bearer $token" \
        --checks not_a_server_error \
        --max-examples "$EXAMPLES" --seed "$SEED" \
        --workers 1 --request-timeout 10 \
        --exclude-path-regex '/logs$' \
        || status=$?
    # Logs that follow a run stream until it ends: fuzzed without following.
    "$VENV/bin/st" run "http://127.0.0.1:$PORT/api/v1/openapi.json" \
        --url "http://127.0.0.1:$PORT" \
        -H "Authorization: Bearer $token" \
        --checks not_a_server_error \
        --max-examples "$EXAMPLES" --seed "$SEED" \
        --include-path-regex '/logs$' --request-timeout 5 \
        || status=$?
done
if grep -q 'panicked' "$WORK/server.log"; then
    echo "the server panicked:"; grep -A5 panicked "$WORK/server.log"; status=1
fi
kill -0 $SERVER || { echo "the server died"; status=1; }
if [ "$status" -ne 0 ]; then
    # The folder goes at exit: the server's log is kept where it can be read.
    mkdir -p "$ROOT/bench/out"
    cp "$WORK/server.log" "$ROOT/bench/out/fuzz_api-server.log"
    echo "the server's log: bench/out/fuzz_api-server.log; its end:"
    tail -40 "$WORK/server.log"
fi
exit $status

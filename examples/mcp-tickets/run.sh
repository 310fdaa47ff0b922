#!/usr/bin/env bash
# Runs the offline MCP example end to end: copies this directory into a new temporary git
# repository, runs `cordon run --no-ui` there (the ticket tracker's MCP server starts inside the
# agent step's sandbox) and prints the diff the run left: the fix and the closed ticket.
# It never writes into this checkout (except building cordon into target/ when it is missing)
# and can be run again and again; each run gets its own copy.
#
#   bash examples/mcp-tickets/run.sh
#
# The cordon binary is $CORDON, else the `cordon` on PATH, else target/debug/cordon (built with
# cargo when missing). Needs python3.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

cordon=${CORDON:-$(command -v cordon || echo "$root/target/debug/cordon")}
if [ ! -x "$cordon" ]; then
    echo "building cordon (cargo build -p cordon-cli)…" >&2
    (cd "$root" && cargo build --quiet -p cordon-cli)
fi
echo "using $cordon ($("$cordon" --version))" >&2

work=$(mktemp -d "${TMPDIR:-/tmp}/cordon-mcp-tickets.XXXXXX")
tar -C "$here" --exclude=./run.sh -cf - . | tar -C "$work" -xf -

cd "$work"
git init --quiet
git add --all
git -c user.name="cordon example" -c user.email="example@example.com" \
    commit --quiet --message "tickets: the example before the run"

echo "workspace: $work" >&2
status=0
"$cordon" run --no-ui || status=$?
echo
git --no-pager diff --stat
exit "$status"

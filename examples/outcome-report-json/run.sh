#!/usr/bin/env bash
# Runs the offline outcome example end to end: copies this directory into a new temporary git
# repository, runs `cordon do "…" --no-ui` there and prints the commits it made (one per task).
# It never writes into this checkout (except building cordon into target/ when it is missing)
# and can be run again and again; each run gets its own copy.
#
#   bash examples/outcome-report-json/run.sh
#
# The cordon binary is $CORDON, else the `cordon` on PATH, else target/debug/cordon (built with
# cargo when missing). Run state goes where cordon keeps it ($CORDON_STATE_DIR, else
# ~/.local/state/cordon), so `cordon ui` can show the run afterwards.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

cordon=${CORDON:-$(command -v cordon || echo "$root/target/debug/cordon")}
if [ ! -x "$cordon" ]; then
    echo "building cordon (cargo build -p cordon-cli)…" >&2
    (cd "$root" && cargo build --quiet -p cordon-cli)
fi
echo "using $cordon ($("$cordon" --version))" >&2

work=$(mktemp -d "${TMPDIR:-/tmp}/cordon-outcome-report-json.XXXXXX")
tar -C "$here" --exclude=./run.sh -cf - . | tar -C "$work" -xf -

cd "$work"
git init --quiet
git add --all
git -c user.name="cordon example" -c user.email="example@example.com" \
    commit --quiet --message "report: the example before the outcome"

echo "workspace: $work" >&2
status=0
"$cordon" do "Add a --json option to report.py that prints the counts as JSON, and document it." \
    --no-ui || status=$?
echo
git --no-pager log --format='%h %s' -3
exit "$status"

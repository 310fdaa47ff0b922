#!/usr/bin/env bash
# Runs the offline fix-calculator example end to end: copies this directory into a new temporary
# git repository, runs `cordon run pipeline.yaml --no-ui` there and prints the commit it made.
# It never writes into this checkout (except building cordon into target/ when it is missing)
# and can be run again and again; each run gets its own copy.
#
#   bash examples/fix-calculator/run.sh
#
# The cordon binary is $CORDON, else the `cordon` on PATH (the one `cargo install` put there), else
# target/debug/cordon (built with cargo when missing); the script says which it runs. Run state
# goes where cordon keeps it ($CORDON_STATE_DIR, else ~/.local/state/cordon), so `cordon ui` can
# show the run afterwards.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

cordon=${CORDON:-$(command -v cordon || echo "$root/target/debug/cordon")}
if [ ! -x "$cordon" ]; then
    echo "building cordon (cargo build -p cordon-cli)…" >&2
    (cd "$root" && cargo build --quiet -p cordon-cli)
fi
echo "using $cordon ($("$cordon" --version))" >&2

work=$(mktemp -d "${TMPDIR:-/tmp}/cordon-fix-calculator.XXXXXX")
# Everything but this script: the code, its tests and the tooling (pipeline, agents, transcript).
tar -C "$here" --exclude=./run.sh -cf - . | tar -C "$work" -xf -

cd "$work"
git init --quiet
# cordon requires its tooling files to be committed; the example's own identity keeps the
# user's git configuration out of it.
git add --all
git -c user.name="cordon example" -c user.email="example@example.com" \
    commit --quiet --message "calc: the example before the fix"

# `--no-ui`: no live page for a scripted run (older builds have no page and no flag).
flags=()
if "$cordon" run --help 2>/dev/null | grep -q -- '--no-ui'; then
    flags+=(--no-ui)
fi

echo "workspace: $work" >&2
status=0
"$cordon" run pipeline.yaml "${flags[@]}" || status=$?
echo
git --no-pager log -1 --stat
exit "$status"

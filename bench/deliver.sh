#!/usr/bin/env bash
# Delivery benchmark (DESIGN §15, issue 20): the `deliver` action against a bare `git push` of the
# same commit, side by side, through the same loopback smart-HTTP server (`git http-backend`
# behind basic auth, the tests' crates/cli/tests/cli/deliver/forge.py) with the same token.
#
# Each round makes a fresh workspace whose `make` step writes CORDON_BENCH_FILES files (default
# 2000, 4 KiB each, executable bits on every tenth), then `commit` and `deliver` (push + find or
# open the pull request through the scripted GitHub API). cordon's time is the `deliver` step's,
# from its `step.started` to its `step.finished` event (its lineage check, the secret scan of
# every added blob, `ls-remote`, the push, two API calls); the peer's is `git push` of the same
# commit into a fresh bare repository on the same server, and `git ls-remote` + `git push` (the
# git work `deliver` does, without cordon's checks and the API calls). Medians of CORDON_BENCH_RUNS rounds
# (default 7) and their ratio.
#
#   bash bench/deliver.sh            # from the workspace root
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${CORDON_BENCH_RUNS:-7}"
files="${CORDON_BENCH_FILES:-2000}"
token="bench-token-0123456789"

cargo build --profile dist --locked -p cordon-cli
cargo build --profile dist --locked -p cordon-sandbox --bin cordon-sandbox-init

dir=$(mktemp -d /tmp/cordon-bench-deliver.XXXXXX)
forge_pid=
trap '[ -n "$forge_pid" ] && kill "$forge_pid" 2>/dev/null; rm -rf "$dir"' EXIT
cp target/dist/cordon target/dist/cordon-sandbox-init "$dir/"
cp crates/cli/tests/cli/deliver/forge.py "$dir/forge.py"
mkdir -p "$dir/forge"

export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.test
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.test

FORGE_GIT_PASSWORD=$token FORGE_API_TOKEN=$token python3 "$dir/forge.py" \
    --root "$dir/forge" --log "$dir/forge.log" --port-file "$dir/port" &
forge_pid=$!
for _ in $(seq 1 200); do [ -s "$dir/port" ] && break; sleep 0.05; done
port=$(cat "$dir/port")
cat >"$dir/policy.toml" <<EOF
allow_private = ["127.0.0.0/8"]
[delivery]
allow = ["ip:127.0.0.1:*"]
allow_insecure = ["ip:127.0.0.1:*"]
EOF

# What the make step writes: FILES files of 4 KiB, every tenth executable.
cat >"$dir/make.py" <<EOF
import os
for i in range($files):
    path = f"src/d{i % 40}/f{i}.txt"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write((f"line {i} " * 512)[:4096])
    if i % 10 == 0:
        os.chmod(path, 0o755)
EOF

elapsed() { # the deliver step's seconds, from the run's events
    python3 - "$1" <<'EOF'
import json, sys, datetime
def ts(t):
    return datetime.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
start = end = None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("step") == "deliver" and e["type"] == "step.started":
        start = ts(e["ts"])
    if e.get("step") == "deliver" and e["type"] == "step.finished":
        end = ts(e["ts"])
print(f"{end - start:.4f}")
EOF
}

cordon_times=()
git_times=()
both_times=()
for round in $(seq 1 "$runs"); do
    ws="$dir/ws$round"
    mkdir -p "$ws"
    git -C "$dir/forge" init -q --bare "r$round.git"
    git -C "$dir/forge" init -q --bare "p$round.git"
    cp "$dir/make.py" "$ws/make.py"
    cat >"$ws/pipeline.yaml" <<EOF
name: bench
secrets:
  gh: {from: env, key: BENCH_TOKEN}
steps:
  - {name: make, command: "python3 make.py"}
  - {name: commit, action: commit}
  - name: deliver
    action: deliver
    params:
      remote: http://127.0.0.1:$port/git/r$round.git
      token: gh
      pull_request: {forge: github, api_url: 'http://127.0.0.1:$port/api', repo: bench/r$round}
EOF
    git -C "$ws" init -q -b main
    git -C "$ws" add -A
    git -C "$ws" commit -q -m base
    (cd "$ws" && BENCH_TOKEN=$token "$dir/cordon" run --no-ui --quiet --state-dir "$dir/state" \
        --policy "$dir/policy.toml" >/dev/null 2>"$dir/err$round") || { cat "$dir/err$round" >&2; exit 1; }
    (cd "$ws" && "$dir/cordon" logs --last --json --state-dir "$dir/state" >"$dir/events$round")
    cordon_times+=("$(elapsed "$dir/events$round")")
    # The peer: the same commit, pushed by git itself with the same credentials.
    start=$(date +%s.%N)
    git -C "$ws" -c credential.helper= \
        -c "credential.helper=!f() { echo username=x-access-token; echo password=$token; }; f" \
        push -q "http://127.0.0.1:$port/git/p$round.git" HEAD:refs/heads/bench
    end=$(date +%s.%N)
    git_times+=("$(python3 -c "print(f'{$end - $start:.4f}')")")
    # The same git work cordon does: look the branch up, then push.
    git -C "$dir/forge" init -q --bare "q$round.git"
    start=$(date +%s.%N)
    helper="!f() { echo username=x-access-token; echo password=$token; }; f"
    git -C "$ws" -c credential.helper= -c "credential.helper=$helper" \
        ls-remote --refs "http://127.0.0.1:$port/git/q$round.git" refs/heads/bench >/dev/null
    git -C "$ws" -c credential.helper= -c "credential.helper=$helper" \
        push -q "http://127.0.0.1:$port/git/q$round.git" HEAD:refs/heads/bench
    end=$(date +%s.%N)
    both_times+=("$(python3 -c "print(f'{$end - $start:.4f}')")")
done

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
c=$(median "${cordon_times[@]}")
g=$(median "${git_times[@]}")
b=$(median "${both_times[@]}")
echo "files per commit:            $files (4 KiB each)"
echo "rounds:                      $runs"
echo "cordon deliver (median):     ${c} s   [${cordon_times[*]}]"
echo "git push (median):           ${g} s   [${git_times[*]}]"
echo "git ls-remote + push (med.): ${b} s   [${both_times[*]}]"
python3 -c "print(f'ratio deliver / git push:    {$c / $g:.2f}x')"
python3 -c "print(f'ratio deliver / ls-remote + push: {$c / $b:.2f}x')"

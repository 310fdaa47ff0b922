#!/usr/bin/env bash
# Host-side cost of a run (issue "the host never trusts the workspace"): what cordon does on the
# host between steps — events, the diff recorded after every attempt, the commit action — timed
# with whole `cordon run` invocations.
#
#   * a 50-step pipeline of `true` commands over a 500-file work tree (50 diffs);
#   * a 10,000-file commit (CORDON_BENCH_FILES): one step rewrites 10,000 tracked files, then the
#     commit action — timed from the commit step's `step.started` to its `step.finished`, beside
#     `git add -A && git commit` of the same change without cordon (the peer), and as the whole
#     run (the rewrite, the diff recorded after it, the commit). The whole run is what compares
#     binaries: cordon before the in-process git wrote the new blobs while taking the rewrite's
#     diff, so its commit step had none left to write.
#
# CORDON_BENCH_AFTER=/path/to/cordon times that binary instead of building this checkout's;
# CORDON_BENCH_BEFORE=/path/to/an/older/cordon runs the same cases with that binary too, each
# round alternating the two, and prints the ratio. CORDON_BENCH_ROUNDS sets the rounds (default 5);
# the medians are printed. CORDON_BENCH_FILES sets the commit's file count (default 10000). A run
# that does not end within 300 s is stopped and reported as a hang (cordon before the in-process
# git deadlocked on commits of more than ~1,600 files: `git hash-object --stdin-paths` filled its
# output pipe while cordon was still writing the path list).
#
#   bash bench/host-boundary.sh
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${CORDON_BENCH_ROUNDS:-5}"
files="${CORDON_BENCH_FILES:-10000}"
before="${CORDON_BENCH_BEFORE-}"
after="${CORDON_BENCH_AFTER-}"
if [ -z "$after" ]; then
    cargo build --profile dist --locked -p cordon-cli
    after=target/dist/cordon
fi
dir=$(mktemp -d /tmp/cordon-bench-host.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cp "$after" "$dir/cordon-after"
bins=("$dir/cordon-after")
if [ -n "$before" ]; then
    cp "$before" "$dir/cordon-before"
    bins+=("$dir/cordon-before")
fi

export GIT_CONFIG_GLOBAL="$dir/gitconfig" GIT_CONFIG_NOSYSTEM=1
# No automatic gc after the peer's commit: it would run detached into the next round (and
# cordon's commit does not gc either).
printf '[user]\n\tname = bench\n\temail = bench@example.test\n[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n' >"$GIT_CONFIG_GLOBAL"

now_ms() { date +%s%3N; }

# A git work tree at $1 with $2 files in 100-file directories and the pipeline $3.
make_repo() {
    local repo=$1 files=$2 pipeline=$3
    mkdir -p "$repo"
    git -C "$repo" init -q
    python3 - "$repo" "$files" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "src", f"d{i // 100:03}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05}.txt"), "w") as f:
        f.write(f"line one of file {i}\nline two\nline three\n")
EOF
    printf '%s' "$pipeline" >"$repo/pipeline.yaml"
    git -C "$repo" add -A
    git -C "$repo" commit -q -m base
    # The repository just made is written back before the timed run starts: otherwise the
    # kernel's writeback of its thousands of new files is charged to whoever writes next (the
    # peer's `git add` measured 0.19 s after a sync and ~1 s without one).
    sync
}

fifty=$'name: fifty\nsteps:\n'
for i in $(seq 1 50); do fifty+="  - {name: s$i, command: [\"true\"]}"$'\n'; done
commit=$'name: big-commit\nsteps:\n  - name: rewrite\n    command: "find src -name \'*.txt\' -exec sed -i s/two/TWO/ {} +"\n  - name: commit\n    action: commit\n    params: {message: "rewrite"}\n'

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A fifty_ms commit_ms whole_ms
peer_ms=()
for round in $(seq 1 "$rounds"); do
    for bin in "${bins[@]}"; do
        name=$(basename "$bin")
        repo="$dir/r$round-$name-fifty"
        make_repo "$repo" 500 "$fifty"
        start=$(now_ms)
        "$bin" run "$repo/pipeline.yaml" --no-ui --state-dir "$dir/state-$name" 2>/dev/null
        fifty_ms[$name]+="$(( $(now_ms) - start )) "

        repo="$dir/r$round-$name-commit"
        make_repo "$repo" "$files" "$commit"
        start=$(now_ms)
        if ! timeout 300 "$bin" run "$repo/pipeline.yaml" --no-ui --state-dir "$dir/state-$name" 2>/dev/null; then
            echo "$name: the $files-file commit run did not end within 300 s (or failed)" >&2
            commit_ms[$name]+="999999 "
            whole_ms[$name]+="999999 "
            rm -rf "$dir/r$round-$name-fifty" "$repo"
            continue
        fi
        span=$("$bin" logs --last --json --step commit --state-dir "$dir/state-$name" | python3 -c '
import json, sys, datetime
ts = [json.loads(l) for l in sys.stdin]
ts = [datetime.datetime.fromisoformat(r["ts"].replace("Z", "+00:00")) for r in ts if r["type"] in ("step.started", "step.finished")]
print(int((ts[-1] - ts[0]).total_seconds() * 1000))')
        whole_ms[$name]+="$(( $(now_ms) - start )) "
        commit_ms[$name]+="$span "
        rm -rf "$dir/r$round-$name-fifty" "$dir/r$round-$name-commit"
    done
    # The peer: the same change committed by git alone.
    repo="$dir/r$round-peer"
    make_repo "$repo" "$files" "$commit"
    (cd "$repo" && find src -name '*.txt' -exec sed -i s/two/TWO/ {} +)
    start=$(now_ms)
    git -C "$repo" add -A && git -C "$repo" commit -q -m rewrite
    peer_ms+=("$(( $(now_ms) - start ))")
    rm -rf "$repo"
done

peer=$(printf '%s\n' "${peer_ms[@]}" | median)
echo "medians of $rounds rounds"
for bin in "${bins[@]}"; do
    name=$(basename "$bin")
    f=$(printf '%s\n' ${fifty_ms[$name]} | median)
    c=$(printf '%s\n' ${commit_ms[$name]} | median)
    w=$(printf '%s\n' ${whole_ms[$name]} | median)
    echo "$name: 50-step run ${f} ms; $files-file commit step ${c} ms ($(python3 -c "print(f'{$c/$peer:.2f}')")x git add+commit, ${peer} ms); rewrite+commit run ${w} ms"
done
if [ -n "$before" ]; then
    fa=$(printf '%s\n' ${fifty_ms[cordon-after]} | median)
    fb=$(printf '%s\n' ${fifty_ms[cordon-before]} | median)
    ca=$(printf '%s\n' ${commit_ms[cordon-after]} | median)
    cb=$(printf '%s\n' ${commit_ms[cordon-before]} | median)
    wa=$(printf '%s\n' ${whole_ms[cordon-after]} | median)
    wb=$(printf '%s\n' ${whole_ms[cordon-before]} | median)
    python3 -c "print(f'after/before: 50-step run {$fa/$fb:.2f}x, $files-file commit step {$ca/$cb:.2f}x, rewrite+commit run {$wa/$wb:.2f}x')"
fi

#!/usr/bin/env bash
# Start-up benchmark (DESIGN §9, issue "caps, doctor, speed"): runs `/bin/true` bare, under
# `bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp`,
# through `cordon exec --`, and in a warm session through the library, CORDON_BENCH_RUNS times each
# (default 200), as root and as uid 65534, and prints medians and ratios
# (crates/sandbox/benches/startup.rs does the timing). It also times `cordon exec --image` on an
# image built from the distribution's static busybox (`busybox-static`), imported for each user,
# against `cordon exec` in the same rounds (DESIGN §14: at most 1.1x).
#
#   bash bench/sandbox-startup.sh            # from the workspace root, as root for both users
set -euo pipefail
cd "$(dirname "$0")/.."

export CORDON_BENCH_RUNS="${CORDON_BENCH_RUNS:-200}"
user=65534

if ! command -v bwrap >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        echo "installing bubblewrap (the peer this benchmark compares with)" >&2
        apt-get install -y bubblewrap >/dev/null || { apt-get update >/dev/null && apt-get install -y bubblewrap >/dev/null; }
    else
        echo "cordon: bwrap is missing; install bubblewrap (e.g. \`sudo apt-get install bubblewrap\`)" >&2
        exit 2
    fi
fi

cargo build --profile dist --locked -p cordon-cli
cargo build --profile dist --locked -p cordon-sandbox --bin cordon-sandbox-init
bench=$(
    cargo bench --locked -p cordon-sandbox --bench startup --no-run --message-format=json 2>/dev/null \
        | grep '"reason":"compiler-artifact"' \
        | grep -o '"executable":"[^"]*startup[^"]*"' \
        | sed -e 's/^"executable":"//' -e 's/"$//' \
        | tail -n 1
)
if [ -z "$bench" ]; then
    echo "cordon: the startup benchmark did not build (\`cargo bench -p cordon-sandbox --no-run\`)" >&2
    exit 1
fi

# Both users time the same fresh copies, made at one moment: two byte-identical copies of the
# binary were measured 13-20% apart depending on how their page-cache pages were filled, so the
# root column must not time the build output in place while the other times a copy.
dir=$(mktemp -d /tmp/cordon-bench.XXXXXX)
home=$(mktemp -d /tmp/cordon-bench-home.XXXXXX)
trap 'rm -rf "$dir" "$home"' EXIT
cp "$bench" "$dir/startup"
cp target/dist/cordon target/dist/cordon-sandbox-init "$dir/"
chmod 755 "$dir" && chmod -R a+rX "$dir"

# The image: busybox and its applets (`true` among them), saved as `docker save` would and
# imported into a state directory per user.
image_archive() {
    local work=$1
    mkdir -p "$work/rootfs/bin" "$work/save/layer"
    cp /bin/busybox "$work/rootfs/bin/busybox"
    for applet in sh true; do ln -sf busybox "$work/rootfs/bin/$applet"; done
    tar -C "$work/rootfs" -cf "$work/save/layer/layer.tar" .
    local diff_id config
    diff_id=$(sha256sum "$work/save/layer/layer.tar" | cut -d' ' -f1)
    printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
        "$diff_id" >"$work/save/config.json"
    config=$(sha256sum "$work/save/config.json" | cut -d' ' -f1)
    mv "$work/save/config.json" "$work/save/$config.json"
    printf '[{"Config":"%s.json","RepoTags":["bench-busybox"],"Layers":["layer/layer.tar"]}]' \
        "$config" >"$work/save/manifest.json"
    tar -C "$work/save" -cf "$work/image.tar" manifest.json "$config.json" layer
}
image_archive "$dir/image"
chmod -R a+rX "$dir/image"
"$dir/cordon" image import "$dir/image/image.tar" --state-dir "$dir/state-root" >/dev/null

echo "== as $(id -un)"
(cd "$dir" && CORDON_BIN="$dir/cordon" CORDON_BENCH_INIT="$dir/cordon-sandbox-init" \
    CORDON_BENCH_IMAGE=bench-busybox CORDON_STATE_DIR="$dir/state-root" ./startup)

if [ "$(id -u)" = 0 ]; then
    # The user needs a home and workspace of its own.
    chown "$user:$user" "$home"
    echo
    echo "== as uid $user"
    setpriv --reuid "$user" --regid "$user" --clear-groups env HOME="$home" \
        "$dir/cordon" image import "$dir/image/image.tar" --state-dir "$home/state" >/dev/null
    (cd "$dir" && setpriv --reuid "$user" --regid "$user" --clear-groups \
        env HOME="$home" TMPDIR=/tmp PATH="$PATH" CORDON_BENCH_RUNS="$CORDON_BENCH_RUNS" \
        CORDON_BIN="$dir/cordon" CORDON_BENCH_INIT="$dir/cordon-sandbox-init" \
        CORDON_BENCH_IMAGE=bench-busybox CORDON_STATE_DIR="$home/state" ./startup)
fi

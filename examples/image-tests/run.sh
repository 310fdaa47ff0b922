#!/usr/bin/env bash
# Runs the image-tests example end to end, offline: builds a root filesystem from the
# distribution's static busybox (`busybox-static`), saves it as a docker-archive (the format
# `docker save` and `podman save` write), imports it with `cordon image import`, and runs the
# project's tests on it — first with `cordon exec --image`, then as a pipeline step. It never
# writes into this checkout (except building cordon into target/ when it is missing).
#
#   bash examples/image-tests/run.sh
#
# The cordon binary is $CORDON, else the `cordon` on PATH, else target/debug/cordon. The image
# goes into cordon's state directory ($CORDON_STATE_DIR, else ~/.local/state/cordon); remove it
# afterwards with `cordon image rm busybox-tests`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cordon=${CORDON:-$(command -v cordon || echo "$root/target/debug/cordon")}
if [ ! -x "$cordon" ]; then
    echo "building cordon (cargo build -p cordon-cli)…" >&2
    (cd "$root" && cargo build --quiet -p cordon-cli)
fi
busybox=$(command -v busybox || true)
if [ -z "$busybox" ] || ! file -L "$busybox" 2>/dev/null | grep -q static; then
    busybox=/bin/busybox
fi
[ -x "$busybox" ] || { echo "this example needs a static busybox (apt install busybox-static)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cordon-image-tests.XXXXXX")

# 1. A root filesystem: busybox, its applets as links, an os-release naming it.
rootfs="$work/rootfs"
mkdir -p "$rootfs/bin" "$rootfs/etc"
cp "$busybox" "$rootfs/bin/busybox"
for applet in sh cat echo test [ ls grep wc; do ln -s busybox "$rootfs/bin/$applet"; done
echo "ID=busybox-tests" > "$rootfs/etc/os-release"

# 2. A docker-archive of it: one layer, its configuration named by its digest, a manifest.
save="$work/save"
mkdir -p "$save/layer"
tar -C "$rootfs" -cf "$save/layer/layer.tar" .
diff_id=$(sha256sum "$save/layer/layer.tar" | cut -d' ' -f1)
printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$diff_id" > "$save/config.json"
config=$(sha256sum "$save/config.json" | cut -d' ' -f1)
mv "$save/config.json" "$save/$config.json"
printf '[{"Config":"%s.json","RepoTags":["busybox-tests:latest"],"Layers":["layer/layer.tar"]}]' \
    "$config" > "$save/manifest.json"
tar -C "$save" -cf "$work/busybox-tests.tar" manifest.json "$config.json" layer

# 3. Import it, and run the tests on it by hand.
"$cordon" image import "$work/busybox-tests.tar" --name busybox-tests
project="$work/project"
mkdir -p "$project"
cp "$here/wc.sh" "$here/test.sh" "$here/pipeline.yaml" "$project/"
echo "\$ cordon exec --image busybox-tests -- sh test.sh" >&2
(cd "$project" && "$cordon" exec --image busybox-tests -- sh test.sh)

# 4. The same tests as a pipeline step (a git work tree with its tooling committed).
cd "$project"
git init --quiet
git add --all
git -c user.name="cordon example" -c user.email="example@example.com" \
    commit --quiet --message "wc: the project and its tests"
echo "\$ cordon run pipeline.yaml" >&2
"$cordon" run pipeline.yaml --no-ui

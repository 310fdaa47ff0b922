#!/bin/sh
# The run page's end-to-end test in headless Chromium (issue 9), as CI runs it: installs Debian's
# chromium when missing and playwright-core from package-lock.json, builds `cordon` and the
# run driver, then runs the test. Needs the sandbox (`cordon run` runs real command steps).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ ! -x /usr/bin/chromium ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium
fi
cd "$here"
npm ci --no-audit --no-fund --loglevel=error
cd "$root"
# With the features the suites were built with (`.ci/run` exports them), so nothing is rebuilt.
cargo build -p cordon-cli --bin cordon -p cordon-web --example drive_run \
    ${CORDON_TEST_FEATURES:+--features "$CORDON_TEST_FEATURES"}
cd "$here"
exec node run-page.test.mjs

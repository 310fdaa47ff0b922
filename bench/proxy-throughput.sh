#!/usr/bin/env bash
# Egress proxy benchmark (issue 6, DESIGN §9): 1 GiB over loopback through `cordon proxy` by
# CONNECT (`curl --proxytunnel`) and by absolute-form HTTP (`curl --proxy`), against curl straight
# to the upstream and against tinyproxy (Debian package) in the same run; medians of
# CORDON_BENCH_RUNS (default 5) runs each, interleaved. Two upstreams, because the ratio depends
# on how much CPU the upstream leaves the proxy on a small machine: `memory` sends from a 1 MiB
# buffer with send(2) (the fastest direct peer), `file` sends a tmpfs file with sendfile(2) (what
# a static file server does). Then CONNECT setup latency — from the client's completed TCP
# connect to the `200` — p50 and p99 over CORDON_BENCH_SETUPS (default 2000) connections, for
# cordon and tinyproxy.
#
#   bash bench/proxy-throughput.sh           # from anywhere; everything stays on 127.0.0.1
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${CORDON_BENCH_RUNS:-5}"
setups="${CORDON_BENCH_SETUPS:-2000}"
size=$((1024 * 1024 * 1024))

if ! command -v tinyproxy >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        echo "installing tinyproxy (the peer this benchmark compares with)" >&2
        apt-get install -y tinyproxy >/dev/null 2>&1 \
            || { apt-get update >/dev/null && apt-get install -y tinyproxy >/dev/null; }
    else
        echo "cordon: tinyproxy is missing; install it (e.g. \`sudo apt-get install tinyproxy\`)" >&2
        exit 2
    fi
fi
for tool in curl python3; do
    command -v "$tool" >/dev/null || { echo "cordon: $tool is missing; install it" >&2; exit 2; }
done

cargo build --release --locked -p cordon-cli >&2
cordon="$PWD/target/release/cordon"

work=$(mktemp -d)
blob=$(mktemp /dev/shm/cordon-bench.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
    rm -f "$blob"
}
trap cleanup EXIT

# The upstream: answers every request with SIZE bytes, from one 1 MiB buffer (`memory`: sendall
# is a system call per MiB) or from FILE with sendfile (`file`); for a CONNECT setup probe it
# accepts and waits for the client to close.
cat >"$work/upstream.py" <<'EOF'
import os, socket, socketserver, sys
SIZE = int(sys.argv[1])
FILE = sys.argv[2] if len(sys.argv) > 2 else None
CHUNK = b"x" * (1 << 20)
class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.request.recv(65536)
            if not data:
                return
            head += data
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % SIZE)
        if FILE:
            with open(FILE, "rb") as f:
                self.request.sendfile(f)
            return
        left = SIZE
        while left > 0:
            n = min(left, len(CHUNK))
            self.request.sendall(CHUNK[:n] if n < len(CHUNK) else CHUNK)
            left -= n
class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 1024
server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
EOF

# The setup-latency probe: connect, send CONNECT, time until the 200 head arrived.
cat >"$work/setup.py" <<'EOF'
import socket, sys, time
proxy_port, target_port, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
request = b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (target_port, target_port)
samples = []
for i in range(count + 50):
    s = socket.create_connection(("127.0.0.1", proxy_port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    start = time.perf_counter_ns()
    s.sendall(request)
    head = b""
    while b"\r\n\r\n" not in head:
        data = s.recv(4096)
        if not data:
            break
        head += data
    elapsed = time.perf_counter_ns() - start
    if not head.startswith(b"HTTP/1.") or head[9:12] != b"200":
        sys.exit("setup probe: no 200: %r" % head[:80])
    s.close()
    if i >= 50:  # warm-up
        samples.append(elapsed)
samples.sort()
print("%.3f %.3f" % (samples[len(samples) // 2] / 1e6, samples[len(samples) * 99 // 100] / 1e6))
EOF

head -c "$size" /dev/zero >"$blob"
python3 "$work/upstream.py" "$size" >"$work/memory.port" &
pids+=($!)
python3 "$work/upstream.py" "$size" "$blob" >"$work/file.port" &
pids+=($!)
until [ -s "$work/memory.port" ] && [ -s "$work/file.port" ]; do sleep 0.05; done
up=$(cat "$work/memory.port")
file_up=$(cat "$work/file.port")

XDG_CONFIG_HOME="$work" "$cordon" proxy --listen 127.0.0.1:0 \
    --allow "ip:127.0.0.1:$up" --allow "ip:127.0.0.1:$file_up" --allow-private 127.0.0.0/8 \
    >"$work/cordon.out" &
pids+=($!)
until [ -s "$work/cordon.out" ]; do sleep 0.05; done
cordon_addr=$(awk '{print $2}' "$work/cordon.out")
cordon_port=${cordon_addr##*:}

tiny_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/tinyproxy.conf" <<EOF
User nobody
Group nogroup
Port $tiny_port
Listen 127.0.0.1
Timeout 600
MaxClients 100
LogLevel Critical
Allow 127.0.0.1
DisableViaHeader Yes
EOF
tinyproxy -d -c "$work/tinyproxy.conf" 2>/dev/null &
pids+=($!)
until (exec 3<>"/dev/tcp/127.0.0.1/$tiny_port") 2>/dev/null; do sleep 0.1; done

# Bytes per second of one 1 GiB download from $url; fails if fewer bytes arrived.
fetch() {
    local out
    out=$(curl --noproxy '' -s -o /dev/null -w '%{size_download} %{speed_download}' "$@" "$url")
    [ "${out%% *}" = "$size" ] || { echo "cordon: short download ($out) with: $*" >&2; exit 1; }
    echo "${out##* }"
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

# measure LABEL PORT: the five ways, interleaved, RUNS times; prints the table.
measure() {
    local label=$1 i way
    url="http://127.0.0.1:$2/blob"
    local -A samples=() mb=()
    local ways=(direct cordon_connect cordon_http tiny_connect tiny_http)
    for ((i = 1; i <= runs; i++)); do
        samples[direct]+="$(fetch) "
        samples[cordon_connect]+="$(fetch --proxytunnel -x "http://$cordon_addr") "
        samples[cordon_http]+="$(fetch -x "http://$cordon_addr") "
        samples[tiny_connect]+="$(fetch --proxytunnel -x "http://127.0.0.1:$tiny_port") "
        samples[tiny_http]+="$(fetch -x "http://127.0.0.1:$tiny_port") "
    done
    for way in "${ways[@]}"; do
        mb[$way]=$(echo "${samples[$way]}" | tr ' ' '\n' | grep . | median | awk '{printf "%.0f", $1 / 1048576}')
    done
    echo "1 GiB over loopback, $label upstream, median of $runs (MiB/s)"
    printf '  %-28s %6s MiB/s\n' "direct curl" "${mb[direct]}"
    printf '  %-28s %6s MiB/s  %sx direct  %sx tinyproxy\n' "cordon CONNECT" "${mb[cordon_connect]}" \
        "$(ratio "${mb[cordon_connect]}" "${mb[direct]}")" "$(ratio "${mb[cordon_connect]}" "${mb[tiny_connect]}")"
    printf '  %-28s %6s MiB/s  %sx direct  %sx tinyproxy\n' "cordon absolute-form HTTP" "${mb[cordon_http]}" \
        "$(ratio "${mb[cordon_http]}" "${mb[direct]}")" "$(ratio "${mb[cordon_http]}" "${mb[tiny_http]}")"
    printf '  %-28s %6s MiB/s  %sx direct\n' "tinyproxy CONNECT" "${mb[tiny_connect]}" "$(ratio "${mb[tiny_connect]}" "${mb[direct]}")"
    printf '  %-28s %6s MiB/s  %sx direct\n' "tinyproxy absolute-form HTTP" "${mb[tiny_http]}" "$(ratio "${mb[tiny_http]}" "${mb[direct]}")"
}

measure memory "$up"
measure file "$file_up"

echo "CONNECT setup (client connect done -> 200 received), $setups connections (ms)"
read -r c50 c99 < <(python3 "$work/setup.py" "$cordon_port" "$up" "$setups")
read -r t50 t99 < <(python3 "$work/setup.py" "$tiny_port" "$up" "$setups")
printf '  %-28s p50 %s  p99 %s\n' "cordon" "$c50" "$c99"
printf '  %-28s p50 %s  p99 %s\n' "tinyproxy" "$t50" "$t99"

echo "CONNECT setup in process (crates/egress/benches/connect_setup.rs)"
cargo bench --locked -q -p cordon-egress --bench connect_setup 2>/dev/null | sed 's/^/  /'

#!/usr/bin/env bash
# Egress proxy benchmark (issue 6, DESIGN §9): 1 GiB over loopback through `cordon proxy` by
# CONNECT (`curl --proxytunnel`) and by absolute-form HTTP (`curl --proxy`), against curl straight
# to the upstream, against tinyproxy (Debian package) and against a minimal blocking splice relay
# (`bench/splice-floor.py`, the floor: what any relay costs on this machine) in the same run;
# medians of CORDON_BENCH_RUNS (default 5) runs each, interleaved. Two upstreams, because the
# ratio depends on how much CPU the upstream leaves the proxy on a small machine: `memory` sends
# from a 1 MiB buffer with send(2) (the fastest direct peer), `file` sends a tmpfs file with
# sendfile(2) (what a static file server does). Each row also gives the CPU seconds per GiB of
# the relay and of all three processes together (upstream + relay + curl, user + system): on two
# cores, 2 / that total bounds the throughput of any relay. Then CONNECT setup latency — from the
# client's completed TCP connect to the `200` — p50 and p99 over CORDON_BENCH_SETUPS (default
# 2000) connections, for cordon and tinyproxy.
#
# CORDON_BENCH_FIFO=1 runs every process of the measurement (upstreams, relays, curl) as
# SCHED_FIFO (root only): each then runs until it blocks, which shows what the relays reach when
# the scheduler's placement of three busy processes on few cores is taken out of the picture.
#
#   bash bench/proxy-throughput.sh           # from anywhere; everything stays on 127.0.0.1
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${CORDON_BENCH_RUNS:-5}"
sched=()
if [ "${CORDON_BENCH_FIFO:-0}" = 1 ]; then
    sched=(chrt -f 1)
fi
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

cargo build --profile dist --locked -p cordon-cli >&2
cordon="$PWD/target/dist/cordon"

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
"${sched[@]}" python3 "$work/upstream.py" "$size" >"$work/memory.port" &
pids+=($!)
declare -A upstream_pid=([memory]=$!)
"${sched[@]}" python3 "$work/upstream.py" "$size" "$blob" >"$work/file.port" &
pids+=($!)
upstream_pid[file]=$!
until [ -s "$work/memory.port" ] && [ -s "$work/file.port" ]; do sleep 0.05; done
up=$(cat "$work/memory.port")
file_up=$(cat "$work/file.port")

XDG_CONFIG_HOME="$work" "${sched[@]}" "$cordon" proxy --listen 127.0.0.1:0 \
    --allow "ip:127.0.0.1:$up" --allow "ip:127.0.0.1:$file_up" --allow-private 127.0.0.0/8 \
    >"$work/cordon.out" &
pids+=($!)
cordon_pid=$!
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
"${sched[@]}" tinyproxy -d -c "$work/tinyproxy.conf" 2>/dev/null &
pids+=($!)
tiny_pid=$!
until (exec 3<>"/dev/tcp/127.0.0.1/$tiny_port") 2>/dev/null; do sleep 0.1; done

"${sched[@]}" python3 bench/splice-floor.py >"$work/floor.out" &
pids+=($!)
floor_pid=$!
until [ -s "$work/floor.out" ]; do sleep 0.05; done
floor_addr=$(awk '{print $2}' "$work/floor.out")

# CPU seconds (user + system, all threads, finished ones included) a process has used so far.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }

# One 1 GiB download from $url through relay process RELAY_PID (or `-` for none): prints bytes
# per second, the relay's CPU seconds, and the CPU seconds of upstream + relay + curl; fails if
# fewer bytes arrived.
fetch() {
    local relay=$1 out up0 up1 re0=0 re1=0 times
    shift
    up0=$(cpu_of "$upstream")
    [ "$relay" = - ] || re0=$(cpu_of "$relay")
    times=$(mktemp)
    out=$( { TIMEFORMAT='%U %S'; time "${sched[@]}" curl --noproxy '' -s -o /dev/null \
        -w '%{size_download} %{speed_download}' "$@" "$url"; } 2>"$times")
    up1=$(cpu_of "$upstream")
    [ "$relay" = - ] || re1=$(cpu_of "$relay")
    [ "${out%% *}" = "$size" ] || { echo "cordon: short download ($out) with: $*" >&2; exit 1; }
    read -r cu cs <"$times"
    rm -f "$times"
    awk -v b="${out##* }" -v u0="$up0" -v u1="$up1" -v r0="$re0" -v r1="$re1" \
        -v cu="$cu" -v cs="$cs" 'BEGIN {printf "%s/%.2f/%.2f", b, r1 - r0, (u1 - u0) + (r1 - r0) + cu + cs}'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

# measure LABEL PORT: the seven ways, interleaved, RUNS times; prints the table.
measure() {
    local label=$1 i way field
    url="http://127.0.0.1:$2/blob"
    upstream=${upstream_pid[$label]}
    local -A samples=() mb=() relay_cpu=() total_cpu=()
    local ways=(direct cordon_connect cordon_http tiny_connect tiny_http floor_connect floor_http)
    for ((i = 1; i <= runs; i++)); do
        samples[direct]+="$(fetch -) "
        samples[cordon_connect]+="$(fetch "$cordon_pid" --proxytunnel -x "http://$cordon_addr") "
        samples[cordon_http]+="$(fetch "$cordon_pid" -x "http://$cordon_addr") "
        samples[tiny_connect]+="$(fetch "$tiny_pid" --proxytunnel -x "http://127.0.0.1:$tiny_port") "
        samples[tiny_http]+="$(fetch "$tiny_pid" -x "http://127.0.0.1:$tiny_port") "
        samples[floor_connect]+="$(fetch "$floor_pid" --proxytunnel -x "http://$floor_addr") "
        samples[floor_http]+="$(fetch "$floor_pid" -x "http://$floor_addr") "
    done
    # field N of every `bytes/relay/total` sample of WAY, one a line
    field() { echo "${samples[$1]}" | tr ' ' '\n' | grep . | cut -d/ -f"$2"; }
    for way in "${ways[@]}"; do
        mb[$way]=$(field "$way" 1 | median | awk '{printf "%.0f", $1 / 1048576}')
        relay_cpu[$way]=$(field "$way" 2 | median)
        total_cpu[$way]=$(field "$way" 3 | median)
    done
    echo "1 GiB over loopback, $label upstream, median of $runs (MiB/s; CPU s per GiB: relay, all three)"
    row() { # LABEL WAY [TINYPROXY_WAY]: throughput, ratios, CPU
        local vs=""
        [ -n "${3:-}" ] && vs="  $(ratio "${mb[$2]}" "${mb[$3]}")x tinyproxy"
        printf '  %-30s %6s MiB/s  %sx direct%-21s  cpu %5s / %5s\n' "$1" "${mb[$2]}" \
            "$(ratio "${mb[$2]}" "${mb[direct]}")" "$vs" "${relay_cpu[$2]}" "${total_cpu[$2]}"
    }
    printf '  %-30s %6s MiB/s  %-37s  cpu %5s / %5s\n' "direct curl" "${mb[direct]}" "" "-" "${total_cpu[direct]}"
    row "cordon CONNECT" cordon_connect tiny_connect
    row "cordon absolute-form HTTP" cordon_http tiny_http
    row "tinyproxy CONNECT" tiny_connect
    row "tinyproxy absolute-form HTTP" tiny_http
    row "splice floor CONNECT" floor_connect
    row "splice floor absolute-form" floor_http
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

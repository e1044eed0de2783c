#!/usr/bin/env bash
# The egress allowlist's figures, measured side by side,
# interleaved, medians. Needs root, iproute2, curl, python3.
#
#   1. throughput: a 1 GiB download (sendfile from a page-cached sparse file,
#      plain HTTP) by curl in the runner's network namespace directly, vs the
#      same curl as the child of `governed-exec run` with `--allow-net`,
#      through the proxy. Target: proxied >= 0.9x direct.
#   2. per-run cost: `governed-exec run -- true` with `--allow-net` (proxy
#      started, no connection) vs with `--no-network`. Target: <= 1.2x.
#
# The lab: two network namespaces joined by a veth pair (10.19.0.1 runner,
# 10.19.0.2 server), which exist only for the run of this script.
#
# Usage: scripts/bench-egress.sh [BIN] [ROUNDS]   (default: target/release/governed-exec, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/release/governed-exec}")
rounds="${2:-5}"
runs="${RUNS:-30}"
[ "$(id -u)" = 0 ] || { echo "bench-egress.sh: needs root (network namespaces)" >&2; exit 1; }
for t in ip nsenter curl python3; do
  command -v $t >/dev/null || { echo "bench-egress.sh: needs $t" >&2; exit 1; }
done
tag="ge19b-$$"
R="${tag}r" S="${tag}s"
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  ip netns del "$R" 2>/dev/null || true
  ip netns del "$S" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$R"; ip netns add "$S"
ip -n "$R" link add v0 type veth peer name v1 netns "$S"
ip -n "$R" addr add 10.19.0.1/24 dev v0; ip -n "$S" addr add 10.19.0.2/24 dev v1
for ns in "$R" "$S"; do ip -n "$ns" link set lo up; done
ip -n "$R" link set v0 up; ip -n "$S" link set v1 up

truncate -s 1G "$work/big.bin"
cat > "$work/server.py" <<'EOF'
import http.server, os, sys
path = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(s):
        size = os.path.getsize(path)
        s.send_response(200)
        s.send_header("Content-Length", str(size))
        s.end_headers()
        s.wfile.flush()
        with open(path, "rb") as f:
            off = 0
            while off < size:
                off += os.sendfile(s.connection.fileno(), f.fileno(), off, size - off)
    def log_message(s, *a): pass
http.server.ThreadingHTTPServer(("10.19.0.2", 8080), H).serve_forever()
EOF
ip netns exec "$S" python3 "$work/server.py" "$work/big.bin" &
server_pid=$!
cat "$work/big.bin" >/dev/null # into the page cache
for _ in $(seq 100); do
  ip netns exec "$R" curl -s -o /dev/null --noproxy '*' http://10.19.0.2:8080/ -r 0-0 && break
  sleep 0.1
done

# Leases: one goal, a workspace, a key, in $work.
mkdir -p "$work/ws" "$work/state"
cat > "$work/goal.json" <<'EOF'
{ "schema": "governed-exec/goal/v1", "id": "bench-egress", "revision": 1, "criteria": [ { "kind": "exit_code", "equals": 0 } ] }
EOF
"$bin" keygen --out "$work/approver" >/dev/null
approve() { "$bin" approve --goal "$work/goal.json" --workspace "$work/ws" --manifest "$work/manifest.json" --key "$work/approver.key" --uses 100000 "$@" >/dev/null 2>&1; }
run() { nsenter --net="/run/netns/$R" -- "$bin" run --goal "$work/goal.json" --manifest "$work/manifest.json" --trust "$work/approver.pub" --state-dir "$work/state" "$@" >/dev/null; }
dl=(curl -sS -o /dev/null http://10.19.0.2:8080/big.bin)
approve --allow-net 10.19.0.2:8080 -- "${dl[@]}"
approve --allow-net 10.19.0.2:8080 -- true
approve --no-network -- /usr/bin/true

now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

direct=() proxied=()
for _ in $(seq "$rounds"); do
  t0=$(now); nsenter --net="/run/netns/$R" -- curl -sS -o /dev/null --noproxy '*' http://10.19.0.2:8080/big.bin; t1=$(now)
  direct+=($(( (t1 - t0) / 1000 )))
  t0=$(now); run -- "${dl[@]}"; t1=$(now)
  proxied+=($(( (t1 - t0) / 1000 )))
done
echo "direct us: ${direct[*]}; proxied us: ${proxied[*]}" >&2
d=$(printf '%s\n' "${direct[@]}" | median)
p=$(printf '%s\n' "${proxied[@]}" | median)
awk -v d="$d" -v p="$p" 'BEGIN {
  gd = 1024 / (d / 1e6); gp = 1024 / (p / 1e6);
  printf "1 GiB download: direct %.0f MiB/s, through the proxy (whole governed run) %.0f MiB/s: %.2fx (target >= 0.9x) %s\n",
    gd, gp, gp / gd, (gp / gd >= 0.9) ? "HOLDS" : "MISSED" }'
[ -z "${ROWS:-}" ] || awk -v d="$d" -v p="$p" 'BEGIN {
  printf "| 1 GiB through the egress proxy >= 0.9x direct | %.2fx (%.0f vs %.0f MiB/s) | %s |\n",
    d / p, 1024 / (p / 1e6), 1024 / (d / 1e6), (d / p >= 0.9) ? "yes" : "no" }' >> "$ROWS"

an=() nn=()
for _ in $(seq "$runs"); do
  t0=$(now); run -- true; t1=$(now); an+=($(( (t1 - t0) / 1000 )))
  t0=$(now); run -- /usr/bin/true; t1=$(now); nn+=($(( (t1 - t0) / 1000 )))
done
a=$(printf '%s\n' "${an[@]}" | median)
n=$(printf '%s\n' "${nn[@]}" | median)
awk -v a="$a" -v n="$n" 'BEGIN {
  printf "per-run cost, no connection: --allow-net %.1f ms, --no-network %.1f ms: %.2fx (target <= 1.2x) %s\n",
    a / 1000, n / 1000, a / n, (a / n <= 1.2) ? "HOLDS" : "MISSED" }'
[ -z "${ROWS:-}" ] || awk -v a="$a" -v n="$n" 'BEGIN {
  printf "| --allow-net with no connection <= 1.2x --no-network | %.2fx (%.2f vs %.2f ms) | %s |\n",
    a / n, a / 1000, n / 1000, (a / n <= 1.2) ? "yes" : "no" }' >> "$ROWS"

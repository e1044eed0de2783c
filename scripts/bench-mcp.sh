#!/usr/bin/env bash
# The per-call cost of the agent's tool: a `local_process` call of
# /bin/true through one `governed-exec mcp` session, measured side by side
# (interleaved rounds, medians) with a `governed-exec run` process of the
# same request and, for the isolated case (--no-network --pid-namespace),
# with `bwrap --unshare-net --unshare-pid /bin/true`. Wall time and CPU per
# call (the server's and its children's, from /proc and getrusage).
#
#   scripts/bench-mcp.sh [BIN] [ROUNDS]     # BIN: default the static build
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-$(bash scripts/build-static.sh)}")
rounds="${2:-100}"
work=$(mktemp -d "${TMPDIR:-/tmp}/governed-exec-bench-mcp.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws"
"$bin" keygen --out "$work/approver" >/dev/null 2>&1
printf '%s\n' '{"schema":"governed-exec/goal/v1","id":"bench-mcp","revision":1,"criteria":[{"kind":"exit_code","equals":0}]}' > "$work/goal.json"
uses=$(( rounds * 4 + 10 ))
approve() {
  "$bin" approve --goal "$work/goal.json" --workspace "$work/ws" --manifest "$work/$1.json" \
    --key "$work/approver.key" --uses "$uses" --ttl 2h --profile short "${@:2}" -- /bin/true 2>/dev/null >/dev/null
}
approve plain
isolated=0
if [ "$(id -u)" = 0 ]; then approve isolated --no-network --pid-namespace && isolated=1; fi
python3 - "$bin" "$work" "$rounds" "$isolated" <<'PY'
import json, os, resource, shutil, statistics, subprocess, sys, time
bin_, work, rounds, isolated = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
req = {"executable": "/bin/true", "argv": [], "cwd": ".", "profile": "short"}
common = ["--goal", f"{work}/goal.json", "--trust", f"{work}/approver.pub"]

def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    # utime, stime, cutime, cstime
    return sum(int(x) for x in fields[11:15]) / tick

class Server:
    def __init__(self, manifest, state):
        self.p = subprocess.Popen([bin_, "mcp", *common, "--manifest", manifest, "--workspace",
                                   f"{work}/ws", "--receipts", f"{state}/receipts", "--state-dir", state,
                                   "--principal", "bench"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.n = 0
        self.ask("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "0"}})
    def ask(self, method, params):
        self.n += 1
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}) + "\n")
        self.p.stdin.flush()
        while True:
            m = json.loads(self.p.stdout.readline())
            if m.get("id") == self.n:
                return m
    def call(self):
        r = self.ask("tools/call", {"name": "local_process", "arguments": req})
        assert r["result"]["structuredContent"]["outcome"] == "exited", r
    def close(self):
        cpu = proc_cpu(self.p.pid)
        self.p.stdin.close(); self.p.wait()
        return cpu

def run_once(manifest, state):
    subprocess.run([bin_, "run", *common, "--manifest", manifest, "--state-dir", state,
                    "--workspace", f"{work}/ws", "--quiet", "--", "/bin/true"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=f"{work}/ws")

def measure(label, manifest, compare):
    state_m, state_r = f"{work}/state-{label}-mcp", f"{work}/state-{label}-run"
    srv = Server(manifest, state_m)
    srv.call(); run_once(manifest, state_r)  # warm: keys made, journals opened
    t_mcp, t_run, t_cmp, cpu_run, cpu_cmp = [], [], [], 0.0, 0.0
    cpu_srv0 = proc_cpu(srv.p.pid)
    for _ in range(rounds):
        a = time.perf_counter(); srv.call(); t_mcp.append(time.perf_counter() - a)
        c0 = children_cpu(); a = time.perf_counter(); run_once(manifest, state_r)
        t_run.append(time.perf_counter() - a); cpu_run += children_cpu() - c0
        if compare:
            c0 = children_cpu(); a = time.perf_counter()
            subprocess.run(compare, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            t_cmp.append(time.perf_counter() - a); cpu_cmp += children_cpu() - c0
    cpu_mcp = srv.close() - cpu_srv0
    med = lambda v: statistics.median(v) * 1000
    print(f"{label}: local_process via mcp {med(t_mcp):.3f} ms, run process {med(t_run):.3f} ms "
          f"-> run/mcp {med(t_run)/med(t_mcp):.2f}x; CPU per call mcp {cpu_mcp/rounds*1000:.2f} ms, "
          f"run {cpu_run/rounds*1000:.2f} ms")
    if compare:
        print(f"{label}: bwrap {med(t_cmp):.3f} ms (CPU {cpu_cmp/rounds*1000:.2f} ms) -> mcp/bwrap "
              f"{med(t_mcp)/med(t_cmp):.2f}x")

measure("plain", f"{work}/plain.json", None)
if isolated:
    bwrap = shutil.which("bwrap")
    cmp = [bwrap, "--unshare-net", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev",
           "--proc", "/proc", "/bin/true"] if bwrap else None
    if not bwrap:
        print("isolated: bwrap not installed; its comparison is SKIP")
    measure("isolated", f"{work}/isolated.json", cmp)
else:
    print("isolated: SKIP (needs root for the namespaces)")
PY

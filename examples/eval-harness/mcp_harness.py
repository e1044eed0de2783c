#!/usr/bin/env python3
"""The eval harness of harness.py, with the agent's tool served over the
Model Context Protocol: per task, the harness starts `governed-exec mcp`
(its whole policy on the command line: goal, manifest, keys, workspace,
receipts directory, principal), and each of the agent's requests is one
`tools/call` of `local_process`. The harness reads the structured result,
keeps the receipt the server wrote, and asks `verify` whether the task's
goal is done.

    python3 examples/eval-harness/mcp_harness.py [--governed-exec PATH]

Prints one JSON line per request. Standard library only: the protocol is
newline-delimited JSON-RPC on the server's stdin and stdout.
"""

import argparse
import json
import os
import subprocess
import tempfile

from harness import TASKS, ge, mint_lease


class Session:
    """One MCP session with `governed-exec mcp` over stdio."""

    def __init__(self, binary, goal, tmp):
        self.p = subprocess.Popen(
            [binary, "mcp", "--goal", goal,
             "--manifest", os.path.join(tmp, "manifest.json"),
             "--trust", os.path.join(tmp, "approver.pub"),
             "--workspace", os.path.join(tmp, "ws"),
             "--receipts", os.path.join(tmp, "receipts"),
             "--state-dir", os.path.join(tmp, "state"),
             "--principal", "eval-agent"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1)
        self.next_id = 0
        init = self.ask("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                       "clientInfo": {"name": "eval-harness", "version": "1"}})
        assert "result" in init, init
        self.notify("notifications/initialized")

    def notify(self, method):
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.p.stdin.flush()

    def ask(self, method, params):
        self.next_id += 1
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id,
                                       "method": method, "params": params}) + "\n")
        self.p.stdin.flush()
        while True:  # progress notifications may come first
            msg = json.loads(self.p.stdout.readline())
            if msg.get("id") == self.next_id:
                return msg

    def local_process(self, request):
        """The agent's one tool: the request's four fields in, a result out."""
        r = self.ask("tools/call", {"name": "local_process", "arguments": request})
        return r["result"]

    def close(self):
        self.p.stdin.close()      # the client going away: the server exits 0
        return self.p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--governed-exec", default="governed-exec")
    binary = ap.parse_args().governed_exec
    for task in TASKS:
        with tempfile.TemporaryDirectory(prefix="ge-mcp-task-") as tmp:
            goal = mint_lease(binary, tmp, task)
            session = Session(binary, goal, tmp)
            for request in task["requests"]:
                result = session.local_process(request)
                s = result["structuredContent"]
                # isError is the model's signal; exit 0 is not completion:
                # only verify says the goal is done.
                v = ge("verify", "--goal", goal, "--receipt", s["receipt_path"],
                       "--trust", os.path.join(tmp, "state", "runner.pub"),
                       "--state-dir", os.path.join(tmp, "state"), "--json", binary=binary)
                print(json.dumps({
                    "task": task["id"], "request": request, "via": "mcp",
                    "is_error": result["isError"], "class": s["outcome"],
                    "reason": s["reason"], "needs_human": s["needs_human"],
                    "pending_id": s["pending_id"], "exit_code": s["exit_code"],
                    "verdict": json.loads(v.stdout)["verdict"],
                    "stdout": s["stdout"][-200:], "tmp": tmp,
                }), flush=True)
                # needs_human: stop this task and escalate; never retry.
                if s["needs_human"]:
                    break
            assert session.close() == 0


if __name__ == "__main__":
    main()

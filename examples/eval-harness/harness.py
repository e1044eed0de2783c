#!/usr/bin/env python3
"""An eval harness around governed-exec: one lease per task, minted in a
throwaway temp dir; the agent's only tool takes a request JSON; the harness
reads exactly one document back per request (a signed receipt, refusals
included) and asks `verify` whether the task's goal is done.

    python3 examples/eval-harness/harness.py [--governed-exec PATH]

Prints one JSON line per request. Standard library only.
"""

import argparse
import base64
import json
import os
import subprocess
import tempfile

# Each task: the goal's criteria, the one request a human approved for it,
# and the requests the "agent" makes (here scripted; in a real harness they
# come from the model's tool calls).
TASKS = [
    {
        "id": "write-answer",
        "criteria": [
            {"kind": "exit_code", "equals": 0},
            {"kind": "file", "path": "answer.txt", "contains": "42"},
        ],
        "approved": {"executable": "sh", "argv": ["-c", "echo 42 > answer.txt"],
                     "cwd": ".", "profile": "short"},
        "requests": [
            {"executable": "sh", "argv": ["-c", "echo 42 > answer.txt"],
             "cwd": ".", "profile": "short"},
            # Not approved: refused before anything runs, still one receipt.
            {"executable": "sh", "argv": ["-c", "rm -rf \"$HOME\""],
             "cwd": ".", "profile": "short"},
        ],
    },
    {
        "id": "failing-check",
        "criteria": [{"kind": "exit_code", "equals": 0}],
        "approved": {"executable": "sh", "argv": ["-c", "echo checking; exit 3"],
                     "cwd": ".", "profile": "short"},
        "requests": [
            {"executable": "sh", "argv": ["-c", "echo checking; exit 3"],
             "cwd": ".", "profile": "short"},
        ],
    },
]


def ge(*args, binary, **kw):
    return subprocess.run([binary, *args], capture_output=True, **kw)


def mint_lease(binary, tmp, task):
    """A human's approval, done by the harness for its own sandboxed task:
    a throwaway approver key, goal and manifest in the task's temp dir."""
    ws = os.path.join(tmp, "ws")
    os.mkdir(ws)
    goal = os.path.join(tmp, "goal.json")
    with open(goal, "w") as f:
        json.dump({"schema": "governed-exec/goal/v1", "id": task["id"],
                   "revision": 1, "criteria": task["criteria"]}, f)
    ge("keygen", "--out", os.path.join(tmp, "approver"), binary=binary, check=True)
    req = task["approved"]
    ge("approve", "--goal", goal, "--workspace", ws,
       "--manifest", os.path.join(tmp, "manifest.json"),
       "--key", os.path.join(tmp, "approver.key"), "--ttl", "10m", "--uses", "1",
       "--profile", req["profile"], "--cwd", req["cwd"],
       # Writes only in the workspace; any isolation option also keeps the
       # runner key out of the agent's reach, so it cannot forge a receipt
       # (verify refuses receipts whose key was within the child's reach).
       "--fs-write-scope",
       "--", req["executable"], *req["argv"], binary=binary, check=True)
    return goal


def run_request(binary, goal, manifest, approver_pub, state, request):
    """The agent's tool: one request in, one document out (docs/GUIDE.md snippet)."""
    p = subprocess.run([binary, "run", "--goal", goal, "--manifest", manifest,
                        "--trust", approver_pub, "--state-dir", state, "--request", "-"],
                       input=json.dumps(request).encode(), capture_output=True)
    stmt = json.loads(base64.b64decode(json.loads(p.stdout)["payload"]))
    outcome = stmt["predicate"]["outcome"]     # class, reason, needs_human, exit_code, signal
    stdout_text = stmt["predicate"]["streams"]["stdout"]["text"]   # safe: no escapes, valid UTF-8
    return p.returncode, p.stdout, outcome, stdout_text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--governed-exec", default="governed-exec")
    binary = ap.parse_args().governed_exec
    for task in TASKS:
        with tempfile.TemporaryDirectory(prefix="ge-task-") as tmp:
            goal = mint_lease(binary, tmp, task)
            manifest = os.path.join(tmp, "manifest.json")
            state = os.path.join(tmp, "state")
            for n, request in enumerate(task["requests"]):
                code, receipt, outcome, text = run_request(
                    binary, goal, manifest, os.path.join(tmp, "approver.pub"), state, request)
                path = os.path.join(tmp, f"receipt-{n}.json")
                with open(path, "wb") as f:
                    f.write(receipt)
                # Exit 0 is not completion: only verify says the goal is done.
                v = ge("verify", "--goal", goal, "--receipt", path,
                       "--trust", os.path.join(state, "runner.pub"), "--state-dir", state,
                       "--json", binary=binary)
                verdict = json.loads(v.stdout)["verdict"]
                print(json.dumps({
                    "task": task["id"], "request": request, "exit": code,
                    "class": outcome["class"], "reason": outcome["reason"],
                    "needs_human": outcome["needs_human"],
                    "exit_code": outcome["exit_code"], "verdict": verdict,
                    "stdout": text[-200:], "tmp": tmp,
                }), flush=True)
                # needs_human: stop this task and escalate; never retry.
                if outcome["needs_human"]:
                    break


if __name__ == "__main__":
    main()

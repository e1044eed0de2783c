"""An agent's journey through `governed-exec mcp`, driven by the official
MCP Python SDK: a second, independent reading of the protocol.

usage: mcp_client.py BIN GOAL MANIFEST TRUST WORKSPACE RECEIPTS STATE_DIR APPROVER_KEY EXECUTABLE ARG

Prints one JSON object describing what the client saw; exits non-zero on
any protocol failure (the SDK raises).
"""

import json
import subprocess
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    (binary, goal, manifest, trust, workspace, receipts, state, key, exe, arg) = sys.argv[1:11]
    server = StdioServerParameters(
        command=binary,
        args=["mcp", "--goal", goal, "--manifest", manifest, "--trust", trust,
              "--workspace", workspace, "--receipts", receipts, "--state-dir", state,
              "--principal", "python-sdk-agent"],
    )
    seen = {}
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            seen["protocol"] = init.protocol_version
            tools = await session.list_tools()
            seen["tools"] = [t.name for t in tools.tools]
            seen["input_schema"] = tools.tools[0].input_schema
            request = {"executable": exe, "argv": [arg], "cwd": ".", "profile": "short"}
            first = await session.call_tool("local_process", request)
            seen["first"] = {"isError": first.is_error, "structured": first.structured_content}
            bad = await session.call_tool("local_process", dict(request, shell="sh -c"))
            seen["bad"] = {"isError": bad.is_error, "text": bad.content[0].text}
            pending = first.structured_content["pending_id"]
            approved = subprocess.run(
                [binary, "approve", "--pending", pending, "--state-dir", state, "--goal", goal,
                 "--workspace", workspace, "--manifest", manifest, "--key", key],
                capture_output=True, text=True)
            seen["approve_exit"] = approved.returncode
            second = await session.call_tool("local_process", request)
            seen["second"] = {"isError": second.is_error, "structured": second.structured_content,
                              "text": second.content[0].text}
    print(json.dumps(seen))


anyio.run(main)

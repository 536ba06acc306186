"""A real MCP client (the Python `mcp` SDK, pinned by the test) driving
`tinycode mcp serve` over stdio. Prints one JSON object per step.

    mcp_client.py TINYCODE WORKSPACE first   # list, read, classify, route, escalate (pending)
    mcp_client.py TINYCODE WORKSPACE again   # the same escalation, waiting for the decision
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ESCALATION = {
    "ticket_id": "T-1003",
    "level": 2,
    "reason": "Refund over the limit; see refund-policy",
}


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def main(tinycode, workspace, phase):
    params = StdioServerParameters(
        command=tinycode,
        args=["mcp", "serve", "--wait", "2" if phase == "first" else "40"],
        cwd=workspace,
        env=dict(os.environ),
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            if phase == "first":
                tools = await session.list_tools()
                say("tools", names=sorted(t.name for t in tools.tools),
                    read_only=sorted(t.name for t in tools.tools
                                     if t.annotations and t.annotations.read_only_hint))
                resources = await session.list_resources()
                say("resources", uris=sorted(str(r.uri) for r in resources.resources))
                ticket = await session.read_resource("ticket://T-1003")
                say("ticket", text=ticket.contents[0].text)
                prompts = await session.list_prompts()
                say("prompts", names=sorted(p.name for p in prompts.prompts))
                classified = await session.call_tool("classify_ticket", {
                    "ticket_id": "T-1003", "category": "账户", "priority": "P1",
                    "intent": "refund over the limit"})
                say("classify", error=classified.is_error, text=text_of(classified))
                routed = await session.call_tool("route_ticket", {
                    "ticket_id": "T-1003", "queue": "售后组", "reason": "account frozen"})
                say("route", error=routed.is_error, text=text_of(routed))
            progress = []

            async def on_progress(done, total, message):
                progress.append(message)

            escalated = await session.call_tool(
                "escalate_ticket", ESCALATION, progress_callback=on_progress)
            say("escalate", error=escalated.is_error, text=text_of(escalated),
                progress=progress)


asyncio.run(main(*sys.argv[1:4]))

"""A tiny ticket tracker as an MCP server (stdio transport: one JSON-RPC 2.0 message per line).

The tickets live in tickets.json beside the workspace's code; `close_ticket` writes its note
there, so the change is part of the run's diff. Standard library only."""

import json
import sys

STORE = "tickets.json"

TOOLS = [
    {
        "name": "list_tickets",
        "description": "Lists the open tickets: id and title.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "read_ticket",
        "description": "Returns a ticket's title and description.",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
        },
    },
    {
        "name": "close_ticket",
        "description": "Closes a ticket with a note saying what was done.",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "note": {"type": "string"}},
            "required": ["id", "note"],
        },
    },
]


def load():
    with open(STORE) as f:
        return json.load(f)


def text(value, error=False):
    return {"content": [{"type": "text", "text": value}], "isError": error}


def call(name, args):
    tickets = load()
    if name == "list_tickets":
        open_ones = [t for t in tickets if t["state"] == "open"]
        return text("\n".join("%s %s" % (t["id"], t["title"]) for t in open_ones) or "none")
    ticket = next((t for t in tickets if t["id"] == args.get("id")), None)
    if ticket is None:
        return text("no ticket %s" % args.get("id"), error=True)
    if name == "read_ticket":
        return text("%s: %s\n\n%s" % (ticket["id"], ticket["title"], ticket["description"]))
    if name == "close_ticket":
        ticket["state"] = "closed"
        ticket["note"] = args["note"]
        with open(STORE, "w") as f:
            json.dump(tickets, f, indent=2)
            f.write("\n")
        return text("closed " + ticket["id"])
    return None


for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    reply = {"jsonrpc": "2.0", "id": message["id"]}
    method = message.get("method")
    if method == "initialize":
        reply["result"] = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "tickets", "version": "1"},
        }
    elif method == "tools/list":
        reply["result"] = {"tools": TOOLS}
    elif method == "tools/call":
        result = call(message["params"]["name"], message["params"].get("arguments") or {})
        if result is None:
            reply["error"] = {"code": -32602, "message": "unknown tool"}
        else:
            reply["result"] = result
    else:
        reply["error"] = {"code": -32601, "message": "method not found"}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()

"""A small MCP server for cordon's tests: newline-delimited JSON-RPC 2.0 on stdin/stdout, the
stdio transport of the Model Context Protocol. Tools: `echo`, `write_note` (a file in the working
directory), `read_path` (any path, to probe the sandbox), `env` (a variable of its environment),
`crash` (exits at once, after a line on stderr). `--fail-at-start` writes to stderr and exits
before the handshake; `--collide` adds two tools whose names reduce to one, `--many-tools` more
tools than cordon takes, `--huge-schema` a schema past its bound."""

import json
import os
import sys

if "--fail-at-start" in sys.argv:
    sys.stderr.write("cannot open the ticket database: permission denied\n")
    sys.exit(3)

TOOLS = [
    {
        "name": "echo",
        "description": "Returns its text.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "name": "write_note",
        "description": "Writes a note file in the working directory.",
        "inputSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "text": {"type": "string"}},
            "required": ["name", "text"],
        },
    },
    {
        "name": "read_path",
        "description": "Reads a file.",
        "inputSchema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "env",
        "description": "Reads a variable of the server's environment.",
        "inputSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
    {
        "name": "crash",
        "description": "Exits at once.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]


if "--collide" in sys.argv:
    TOOLS.append(dict(TOOLS[0], name="find.files"))
    TOOLS.append(dict(TOOLS[0], name="find_files"))
if "--many-tools" in sys.argv:
    TOOLS.extend(dict(TOOLS[0], name="tool%d" % i) for i in range(130))
if "--huge-schema" in sys.argv:
    TOOLS[0] = dict(TOOLS[0], inputSchema={"type": "object", "description": "x" * 70000})


def text(value, error=False):
    return {"content": [{"type": "text", "text": value}], "isError": error}


def call(name, args):
    if name == "echo":
        return text(args.get("text", ""))
    if name == "write_note":
        with open(args["name"], "w") as f:
            f.write(args["text"])
        return text("wrote " + args["name"] + " in " + os.getcwd())
    if name == "read_path":
        try:
            with open(args["path"]) as f:
                return text(f.read())
        except OSError as e:
            return text("cannot read: " + e.strerror, error=True)
    if name == "env":
        return text(os.environ.get(args["name"], "(unset)"))
    if name == "crash":
        sys.stderr.write("the ticket service went away\n")
        sys.stderr.flush()
        os._exit(7)
    return None


for line in sys.stdin:
    message = json.loads(line)
    method = message.get("method")
    if "id" not in message:
        continue
    reply = {"jsonrpc": "2.0", "id": message["id"]}
    if method == "initialize":
        reply["result"] = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "cordon-test", "version": "1"},
        }
    elif method == "tools/list":
        reply["result"] = {"tools": TOOLS}
    elif method == "tools/call":
        result = call(message["params"]["name"], message["params"].get("arguments") or {})
        if result is None:
            reply["error"] = {"code": -32602, "message": "unknown tool"}
        else:
            reply["result"] = result
    elif method == "ping":
        reply["result"] = {}
    else:
        reply["error"] = {"code": -32601, "message": "method not found: " + str(method)}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()

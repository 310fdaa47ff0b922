"""A small MCP server for cordon's tests: newline-delimited JSON-RPC 2.0 on stdin/stdout, the
stdio transport of the Model Context Protocol. Tools: `echo`, `write_note` (a file in the working
directory), `read_path` (any path, to probe the sandbox), `env` (a variable of its environment),
`sleep`, `crash` (exits at once, after a line on stderr). `--fail-at-start` writes to stderr and exits
before the handshake; `--collide` adds two tools whose names reduce to one, `--many-tools` more
tools than cordon takes, `--huge-schema` a schema past its bound, `--pages` an endless tool list; `flood` sends requests
of its own without reading the answers. `--http PORT_FILE LOG_FILE`
serves streamable HTTP on loopback instead (see `serve_http`)."""

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
        "name": "sleep",
        "description": "Answers after `seconds`.",
        "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
    },
    {
        "name": "flood",
        "description": "Sends the client requests and never reads the answers.",
        "inputSchema": {"type": "object", "properties": {}},
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
    if name == "sleep":
        import time
        time.sleep(args.get("seconds", 0))
        return text("slept")
    if name == "flood":
        # Requests of its own, their answers never read.
        for i in range(200000):
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": "s%d" % i, "method": "ping"}) + "\n")
        sys.stdout.flush()
        import time
        time.sleep(60)
    if name == "crash":
        sys.stderr.write("the ticket service went away\n")
        sys.stderr.flush()
        os._exit(7)
    return None


def answer(message):
    """The JSON-RPC response to `message`, or None for a notification."""
    method = message.get("method")
    if "id" not in message:
        return None
    reply = {"jsonrpc": "2.0", "id": message["id"]}
    if method == "initialize":
        reply["result"] = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "cordon-test", "version": "1"},
        }
    elif method == "tools/list" and "--pages" in sys.argv:
        cursor = int((message.get("params") or {}).get("cursor") or 0)
        page = [dict(TOOLS[0], name="page%d_%d" % (cursor, i)) for i in range(10)]
        reply["result"] = {"tools": page, "nextCursor": str(cursor + 1)}
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
    return reply


def serve_http(port_file, log_file):
    """Streamable HTTP on 127.0.0.1: JSON-RPC POSTed, answered as JSON; every request's method,
    path and Authorization header appended to `log_file`; the port written to `port_file`."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def record(self):
            with open(log_file, "a") as f:
                f.write("%s %s %s\n" % (self.command, self.path, self.headers.get("Authorization")))

        def do_POST(self):
            self.record()
            length = int(self.headers.get("Content-Length") or 0)
            reply = answer(json.loads(self.rfile.read(length)))
            if reply is None:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Mcp-Session-Id", "cordon-test-session")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.record()
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_DELETE = do_GET

    server = HTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


if "--http" in sys.argv:
    at = sys.argv.index("--http")
    serve_http(sys.argv[at + 1], sys.argv[at + 2])
    sys.exit(0)

for line in sys.stdin:
    reply = answer(json.loads(line))
    if reply is None:
        continue
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()

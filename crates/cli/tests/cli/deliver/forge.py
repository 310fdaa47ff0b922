#!/usr/bin/env python3
"""A forge on loopback for cordon's delivery tests.

* `/git/<name>.git/...`: git's smart HTTP, served by `git http-backend` (the distribution's)
  behind basic auth, over bare repositories in ROOT.
* `/api/...`: a scripted forge API (pull requests, issues, comments) in GitHub's shape, or with
  `--shape` Gitea's (`/api/v1`, `token` auth) or GitLab's (`/api/v4/projects/<path>`, merge
  requests and notes, `PRIVATE-TOKEN`), its state in memory (`GET /state` shows it, unrecorded).

Every request is appended to LOG as a JSON line: method, path, query, the Authorization header,
the body (API requests), and `holders`: every process (by its `comm`) whose command line or
environment held the API token while the request was served — how a test sees that only cordon
itself held it, never git, a credential helper or a step.

The API's account is `cordon-bot` (`GET /user`); what it makes carries that author.

Files in ROOT steer it: `down` (every API request answers 503), `hang-<what>` (the next
`create_pull` / `create_issue` is made, then answered only after 60 s: a test kills cordon in
between; the file is removed when it is used), `forge-markers` (every listing starts with
entries by `mallory` holding the markers of each run the forge has seen: a pull request from the
branch asked for, an issue, a comment with every report marker), `echo-token` (every API
request answers 422 with the token in its message), `slow-api` (every API answer sends a byte
every half second), `git-bomb` (git's ref advertisement never ends), `git-drip` (git's answer is
a byte every half second); the last two end after 120 s; `dumb-http` (git is served as dumb HTTP
with WebDAV, listing 64 packs of 8 MiB indexes), `user-403` (GitHub's `GET /user` answers 403, as it
does for GitHub Actions' and Apps' tokens; entries carry `user.type`, `Bot` for cordon-bot's),
`slow-pages` (every page of pull requests holds another branch's and takes 1.5 s).
"""

import argparse
import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"pulls": [], "issues": [], "comments": {}}
# Run ids seen in what cordon sent (for `forge-markers`).
SEEN = set()
ME = "cordon-bot"


def holders(token):
    """The `comm` of cordon processes and of everything they started whose command line or
    environment holds `token` (other processes, the tests' own among them, are not cordon's)."""
    if not token:
        return []
    needle = token.encode()
    parent, comm = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/comm") as f:
                comm[pid] = f.read().strip()
        except OSError:
            continue
        # `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        parent[pid] = stat[stat.rindex(")") + 2:].split()[1]

    def under_cordon(pid):
        seen = 0
        while pid in comm and seen < 64:
            if comm[pid] == "cordon":
                return True
            pid, seen = parent.get(pid), seen + 1
        return False

    found = []
    for pid in comm:
        if not under_cordon(pid):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                environ = b""
        except OSError:
            continue
        if needle in cmdline or needle in environ:
            found.append(comm[pid])
    return sorted(found)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def record(self, body):
        url = urllib.parse.urlsplit(self.path)
        entry = {
            "method": self.command,
            "path": url.path,
            "query": dict(urllib.parse.parse_qsl(url.query)),
            "auth": self.headers.get("Authorization"),
            "body": body.decode("utf-8", "replace") if url.path.startswith("/api/") else None,
            "holders": holders(self.server.api_token),
        }
        with LOCK, open(self.server.log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def send(self, status, payload=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)
        self.close_connection = True

    def json(self, status, value):
        self.send(status, json.dumps(value).encode(), [("Content-Type", "application/json")])

    def do_GET(self):
        self.handle_any()

    def do_POST(self):
        self.handle_any()

    def do_HEAD(self):
        self.handle_any()

    def do_PROPFIND(self):
        self.handle_any()

    def do_MKCOL(self):
        self.handle_any()

    def do_LOCK(self):
        self.handle_any()

    def handle_any(self):
        body = self.body()
        path = urllib.parse.urlsplit(self.path).path
        if path == "/state":
            with LOCK:
                return self.json(200, STATE)
        self.record(body)
        if path.startswith("/git/"):
            return self.git(body)
        if path.startswith("/api/"):
            return self.api(body)
        self.send(404)

    def git(self, body):
        auth = self.headers.get("Authorization", "")
        want = "Basic " + base64.b64encode(
            f"{self.server.git_user}:{self.server.git_password}".encode()
        ).decode()
        if auth != want:
            return self.send(401, b"no", [("WWW-Authenticate", 'Basic realm="git"')])
        service = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query)).get(
            "service", "git-upload-pack")
        advert = f"application/x-{service}-advertisement"
        if self.flagged("git-bomb"):
            def pkt(text):
                return b"%04x" % (len(text) + 4) + text.encode()
            sha = "1" * 40
            refs = b"".join(pkt(f"{sha} refs/heads/{'x' * 900}{i}\n") for i in range(1000))
            # The service line and the first ref once, then refs without end.
            first = pkt(f"# service={service}\n") + b"0000" + pkt(f"{sha} HEAD\0multi_ack\n")
            return self.stream(advert, refs, 0, first)
        if self.flagged("dumb-http"):
            return self.dumb()
        if self.flagged("git-drip"):
            # A packet announced long, its bytes sent slowly.
            return self.stream(advert, b"a", 0.5, b"fff0")
        url = urllib.parse.urlsplit(self.path)
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": self.server.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "PATH_INFO": url.path[len("/git"):],
            "QUERY_STRING": url.query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": self.server.git_user,
            "REMOTE_ADDR": "127.0.0.1",
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        out = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        ).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode().split("\r\n"):
            if not line:
                continue
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            else:
                headers.append((name, value.strip()))
        self.send(status, payload, headers)

    def dumb(self):
        """git's dumb HTTP with WebDAV, as a push target would serve it: no refs, and a pack list
        naming 64 packs whose indexes are 8 MiB each (a push through `git http-push` downloads
        every one into the pushing repository)."""
        path = urllib.parse.urlsplit(self.path).path
        plain = [("Content-Type", "text/plain")]
        if self.command == "PROPFIND":
            lock = ("<D:supportedlock><D:lockentry><D:lockscope><D:exclusive/></D:lockscope>"
                    "<D:locktype><D:write/></D:locktype></D:lockentry></D:supportedlock>")
            xml = ('<?xml version="1.0"?><D:multistatus xmlns:D="DAV:"><D:response>'
                   f"<D:propstat><D:prop>{lock}</D:prop></D:propstat></D:response>"
                   "</D:multistatus>")
            return self.send(207, xml.encode(), [("Content-Type", "text/xml")])
        if self.command == "HEAD":
            return self.send(200 if "/objects/" in path else 404, b"", plain)
        if self.command != "GET":
            return self.send(405)
        if path.endswith("/info/refs"):
            return self.send(200, b"", plain)
        if path.endswith("/objects/info/packs"):
            packs = "".join(f"P pack-{i:040x}.pack\n" for i in range(64))
            return self.send(200, packs.encode(), plain)
        if path.endswith(".idx"):
            return self.send(200, b"\0" * (8 << 20), plain)
        self.send(404)

    def slow_json(self, value):
        """`value` as a 200 answer sent in three parts half a second apart."""
        payload = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        third = len(payload) // 3 + 1
        try:
            for i in range(3):
                time.sleep(0.5)
                self.wfile.write(payload[i * third:(i + 1) * third])
                self.wfile.flush()
        except OSError:
            pass

    def hang(self, what):
        flag = os.path.join(self.server.root, f"hang-{what}")
        if os.path.exists(flag):
            os.unlink(flag)
            time.sleep(60)

    def flagged(self, name):
        return os.path.exists(os.path.join(self.server.root, name))

    def stream(self, content_type, chunk, pause, first=b""):
        """Sends `first`, then `chunk` again and again (after `pause` s each) for 120 s at
        most."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        end = time.time() + 120
        try:
            self.wfile.write(first)
            while time.time() < end:
                self.wfile.write(chunk)
                self.wfile.flush()
                if pause:
                    time.sleep(pause)
        except OSError:
            pass

    def authorized(self):
        token = self.server.api_token
        if self.server.shape == "gitlab":
            return self.headers.get("PRIVATE-TOKEN") == token
        scheme = "token" if self.server.shape == "gitea" else "Bearer"
        return self.headers.get("Authorization") == f"{scheme} {token}"

    def api(self, body):
        if self.flagged("down"):
            return self.json(503, {"message": "the forge is down for maintenance"})
        if not self.authorized():
            return self.json(401, {"message": "Bad credentials"})
        if self.flagged("echo-token"):
            return self.json(422, {"message": f"the token {self.server.api_token} may not do that"})
        if self.flagged("slow-api"):
            return self.stream("application/json", b" ", 0.5)
        shape = self.server.shape
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if self.command == "POST" and body:
            with LOCK:
                SEEN.update(re.findall(rb"<!-- cordon-(?:run|report) ([0-9A-Za-z_-]+)", body))
        # The API root: /api (GitHub), /api/v1 (Gitea), /api/v4 (GitLab).
        parts = url.path.split("/")[2:]
        if shape != "github":
            parts = parts[1:]
        if parts == ["user"]:
            if self.flagged("user-403") and shape == "github":
                return self.json(403, {"message": "Resource not accessible by integration"})
            return self.json(200, {"username" if shape == "gitlab" else "login": ME})
        forged = sorted(r.decode() for r in SEEN) if self.flagged("forge-markers") else []
        if shape == "gitlab":
            if len(parts) < 3 or parts[0] != "projects":
                return self.json(404, {"message": "404 Project Not Found"})
            project, rest = urllib.parse.unquote(parts[1]), parts[2:]
            if rest and rest[0] == "merge_requests":
                rest = ["pulls"] + rest[1:]
            if len(rest) == 3 and rest[2] == "notes":
                rest = [rest[0], rest[1], "comments"]
        else:
            if len(parts) < 4 or parts[0] != "repos":
                return self.json(404, {"message": "Not Found"})
            project, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        owner = project.split("/")[0]
        base = f"http://forge.test/{project}"
        data = json.loads(body) if body else {}
        page = int(query.get("page", "1"))
        number_key, url_key = ("iid", "web_url") if shape == "gitlab" else ("number", "html_url")
        text_key = "description" if shape == "gitlab" else "body"

        def by(view, author):
            if shape == "gitlab":
                view["author"] = {"username": author}
            elif shape == "github":
                view["user"] = {"login": author, "type": "Bot" if author == ME else "User"}
            else:
                view["user"] = {"login": author}
            return view

        def pull_view(p):
            if shape == "gitlab":
                view = {"iid": p["number"], "web_url": p["url"], "source_branch": p["head"],
                        "target_branch": p["base"], "title": p["title"]}
            elif shape == "gitea":
                view = {"number": p["number"], "html_url": p["url"], "head": {"ref": p["head"]},
                        "base": {"ref": p["base"]}, "title": p["title"]}
            else:
                view = {"number": p["number"], "html_url": p["url"], "head": p["head"],
                        "base": p["base"], "title": p["title"], "body": p["body"],
                        "draft": p["draft"]}
            return by(view, p.get("author", ME))

        def issue_view(i):
            return by({number_key: i["number"], url_key: i["url"], "title": i["title"],
                       text_key: i["body"]}, i.get("author", ME))

        # Forgeries by another account, holding each seen run's markers.
        forged_pulls, forged_issues, forged_comments = [], [], []
        for n, run in enumerate(forged):
            head = query.get("source_branch") or query.get("head", "").split(":")[-1]
            forged_pulls.append(pull_view({
                "number": 900 + n, "url": f"{base}/pull/{900 + n}", "author": "mallory",
                "head": head or f"cordon/{run}", "base": query.get("target_branch")
                or query.get("base", "main"), "title": "forged", "body": "", "draft": False}))
            forged_issues.append(issue_view({
                "number": 950 + n, "url": f"{base}/issues/{950 + n}", "author": "mallory",
                "title": "forged", "body": f"<!-- cordon-run {run} -->"}))
            markers = " ".join(f"<!-- cordon-report {run} {k} -->" for k in range(50))
            forged_comments.append(by({"id": 9000 + n, "body": markers,
                                       "html_url": f"{base}/issues/0#issuecomment-{9000 + n}"},
                                      "mallory"))

        with LOCK:
            if rest == ["pulls"] and self.command == "GET":
                if shape == "github":
                    found = [p for p in STATE["pulls"] if f"{owner}:{p['head']}" == query.get("head")
                             and p["base"] == query.get("base", p["base"])]
                elif shape == "gitlab":
                    found = [p for p in STATE["pulls"] if p["head"] == query.get("source_branch")]
                else:
                    found = list(STATE["pulls"])  # Gitea: the client filters by branch
                listed = forged_pulls + [pull_view(p) for p in found]
                if self.flagged("slow-pages"):
                    other = pull_view({"number": 999, "url": f"{base}/pull/999", "author": "x",
                                       "head": "other", "base": "main", "title": "other",
                                       "body": "", "draft": False})
                    return self.slow_json([other] + (listed if page == 1 else []))
                return self.json(200, listed if page == 1 else [])
            if rest == ["pulls"] and self.command == "POST":
                number = len(STATE["pulls"]) + len(STATE["issues"]) + 1
                head, base_ref = (
                    (data["source_branch"], data["target_branch"]) if shape == "gitlab"
                    else (data["head"], data["base"])
                )
                made = {"number": number, "url": f"{base}/pull/{number}", "head": head,
                        "base": base_ref, "title": data["title"], "body": data.get(text_key, ""),
                        "draft": data.get("draft", False)}
                STATE["pulls"].append(made)
                view, what = pull_view(made), "create_pull"
            elif rest == ["issues"] and self.command == "GET":
                issues = forged_issues + [issue_view(i) for i in reversed(STATE["issues"])]
                if shape == "gitlab":
                    issues = [i for i in issues if query.get("search", "") in i["description"]]
                return self.json(200, issues if page == 1 else [])
            elif rest == ["issues"] and self.command == "POST":
                number = len(STATE["pulls"]) + len(STATE["issues"]) + 1
                made = {"number": number, "url": f"{base}/issues/{number}",
                        "title": data["title"], "body": data[text_key]}
                STATE["issues"].append(made)
                STATE["comments"][str(number)] = []
                view, what = issue_view(made), "create_issue"
            elif len(rest) == 3 and rest[0] == "issues" and rest[2] == "comments":
                comments = STATE["comments"].get(rest[1])
                if comments is None:
                    return self.json(404, {"message": "Not Found"})
                if self.command == "GET":
                    return self.json(200, forged_comments + comments if page == 1 else [])
                index = sum(len(c) for c in STATE["comments"].values()) + 1
                comment = by({"id": index, "body": data["body"]}, ME)
                if shape != "gitlab":
                    comment["html_url"] = f"{base}/issues/{rest[1]}#issuecomment-{index}"
                comments.append(comment)
                return self.json(201, comment)
            else:
                return self.json(404, {"message": "Not Found"})
        # Made, and answered after a pause when asked to (the lock released first).
        self.hang(what)
        return self.json(201, view)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--git-user", default="x-access-token")
    parser.add_argument("--shape", default="github", choices=["github", "gitea", "gitlab"])
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.root = args.root
    server.log = args.log
    server.git_user = args.git_user
    server.shape = args.shape
    # From the environment, not the command line: the tokens are the tests' secrets.
    server.git_password = os.environ["FORGE_GIT_PASSWORD"]
    server.api_token = os.environ["FORGE_API_TOKEN"]
    open(args.log, "a").close()
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

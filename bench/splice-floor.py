# The floor for bench/proxy-throughput.sh: the least a relay can do to move bytes between two
# loopback sockets. No policy, no parsing beyond the request line, no limits, no audit: accept,
# read the head, dial the target (CONNECT → `200`; absolute-form → the head rewritten to origin
# form), then one blocking thread per direction splicing socket → pipe → socket, with the same
# pipe size (256 KiB) and TCP_NODELAY as cordon. Whatever cordon loses against this is overhead
# of its own; whatever this loses against direct curl is the cost of any relay on the machine.
#
#   python3 bench/splice-floor.py   # prints `listening 127.0.0.1:PORT`; never use beyond loopback
import fcntl
import os
import socket
import threading

PIPE_BYTES = 256 * 1024
F_SETPIPE_SZ = 1031


def pump(source, sink):
    read, write = os.pipe()
    try:
        fcntl.fcntl(write, F_SETPIPE_SZ, PIPE_BYTES)
        while True:
            n = os.splice(source.fileno(), write, PIPE_BYTES)
            if n == 0:
                break
            while n:
                n -= os.splice(read, sink.fileno(), n)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        os.close(read)
        os.close(write)


def serve(client):
    head = b""
    while b"\r\n\r\n" not in head:
        data = client.recv(65536)
        if not data:
            client.close()
            return
        head += data
    end = head.index(b"\r\n\r\n") + 4
    head, rest = head[:end], head[end:]
    line, fields = head.split(b"\r\n", 1)
    method, target, version = line.split(b" ")
    if method == b"CONNECT":
        host, port = target.rsplit(b":", 1)
        upstream = socket.create_connection((host.decode(), int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    else:
        authority, _, path = target[len(b"http://"):].partition(b"/")
        host, port = authority.rsplit(b":", 1)
        upstream = socket.create_connection((host.decode(), int(port)))
        upstream.sendall(b"%s /%s %s\r\n%s" % (method, path, version, fields))
    upstream.sendall(rest)
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    up = threading.Thread(target=pump, args=(client, upstream), daemon=True)
    up.start()
    pump(upstream, client)
    up.join()
    client.close()
    upstream.close()


listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen(128)
print("listening 127.0.0.1:%d" % listener.getsockname()[1], flush=True)
while True:
    connection, _ = listener.accept()
    threading.Thread(target=serve, args=(connection,), daemon=True).start()

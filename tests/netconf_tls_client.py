"""A real NETCONF client for tests/netconf_tls.rs and tests/netconf_call_home.rs: ncclient
(its TLS transport, RFC 7589, and its SSH Call Home, RFC 8071), plus Python ssl wrapping
an accepted socket as the TLS *client* for TLS Call Home, which ncclient has no helper for.

Each command does one session: hello, a <get> of ietf-netconf-monitoring's sessions, then
close-session, and prints one JSON line with what it saw. The listening commands print
`LISTENING <port>` first (flushed), so that the test can configure the agent to call it.

  connect-tls HOST PORT CERT KEY CA
  callhome-ssh USER PASSWORD [COUNT]
  callhome-tls CERT KEY CA [COUNT]

A call-home command accepts COUNT connections (default 1) one after the other, each a
session; with `--hold SECONDS` it keeps each session open that long without sending
anything (for the idle timeout of a periodic connection) and reports how it ended; with
`--keep` it reports the first session and keeps it up until killed.
"""

import json
import socket
import ssl
import sys
import time

import ncclient.transport.session
from ncclient import manager
from ncclient.manager import Manager, make_device_handler
from ncclient.transport.tls import TLSSession

ncclient.transport.session.TICK = 0.001

MON = "urn:ietf:params:xml:ns:yang:ietf-netconf-monitoring"
FILTER = f'<netconf-state xmlns="{MON}"><sessions/></netconf-state>'


def sessions(m):
    """The session entries of the reply as dicts (session-id, username, transport)."""
    reply = m.get(filter=("subtree", FILTER))
    out = []
    for s in reply.data_ele.iter(f"{{{MON}}}session"):
        out.append({c.tag.split("}")[1]: (c.text or "") for c in s})
    return out


def report(m, hold=0.0):
    seen = {"session-id": m.session_id, "sessions": sessions(m), "ended": "closed"}
    if KEEP:
        # Report, then keep the session up until the test ends (kills the client).
        seen["ended"] = "kept"
        print(json.dumps(seen), flush=True)
        while True:
            time.sleep(1)
    if hold:
        # Say nothing for `hold` seconds: a periodic connection's idle timeout closes it.
        deadline = time.time() + hold
        while time.time() < deadline and m.connected:
            time.sleep(0.05)
        if not m.connected:
            seen["ended"] = "by-server"
            print(json.dumps(seen), flush=True)
            return
    m.close_session()
    print(json.dumps(seen), flush=True)


def listen():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(60)
    print(f"LISTENING {srv.getsockname()[1]}", flush=True)
    return srv


def client_context(cert, key, ca):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_cert_chain(certfile=cert, keyfile=key)
    ctx.load_verify_locations(cafile=ca)
    return ctx


KEEP = False


def main(argv):
    global KEEP
    if "--keep" in argv:
        argv.remove("--keep")
        KEEP = True
    hold = 0.0
    if "--hold" in argv:
        i = argv.index("--hold")
        hold = float(argv[i + 1])
        del argv[i : i + 2]
    cmd, args = argv[0], argv[1:]
    if cmd == "connect-tls":
        host, port, cert, key, ca = args
        try:
            m = manager.connect_tls(
                host=host,
                port=int(port),
                certfile=cert,
                keyfile=key,
                ca_certs=ca,
                protocol=ssl.PROTOCOL_TLS_CLIENT,
                server_hostname="localhost",
                timeout=20,
            )
        except Exception as e:  # the agent refused the certificate
            print(json.dumps({"refused": f"{type(e).__name__}: {e}"}), flush=True)
            return 0
        try:
            report(m)
        except Exception as e:  # refused right after the handshake (TLS 1.3 alert)
            print(json.dumps({"refused": f"{type(e).__name__}: {e}"}), flush=True)
        return 0
    if cmd == "callhome-ssh":
        user, password = args[0], args[1]
        count = int(args[2]) if len(args) > 2 else 1
        srv = listen()
        for _ in range(count):
            sock, _peer = srv.accept()
            # ncclient's own call_home() binds the port itself; with the socket accepted
            # here (port known in advance) it is connect_ssh(sock=...), which is what
            # call_home() does after its accept.
            m = manager.connect_ssh(
                host=None,
                sock=sock,
                username=user,
                password=password,
                hostkey_verify=False,
                allow_agent=False,
                look_for_keys=False,
                timeout=20,
            )
            report(m, hold)
        return 0
    if cmd == "callhome-tls":
        cert, key, ca = args[0], args[1], args[2]
        count = int(args[3]) if len(args) > 3 else 1
        srv = listen()
        for _ in range(count):
            sock, _peer = srv.accept()
            # RFC 8071: the side that accepted TCP is the TLS client.
            tls = client_context(cert, key, ca).wrap_socket(sock, server_hostname="localhost")
            tls.settimeout(20)
            handler = make_device_handler({})
            session = TLSSession(handler)
            session._host = "127.0.0.1"
            session._socket = tls
            session._connected = True
            session._post_connect()
            report(Manager(session, handler, timeout=20), hold)
        return 0
    print(f"unknown command {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

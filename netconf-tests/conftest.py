"""Shared support for the NETCONF interop tests: the real `cats-sma` binary started on an
ephemeral loopback port, and the real clients that talk to it over real SSH as admin with
its password (ncclient, netconf-console2, yangcli, and a raw paramiko channel for what no
client can express)."""

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import paramiko
import pytest
from lxml import etree

import ncclient.transport.session
from ncclient import manager
from ncclient.operations import RaiseMode

# ncclient polls its transport every TICK seconds (0.1 by default), which caps a session
# at about ten sequential RPCs per second.
ncclient.transport.session.TICK = 0.001

REPO = Path(__file__).resolve().parent.parent
AGENT_BIN = Path(os.environ.get("CATS_SMA_BIN") or REPO / "target" / "debug" / "cats-sma")
PASSWORD = "interop-admin-pw"
USER = "admin"
READY_TIMEOUT = 60

NC = "urn:ietf:params:xml:ns:netconf:base:1.0"
CATS = "urn:cats-sma:yang:cats-sma"
YANG_LIBRARY = "urn:ietf:params:xml:ns:yang:ietf-yang-library"
MONITORING = "urn:ietf:params:xml:ns:yang:ietf-netconf-monitoring"
# RFC 6243 section 6: the namespace of the `default` attribute of report-all-tagged.
DEFAULT_ATTR_NS = "urn:ietf:params:xml:ns:netconf:default:1.0"
NS = {"nc": NC, "c": CATS, "yl": YANG_LIBRARY, "ncm": MONITORING}

# The SCI most tests configure.
SCI_ID = "188.3.67.3:67"


# ----- the agent ------------------------------------------------------------------------


class Agent:
    """One `cats-sma run` process with its own state directory; restartable."""

    def __init__(self, workdir: Path, extra_args=()):
        self.workdir = workdir
        self.extra_args = list(extra_args)
        self.state_dir = workdir / "state"
        self.proc = None
        self.port = None
        self.log = []
        self._clients = []

    def start(self):
        if not AGENT_BIN.exists():
            pytest.fail(f"agent binary {AGENT_BIN} not found: run `cargo build` first")
        env = dict(
            os.environ,
            CATS_SMA_ADMIN_PASSWORD=PASSWORD,
            RUST_LOG="info",
            NO_COLOR="1",
        )
        self.log = []
        self.proc = subprocess.Popen(
            [
                str(AGENT_BIN),
                "run",
                "--state-dir",
                str(self.state_dir),
                "--netconf-listen",
                "127.0.0.1:0",
                "--restconf-listen",
                "127.0.0.1:0",
                *self.extra_args,
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready = threading.Event()
        found = {}

        def drain(stream, log):
            # Keeps reading to the end so the agent never blocks on a full pipe.
            for line in stream:
                log.append(line.rstrip("\n"))
                m = re.search(r"cats-sma ready: NETCONF over SSH listening on 127\.0\.0\.1:(\d+)", line)
                if m and not ready.is_set():
                    found["port"] = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=drain, args=(self.proc.stderr, self.log), daemon=True).start()
        if not ready.wait(READY_TIMEOUT) or "port" not in found:
            self.stop()
            pytest.fail("the agent did not report ready:\n" + "\n".join(self.log[-30:]))
        self.port = found["port"]
        return self

    def stop(self):
        for m in self._clients:
            _quietly_close(m)
        self._clients = []
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def restart(self):
        self.stop()
        return self.start()

    # -- clients --

    def connect(self, timeout=30, user=USER, password=PASSWORD):
        """An ncclient session (admin unless told otherwise); replies with rpc-errors are
        returned, not raised."""
        m = manager.connect(
            host="127.0.0.1",
            port=self.port,
            username=user,
            password=password,
            hostkey_verify=False,
            look_for_keys=False,
            allow_agent=False,
            timeout=timeout,
        )
        m.raise_mode = RaiseMode.NONE
        self._clients.append(m)
        return m

    def close_clients(self):
        for m in self._clients:
            _quietly_close(m)
        self._clients = []

    def raw(self, base11=True):
        """A raw NETCONF session over a paramiko channel, hellos exchanged."""
        s = RawSession(self.port)
        s.exchange_hellos(base11)
        return s

    def netconf_console(self, *args, timeout=60):
        """Runs netconf-console2 against the agent."""
        cmd = [
            _tool("netconf-console2"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-u",
            USER,
            "-p",
            PASSWORD,
            *args,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)

    def yangcli(self, *args, home: Path, timeout=60):
        """Runs yangcli (yuma123) in batch mode against the agent.

        yangcli keeps files in ~/.yuma; the auto* switches stop it from saving history,
        aliases and user variables there between runs. It still creates its session
        scratch directory under the passwd home (~/.yuma/tmp), whatever $HOME says.
        """
        exe = shutil.which("yangcli")
        if exe is None:
            pytest.fail("yangcli not found: scripts/setup.sh installs it (Debian yuma123)")
        cmd = [
            exe,
            "--server=127.0.0.1",
            f"--ncport={self.port}",
            f"--user={USER}",
            f"--password={PASSWORD}",
            "--batch-mode",
            "--autohistory=false",
            "--autoaliases=false",
            "--autouservars=false",
            *args,
        ]
        env = dict(os.environ, HOME=str(home))
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _quietly_close(m):
    try:
        if m.connected:
            m.close_session()
    except Exception:
        pass


def _tool(name):
    """A console script of the venv pytest runs from, else one on PATH."""
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found (it is installed into .venv by scripts/setup.sh)")
    return found


# ----- a raw NETCONF session (RFC 6242 framing by hand) ------------------------------------


class RawSession:
    """Bytes over the `netconf` SSH subsystem, with both framings done here, so tests can
    send what the clients refuse to send (no message-id, broken XML)."""

    def __init__(self, port):
        self.client = paramiko.SSHClient()
        self.client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        self.client.connect(
            "127.0.0.1",
            port=port,
            username=USER,
            password=PASSWORD,
            look_for_keys=False,
            allow_agent=False,
            timeout=20,
        )
        self.chan = self.client.get_transport().open_session()
        self.chan.settimeout(20)
        self.chan.invoke_subsystem("netconf")
        self.buf = b""
        self.chunked = False
        self.server_hello = None

    def _fill(self):
        data = self.chan.recv(65536)
        if not data:
            raise EOFError("the server closed the channel")
        self.buf += data

    def _read_eom(self):
        while b"]]>]]>" not in self.buf:
            self._fill()
        msg, self.buf = self.buf.split(b"]]>]]>", 1)
        return msg.decode()

    def _read_chunked(self):
        out = b""
        while True:
            while len(self.buf) < 4:
                self._fill()
            assert self.buf.startswith(b"\n#"), f"bad chunk header: {self.buf[:20]!r}"
            if self.buf[2:4] == b"#\n":
                self.buf = self.buf[4:]
                return out.decode()
            while b"\n" not in self.buf[2:]:
                self._fill()
            end = self.buf.index(b"\n", 2)
            size = int(self.buf[2:end])
            while len(self.buf) < end + 1 + size:
                self._fill()
            out += self.buf[end + 1 : end + 1 + size]
            self.buf = self.buf[end + 1 + size :]

    def exchange_hellos(self, base11):
        self.server_hello = self._read_eom()
        caps = "<capability>urn:ietf:params:netconf:base:1.0</capability>"
        if base11:
            caps += "<capability>urn:ietf:params:netconf:base:1.1</capability>"
        self.send_eom(f'<hello xmlns="{NC}"><capabilities>{caps}</capabilities></hello>')
        self.chunked = base11

    def send_eom(self, text):
        self.chan.sendall(text.encode() + b"]]>]]>")

    def send(self, text):
        """Sends one message in the negotiated framing."""
        if self.chunked:
            body = text.encode()
            self.chan.sendall(b"\n#%d\n" % len(body) + body + b"\n##\n")
        else:
            self.send_eom(text)

    def receive(self):
        return self._read_chunked() if self.chunked else self._read_eom()

    def rpc(self, text):
        self.send(text)
        return etree.fromstring(self.receive().encode())

    def close(self):
        self.client.close()


# ----- XML helpers ------------------------------------------------------------------------


def xml(reply):
    """The lxml root of an ncclient reply (or of reply text)."""
    text = reply if isinstance(reply, str) else reply.xml
    return etree.fromstring(text.encode())


def errors(reply):
    """The rpc-errors of a reply as dicts: type, tag, severity, app-tag, path, message,
    info (child local name -> text), and the error-path element itself."""
    root = reply if isinstance(reply, etree._Element) else xml(reply)
    out = []
    for e in root.iter(f"{{{NC}}}rpc-error"):
        info = {}
        info_el = e.find(f"{{{NC}}}error-info")
        if info_el is not None:
            for child in info_el:
                info[etree.QName(child).localname] = (child.text or "").strip()
        out.append(
            {
                "type": e.findtext(f"{{{NC}}}error-type"),
                "tag": e.findtext(f"{{{NC}}}error-tag"),
                "severity": e.findtext(f"{{{NC}}}error-severity"),
                "app-tag": e.findtext(f"{{{NC}}}error-app-tag"),
                "path": e.findtext(f"{{{NC}}}error-path"),
                "path-element": e.find(f"{{{NC}}}error-path"),
                "message": e.findtext(f"{{{NC}}}error-message"),
                "info": info,
            }
        )
    return out


def one_error(reply):
    errs = errors(reply)
    assert len(errs) == 1, f"expected exactly one rpc-error: {_text(reply)}"
    return errs[0]


def assert_ok(reply):
    root = reply if isinstance(reply, etree._Element) else xml(reply)
    assert root.find(f"{{{NC}}}ok") is not None, f"expected <ok/>: {_text(reply)}"


def _text(reply):
    if isinstance(reply, etree._Element):
        return etree.tostring(reply).decode()
    return reply if isinstance(reply, str) else reply.xml


def data(reply):
    """The <data> element of a reply (fails on an rpc-error)."""
    root = reply if isinstance(reply, etree._Element) else xml(reply)
    d = root.find(f"{{{NC}}}data")
    assert d is not None, f"expected <data>: {_text(reply)}"
    return d


def scis(reply):
    """/cats-sma/scis/sci entries of a data reply: csci-id -> {leaf: text}; cs-id (a
    leaf-list) as a list."""
    out = {}
    for sci in data(reply).iterfind("c:cats-sma/c:scis/c:sci", NS):
        leaves = {}
        for leaf in sci:
            name = etree.QName(leaf).localname
            if name == "cs-id":
                leaves.setdefault("cs-id", []).append(leaf.text)
            else:
                leaves[name] = leaf.text
        out[sci.findtext("c:csci-id", namespaces=NS)] = leaves
    return out


def config(body, attrs=""):
    """An edit-config / copy-config <config> holding /cats-sma with `body`; the `nc`
    prefix is bound for operation attributes."""
    return (
        f'<config xmlns="{NC}" xmlns:nc="{NC}">'
        f'<cats-sma xmlns="{CATS}"{attrs}>{body}</cats-sma></config>'
    )


def sci(csci_id, *leaves, cs_id="AR1", op=None):
    """One /cats-sma/scis/sci entry; `leaves` are extra child elements as XML text."""
    attr = f' nc:operation="{op}"' if op else ""
    return (
        f"<sci{attr}><csci-id>{csci_id}</csci-id><cs-id>{cs_id}</cs-id>"
        + "".join(leaves)
        + "</sci>"
    )


def scis_config(*entries):
    """A <config> holding /cats-sma/scis with the given sci entries."""
    return config("<scis>" + "".join(entries) + "</scis>")


def reset(m, body=""):
    """Makes running hold exactly `body` under /cats-sma (copy-config with inline config),
    and drops any uncommitted candidate changes."""
    assert_ok(m.discard_changes())
    inline = (
        f'<source xmlns="{NC}">{config(body)}</source>'
        if body
        else (f'<source xmlns="{NC}"><config/></source>')
    )
    assert_ok(m.copy_config(source=inline, target="running"))


def grpc_stubs(out, *protos):
    """Generates Python messages and gRPC stubs for `protos` (paths under proto/) into
    `out` with grpcio-tools' protoc and imports them from there: {"sci_pb2": module, ...}."""
    import importlib

    from grpc_tools import protoc

    well_known = Path(protoc.__file__).parent / "_proto"
    args = ["protoc", f"-I{REPO / 'proto'}", f"-I{well_known}", f"--python_out={out}", f"--grpc_python_out={out}"]
    rc = protoc.main(args + [str(REPO / "proto" / p) for p in protos])
    assert rc == 0, f"protoc failed on {protos}"
    sys.path.insert(0, str(out))
    try:
        names = [Path(p).stem + suffix for p in protos for suffix in ("_pb2", "_pb2_grpc")]
        return {n: importlib.import_module(f"cats.sma.v1.{n}") for n in names}
    finally:
        sys.path.remove(str(out))


def wait_until(predicate, timeout=5.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# ----- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """One agent for the whole test module."""
    a = Agent(tmp_path_factory.mktemp("agent")).start()
    yield a
    a.stop()


@pytest.fixture
def nc(agent):
    """Opens ncclient sessions on the module's agent; all are closed after the test."""
    yield agent.connect
    agent.close_clients()


@pytest.fixture
def m(nc):
    """A session over a running datastore holding just the SCI SCI_ID; test modules that
    need another starting configuration define their own `m`."""
    m = nc()
    reset(m, "<scis>" + sci(SCI_ID) + "</scis>")
    yield m
    m.discard_changes()


def pytest_collection_modifyitems(items):
    """A hung agent or client fails its test instead of stalling the whole run."""
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(120))

"""End-to-end CATS demo (issue 6): three C-SMAs (cats-sma) for three service sites, their
SCIs simulated with shifting load (`cats-sma simulate --profile cycle`), one reference C-PS, and a live view of the site the
C-PS would choose for each service from one ingress router.

Started by scripts/demo.sh (which builds the binaries); everything listens on 127.0.0.1
ports picked at random and is stopped at the end or on Ctrl-C.
"""

import argparse
import base64
import datetime as dt
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import ncclient.transport.session
from ncclient import manager

ncclient.transport.session.TICK = 0.001

REPO = Path(__file__).resolve().parent.parent
PASSWORD = "demo-admin-pw"
PSK_ID = "demo"
PSK_HEX = "6361747320646576656c6f706d656e74206b6579"  # "cats development key"


# Every SCI signs its reports (seed 004: SCIs MUST authenticate): one HMAC key per SCI,
# derived here from its CSCI-ID so the demo needs no key files.
def sci_key(csci):
    return hashlib.sha256(b"cats demo sci key " + csci.encode()).digest()


INGRESS = "ingress-1"

# site -> (delay from the ingress in ms, capacity index, {service: base GAS}, load phase)
SITES = {
    "site-a": (2.0, 1.0, {"AR1": 400}, 0.0),
    "site-b": (5.0, 1.0, {"AR1": 400, "LLM1": 300}, 2.1),
    "site-c": (9.0, 2.0, {"AR1": 400, "LLM1": 300}, 4.2),
}
SERVICES = ["AR1", "LLM1"]
PERIOD = 40.0  # seconds of one load cycle


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Procs:
    def __init__(self):
        self.procs = []

    def start(self, args, env=None, ready=None, log=None):
        p = subprocess.Popen(
            args,
            env=dict(os.environ, **(env or {})),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(p)
        found = {}
        got = threading.Event()
        p.early_lines = []  # the log up to the ready line (the SSH host key is in it)

        def pump():
            for line in p.stderr:
                if not got.is_set():
                    p.early_lines.append(line)
                if log is not None:
                    log.write(line)
                    log.flush()
                if ready and not got.is_set() and ready in line:
                    found["line"] = line
                    got.set()

        threading.Thread(target=pump, daemon=True).start()
        if ready and not got.wait(60):
            raise SystemExit(f"demo: {args[0]} did not start (see the log)")
        return p, found.get("line", "")

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()


def cps_config(port, grpc_port=None):
    lines = [
        f'listen = "127.0.0.1:{port}"',
        *([f'grpc_listen = "127.0.0.1:{grpc_port}"'] if grpc_port else []),
        "weight = 0.5",
        "[[keys]]",
        f'id = "{PSK_ID}"',
        f'secret = "{PSK_HEX}"',
    ]
    for site, (delay, cap, _, _) in SITES.items():
        lines += ["[[sites]]", f'id = "{site}"', f"capacity = {cap}", "preference = 1.0"]
        lines += ["[[delays]]", f'ingress = "{INGRESS}"', f'site = "{site}"', f"ms = {delay}"]
    return "\n".join(lines) + "\n"


def agent_config(site, services, cps_port, grpc_port=None, prefix=None):
    """An agent's configuration; `prefix` names its SCIs (default: the site), and with
    `cps_port` None it has no C-PS peer (a subordinate: its coordinator reports)."""
    prefix = prefix or site
    # REST (gzip-compressed JSON) or, with --grpc, the gRPC stream (protobuf).
    target = (
        f"<url>grpc://127.0.0.1:{grpc_port}</url>"
        if grpc_port
        else f"<url>http://127.0.0.1:{cps_port}</url><compression>gzip</compression>"
    )
    scis = "".join(
        f"""<sci><csci-id>{prefix}-{cs.lower()}</csci-id><cs-id>{cs}</cs-id>
            <credential-ref>{prefix}-{cs.lower()}</credential-ref>
            <expected-interval>500</expected-interval></sci>"""
        for cs in services
    )
    creds = "".join(
        f"""<credential><name>{prefix}-{cs.lower()}</name><type>hmac-sha256</type>
            <key>{base64.b64encode(sci_key(f"{prefix}-{cs.lower()}")).decode()}</key></credential>"""
        for cs in services
    )
    return f"""<config xmlns="urn:ietf:params:xml:ns:netconf:base:1.0">
  <cats-sma xmlns="urn:cats-sma:yang:cats-sma">
    <agent><csma-id>csma-{site}</csma-id><site-id>{site}</site-id></agent>
    <collection><authentication>{creds}</authentication></collection>
    <scis>{scis}</scis>
    <cache><ttl-multiplier>3</ttl-multiplier><grace-period>500</grace-period></cache>
    <policy xmlns="urn:cats-sma:yang:cats-sma-policy">
      <update-control>
        <gas-delta-percent>3</gas-delta-percent><gas-delta-absolute>5</gas-delta-absolute>
        <heartbeat-interval>10</heartbeat-interval><min-interval>0</min-interval>
      </update-control>
    </policy>
    <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps">
      <peer>
        <name>ref-cps</name>
        {target}
        <allowed-cs-id>AR1</allowed-cs-id><allowed-cs-id>LLM1</allowed-cs-id>
        <psk><key-id>{PSK_ID}</key-id><key>{PSK_HEX}</key></psk>
        <backoff-initial>500</backoff-initial><backoff-max>4000</backoff-max>
      </peer>
    </c-ps>
  </cats-sma>
</config>"""


class Sci:
    """One simulated SCI: a `cats-sma simulate` process (profile cycle: its load rises and
    falls on the demo's cycle, shifted by its site's phase) POSTing a report every 0.5 s
    over HTTPS, signed with the SCI's own HMAC key. Stopped and started again to simulate
    a failure and its recovery."""

    def __init__(self, bin, work, base_url, csci, cs, base, phase, t0, cafile, log):
        self.bin, self.base_url, self.csci, self.cs = bin, base_url, csci, cs
        self.base, self.phase, self.t0, self.cafile, self.log = base, phase, t0, cafile, log
        # The agent's SCI listener speaks HTTPS with a certificate it generated into its
        # state directory on the first start: the simulator trusts exactly that one.
        self.keyfile = work / f"{csci}.key"
        self.keyfile.write_text(base64.b64encode(sci_key(csci)).decode())
        os.chmod(self.keyfile, 0o600)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [self.bin, "simulate", "--transport", "http", "--target", self.base_url, "--cacert", self.cafile,
             "--id", self.csci, "--cs-id", self.cs, "--profile", "cycle", "--period", str(PERIOD),
             "--phase", str(self.phase), "--cycle-origin", str(self.t0), "--gas", str(self.base),
             "--interval-ms", "500", "--duration", "86400", "--connections", "1",
             "--hmac-key-file", str(self.keyfile)],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def pause(self):
        if self.running():
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    close = pause


def select(cps_port, cs):
    url = f"http://127.0.0.1:{cps_port}/cats/select?cs-id={cs}&ingress={INGRESS}"
    try:
        return json.load(urllib.request.urlopen(url, timeout=2))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def render(t, cps_port, events, history, clear):
    out = []
    out.append(f"CATS end-to-end demo   t = {t:4.0f} s   reference C-PS http://127.0.0.1:{cps_port}")
    out.append(
        f"Which site serves each service for traffic entering at {INGRESS}? "
        "(seed 000 cost, w = 0.5: load/capacity vs delay/preference; lowest wins)"
    )
    out.append("")
    head = f"{'service':8} {'chosen':8} " + " ".join(
        f"{s + f' ({SITES[s][0]:.0f} ms, cap {SITES[s][1]:.0f})':>26}" for s in SITES
    )
    out.append(head)
    out.append("-" * len(head))
    for cs in SERVICES:
        sel = select(cps_port, cs)
        if sel is None:
            out.append(f"{cs:8} (C-PS not answering)")
            continue
        chosen = sel.get("site") or "none"
        cells = []
        cand = {c["site"]: c for c in sel.get("candidates", [])}
        excl = {e["site"]: e["reason"] for e in sel.get("excluded", [])}
        for s in SITES:
            if s in cand:
                c = cand[s]
                mark = "*" if s == chosen else " "
                cells.append(f"{mark}gas {c['gas']:4} {c['computing-time']:3}ms cost {c['cost']:5.2f}".rjust(26))
            elif s in excl:
                cells.append(f"{excl[s][:24]:>26}")
            else:
                cells.append(f"{'-- not advertised --':>26}")
        out.append(f"{cs:8} {chosen:8} " + " ".join(cells))
        prev = history.get(cs)
        if prev is not None and prev != chosen:
            events.append(f"t={t:4.0f}s  {cs}: C-PS now chooses {chosen} (was {prev})")
        history[cs] = chosen
    out.append("")
    out.append("gas = available slots, ms = computing time per request (as the C-SMAs advertise them)")
    out.append("")
    out.append("What happened:")
    out.extend(events[-10:] or ["  (nothing yet)"])
    text = "\n".join(out)
    if clear:
        sys.stdout.write("\x1b[H\x1b[2J" + text + "\n")
    else:
        sys.stdout.write(text + "\n\n")
    sys.stdout.flush()


IPM_NS = "urn:cats-sma:yang:cats-ip-metrics"
IPM_APP = "203.0.113.80"
# site -> (A-ER address the flows are exported from, server address, RTT from the ingress in µs)
IPM_SITES = {"near": ("127.0.0.1", "192.0.2.10", 2000), "far": ("::1", "192.0.2.20", 8000)}


def write_pcap(path, flows):
    """A libpcap file of IPv4/UDP packets: flows is [(src, dst, payload octets, count)]."""
    import struct
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    now, k = int(time.time()), 0
    for src, dst, payload, count in flows:
        for _ in range(count):
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + payload, 1, 0, 64, 17, 0,
                             socket.inet_aton(src), socket.inet_aton(dst))
            frame = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + struct.pack("!HHHH", 40000, 443, 8 + payload, 0) + bytes(payload)
            out.append(struct.pack("<IIII", now, (k % 1000) * 1000, len(frame), len(frame)) + frame)
            k += 1
    path.write_bytes(b"".join(out))


def ipm_select(m):
    """select-site for IPM_APP as ingress-1 with its RTT-ANYCAST; {site: (load, cost)}, chosen."""
    from ncclient.xml_ import to_ele
    import xml.etree.ElementTree as ET
    rtt = "".join(f"<rtt><a-er>{a}</a-er><value>{us}</value></rtt>" for a, _, us in IPM_SITES.values())
    reply = m.dispatch(to_ele(f'<select-site xmlns="{IPM_NS}"><application-id>{IPM_APP}</application-id>'
                              f"<ingress>{INGRESS}</ingress>{rtt}</select-site>"))
    root = ET.fromstring(reply.xml)
    rows, chosen = {}, None
    for site in root.iter(f"{{{IPM_NS}}}site"):
        get = lambda tag: site.findtext(f"{{{IPM_NS}}}{tag}")
        sid = get("site-id")
        if get("rank") == "1" and get("incomplete") is None:
            chosen = sid
        rows[sid] = (get("load-index"), get("cost"))
    return rows, chosen


def ip_metrics_demo(args):
    """Seed 000 in one agent: softflowd exports the A-ERs' counters (IPFIX from the near
    site's A-ER, NetFlow v9 from the far one's); the near site's traffic grows each interval
    until the section 4 cost sends ingress-1 to the far site."""
    softflowd = shutil.which("softflowd") or "/usr/sbin/softflowd"
    work = Path(tempfile.mkdtemp(prefix="cats-demo-ipm-"))
    log = open(work / "demo.log", "w")
    procs = Procs()
    try:
        _, line = procs.start(
            [args.bin, "run", "--state-dir", str(work / "agent"), "--netconf-listen", "127.0.0.1:0",
             "--restconf-listen", "127.0.0.1:0"],
            env={"CATS_SMA_ADMIN_PASSWORD": PASSWORD, "RUST_LOG": "info", "NO_COLOR": "1"},
            ready="cats-sma ready", log=log,
        )
        nc_port = int(line.split("listening on ")[1].split(",")[0].split(";")[0].split(" ")[0].rsplit(":", 1)[1])
        sites = "".join(
            f"<site><site-id>{s}</site-id><a-er>{aer}</a-er><server-address>{srv}</server-address>"
            f"<capacity-index>10</capacity-index></site>"
            for s, (aer, srv, _) in IPM_SITES.items()
        )
        config = f"""<config xmlns="urn:ietf:params:xml:ns:netconf:base:1.0">
  <cats-sma xmlns="urn:cats-sma:yang:cats-sma"><ip-metrics xmlns="{IPM_NS}">
    <collector><enabled>true</enabled><listen-port>0</listen-port></collector>
    <load-index><measurement-interval>2</measurement-interval></load-index>
    <application><application-id>{IPM_APP}</application-id>{sites}</application>
  </ip-metrics></cats-sma></config>"""
        with manager.connect(host="127.0.0.1", port=nc_port, username="admin", password=PASSWORD,
                             hostkey_verify=False, look_for_keys=False, allow_agent=False, timeout=30) as m:
            m.edit_config(target="running", config=config)
            state = m.get(filter=("subtree", f'<cats-sma xmlns="urn:cats-sma:yang:cats-sma"><ip-metrics xmlns="{IPM_NS}">'
                                             "<collector><statistics/></collector></ip-metrics></cats-sma>")).xml
            port = int(state.split("listening-port>")[1].split("<")[0])
            events = [f"t=   0s  agent configured over NETCONF; collector on UDP {port}; logs in {work}/demo.log"]
            prev, start, step = None, time.time(), 0
            client = "198.51.100.1"
            while time.time() - start < args.duration:
                t = time.time() - start
                # The near site's server gets 20 more requests (and answers) each interval.
                near_n, far_n = 20 + 20 * step, 60
                for s, n in (("near", near_n), ("far", far_n)):
                    aer, srv, _ = IPM_SITES[s]
                    pcap = work / f"{s}.pcap"
                    write_pcap(pcap, [(client, srv, 100, n), (srv, client, 1000, n)])
                    dest = f"[{aer}]:{port}" if ":" in aer else f"{aer}:{port}"
                    subprocess.run([softflowd, "-r", str(pcap), "-n", dest, "-v", "9" if ":" in aer else "10",
                                    "-d", "-c", "none", "-p", str(work / "softflowd.pid")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, check=False)
                time.sleep(2.2)
                rows, chosen = ipm_select(m)
                out = [f"Seed 000 demo   t = {t:4.0f} s   application {IPM_APP}, ingress {INGRESS}, w = 0.5",
                       "A-ER counters (softflowd: IPFIX from near's A-ER, NetFlow v9 from far's) -> Load Index;",
                       "RTT from the ingress: near 2 ms, far 8 ms; capacity 10 at both", "",
                       f"{'site':6} {'packets/interval':>17} {'Load Index':>12} {'cost':>10}"]
                for s, n in (("near", near_n), ("far", far_n)):
                    load, cost = rows.get(s, (None, None))
                    mark = "*" if s == chosen else " "
                    out.append(f"{mark}{s:5} {2 * n:17} {load or '-':>12} {cost or '-':>10}")
                if chosen and chosen != prev:
                    events.append(f"t={t:4.0f}s  select-site now answers {chosen}" + (f" (was {prev})" if prev else ""))
                    prev = chosen
                out += ["", "What happened:"] + events[-8:]
                text = "\n".join(out)
                sys.stdout.write(("" if args.no_clear else "\x1b[H\x1b[2J") + text + "\n\n")
                sys.stdout.flush()
                step += 1
        print(f"demo finished; logs in {work}/demo.log")
    except KeyboardInterrupt:
        print("\ndemo stopped")
    finally:
        procs.stop()
        log.close()
        shutil.rmtree(work / "agent", ignore_errors=True)



def hierarchy_config(subordinates):
    """The coordinator's hierarchy: each subordinate by address and pinned host key."""
    subs = "".join(
        f"""<subordinate><name>{name}</name><address>127.0.0.1</address><port>{port}</port>
            <username>admin</username><password>{PASSWORD}</password><host-key>{key}</host-key></subordinate>"""
        for name, port, key in subordinates
    )
    return f"""<config xmlns="urn:ietf:params:xml:ns:netconf:base:1.0">
  <cats-sma xmlns="urn:cats-sma:yang:cats-sma">
    <hierarchy xmlns="urn:cats-sma:yang:cats-sma-hierarchy">
      <withdraw-after>3</withdraw-after><reconnect><initial>500</initial><max>2000</max></reconnect>
      {subs}
    </hierarchy>
  </cats-sma>
</config>"""


def subordinate_config(site, name, services):
    """A subordinate: its SCIs and their credentials, no C-PS (the coordinator reports)."""
    full = agent_config(site, services, 0, prefix=name)
    start = full.index('<c-ps xmlns=')
    end = full.index("</c-ps>") + len("</c-ps>")
    return full[:start] + full[end:]


def host_key_line(lines):
    """The agent logs its SSH host key at start: the OpenSSH public key line."""
    for line in lines:
        if "SSH host key " in line:
            rest = line.split("SSH host key ", 1)[1]
            return rest.split(" (SHA256:")[0].strip()
    raise SystemExit("demo: the agent did not log its SSH host key")


AGENT_ENV = {"CATS_SMA_ADMIN_PASSWORD": PASSWORD, "RUST_LOG": "info", "NO_COLOR": "1"}


class Hierarchy:
    """site-a as a coordinator over two subordinates; the second is stopped at 30 % of the
    run and started again at 60 %: the coordinator withdraws its SCIs after withdraw-after
    (3 s) and takes them back from the sync-on-start push-update of the new session."""

    def __init__(self, args, procs, log, work, site):
        self.args, self.procs, self.log, self.work, self.site = args, procs, log, work, site
        self.subs = {}  # name -> (netconf port, sci port, process)
        self.down = False
        self.restarted = False

    def start_sub(self, name, nc_port, sci_port):
        p, _ = self.procs.start(
            [self.args.bin, "run", "--state-dir", str(self.work / name), "--netconf-listen", f"127.0.0.1:{nc_port}",
             "--sci-listen", f"127.0.0.1:{sci_port}", "--restconf-listen", "127.0.0.1:0"],
            env=AGENT_ENV, ready="cats-sma ready", log=self.log)
        self.subs[name] = (nc_port, sci_port, p)
        return p

    def step(self, t, duration, events):
        name = f"{self.site}-s2"
        nc_port, sci_port, p = self.subs[name]
        if not self.down and not self.restarted and t >= duration * 0.3:
            p.terminate()
            p.wait(10)
            self.down = True
            events.append(f"t={t:4.0f}s  subordinate {name} stops: after withdraw-after (3 s) the coordinator "
                          "withdraws its SCI, site-a's AR1 GAS drops by its share")
        elif self.down and t >= duration * 0.6:
            self.start_sub(name, nc_port, sci_port)
            self.down, self.restarted = False, True
            events.append(f"t={t:4.0f}s  subordinate {name} is back: the coordinator reconnects, the "
                          "sync-on-start push-update restores its SCI, counted once")


def hierarchy_site(args, procs, log, work, site, services, phase, t0, cps_port, grpc_port, scis):
    h = Hierarchy(args, procs, log, work, site)
    subordinates = []
    for i in (1, 2):
        name = f"{site}-s{i}"
        nc_port, sci_port = free_port(), free_port()
        p = h.start_sub(name, nc_port, sci_port)
        share = {cs: base // 2 for cs, base in services.items()}
        with manager.connect(host="127.0.0.1", port=nc_port, username="admin", password=PASSWORD,
                             hostkey_verify=False, look_for_keys=False, allow_agent=False, timeout=30) as m:
            m.edit_config(target="running", config=subordinate_config(site, name, share))
            # Kept in startup: the subordinate restarted later still knows its SCIs.
            m.copy_config(source="running", target="startup")
        for cs, base in share.items():
            sci = Sci(args.bin, work, f"https://127.0.0.1:{sci_port}", f"{name}-{cs.lower()}", cs, base, phase, t0,
                      str(work / name / "sci-cert.pem"), log)
            sci.start()
            scis.append(sci)
        subordinates.append((name, nc_port, host_key_line(p.early_lines)))
    p, line = procs.start(
        [args.bin, "run", "--state-dir", str(work / site), "--netconf-listen", "127.0.0.1:0",
         "--sci-listen", "127.0.0.1:0", "--restconf-listen", "127.0.0.1:0"],
        env=AGENT_ENV, ready="cats-sma ready", log=log)
    nc_port = int(line.split("listening on ")[1].split(",")[0].split(";")[0].split(" ")[0].rsplit(":", 1)[1])
    with manager.connect(host="127.0.0.1", port=nc_port, username="admin", password=PASSWORD,
                         hostkey_verify=False, look_for_keys=False, allow_agent=False, timeout=30) as m:
        m.edit_config(target="running", config=agent_config(site, {}, cps_port, grpc_port))
        m.edit_config(target="running", config=hierarchy_config(subordinates))
    return h


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=75, help="seconds to run (default 75)")
    ap.add_argument("--no-clear", action="store_true", help="print frames one after another")
    ap.add_argument("--grpc", action="store_true",
                    help="the C-SMAs report over the gRPC stream (grpc://) instead of REST")
    ap.add_argument("--ip-metrics", action="store_true",
                    help="seed 000: A-ER counters from softflowd move the chosen site (one agent)")
    ap.add_argument("--hierarchy", action="store_true",
                    help="seed 004 scalability: site-a is a coordinator C-SMA over two subordinate C-SMAs")
    ap.add_argument("--bin", default=str(REPO / "target" / "debug" / "cats-sma"))
    ap.add_argument("--ref-cps", default=str(REPO / "target" / "debug" / "examples" / "ref_cps"))
    args = ap.parse_args()
    if args.ip_metrics:
        return ip_metrics_demo(args)

    work = Path(tempfile.mkdtemp(prefix="cats-demo-"))
    log = open(work / "demo.log", "w")
    procs = Procs()
    scis = []
    try:
        cps_port = free_port()
        grpc_port = free_port() if args.grpc else None
        (work / "cps.toml").write_text(cps_config(cps_port, grpc_port))
        procs.start([args.ref_cps, str(work / "cps.toml")], env={"RUST_LOG": "warn"},
                    ready="reference C-PS ready", log=log)
        t0 = time.time()
        hier = None
        for site, (_, _, services, phase) in SITES.items():
            if args.hierarchy and site == "site-a":
                hier = hierarchy_site(args, procs, log, work, site, services, phase, t0, cps_port, grpc_port, scis)
                continue
            sci_port = free_port()
            _, line = procs.start(
                [args.bin, "run", "--state-dir", str(work / site), "--netconf-listen", "127.0.0.1:0",
                 "--sci-listen", f"127.0.0.1:{sci_port}", "--restconf-listen", "127.0.0.1:0"],
                env={"CATS_SMA_ADMIN_PASSWORD": PASSWORD, "RUST_LOG": "info", "NO_COLOR": "1"},
                ready="cats-sma ready", log=log,
            )
            nc_port = int(line.split("listening on ")[1].split(",")[0].split(";")[0].split(" ")[0].rsplit(":", 1)[1])
            with manager.connect(host="127.0.0.1", port=nc_port, username="admin", password=PASSWORD,
                                 hostkey_verify=False, look_for_keys=False, allow_agent=False,
                                 timeout=30) as m:
                m.edit_config(target="running", config=agent_config(site, services, cps_port, grpc_port))
            for cs, base in services.items():
                sci = Sci(args.bin, work, f"https://127.0.0.1:{sci_port}", f"{site}-{cs.lower()}", cs, base, phase,
                          t0, str(work / site / "sci-cert.pem"), log)
                sci.start()
                scis.append(sci)
        # Let every site's first advertisement reach the C-PS before the clock starts.
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                cst = json.load(urllib.request.urlopen(f"http://127.0.0.1:{cps_port}/cats/cst", timeout=2))
                if all(cst.get(site, {}).get("services") for site in SITES):
                    break
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.2)
        how = "the gRPC stream" if args.grpc else "REST"
        events = [f"t=   0s  3 C-SMAs configured over NETCONF, reporting over {how}; {len(scis)} SCIs reporting; "
                  f"logs in {work}/demo.log"]
        if hier:
            events.append("t=   0s  site-a is a coordinator C-SMA over 2 subordinate C-SMAs (NETCONF + YANG-Push "
                          "on-change): the C-PS sees one site-a")
        history = {}
        failed = next(s for s in scis if s.csci == "site-b-llm1")
        fail_at, recover_at = args.duration * 0.45, args.duration * 0.75
        start = time.time()
        while True:
            t = time.time() - start
            if t >= args.duration:
                break
            if failed.running() and fail_at <= t < recover_at:
                failed.pause()
                events.append(f"t={t:4.0f}s  SCI site-b-llm1 stops reporting (failure): its C-SMA "
                              "withdraws LLM1 at site-b once the TTL and grace period expire")
            elif not failed.running() and t >= recover_at:
                failed.start()
                events.append(f"t={t:4.0f}s  SCI site-b-llm1 reports again: LLM1 at site-b is advertised again")
            if hier:
                hier.step(t, args.duration, events)
            render(t, cps_port, events, history, clear=not args.no_clear)
            time.sleep(1)
        print(f"demo finished; logs in {work}/demo.log")
    except KeyboardInterrupt:
        print("\ndemo stopped")
    finally:
        for s in scis:
            s.close()
        procs.stop()
        log.close()
        # Keep the log, not the agents' state directories.
        for site in SITES:
            shutil.rmtree(work / site, ignore_errors=True)
        for d in work.glob("site-a-s*"):
            shutil.rmtree(d, ignore_errors=True)
        for k in work.glob("*.key"):
            k.unlink(missing_ok=True)


if __name__ == "__main__":
    main()

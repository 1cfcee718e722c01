"""RSS growth per NETCONF <get> reply: starts BINARY on an ephemeral port, 50 warm-up gets of
netconf-state/schemas over one ncclient session, then N more, and prints the VmRSS growth.
Usage: .venv/bin/python scripts/reply_memory.py BINARY N (docs/performance.md)."""
import subprocess, os, re, sys, tempfile
from ncclient import manager
binary, n = sys.argv[1], int(sys.argv[2])
st = tempfile.mkdtemp()
env = dict(os.environ, CATS_SMA_ADMIN_PASSWORD="pw", RUST_LOG="info")
p = subprocess.Popen([binary,"run","--state-dir",st,"--netconf-listen","127.0.0.1:0","--restconf-listen","127.0.0.1:0"], env=env, stderr=subprocess.PIPE, text=True)
for line in p.stderr:
    m = re.search(r"listening on 127.0.0.1:(\d+)", line)
    if m: port=int(m.group(1)); break
def rss():
    return int([l for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS")][0].split()[1])
m = manager.connect(host="127.0.0.1", port=port, username="admin", password="pw", hostkey_verify=False, look_for_keys=False, allow_agent=False, timeout=30)
f = '<netconf-state xmlns="urn:ietf:params:xml:ns:yang:ietf-netconf-monitoring"><schemas/></netconf-state>'
size = len(str(m.get(filter=("subtree", f))))
for _ in range(50): m.get(filter=("subtree", f))
r0 = rss()
for _ in range(n): m.get(filter=("subtree", f))
r1 = rss()
print(f"{os.path.basename(binary)}: reply {size} B, {n} gets, RSS {r0} -> {r1} kB (+{r1-r0} kB, {1024*(r1-r0)/n:.0f} B/get)")
p.kill()

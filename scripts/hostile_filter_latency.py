#!/usr/bin/env python3
"""Issue 11 class 3 measurement: an admin's one-leaf edit-config + commit on the candidate,
with N SCIs in running, alone and while a second user's hostile XPath get-config
(`//*[count(//*)>=0]`) is in flight. Prints one line per figure (seconds).

    scripts/hostile_filter_latency.py BINARY [N] [XPATH]

XPATH (default the hostile one) is the filter of the concurrent read; `//*` is a permitted
but heavy one (every node, copied with its subtree).

Starts BINARY (`cats-sma run`) on ephemeral loopback ports in a temporary state directory;
needs ncclient (the interop venv: /work/main/.venv/bin/python or scripts/setup.sh)."""

import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from ncclient import manager
from ncclient.operations import RaiseMode

CATS = "urn:cats-sma:yang:cats-sma"
PW = "latency-pw"
HOSTILE = "//*[count(//*)>=0]"
CAP = 60.0


def start(binary, state):
    p = subprocess.Popen(
        [binary, "run", "--state-dir", state, "--netconf-listen", "127.0.0.1:0", "--restconf-listen", "127.0.0.1:0"],
        env={**os.environ, "CATS_SMA_ADMIN_PASSWORD": PW, "RUST_LOG": "warn,cats_sma=info", "NO_COLOR": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in p.stderr:
        m = re.search(r"NETCONF over SSH listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, int(m.group(1))
    raise SystemExit("agent did not start")


def session(port):
    m = manager.connect(
        host="127.0.0.1", port=port, username="admin", password=PW, hostkey_verify=False,
        allow_agent=False, look_for_keys=False, timeout=600,
    )
    m.raise_mode = RaiseMode.ERRORS
    return m


def commit_once(m, i):
    cfg = (f'<config><cats-sma xmlns="{CATS}"><scis><sci><csci-id>s-0</csci-id>'
           f"<description>v{i}</description></sci></scis></cats-sma></config>")
    t = time.monotonic()
    m.edit_config(target="candidate", config=cfg)
    m.commit()
    return time.monotonic() - t


def main():
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    expr = sys.argv[3] if len(sys.argv) > 3 else HOSTILE
    with tempfile.TemporaryDirectory() as d:
        p, port = start(binary, os.path.join(d, "state"))
        try:
            admin = session(port)
            scis = "".join(f"<sci><csci-id>s-{i}</csci-id><cs-id>AR1</cs-id></sci>" for i in range(n))
            admin.edit_config(target="running", config=f'<config><cats-sma xmlns="{CATS}"><scis>{scis}</scis></cats-sma></config>')
            base = [commit_once(admin, i) for i in range(5)]
            print(f"SCIs: {n}; concurrent read: get-config select=\"{expr}\"")
            print(f"baseline commit (median of 5): {statistics.median(base):.3f}")
            reader = session(port)
            outcome = {}

            def hostile():
                t = time.monotonic()
                try:
                    reader.get_config(source="running", filter=("xpath", expr))
                    outcome["reply"] = "data"
                except Exception as e:  # the fixed agent answers resource-denied
                    outcome["reply"] = type(e).__name__ + ": " + str(e)[:80]
                outcome["time"] = time.monotonic() - t

            th = threading.Thread(target=hostile, daemon=True)
            th.start()
            time.sleep(0.2)  # let the hostile request reach the agent first
            result = {}

            def timed():
                result["t"] = commit_once(admin, 99)

            c = threading.Thread(target=timed, daemon=True)
            c.start()
            c.join(CAP)
            during = result.get("t")
            print(f"commit while hostile filter in flight: {during:.3f}" if during is not None
                  else f"commit while hostile filter in flight: not done after {CAP:.0f} s")
            th.join(1 if during is None else CAP)
            print(f"hostile reply: {outcome.get('reply', 'none yet')} after {outcome.get('time', float('nan')):.3f}")
        finally:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()

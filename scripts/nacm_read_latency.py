#!/usr/bin/env python3
"""A NACM-restricted user's get-config against the recovery user's, with N SCIs in running
(the cost of pruning by NACM before filtering). Prints seconds per read.

    scripts/nacm_read_latency.py BINARY [N]
"""

import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from ncclient import manager

CATS = "urn:cats-sma:yang:cats-sma"
PW = "latency-pw"


def main():
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    with tempfile.TemporaryDirectory() as d:
        hashed = subprocess.run([binary, "hash-password"], input="bob-pw", capture_output=True, text=True).stdout.strip()
        cfg = os.path.join(d, "boot.toml")
        with open(cfg, "w") as f:
            f.write(f'[[users]]\nname = "bob"\npassword_hash = "{hashed}"\n')
        p = subprocess.Popen(
            [binary, "run", "--state-dir", os.path.join(d, "state"), "--config", cfg,
             "--netconf-listen", "127.0.0.1:0", "--restconf-listen", "127.0.0.1:0"],
            env={**os.environ, "CATS_SMA_ADMIN_PASSWORD": PW}, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )
        port = None
        for line in p.stderr:
            m = re.search(r"NETCONF over SSH listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()

        def connect(user, pw):
            return manager.connect(host="127.0.0.1", port=port, username=user, password=pw, hostkey_verify=False,
                                   allow_agent=False, look_for_keys=False, timeout=600)

        try:
            admin = connect("admin", PW)
            scis = "".join(f"<sci><csci-id>s-{i}</csci-id><cs-id>AR1</cs-id></sci>" for i in range(n))
            admin.edit_config(target="running", config=f'<config><cats-sma xmlns="{CATS}"><scis>{scis}</scis></cats-sma></config>')
            bob = connect("bob", "bob-pw")
            xp = ("xpath", ({"c": CATS}, "/c:cats-sma/c:scis/c:sci[c:cs-id='AR1']"))
            print(f"SCIs: {n}")
            for who, m in (("admin (recovery user)", admin), ("bob (NACM applies)", bob)):
                for what, f in (("whole", None), ("xpath-filtered", xp)):
                    t = time.monotonic()
                    m.get_config(source="running", filter=f) if f else m.get_config(source="running")
                    print(f"{who} get-config {what}: {time.monotonic() - t:.3f}")
        finally:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()

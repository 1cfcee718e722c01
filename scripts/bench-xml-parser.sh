#!/bin/sh
# Times the NETCONF message parser against the one before the message limits (commit
# 3ce879b, the hand-written namespace scope chain), in one release binary and one run:
# parse + <config> text for libyang + drop, for a 100 000-entry and a 64 MB edit-config.
# Usage: scripts/bench-xml-parser.sh   (needs quick-xml, thiserror and libc from the registry)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
cat > "$work/Cargo.toml" <<'TOML'
[package]
name = "bench-xml"
version = "0.1.0"
edition = "2021"

[dependencies]
quick-xml = "0.42"
thiserror = "2"
libc = "0.2"
TOML
ns='s/crate::netconf::NS_BASE/"urn:ietf:params:xml:ns:netconf:base:1.0"/'
untested='/^#\[cfg(test)\]/q;p'
git -C "$root" show 3ce879b:src/netconf/xml.rs | sed -e "$ns" | sed -n "$untested" > "$work/src/old.rs"
sed -e "$ns" -e 's/^pub use crate::config::message_limits::MessageLimits as XmlLimits;/pub use crate::limits::MessageLimits as XmlLimits;/' \
    "$root/src/netconf/xml.rs" | sed -n "$untested" > "$work/src/new.rs"
sed -e 's/^use serde::Deserialize;//' -e 's/Deserialize, //' -e '/^#\[serde/d' \
    "$root/src/config/message_limits.rs" > "$work/src/limits.rs"
cp "$root/scripts/bench-xml/main.rs" "$work/src/main.rs"
cd "$work" && cargo run --release --quiet

//! `cats-sma status`: connects to an agent over NETCONF (SSH, the host key pinned, never
//! trusted on first use), reads its operational state with one `<get>` and prints the
//! services (the site aggregates), the SCIs of the metric cache and the C-PS sessions as
//! tables.

use std::time::Duration;

use crate::hierarchy::client::{ClientAuth, HostKeyPin, Session, Target};
use crate::xml::Element;

const CATS: &str = "urn:cats-sma:yang:cats-sma";
const CPS: &str = "urn:cats-sma:yang:cats-sma-cps";
const POLICY: &str = "urn:cats-sma:yang:cats-sma-policy";

/// What `status` was asked.
pub struct StatusArgs {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// A private key file (else the password in `CATS_SMA_PASSWORD`).
    pub key: Option<std::path::PathBuf>,
    /// The agent's host key fingerprint (`SHA256:…`, logged at its start); else the host
    /// key in `state_dir` (an agent on this machine).
    pub host_key_fingerprint: Option<String>,
    pub state_dir: std::path::PathBuf,
    /// SCIs listed at most (the counts cover them all).
    pub max_scis: usize,
}

/// Runs the command; the exit code.
pub fn run(args: StatusArgs) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cats-sma status: {e}");
            return 1;
        }
    };
    match rt.block_on(status(&args)) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("cats-sma status: {e}");
            1
        }
    }
}

fn progress(msg: &str) {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(2) } == 1 {
        eprint!("\r\x1b[K{msg}");
    }
}

async fn status(args: &StatusArgs) -> Result<String, String> {
    let auth = match &args.key {
        Some(k) => ClientAuth::PrivateKey(k.clone()),
        None => ClientAuth::Password(
            std::env::var("CATS_SMA_PASSWORD")
                .map_err(|_| "set CATS_SMA_PASSWORD (or give --key FILE) to log in".to_owned())?,
        ),
    };
    let host_key = match &args.host_key_fingerprint {
        Some(f) => HostKeyPin::Fingerprint(f.clone()),
        None => {
            let file = args.state_dir.join("ssh_host_ed25519_key");
            let text = std::fs::read_to_string(&file).map_err(|e| {
                format!(
                    "no --host-key-fingerprint and the host key {} cannot be read ({e}): give the fingerprint the \
                     agent logs at its start",
                    file.display()
                )
            })?;
            let key = russh::keys::PrivateKey::from_openssh(text.as_bytes())
                .map_err(|e| format!("{}: {e}", file.display()))?;
            HostKeyPin::Key(key.public_key().to_openssh().map_err(|e| e.to_string())?)
        }
    };
    let target = Target {
        host: args.host.clone(),
        port: args.port,
        username: args.user.clone(),
        auth,
        host_key,
        connect_timeout: Duration::from_secs(10),
        max_message_size: 1 << 30,
    };
    progress(&format!("connecting to {}:{} …", args.host, args.port));
    let mut s = Session::connect(&target).await.map_err(|e| e.to_string())?;
    progress("reading the operational state …");
    let get = format!(
        "<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><agent/><services/><metric-cache/>\
         <c-ps xmlns=\"{CPS}\"><peer><name/><session/></peer></c-ps></cats-sma></filter></get>"
    );
    let reply = s.rpc(&get, Duration::from_secs(120)).await.map_err(|e| e.to_string());
    s.close().await;
    let reply = reply?;
    progress("");
    let limits = crate::xml::XmlLimits { max_elements: 100_000_000, ..Default::default() };
    let root = crate::xml::parse_with(&reply, &limits).map_err(|e| format!("the reply: {}", e.0))?;
    // The reply's content: `<data>`, or an rpc-error.
    let base = |e: &Element| e.ns.as_deref().is_none_or(|n| n == crate::mgmt::ns::NS_BASE);
    if !(root.name == "data" && base(&root)) {
        let msg = root.child(crate::mgmt::ns::NS_BASE, "error-message").map_or(reply.as_str(), |m| m.text.as_str());
        return Err(format!("the agent refused the read: {msg}"));
    }
    let top = root.child(CATS, "cats-sma");
    Ok(render(top, args.max_scis))
}

fn text<'a>(e: &'a Element, ns: &str, name: &str) -> &'a str {
    e.child(ns, name).map_or("-", |c| c.text.as_str())
}

/// The tables, from the `<cats-sma>` element of the reply (None: nothing readable).
pub fn render(top: Option<&Element>, max_scis: usize) -> String {
    let Some(top) = top else { return "no cats-sma state readable (empty, or hidden by NACM)\n".into() };
    let agent = top.child(CATS, "agent");
    let services: Vec<&Element> = top
        .child(CATS, "services")
        .map(|s| s.children.iter().filter(|c| c.is(CATS, "service")).collect())
        .unwrap_or_default();
    let entries: Vec<&Element> = top
        .child(CATS, "metric-cache")
        .map(|s| s.children.iter().filter(|c| c.is(CATS, "entry")).collect())
        .unwrap_or_default();
    let peers: Vec<&Element> =
        top.child(CPS, "c-ps").map(|s| s.children.iter().filter(|c| c.is(CPS, "peer")).collect()).unwrap_or_default();
    let mut states: std::collections::BTreeMap<&str, usize> = Default::default();
    for e in &entries {
        *states.entry(text(e, CATS, "state")).or_default() += 1;
    }
    let by_state = states.iter().map(|(s, n)| format!("{n} {s}")).collect::<Vec<_>>().join(", ");
    let mut out = format!(
        "C-SMA {} at site {}: {} services, {} SCIs{}, {} C-PS peers\n",
        agent.map_or("-", |a| text(a, CATS, "csma-id")),
        agent.map_or("-", |a| text(a, CATS, "site-id")),
        services.len(),
        entries.len(),
        if by_state.is_empty() { String::new() } else { format!(" ({by_state})") },
        peers.len()
    );
    // The cells of a row: each (namespace, leaf) of `e`, "-" when absent.
    let cells = |e: &Element, leaves: &[(&str, &str)]| -> Vec<String> {
        leaves.iter().map(|(ns, name)| text(e, ns, name).to_owned()).collect()
    };
    let leaves = [
        (CATS, "cs-id"),
        (CATS, "site-gas"),
        (POLICY, "reported-gas"),
        (CATS, "computing-time"),
        (CATS, "health"),
        (CATS, "sci-count"),
    ];
    let rows: Vec<Vec<String>> = services.iter().map(|s| cells(s, &leaves)).collect();
    table(&mut out, "SERVICES", &["CS-ID", "SITE-GAS", "REPORTED-GAS", "COMPUTING-TIME", "HEALTH", "SCIS"], &rows);
    let leaves = ["csci-id", "cs-id", "state", "gas", "computing-time", "health", "timestamp"].map(|l| (CATS, l));
    let rows: Vec<Vec<String>> = entries.iter().take(max_scis).map(|e| cells(e, &leaves)).collect();
    let title = if entries.len() > max_scis {
        format!("SCIS (the first {max_scis} of {})", entries.len())
    } else {
        "SCIS".to_owned()
    };
    table(&mut out, &title, &["CSCI-ID", "CS-ID", "STATE", "GAS", "COMPUTING-TIME", "HEALTH", "LAST REPORT"], &rows);
    let rows: Vec<Vec<String>> = peers
        .iter()
        .map(|p| {
            let s = p.child(CPS, "session");
            let f = |n: &str| s.map_or("-", |s| text(s, CPS, n)).to_owned();
            vec![
                text(p, CPS, "name").to_owned(),
                f("state"),
                f("buffered-updates"),
                f("sent-updates"),
                f("dropped-updates"),
                f("failed-requests"),
            ]
        })
        .collect();
    table(&mut out, "C-PS PEERS", &["NAME", "STATE", "BUFFERED", "SENT", "DROPPED", "FAILED"], &rows);
    out
}

fn table(out: &mut String, title: &str, head: &[&str], rows: &[Vec<String>]) {
    out.push('\n');
    out.push_str(title);
    out.push('\n');
    if rows.is_empty() {
        out.push_str("  (none)\n");
        return;
    }
    let mut width: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::from(" ");
        for (c, w) in cells.zip(&width) {
            l.push(' ');
            l.push_str(c);
            l.push_str(&" ".repeat(w - c.chars().count()));
            l.push(' ');
        }
        l.trim_end().to_owned() + "\n"
    };
    out.push_str(&line(&mut head.iter().copied()));
    for r in rows {
        out.push_str(&line(&mut r.iter().map(String::as_str)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_from_a_get_reply() {
        let reply = format!(
            "<data xmlns=\"urn:ietf:params:xml:ns:netconf:base:1.0\"><cats-sma xmlns=\"{CATS}\">\
             <agent><csma-id>c1</csma-id><site-id>s1</site-id></agent>\
             <services><service><cs-id>AR1</cs-id><site-gas>600</site-gas><computing-time>12</computing-time>\
             <health>healthy</health><sci-count>2</sci-count><reported-gas xmlns=\"{POLICY}\">540</reported-gas></service></services>\
             <metric-cache><entry><csci-id>sci-1</csci-id><cs-id>AR1</cs-id><gas>400</gas><state>healthy</state></entry>\
             <entry><csci-id>sci-2</csci-id><cs-id>AR1</cs-id><gas>200</gas><state>stale</state></entry></metric-cache>\
             <c-ps xmlns=\"{CPS}\"><peer><name>p1</name><session><state>established</state><sent-updates>7</sent-updates></session></peer></c-ps>\
             </cats-sma></data>"
        );
        let root = crate::xml::parse(&reply).unwrap();
        let t = render(root.child(CATS, "cats-sma"), 1);
        assert!(t.starts_with("C-SMA c1 at site s1: 1 services, 2 SCIs (1 healthy, 1 stale), 1 C-PS peers\n"), "{t}");
        assert!(t.contains("  AR1    600       540"), "{t}");
        assert!(t.contains("SCIS (the first 1 of 2)") && t.contains("sci-1") && !t.contains("sci-2"), "{t}");
        assert!(t.contains("p1    established  -         7"), "{t}");
        assert_eq!(render(None, 10), "no cats-sma state readable (empty, or hidden by NACM)\n");
    }
}

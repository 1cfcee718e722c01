//! Bulk-edit benchmark (issue 22, issue 14 goal 4): one NETCONF edit-config creating N list
//! entries, then one removing them, timed end to end by the client (send to reply), for
//! several N, against any NETCONF server, so that cats-sma and a peer (Debian's netconfd)
//! are measured with the same client in the same run.
//!
//! ```sh
//! cargo build --release --bin cats-sma --example bulk_edit
//! CATS_SMA_ADMIN_PASSWORD=bench target/release/cats-sma run --state-dir $(mktemp -d) \
//!     --netconf-listen 127.0.0.1:18840 &
//! ../shared/peers/netconfd-peer.sh start                 # 127.0.0.1:18830, ncpeer/ncpeer
//! target/release/examples/bulk_edit --port 18840 --user admin --password bench \
//!     --pid $(pgrep -nf 'cats-sma run') --label cats-sma --kind nacm-groups
//! target/release/examples/bulk_edit --port 18830 --user ncpeer --password ncpeer \
//!     --pid $(cat /tmp/netconfd-peer/netconfd.pid) --label netconfd --kind nacm-groups
//! target/release/examples/bulk_edit --port 18840 … --kind scis     # cats-sma only
//! ```
//!
//! Kinds: `nacm-groups` creates `/nacm/groups/group` entries (a name and one user-name
//! each; every NETCONF server with ietf-netconf-acm has the list); `scis` creates
//! `/cats-sma/scis/sci` entries (a CSCI-ID and a cs-id). Creation is one edit-config with
//! default-operation merge; removal one edit-config with `operation="delete"` on every entry.
//! The target is running when the server advertises `:writable-running`, else candidate
//! followed by `<commit>` (both timed together). With `--pid`, the server's RSS and CPU time
//! are printed after every step. The exit status is non-zero when any RPC fails.

#[path = "support/nc_client.rs"]
mod nc_client;

use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use nc_client::Session;

const NACM: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-acm";
const CATS: &str = "urn:cats-sma:yang:cats-sma";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    NacmGroups,
    Scis,
}

#[derive(Parser, Debug)]
#[command(about = "NETCONF bulk create / delete of N list entries in one edit-config")]
struct Args {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 830)]
    port: u16,
    #[arg(long, default_value = "admin")]
    user: String,
    #[arg(long, default_value = "")]
    password: String,
    /// Entry counts, one create + delete round each.
    #[arg(long, value_delimiter = ',', default_value = "10000,30000,100000")]
    sizes: Vec<usize>,
    #[arg(long, value_enum, default_value_t = Kind::NacmGroups)]
    kind: Kind,
    /// The server's process id, for RSS and CPU time after every step (may be repeated:
    /// netconfd's work is split between netconfd and its subsystem process).
    #[arg(long)]
    pid: Vec<u32>,
    /// Seconds to wait for one reply.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    #[arg(long, default_value = "server")]
    label: String,
    /// Number the entries from here (to add entries beside ones already there).
    #[arg(long, default_value_t = 0)]
    offset: usize,
    /// Keep the entries of the last size instead of deleting them (to measure small edits
    /// against a large list afterwards).
    #[arg(long)]
    keep: bool,
}

fn entries(kind: Kind, offset: usize, n: usize, delete: bool) -> String {
    let op = " nc:operation=\"delete\"";
    let nc = "xmlns:nc=\"urn:ietf:params:xml:ns:netconf:base:1.0\"";
    let mut s = String::with_capacity(n * 90);
    match kind {
        Kind::NacmGroups => {
            s.push_str(&format!("<nacm xmlns=\"{NACM}\" {nc}><groups>"));
            for i in offset..offset + n {
                if delete {
                    s.push_str(&format!("<group{op}><name>bulk-{i}</name></group>"));
                } else {
                    s.push_str(&format!("<group><name>bulk-{i}</name><user-name>user-{i}</user-name></group>"));
                }
            }
            s.push_str("</groups></nacm>");
        }
        Kind::Scis => {
            s.push_str(&format!("<cats-sma xmlns=\"{CATS}\" {nc}><scis>"));
            for i in offset..offset + n {
                let id = format!("10.{}.{}.{}:8080", (i >> 16) & 255, (i >> 8) & 255, i & 255);
                if delete {
                    s.push_str(&format!("<sci{op}><csci-id>{id}</csci-id></sci>"));
                } else {
                    s.push_str(&format!("<sci><csci-id>{id}</csci-id><cs-id>CS{}</cs-id></sci>", i % 100));
                }
            }
            s.push_str("</scis></cats-sma>");
        }
    }
    s
}

fn usage(pids: &[u32]) -> String {
    if pids.is_empty() {
        return String::new();
    }
    let rss: u64 = pids.iter().filter_map(|p| nc_client::rss_kib(*p)).sum();
    let cpu: f64 = pids.iter().filter_map(|p| nc_client::cpu_seconds(*p)).sum();
    format!("  server RSS {:.1} MiB, CPU {cpu:.2} s", rss as f64 / 1024.0)
}

async fn edit(s: &mut Session, candidate: bool, config: &str) -> Result<Duration, String> {
    let target = if candidate { "<candidate/>" } else { "<running/>" };
    let t0 = Instant::now();
    s.rpc(&format!("<edit-config><target>{target}</target><config>{config}</config></edit-config>")).await?;
    if candidate {
        s.rpc("<commit/>").await?;
    }
    Ok(t0.elapsed())
}

async fn run(args: Args) -> Result<(), String> {
    let timeout = Duration::from_secs(args.timeout);
    let mut s = Session::connect(&args.host, args.port, &args.user, &args.password, timeout).await?;
    let candidate = !s.has_capability("urn:ietf:params:netconf:capability:writable-running");
    println!(
        "{}: kind {:?}, target {}{}",
        args.label,
        args.kind,
        if candidate { "candidate + commit" } else { "running" },
        usage(&args.pid)
    );
    for &n in &args.sizes {
        let create = entries(args.kind, args.offset, n, false);
        let cpu0: f64 = args.pid.iter().filter_map(|p| nc_client::cpu_seconds(*p)).sum();
        let t = edit(&mut s, candidate, &create).await?;
        let cpu1: f64 = args.pid.iter().filter_map(|p| nc_client::cpu_seconds(*p)).sum();
        println!(
            "{} create {n:>7}: {:>8.3} s (server CPU {:.2} s, {} bytes){}",
            args.label,
            t.as_secs_f64(),
            cpu1 - cpu0,
            create.len(),
            usage(&args.pid)
        );
        drop(create);
        if args.keep && Some(&n) == args.sizes.last() {
            println!("{} kept {n} entries", args.label);
            break;
        }
        let remove = entries(args.kind, args.offset, n, true);
        let t = edit(&mut s, candidate, &remove).await?;
        let cpu2: f64 = args.pid.iter().filter_map(|p| nc_client::cpu_seconds(*p)).sum();
        println!(
            "{} delete {n:>7}: {:>8.3} s (server CPU {:.2} s){}",
            args.label,
            t.as_secs_f64(),
            cpu2 - cpu1,
            usage(&args.pid)
        );
    }
    s.close().await;
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bulk_edit: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

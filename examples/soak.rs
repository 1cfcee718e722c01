//! Soak benchmark (issue 22): does the agent's memory follow its live data over a long run?
//! Ten rounds, each of: `--logins` NETCONF sessions that log in, get-config and log out; a
//! session that establishes and deletes `--subscriptions` YANG-Push subscriptions (RFC 8641
//! periodic, running, one at a time); one edit-config creating `--entries` NACM groups and
//! one deleting them again. After every round it prints the time the round took and the
//! agent's RSS (read after `--settle-ms`, so the agent's delayed heap trim has run), and at
//! the end the RSS growth after the first round. Defaults are the issue's: 1 000 logins,
//! 100 subscriptions, 10 rounds of 100 000 entries.
//!
//! ```sh
//! cargo build --release --bin cats-sma --example soak
//! CATS_SMA_ADMIN_PASSWORD=bench target/release/cats-sma run --state-dir $(mktemp -d) \
//!     --netconf-listen 127.0.0.1:18840 &
//! target/release/examples/soak --port 18840 --password bench --pid $!
//! ```

#[path = "support/nc_client.rs"]
mod nc_client;

use std::time::{Duration, Instant};

use clap::Parser;
use nc_client::Session;

const NACM: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-acm";
const SN: &str = "urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications";
const YP: &str = "urn:ietf:params:xml:ns:yang:ietf-yang-push";
const DS: &str = "urn:ietf:params:xml:ns:yang:ietf-datastores";

#[derive(Parser, Debug)]
#[command(about = "NETCONF soak: logins, subscriptions and bulk edits in rounds, RSS per round")]
struct Args {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 830)]
    port: u16,
    #[arg(long, default_value = "admin")]
    user: String,
    #[arg(long, default_value = "")]
    password: String,
    /// The agent's process id (RSS is read from /proc).
    #[arg(long)]
    pid: u32,
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Login / get-config / logout cycles in all (spread over the rounds).
    #[arg(long, default_value_t = 1000)]
    logins: usize,
    /// Establish / delete cycles in all (spread over the rounds).
    #[arg(long, default_value_t = 100)]
    subscriptions: usize,
    /// Entries created and deleted in every round.
    #[arg(long, default_value_t = 100_000)]
    entries: usize,
    /// Wait before reading RSS at the end of a round.
    #[arg(long, default_value_t = 1500)]
    settle_ms: u64,
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

fn groups(n: usize, delete: bool) -> String {
    let mut s = format!("<nacm xmlns=\"{NACM}\" xmlns:nc=\"urn:ietf:params:xml:ns:netconf:base:1.0\"><groups>");
    for i in 0..n {
        if delete {
            s.push_str(&format!("<group nc:operation=\"delete\"><name>soak-{i}</name></group>"));
        } else {
            s.push_str(&format!("<group><name>soak-{i}</name><user-name>user-{i}</user-name></group>"));
        }
    }
    s.push_str("</groups></nacm>");
    s
}

fn subscription_id(reply: &str) -> Result<String, String> {
    // `<id>N</id>` or `<id xmlns="…">N</id>`, any prefix.
    let tag = reply
        .match_indices("id")
        .map(|(i, _)| i)
        .find(|&i| {
            matches!(reply[..i].chars().next_back(), Some('<' | ':'))
                && matches!(reply[i + 2..].chars().next(), Some('>' | ' '))
        })
        .filter(|&i| !reply[..i].ends_with("</"))
        .ok_or_else(|| format!("no id in {}", nc_client::clip(reply)))?;
    let start = reply[tag..].find('>').ok_or("unterminated id")? + tag + 1;
    let end = reply[start..].find('<').ok_or("unterminated id")? + start;
    Ok(reply[start..end].trim().to_owned())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

async fn run(a: Args) -> Result<(), String> {
    let timeout = Duration::from_secs(a.timeout);
    let connect = || Session::connect(&a.host, a.port, &a.user, &a.password, timeout);
    let fresh = nc_client::rss_kib(a.pid).ok_or("cannot read the agent's RSS")?;
    println!("fresh agent: RSS {:.1} MiB", mib(fresh));
    let mut per_round = Vec::new();
    for round in 1..=a.rounds {
        let t0 = Instant::now();
        for _ in 0..a.logins / a.rounds {
            let mut s = connect().await?;
            s.rpc("<get-config><source><running/></source></get-config>").await?;
            s.close().await;
        }
        let t_logins = t0.elapsed();
        let mut s = connect().await?;
        for _ in 0..a.subscriptions / a.rounds {
            let reply = s
                .rpc(&format!(
                    "<establish-subscription xmlns=\"{SN}\" xmlns:yp=\"{YP}\" xmlns:ds=\"{DS}\">\
                     <yp:datastore>ds:running</yp:datastore>\
                     <yp:datastore-xpath-filter xmlns:n=\"{NACM}\">/n:nacm</yp:datastore-xpath-filter>\
                     <yp:periodic><yp:period>100</yp:period></yp:periodic></establish-subscription>"
                ))
                .await?;
            let id = subscription_id(&reply)?;
            s.rpc(&format!("<delete-subscription xmlns=\"{SN}\"><id>{id}</id></delete-subscription>")).await?;
        }
        let t_subs = t0.elapsed() - t_logins;
        let t1 = Instant::now();
        let cfg = groups(a.entries, false);
        s.rpc(&format!("<edit-config><target><running/></target><config>{cfg}</config></edit-config>")).await?;
        let t_create = t1.elapsed();
        let rss_full = nc_client::rss_kib(a.pid).unwrap_or(0);
        let cfg = groups(a.entries, true);
        let t2 = Instant::now();
        s.rpc(&format!("<edit-config><target><running/></target><config>{cfg}</config></edit-config>")).await?;
        let t_delete = t2.elapsed();
        s.close().await;
        let round_time = t0.elapsed();
        tokio::time::sleep(Duration::from_millis(a.settle_ms)).await;
        let rss = nc_client::rss_kib(a.pid).unwrap_or(0);
        println!(
            "round {round:>2}: {:>6.2} s (logins {:.2} s, subscriptions {:.2} s, create {:.2} s, delete {:.2} s)  \
             RSS with {} entries {:.1} MiB, after {:.1} MiB",
            round_time.as_secs_f64(),
            t_logins.as_secs_f64(),
            t_subs.as_secs_f64(),
            t_create.as_secs_f64(),
            t_delete.as_secs_f64(),
            a.entries,
            mib(rss_full),
            mib(rss)
        );
        per_round.push(rss);
    }
    if let (Some(first), Some(last)) = (per_round.first(), per_round.last()) {
        let max = per_round.iter().max().copied().unwrap_or(0);
        println!(
            "RSS after round 1 {:.1} MiB, after the last {:.1} MiB ({:+.1} %), highest {:.1} MiB; fresh {:.1} MiB",
            mib(*first),
            mib(*last),
            (*last as f64 / *first as f64 - 1.0) * 100.0,
            mib(max),
            mib(fresh)
        );
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

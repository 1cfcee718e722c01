//! The command line: `cats-sma run`, `cats-sma check-config FILE`, `cats-sma hash-password`.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use super::Bootstrap;

#[derive(Parser)]
#[command(name = "cats-sma", version, about = "CATS Service Metric Agent (C-SMA), managed over NETCONF/YANG-Push")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent. With no options it uses the embedded defaults: state in
    /// ~/.local/state/cats-sma (/var/lib/cats-sma as root), NETCONF on 127.0.0.1:8830.
    /// The first start creates user 'admin' with the password in CATS_SMA_ADMIN_PASSWORD,
    /// or a generated one that is printed once.
    Run {
        /// Bootstrap file (TOML) overriding the defaults.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// State directory (host key, credentials, startup datastore).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// NETCONF-over-SSH listen address; repeat for several. Port 0 picks a free port.
        #[arg(long = "netconf-listen", value_name = "ADDR:PORT")]
        netconf_listen: Vec<SocketAddr>,
        /// SCI collection HTTP listen address, overriding the datastore's collection/http.
        #[arg(long = "sci-listen", value_name = "ADDR:PORT")]
        sci_listen: Option<SocketAddr>,
        /// Serve SCI collection over plain HTTP instead of HTTPS (tests and labs; warned).
        #[arg(long = "sci-plain-http")]
        sci_plain_http: bool,
        /// RESTCONF listen address; repeat for several. Port 0 picks a free port.
        #[arg(long = "restconf-listen", value_name = "ADDR:PORT")]
        restconf_listen: Vec<SocketAddr>,
        /// Serve RESTCONF over plain HTTP (tests only; loopback addresses only).
        #[arg(long = "restconf-plain-http-for-tests")]
        restconf_plain_http: bool,
        /// Record every SCI report, refusal, quarantine decision and configuration change
        /// to FILE (rotated; `[record]` sets the sizes), for `cats-sma replay`.
        #[arg(long, value_name = "FILE")]
        record: Option<PathBuf>,
    },
    /// Re-run the metric engine on a recording (`run --record`) under injected time and
    /// print the advertisements and state changes it produces: the same bytes on every run.
    Replay {
        /// The recording.
        file: PathBuf,
        /// Replay against this configuration instead (XML, as `get-config` or the startup
        /// file holds it) and print what would have been advertised differently.
        #[arg(long = "with-config", value_name = "CONFIG")]
        with_config: Option<PathBuf>,
        /// Seconds to run on after the last recorded event.
        #[arg(long, default_value_t = crate::record::replay::DEFAULT_TAIL.as_secs())]
        tail: u64,
    },
    /// Connect to an agent over NETCONF and print its services, SCIs and C-PS sessions.
    /// The password comes from CATS_SMA_PASSWORD (or --key); the host key is the one in
    /// the state directory (an agent on this machine) or --host-key-fingerprint.
    Status {
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        #[arg(long, default_value_t = super::DEFAULT_NETCONF_PORT)]
        port: u16,
        #[arg(long, default_value = "admin")]
        user: String,
        /// An unencrypted OpenSSH private key to log in with.
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// The agent's SSH host key fingerprint (SHA256:…), as it logs it at start.
        #[arg(long = "host-key-fingerprint", value_name = "SHA256:…")]
        host_key_fingerprint: Option<String>,
        /// The state directory whose host key to trust (the default: the agent's default).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// SCIs listed at most.
        #[arg(long = "max-scis", default_value_t = 50)]
        max_scis: usize,
    },
    /// Simulated SCIs reporting to an agent (HTTP(S), MQTT or gRPC) with a load profile,
    /// a progress line and a summary.
    Simulate(crate::sim::SimArgs),
    /// Check a bootstrap file and exit (0 when it is usable).
    CheckConfig { file: PathBuf },
    /// Read a password from stdin and print its argon2 hash, for `password_hash` in a
    /// bootstrap file.
    HashPassword,
}

/// Entry point; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file } => match Bootstrap::load(&file) {
            Ok(_) => {
                println!("{}: ok", file.display());
                0
            }
            Err(e) => {
                eprintln!("{e}");
                1
            }
        },
        Command::Status { host, port, user, key, host_key_fingerprint, state_dir, max_scis } => {
            let state_dir = state_dir.unwrap_or_else(|| Bootstrap::default().state_dir());
            super::status::run(super::status::StatusArgs {
                host,
                port,
                user,
                key,
                host_key_fingerprint,
                state_dir,
                max_scis,
            })
        }
        Command::Simulate(args) => {
            let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cats-sma simulate: {e}");
                    return 1;
                }
            };
            match rt.block_on(crate::sim::run(args)) {
                Ok(summary) => {
                    print!("{summary}");
                    0
                }
                Err(e) => {
                    eprintln!("cats-sma simulate: {e}");
                    1
                }
            }
        }
        Command::Replay { file, with_config, tail } => {
            let tail = std::time::Duration::from_secs(tail);
            let result = match &with_config {
                Some(c) => crate::record::replay::diff(&file, c, tail),
                None => crate::record::replay::run(&file, None, tail),
            };
            match result {
                Ok(lines) => {
                    use std::io::Write;
                    let mut out = std::io::stdout().lock();
                    for l in lines {
                        if writeln!(out, "{l}").is_err() {
                            return 1;
                        }
                    }
                    0
                }
                Err(e) => {
                    eprintln!("cats-sma replay: {e}");
                    1
                }
            }
        }
        Command::HashPassword => {
            let mut line = String::new();
            if std::io::stdin().lock().read_line(&mut line).is_err() {
                eprintln!("cannot read the password from stdin");
                return 1;
            }
            match crate::mgmt::users::hash_password(line.trim_end_matches(['\r', '\n'])) {
                Ok(h) => {
                    println!("{h}");
                    0
                }
                Err(e) => {
                    eprintln!("{e}");
                    1
                }
            }
        }
        Command::Run {
            config,
            state_dir,
            netconf_listen,
            sci_listen,
            sci_plain_http,
            restconf_listen,
            restconf_plain_http,
            record,
        } => {
            init_tracing();
            let mut boot = match config {
                Some(f) => match Bootstrap::load(&f) {
                    Ok(b) => b,
                    Err(e) => {
                        eprintln!("{e}");
                        return 1;
                    }
                },
                None => Bootstrap::default(),
            };
            if state_dir.is_some() {
                boot.state_dir = state_dir;
            }
            if !netconf_listen.is_empty() {
                boot.netconf.listen = netconf_listen;
            }
            if sci_listen.is_some() {
                boot.sci_listen = sci_listen;
            }
            if sci_plain_http {
                boot.sci_plain_http = true;
            }
            if !restconf_listen.is_empty() {
                boot.restconf.listen = restconf_listen;
            }
            if restconf_plain_http {
                boot.restconf.plain_http_for_tests = true;
            }
            if record.is_some() {
                boot.record.path = record;
            }
            if let Err(e) = boot.check() {
                eprintln!("cats-sma: {e}");
                return 1;
            }
            run(boot)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(crate::text::log_writer).try_init();
}

fn run(boot: Bootstrap) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return 1;
        }
    };
    rt.block_on(async {
        let agent = match crate::agent::Agent::start(boot).await {
            Ok(a) => a,
            Err(e) => {
                eprintln!("cats-sma: {e}");
                return 1;
            }
        };
        wait_for_signal().await;
        tracing::info!("shutting down");
        agent.shutdown().await;
        0
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

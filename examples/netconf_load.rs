//! NETCONF load generator (a benchmark, not a test): N concurrent NETCONF-over-SSH
//! sessions, each sending M small RPCs one after the other (send one `<rpc>`, wait for its
//! whole `<rpc-reply>`, check it, send the next). Works against any NETCONF server, so the
//! same client can measure cats-sma and a peer server in the same run.
//!
//! ```sh
//! cargo build --release --example netconf_load
//! # one session, 5000 sequential get-config round trips after 200 warm-up ones
//! target/release/examples/netconf_load --port 18840 --user admin --password bench \
//!     --rpcs 5000 --warmup 200
//! # 100 concurrent sessions x 100 RPCs each
//! target/release/examples/netconf_load --port 18840 --user admin --password bench \
//!     --sessions 100 --rpcs 100 --warmup 10
//! ```
//!
//! Phases: every session connects (TCP, SSH key exchange, password authentication,
//! `netconf` subsystem, hello exchange), then all wait for each other; the warm-up RPCs
//! run, all wait again, and only then the measured RPCs run. Connection setup is reported
//! on its own and never counted in RPC latency. base:1.1 chunked framing is used when the
//! server offers it (`--base10` forces end-of-message framing). The server host key is
//! accepted without checking: this is meant for loopback.
//!
//! The exit status is non-zero when any session failed to connect or any RPC failed
//! (transport error, timeout, wrong message-id or an `<rpc-error>` in the reply).

#[path = "support/nc_client.rs"]
mod nc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use russh::client;
use russh::ChannelMsg;
use tokio::sync::Barrier;

const NS_BASE: &str = "urn:ietf:params:xml:ns:netconf:base:1.0";
const CAP_BASE_10: &str = "urn:ietf:params:netconf:base:1.0";
const CAP_BASE_11: &str = "urn:ietf:params:netconf:base:1.1";
const EOM: &[u8] = b"]]>]]>";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum RpcKind {
    /// `<get-config>` of running with a subtree filter selecting `ietf-netconf-acm:nacm`.
    GetConfig,
    /// `<get>` with the same subtree filter.
    Get,
}

#[derive(Parser, Debug)]
#[command(about = "NETCONF round-trip load generator (sequential RPCs per session, N sessions concurrently)")]
struct Args {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 830)]
    port: u16,
    #[arg(long, default_value = "admin")]
    user: String,
    #[arg(long, default_value = "")]
    password: String,
    /// Concurrent sessions (one SSH connection each).
    #[arg(long, default_value_t = 1)]
    sessions: usize,
    /// Measured RPCs per session, sent one after the other.
    #[arg(long, default_value_t = 1000)]
    rpcs: usize,
    /// Unmeasured RPCs per session before the measured ones.
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// The operation to send.
    #[arg(long, value_enum, default_value_t = RpcKind::GetConfig)]
    rpc: RpcKind,
    /// Send this XML inside `<rpc>` instead of the `--rpc` operation.
    #[arg(long)]
    body: Option<String>,
    /// Use base:1.0 end-of-message framing even when the server offers base:1.1.
    #[arg(long)]
    base10: bool,
    /// Seconds to wait for one reply (or one connection setup) before failing it.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Client runtime worker threads; 1 runs everything on the current thread.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Milliseconds to wait after the hello exchange before the first rpc (not measured).
    /// netconfd (yuma123 2.13) never answers an rpc that reaches it in the same read as the
    /// client hello, which a fast client easily causes.
    #[arg(long, default_value_t = 50)]
    hello_settle_ms: u64,
    /// A name for the server, printed in the summary line.
    #[arg(long, default_value = "server")]
    label: String,
    /// Print the first reply of the first session (to check what the server answers).
    #[arg(long)]
    show_reply: bool,
    /// A server process whose CPU time per RPC to report (repeatable: netconfd's work is
    /// split between its daemon, its subsystem and sshd).
    #[arg(long)]
    pid: Vec<u32>,
}

/// Accepts any host key: a loopback benchmark, not a security boundary.
struct AnyHostKey;

impl client::Handler for AnyHostKey {
    type Error = russh::Error;

    async fn check_server_key(&mut self, _key: &russh::keys::PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

/// The end of one framed message in `buf`: `(message, bytes consumed)`, or `None` when the
/// message is not complete yet.
type Framed = Result<Option<(Vec<u8>, usize)>, String>;

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn take_eom(buf: &[u8]) -> Framed {
    Ok(find(buf, EOM).map(|p| (buf[..p].to_vec(), p + EOM.len())))
}

/// RFC 6242 section 4.2 chunked framing: `(\n#<size>\n<data>)+ \n##\n`.
fn take_chunked(buf: &[u8]) -> Framed {
    let mut msg = Vec::new();
    let mut pos = 0;
    loop {
        if buf.len() < pos + 4 {
            return Ok(None);
        }
        if &buf[pos..pos + 2] != b"\n#" {
            return Err(format!("bad chunk header at byte {pos}"));
        }
        if buf[pos + 2] == b'#' {
            if buf[pos + 3] != b'\n' {
                return Err("bad end-of-chunks marker".into());
            }
            return Ok(Some((msg, pos + 4)));
        }
        let digits = pos + 2;
        let Some(nl) = buf[digits..].iter().take(11).position(|&b| b == b'\n').map(|p| p + digits) else {
            return if buf.len() - digits > 10 { Err("chunk size too long".into()) } else { Ok(None) };
        };
        let size: usize = std::str::from_utf8(&buf[digits..nl])
            .ok()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()) && !s.starts_with('0'))
            .and_then(|s| s.parse().ok())
            .ok_or("bad chunk size")?;
        let data = nl + 1;
        if buf.len() < data + size {
            return Ok(None);
        }
        msg.extend_from_slice(&buf[data..data + size]);
        pos = data + size;
    }
}

/// One NETCONF session over its own SSH connection.
struct Session {
    handle: client::Handle<AnyHostKey>,
    channel: russh::Channel<client::Msg>,
    chunked: bool,
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for an end marker.
    scanned: usize,
    next_id: u64,
    timeout: Duration,
}

impl Session {
    async fn connect(args: &Args) -> Result<Session, String> {
        let config = client::Config { nodelay: true, ..Default::default() };
        let addr = (args.host.as_str(), args.port);
        let mut handle =
            client::connect(Arc::new(config), addr, AnyHostKey).await.map_err(|e| format!("SSH connect: {e}"))?;
        let auth = handle
            .authenticate_password(args.user.clone(), args.password.clone())
            .await
            .map_err(|e| format!("SSH authentication: {e}"))?;
        if !auth.success() {
            return Err(format!("password authentication failed for user {:?}", args.user));
        }
        let channel = handle.channel_open_session().await.map_err(|e| format!("opening a channel: {e}"))?;
        channel.request_subsystem(true, "netconf").await.map_err(|e| format!("netconf subsystem: {e}"))?;
        let mut s = Session {
            handle,
            channel,
            chunked: false,
            buf: Vec::new(),
            scanned: 0,
            next_id: 1,
            timeout: Duration::from_secs(args.timeout),
        };
        let hello = String::from_utf8_lossy(&s.read_message().await?).into_owned();
        if !hello.contains("hello") || !hello.contains(CAP_BASE_10) && !hello.contains(CAP_BASE_11) {
            return Err(format!("unexpected server hello: {hello}"));
        }
        let v11 = !args.base10 && hello.contains(CAP_BASE_11);
        let mut caps = format!("<capability>{CAP_BASE_10}</capability>");
        if v11 {
            caps.push_str(&format!("<capability>{CAP_BASE_11}</capability>"));
        }
        let ours = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><hello xmlns=\"{NS_BASE}\"><capabilities>{caps}</capabilities></hello>"
        );
        s.send(ours.as_bytes()).await?;
        s.chunked = v11;
        Ok(s)
    }

    async fn send(&mut self, msg: &[u8]) -> Result<(), String> {
        let mut frame = Vec::with_capacity(msg.len() + 24);
        if self.chunked {
            frame.extend_from_slice(format!("\n#{}\n", msg.len()).as_bytes());
            frame.extend_from_slice(msg);
            frame.extend_from_slice(b"\n##\n");
        } else {
            frame.extend_from_slice(msg);
            frame.extend_from_slice(EOM);
        }
        self.channel.data(&frame[..]).await.map_err(|e| format!("sending: {e}"))
    }

    /// The next whole message from the server, in the framing in force.
    async fn read_message(&mut self) -> Result<Vec<u8>, String> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            // Only try to decode once an end marker may have arrived.
            let marker: &[u8] = if self.chunked { b"\n##\n" } else { EOM };
            let from = self.scanned.saturating_sub(marker.len() - 1);
            if find(&self.buf[from..], marker).is_some() {
                let got = if self.chunked { take_chunked(&self.buf)? } else { take_eom(&self.buf)? };
                if let Some((msg, used)) = got {
                    self.buf.drain(..used);
                    self.scanned = 0;
                    return Ok(msg);
                }
            }
            self.scanned = self.buf.len();
            match tokio::time::timeout_at(deadline, self.channel.wait()).await {
                Err(_) => {
                    let got = String::from_utf8_lossy(&self.buf);
                    return Err(format!("no reply within {} s; buffered: {:?}", self.timeout.as_secs(), clip(&got)));
                }
                Ok(None | Some(ChannelMsg::Eof | ChannelMsg::Close)) => {
                    return Err("the server closed the channel".into());
                }
                Ok(Some(ChannelMsg::Data { data })) => self.buf.extend_from_slice(&data),
                Ok(Some(_)) => {}
            }
        }
    }

    /// One round trip: sends `<rpc>` with `op` inside, waits for and checks the reply.
    async fn rpc(&mut self, op: &str) -> Result<String, String> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = format!("<rpc xmlns=\"{NS_BASE}\" message-id=\"{id}\">{op}</rpc>");
        self.send(msg.as_bytes()).await?;
        let reply = String::from_utf8(self.read_message().await?).map_err(|_| "reply is not UTF-8")?;
        let id_ok = reply.contains(&format!("message-id=\"{id}\"")) || reply.contains(&format!("message-id='{id}'"));
        if !reply.contains("rpc-reply") || !id_ok {
            return Err(format!("message-id {id}: unexpected reply: {}", clip(&reply)));
        }
        if has_rpc_error(&reply) {
            return Err(format!("message-id {id}: rpc-error: {}", clip(&reply)));
        }
        Ok(reply)
    }

    /// Ends the session politely; failures here do not count.
    async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.rpc("<close-session/>")).await;
        let _ = self.handle.disconnect(russh::Disconnect::ByApplication, "", "en").await;
    }
}

/// Whether the reply holds an `<rpc-error>` element (any prefix), not merely the text
/// "rpc-error" (as in netconf-monitoring's `out-rpc-errors` leaf).
fn has_rpc_error(reply: &str) -> bool {
    reply.match_indices("rpc-error").any(|(i, m)| {
        let before = reply[..i].chars().next_back();
        let after = reply[i + m.len()..].chars().next();
        matches!(before, Some('<' | ':')) && matches!(after, Some('>' | '/' | ' ' | '\t' | '\r' | '\n'))
    })
}

fn clip(s: &str) -> &str {
    match s.char_indices().nth(600) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// What one session did.
#[derive(Default)]
struct Outcome {
    setup: Option<Duration>,
    latencies: Vec<Duration>,
    /// Measured RPCs that were not answered correctly (including those never sent after a
    /// failure, since a session stops at its first failure).
    failed: usize,
    error: Option<String>,
    first_reply: Option<String>,
    /// When the last measured reply arrived.
    finished: Option<Instant>,
}

async fn run_session(args: Arc<Args>, op: Arc<String>, ready: Arc<Barrier>, go: Arc<Barrier>) -> Outcome {
    let mut out = Outcome::default();
    let t0 = Instant::now();
    let connected = match tokio::time::timeout(Duration::from_secs(args.timeout), Session::connect(&args)).await {
        Ok(r) => r,
        Err(_) => Err(format!("connection setup took more than {} s", args.timeout)),
    };
    let mut session = match connected {
        Ok(s) => {
            out.setup = Some(t0.elapsed());
            Some(s)
        }
        Err(e) => {
            out.error = Some(e);
            None
        }
    };
    ready.wait().await;
    // Let the server take the hello on its own before the first rpc (see `hello_settle_ms`).
    tokio::time::sleep(Duration::from_millis(args.hello_settle_ms)).await;
    if let Some(s) = session.as_mut() {
        for _ in 0..args.warmup {
            match s.rpc(&op).await {
                Ok(reply) => {
                    if out.first_reply.is_none() {
                        out.first_reply = Some(reply);
                    }
                }
                Err(e) => {
                    out.error = Some(format!("warm-up: {e}"));
                    break;
                }
            }
        }
    }
    go.wait().await;
    let Some(mut s) = session.filter(|_| out.error.is_none()) else {
        out.failed = args.rpcs;
        return out;
    };
    out.latencies.reserve(args.rpcs);
    for i in 0..args.rpcs {
        let t = Instant::now();
        match s.rpc(&op).await {
            Ok(reply) => {
                out.latencies.push(t.elapsed());
                if out.first_reply.is_none() {
                    out.first_reply = Some(reply);
                }
            }
            Err(e) => {
                out.error = Some(e);
                out.failed = args.rpcs - i;
                out.finished = Some(Instant::now());
                return out;
            }
        }
    }
    out.finished = Some(Instant::now());
    s.close().await;
    out
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn run(args: Args) -> bool {
    let op = match (&args.body, args.rpc) {
        (Some(b), _) => b.clone(),
        (None, kind) => {
            let filter =
                "<filter type=\"subtree\"><nacm xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-acm\"/></filter>";
            match kind {
                RpcKind::GetConfig => format!("<get-config><source><running/></source>{filter}</get-config>"),
                RpcKind::Get => format!("<get>{filter}</get>"),
            }
        }
    };
    let n = args.sessions.max(1);
    let args = Arc::new(args);
    let op = Arc::new(op);
    let ready = Arc::new(Barrier::new(n + 1));
    let go = Arc::new(Barrier::new(n + 1));

    let setup_start = Instant::now();
    let tasks: Vec<_> =
        (0..n).map(|_| tokio::spawn(run_session(args.clone(), op.clone(), ready.clone(), go.clone()))).collect();
    ready.wait().await;
    let setup_wall = setup_start.elapsed();
    go.wait().await;
    let start = Instant::now();
    let cpu0 = CpuSample::take(&args.pid);
    let mut outcomes = Vec::with_capacity(n);
    for t in tasks {
        outcomes.push(t.await.unwrap_or_else(|e| Outcome {
            error: Some(format!("task failed: {e}")),
            failed: args.rpcs,
            ..Default::default()
        }));
    }
    let cpu = CpuSample::take(&args.pid).since(&cpu0);
    report(&args, &op, &outcomes, setup_wall, start, cpu)
}

/// CPU time so far: this client's, the listed server processes', the whole machine's
/// (busy time over every CPU), in seconds.
#[derive(Clone, Copy, Default)]
struct CpuSample {
    client: f64,
    server: f64,
    machine: f64,
}

impl CpuSample {
    fn take(pids: &[u32]) -> CpuSample {
        // SAFETY: sysconf and getrusage have no preconditions; `ru` is written by the call.
        let (hz, client) = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut ru);
            let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            (libc::sysconf(libc::_SC_CLK_TCK) as f64, tv(ru.ru_utime) + tv(ru.ru_stime))
        };
        let server = pids.iter().filter_map(|&pid| nc::cpu_seconds(pid)).sum::<f64>();
        let machine = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| {
                let f: Vec<f64> = s.lines().next()?.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
                let (idle, iowait) = (f.get(3)?, f.get(4).unwrap_or(&0.0));
                Some((f.iter().take(8).sum::<f64>() - idle - iowait) / hz)
            })
            .unwrap_or_default();
        CpuSample { client, server, machine }
    }

    fn since(self, before: &CpuSample) -> CpuSample {
        CpuSample {
            client: self.client - before.client,
            server: self.server - before.server,
            machine: self.machine - before.machine,
        }
    }
}

fn report(args: &Args, op: &str, outcomes: &[Outcome], setup_wall: Duration, start: Instant, cpu: CpuSample) -> bool {
    // Wall time ends with the last measured reply, not with the close-sessions after it.
    let wall = outcomes.iter().filter_map(|o| o.finished).max().map(|t| t - start).unwrap_or_default();
    let mut lat: Vec<Duration> = outcomes.iter().flat_map(|o| o.latencies.iter().copied()).collect();
    lat.sort_unstable();
    let mut setup: Vec<Duration> = outcomes.iter().filter_map(|o| o.setup).collect();
    setup.sort_unstable();
    let ok = lat.len();
    let failed: usize = outcomes.iter().map(|o| o.failed).sum();
    let failed_sessions = outcomes.iter().filter(|o| o.error.is_some()).count();
    let rps = if wall.is_zero() { 0.0 } else { ok as f64 / wall.as_secs_f64() };
    let mean = if ok == 0 { Duration::ZERO } else { lat.iter().sum::<Duration>() / ok as u32 };

    if args.show_reply {
        if let Some(r) = outcomes.iter().find_map(|o| o.first_reply.as_ref()) {
            println!("request body: {op}");
            println!("first reply: {r}");
        }
    }
    for (i, o) in outcomes.iter().enumerate() {
        if let Some(e) = &o.error {
            eprintln!("session {i}: {e}");
        }
    }
    println!(
        "{}: {}:{}  sessions {}  rpcs/session {} (+{} warm-up)  framing {}",
        args.label,
        args.host,
        args.port,
        outcomes.len(),
        args.rpcs,
        args.warmup,
        if args.base10 { "forced base:1.0" } else { "base:1.1 when offered" }
    );
    println!(
        "  connection setup (TCP+SSH+auth+subsystem+hello): all {} in {:.1} ms wall; per session p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        setup.len(),
        ms(setup_wall),
        ms(percentile(&setup, 50.0)),
        ms(percentile(&setup, 99.0)),
        ms(setup.last().copied().unwrap_or_default())
    );
    println!(
        "  rpcs ok {ok}  failed {failed} (sessions with errors {failed_sessions})  wall {:.3} s  {rps:.0} rpc/s",
        wall.as_secs_f64()
    );
    println!(
        "  latency us: mean {:.0}  p50 {:.0}  p90 {:.0}  p99 {:.0}  max {:.0}",
        us(mean),
        us(percentile(&lat, 50.0)),
        us(percentile(&lat, 90.0)),
        us(percentile(&lat, 99.0)),
        us(lat.last().copied().unwrap_or_default())
    );
    // Per RPC sent after the start barrier (warm-up ones included).
    let sent = (outcomes.len() * (args.rpcs + args.warmup)).max(1) as f64;
    let per = |s: f64| s * 1e6 / sent;
    println!(
        "  CPU us per rpc (warm-up included): client {:.0}  server {}  whole machine {:.0} (machine minus client {:.0})",
        per(cpu.client),
        if args.pid.is_empty() { "n/a".to_owned() } else { format!("{:.0}", per(cpu.server)) },
        per(cpu.machine),
        per(cpu.machine - cpu.client)
    );
    println!(
        "RESULT label={} sessions={} rpcs={} ok={ok} failed={failed} wall_s={:.3} rps={rps:.0} p50_us={:.0} p99_us={:.0} max_us={:.0} setup_p50_ms={:.2} setup_max_ms={:.2} client_cpu_us={:.0} server_cpu_us={:.0} machine_cpu_us={:.0}",
        args.label,
        outcomes.len(),
        args.rpcs,
        wall.as_secs_f64(),
        us(percentile(&lat, 50.0)),
        us(percentile(&lat, 99.0)),
        us(lat.last().copied().unwrap_or_default()),
        ms(percentile(&setup, 50.0)),
        ms(setup.last().copied().unwrap_or_default()),
        per(cpu.client),
        per(cpu.server),
        per(cpu.machine)
    );
    failed == 0 && failed_sessions == 0
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    // Quiet unless RUST_LOG asks (e.g. RUST_LOG=russh=debug to see the SSH exchange).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "off".into()))
        .with_writer(std::io::stderr)
        .init();
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads).enable_all().build()
    }
    .expect("tokio runtime");
    if rt.block_on(run(args)) {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

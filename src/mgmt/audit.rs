//! The audit trail (seed 004, Security Considerations: log all authentication failures,
//! policy violations and anomalous metric changes): an append-only JSON-lines file in the
//! state directory, rotated by size, optionally copied to syslog, separate from the debug
//! log. Its format is in `docs/security.md`; its counters are in the operational state
//! (`/cats-sma/audit`).
//!
//! Anyone records with [`event`]: `audit::event(Category::Login).outcome("failure")
//! .user(u).source(addr).emit()`. Floods (an unauthenticated sender failing thousands of
//! times) go through [`Event::emit_aggregated`]: the first record of a key in a window is
//! written at once, the rest are counted and summed up in one record when the window ends,
//! so a flood costs one line per window and never rotates the rest of the trail away.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

/// What a record is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// A management login (NETCONF over SSH, RESTCONF), success or failure.
    Login,
    /// NACM refused an operation, a write or a notification.
    NacmDenial,
    /// A configuration datastore changed (who, which datastore, which paths).
    ConfigChange,
    /// A state-changing operation (commit, kill-session, the agent's RPCs, ...).
    Rpc,
    /// An SCI report whose authentication failed (aggregated per source).
    SciAuthFailure,
    /// The validator found an anomalous metric change.
    MetricAnomaly,
    /// A quarantine decision (report quarantined, released, rejected).
    Quarantine,
    /// A policy rule changed a value that is advertised.
    PolicyApplied,
    /// Input refused for its structure or size (limits), as opposed to its content.
    InputRefused,
    /// A connection refused or closed by a limit before authentication.
    ConnectionRefused,
    /// A file of the state directory had loose permissions and was tightened, or the last
    /// run stopped without saving the validator history (`engine/restart.rs`).
    StateFile,
    /// An SCI was discovered (scis/discovery), or a discovered SCI removed.
    SciDiscovery,
}

impl Category {
    pub const ALL: [Category; 12] = [
        Category::Login,
        Category::NacmDenial,
        Category::ConfigChange,
        Category::Rpc,
        Category::SciAuthFailure,
        Category::MetricAnomaly,
        Category::Quarantine,
        Category::PolicyApplied,
        Category::InputRefused,
        Category::ConnectionRefused,
        Category::StateFile,
        Category::SciDiscovery,
    ];

    /// The name in the record's `category` field and in the operational state.
    pub fn name(self) -> &'static str {
        match self {
            Category::Login => "login",
            Category::NacmDenial => "nacm-denial",
            Category::ConfigChange => "config-change",
            Category::Rpc => "rpc",
            Category::SciAuthFailure => "sci-auth-failure",
            Category::MetricAnomaly => "metric-anomaly",
            Category::Quarantine => "quarantine",
            Category::PolicyApplied => "policy-applied",
            Category::InputRefused => "input-refused",
            Category::ConnectionRefused => "connection-refused",
            Category::StateFile => "state-file",
            Category::SciDiscovery => "sci-discovery",
        }
    }

    fn index(self) -> usize {
        Category::ALL.iter().position(|c| *c == self).unwrap_or(0)
    }
}

/// The `[audit]` table of the bootstrap file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuditSettings {
    /// Write the audit file (`audit.log` in the state directory).
    pub enabled: bool,
    /// Bytes after which `audit.log` is rotated to `audit.log.1` (and so on).
    pub max_file_size: u64,
    /// Rotated files kept besides the current one (the oldest is deleted).
    pub max_files: u32,
    /// Also send every record to the local syslog daemon (facility authpriv).
    pub syslog: bool,
    /// The syslog daemon's datagram socket.
    pub syslog_socket: PathBuf,
    /// Seconds of one aggregation window for floods (auth failures per source, refused
    /// connections per source).
    pub aggregation_window_secs: u64,
    /// Sources tracked at once for aggregation; beyond it, records share one key.
    pub aggregation_sources: usize,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            enabled: true,
            max_file_size: 16 * 1024 * 1024,
            max_files: 4,
            syslog: false,
            syslog_socket: PathBuf::from("/dev/log"),
            aggregation_window_secs: 10,
            aggregation_sources: 4096,
        }
    }
}

impl AuditSettings {
    pub fn check(&self) -> Result<(), String> {
        if self.max_file_size < 4096 {
            return Err("audit.max_file_size must be at least 4096 bytes".into());
        }
        if self.aggregation_window_secs == 0 {
            return Err("audit.aggregation_window_secs must be at least 1".into());
        }
        if self.aggregation_sources == 0 {
            return Err("audit.aggregation_sources must be at least 1".into());
        }
        Ok(())
    }
}

/// The longest text kept of any one field (an attacker's claimed id is cut here).
pub const MAX_FIELD_CHARS: usize = 256;
/// The most extra fields of one record.
const MAX_FIELDS: usize = 16;

/// Counters of the trail, read into the operational state.
#[derive(Default)]
pub struct Counters {
    pub records: [AtomicU64; Category::ALL.len()],
    /// Records folded into an aggregate instead of written one by one.
    pub suppressed: AtomicU64,
    pub bytes: AtomicU64,
    pub rotations: AtomicU64,
    pub write_errors: AtomicU64,
}

struct FileSink {
    path: PathBuf,
    file: Option<File>,
    size: u64,
}

struct Window {
    started: Instant,
    /// Records counted after the first one of the window.
    count: u64,
    /// The last record folded in, written with the count when the window ends.
    last: Option<Event>,
}

/// The audit trail of the process.
pub struct Audit {
    settings: AuditSettings,
    sink: Mutex<Option<FileSink>>,
    syslog: Option<UnixDatagram>,
    windows: Mutex<HashMap<(Category, String), Window>>,
    seq: AtomicU64,
    pub counters: Counters,
    /// The last records written, for tests and the console (bounded).
    recent: Mutex<std::collections::VecDeque<String>>,
}

const RECENT: usize = 256;

impl Audit {
    /// A trail writing `audit.log` in `dir` (when enabled), created 0600.
    pub fn open(dir: &Path, settings: AuditSettings) -> io::Result<Arc<Audit>> {
        let sink = if settings.enabled {
            let path = dir.join("audit.log");
            let file = open_append(&path)?;
            let size = file.metadata()?.len();
            Some(FileSink { path, file: Some(file), size })
        } else {
            None
        };
        let syslog = if settings.syslog {
            let s = UnixDatagram::unbound()?;
            match s.connect(&settings.syslog_socket) {
                Ok(()) => Some(s),
                Err(e) => {
                    tracing::warn!(
                        "audit: syslog requested but {} is not usable: {e}",
                        settings.syslog_socket.display()
                    );
                    None
                }
            }
        } else {
            None
        };
        Ok(Arc::new(Audit::build(settings, sink, syslog)))
    }

    /// A trail kept in memory only (unit tests, and the process before `install`).
    pub fn in_memory() -> Arc<Audit> {
        Arc::new(Audit::build(AuditSettings { enabled: false, ..Default::default() }, None, None))
    }

    fn build(settings: AuditSettings, sink: Option<FileSink>, syslog: Option<UnixDatagram>) -> Audit {
        Audit {
            settings,
            sink: Mutex::new(sink),
            syslog,
            windows: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
            counters: Counters::default(),
            recent: Mutex::new(Default::default()),
        }
    }

    /// The records written most recently (at most 256), oldest first.
    pub fn recent(&self) -> Vec<String> {
        lock(&self.recent).iter().cloned().collect()
    }

    fn write(&self, ev: &Event, suppressed: Option<u64>) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let line = ev.to_json_line(seq, suppressed);
        self.counters.records[ev.category.index()].fetch_add(1, Ordering::Relaxed);
        {
            let mut recent = lock(&self.recent);
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(line.clone());
        }
        if let Some(sink) = lock(&self.sink).as_mut() {
            match self.append(sink, &line) {
                Ok(()) => {
                    self.counters.bytes.fetch_add(line.len() as u64 + 1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("audit: cannot write {}: {e}", sink.path.display());
                }
            }
        }
        if let Some(s) = &self.syslog {
            // <85> = facility authpriv (10) * 8 + severity notice (5), RFC 3164 framing,
            // which every local syslog daemon accepts on /dev/log.
            let msg = format!("<85>cats-sma[{}]: {line}", std::process::id());
            let _ = s.send(msg.as_bytes());
        }
    }

    fn append(&self, sink: &mut FileSink, line: &str) -> io::Result<()> {
        let len = line.len() as u64 + 1;
        if sink.size > 0 && sink.size + len > self.settings.max_file_size {
            self.rotate(sink)?;
        }
        if sink.file.is_none() {
            sink.file = Some(open_append(&sink.path)?);
            sink.size = 0;
        }
        let file = sink.file.as_mut().expect("opened above");
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        // One write of the whole line on an O_APPEND file: lines never interleave.
        file.write_all(&buf)?;
        sink.size += len;
        Ok(())
    }

    fn rotate(&self, sink: &mut FileSink) -> io::Result<()> {
        sink.file = None;
        crate::datastore::persist::rotate_numbered(&sink.path, self.settings.max_files)?;
        self.counters.rotations.fetch_add(1, Ordering::Relaxed);
        sink.size = 0;
        Ok(())
    }

    /// Records one event now.
    pub fn record(&self, ev: Event) {
        self.write(&ev, None);
    }

    /// Records the first event of `key` in a window at once and counts the rest; the count
    /// is written with the last of them when the window has passed ([`Audit::flush_expired`],
    /// which [`install`] runs every second).
    pub fn record_aggregated(&self, key: String, ev: Event) {
        let write_now = {
            let mut windows = lock(&self.windows);
            let key = if windows.len() >= self.settings.aggregation_sources
                && !windows.contains_key(&(ev.category, key.clone()))
            {
                // The table is full: every further source shares one key, so a flood from
                // spoofed sources stays one line per window too.
                "(other sources)".to_owned()
            } else {
                key
            };
            match windows.entry((ev.category, key)) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(Window { started: Instant::now(), count: 0, last: None });
                    true
                }
                std::collections::hash_map::Entry::Occupied(mut o) => {
                    let w = o.get_mut();
                    w.count += 1;
                    w.last = Some(ev.clone());
                    self.counters.suppressed.fetch_add(1, Ordering::Relaxed);
                    false
                }
            }
        };
        if write_now {
            self.write(&ev, None);
        }
    }

    /// Writes the aggregate of every window that has passed.
    pub fn flush_expired(&self) {
        let window = Duration::from_secs(self.settings.aggregation_window_secs);
        let mut due = Vec::new();
        Self::take_expired(&mut lock(&self.windows), Instant::now(), window, &mut due);
        for (ev, n) in due {
            self.write(&ev, Some(n));
        }
    }

    fn take_expired(
        windows: &mut HashMap<(Category, String), Window>,
        now: Instant,
        window: Duration,
        due: &mut Vec<(Event, u64)>,
    ) {
        windows.retain(|_, w| {
            if now.duration_since(w.started) < window {
                return true;
            }
            if let Some(last) = w.last.take() {
                due.push((last, w.count));
            }
            false
        });
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    // O_NOFOLLOW: a symlink planted in the state directory is refused, not followed.
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(crate::datastore::persist::O_NOFOLLOW)
        .open(path)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

static AUDIT: OnceLock<Arc<Audit>> = OnceLock::new();
static BEFORE_INSTALL: OnceLock<Arc<Audit>> = OnceLock::new();

/// Makes `audit` the trail of the process (once; later calls are ignored) and starts the
/// once-a-second flush of aggregation windows.
pub fn install(audit: Arc<Audit>) {
    if AUDIT.set(audit.clone()).is_ok() {
        let weak = Arc::downgrade(&audit);
        std::thread::Builder::new()
            .name("audit-flush".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_secs(1));
                match weak.upgrade() {
                    Some(a) => a.flush_expired(),
                    None => return,
                }
            })
            .ok();
    }
}

/// The trail of the process (an in-memory one until [`install`]).
pub fn global() -> &'static Arc<Audit> {
    match AUDIT.get() {
        Some(a) => a,
        None => BEFORE_INSTALL.get_or_init(Audit::in_memory),
    }
}

/// Starts a record of `category`.
pub fn event(category: Category) -> Event {
    Event { category, outcome: None, user: None, session: None, source: None, transport: None, fields: Vec::new() }
}

/// One audit record being built.
#[derive(Clone, Debug)]
pub struct Event {
    category: Category,
    outcome: Option<&'static str>,
    user: Option<String>,
    session: Option<u32>,
    source: Option<String>,
    transport: Option<&'static str>,
    fields: Vec<(&'static str, Value)>,
}

impl Event {
    /// `success`, `failure`, `denied`, `refused`, ...
    pub fn outcome(mut self, outcome: &'static str) -> Event {
        self.outcome = Some(outcome);
        self
    }

    pub fn user(mut self, user: &str) -> Event {
        self.user = Some(clip(user));
        self
    }

    pub fn session(mut self, id: u32) -> Event {
        self.session = Some(id);
        self
    }

    /// The peer's address (or any text naming the source).
    pub fn source(mut self, source: impl std::fmt::Display) -> Event {
        self.source = Some(clip(&source.to_string()));
        self
    }

    /// `ssh`, `restconf`, `sci-http`, `mqtt`, `pull`, `agent`, ...
    pub fn transport(mut self, transport: &'static str) -> Event {
        self.transport = Some(transport);
        self
    }

    /// An extra field; strings are cut to [`MAX_FIELD_CHARS`], arrays to 32 items.
    pub fn field(mut self, key: &'static str, value: impl Into<Value>) -> Event {
        if self.fields.len() < MAX_FIELDS {
            self.fields.push((key, bound(value.into(), 0)));
        }
        self
    }

    /// Writes the record to the process's trail.
    pub fn emit(self) {
        global().record(self);
    }

    /// Writes the record, folding floods of the same `key` (e.g. the source address) into
    /// one record per window with a `suppressed` count.
    pub fn emit_aggregated(self, key: impl Into<String>) {
        let key = clip(&key.into());
        global().record_aggregated(key, self);
    }

    fn to_json_line(&self, seq: u64, suppressed: Option<u64>) -> String {
        let mut out = String::with_capacity(160);
        let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let _ = write!(out, "{{\"time\":\"{time}\",\"seq\":{seq},\"category\":\"{}\"", self.category.name());
        let mut put = |k: &str, v: &Value| {
            out.push_str(",\"");
            out.push_str(k);
            out.push_str("\":");
            out.push_str(&v.to_string());
        };
        if let Some(o) = self.outcome {
            put("outcome", &Value::from(o));
        }
        if let Some(u) = &self.user {
            put("user", &Value::from(u.as_str()));
        }
        if let Some(s) = self.session {
            put("session", &Value::from(s));
        }
        if let Some(s) = &self.source {
            put("source", &Value::from(s.as_str()));
        }
        if let Some(t) = self.transport {
            put("transport", &Value::from(t));
        }
        for (k, v) in &self.fields {
            put(k, v);
        }
        if let Some(n) = suppressed {
            put("suppressed", &Value::from(n));
        }
        out.push('}');
        out
    }
}

/// Cuts a text to [`MAX_FIELD_CHARS`] characters (marking the cut). JSON encoding escapes
/// every control character, so nothing in a field can break a line of the trail.
fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_FIELD_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

fn bound(v: Value, depth: usize) -> Value {
    match v {
        Value::String(s) => Value::String(clip(&s)),
        Value::Array(a) if depth < 2 => {
            let n = a.len();
            let mut out: Vec<Value> = a.into_iter().take(32).map(|x| bound(x, depth + 1)).collect();
            if n > 32 {
                out.push(Value::String(format!("… {} more", n - 32)));
            }
            Value::Array(out)
        }
        Value::Array(_) | Value::Object(_) => Value::String("…".into()),
        other => other,
    }
}

type UserResolver = Box<dyn Fn(u32) -> Option<String> + Send + Sync>;
static USERS: OnceLock<UserResolver> = OnceLock::new();

/// Tells the trail how to name the user behind a management session (set once by the
/// agent; the NACM session table knows).
pub fn set_user_resolver(f: impl Fn(u32) -> Option<String> + Send + Sync + 'static) {
    let _ = USERS.set(Box::new(f));
}

/// The user behind `session`, when known.
pub fn user_of(session: u32) -> Option<String> {
    USERS.get().and_then(|f| f(session))
}

/// Records a change of a configuration datastore: who (session and user; session 0 is the
/// agent itself, e.g. a confirmed-commit rollback), which datastore, which paths (at most
/// 32 of them, with the total). Values are not recorded: they may be keys.
pub fn config_change(session: u32, datastore: &str, changes: &[crate::datastore::change::Change]) {
    if changes.is_empty() {
        return;
    }
    let mut ev = event(Category::ConfigChange).outcome("success").session(session);
    match user_of(session) {
        Some(u) => ev = ev.user(&u),
        None if session == 0 => ev = ev.user("(agent)"),
        None => {}
    }
    let paths: Vec<Value> = changes
        .iter()
        .filter(|c| !c.is_key)
        .take(32)
        .map(|c| {
            let op = match c.op {
                crate::datastore::change::ChangeOp::Create => "create",
                crate::datastore::change::ChangeOp::Delete => "delete",
                crate::datastore::change::ChangeOp::Modify => "modify",
                crate::datastore::change::ChangeOp::Move => "move",
            };
            Value::from(format!("{op} {}", c.path))
        })
        .collect();
    ev.field("datastore", datastore).field("changes", changes.len()).field("paths", paths).emit();
}

/// Records a state-changing operation (commit, lock, kill-session, the agent's RPCs, ...):
/// who, over which transport, and how it ended (`None` = success, else the error-tag).
pub fn operation(transport: &'static str, user: &str, session: u32, operation: &str, error: Option<&str>) {
    let mut ev = event(Category::Rpc)
        .outcome(if error.is_some() { "failure" } else { "success" })
        .user(user)
        .session(session)
        .transport(transport)
        .field("operation", operation);
    if let Some(tag) = error {
        ev = ev.field("error-tag", tag);
    }
    ev.emit();
}

/// The trail's counters as the operational state `/cats-sma/audit`.
pub struct AuditState;

impl crate::datastore::StateProvider for AuditState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(
        &self,
        tree: &mut yang2::data::DataTree<'static>,
        xpath: Option<&str>,
    ) -> Result<(), crate::error::RpcError> {
        use crate::datastore::tree::set;
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        let a = global();
        let c = &a.counters;
        let base = "/cats-sma:cats-sma/audit";
        let total: u64 = c.records.iter().map(|r| r.load(Ordering::Relaxed)).sum();
        for (leaf, v) in [
            ("records", total),
            ("suppressed", c.suppressed.load(Ordering::Relaxed)),
            ("bytes-written", c.bytes.load(Ordering::Relaxed)),
            ("rotations", c.rotations.load(Ordering::Relaxed)),
            ("write-errors", c.write_errors.load(Ordering::Relaxed)),
        ] {
            set(tree, &format!("{base}/{leaf}"), Some(&v.to_string()))?;
        }
        for cat in Category::ALL {
            let n = c.records[cat.index()].load(Ordering::Relaxed);
            set(tree, &format!("{base}/category[name='{}']/records", cat.name()), Some(&n.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trail(dir: &Path, max: u64) -> Arc<Audit> {
        Audit::open(dir, AuditSettings { max_file_size: max, max_files: 2, ..Default::default() }).unwrap()
    }

    #[test]
    fn records_are_json_lines_with_fixed_fields_first() {
        let dir = tempfile::tempdir().unwrap();
        let a = trail(dir.path(), 1 << 20);
        a.record(
            event(Category::Login)
                .outcome("failure")
                .user("bo\nb")
                .source("127.0.0.1:9")
                .transport("ssh")
                .field("method", "password"),
        );
        let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
        assert_eq!(text.lines().count(), 1, "a newline in a field must not make a second line");
        let v: Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(v["category"], "login");
        assert_eq!(v["user"], "bo\nb");
        assert_eq!(v["method"], "password");
        assert_eq!(v["seq"], 1);
        assert!(text.starts_with("{\"time\":"));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("audit.log")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn long_fields_are_clipped() {
        let a = Audit::in_memory();
        a.record(event(Category::SciAuthFailure).field("claimed-id", "x".repeat(60_000)));
        let line = &a.recent()[0];
        assert!(line.len() < 1000, "{}", line.len());
    }

    #[test]
    fn rotation_keeps_max_files_and_bounds_size() {
        let dir = tempfile::tempdir().unwrap();
        let a = trail(dir.path(), 4096);
        for i in 0..500 {
            a.record(event(Category::Rpc).field("n", i).field("pad", "y".repeat(100)));
        }
        let cur = std::fs::metadata(dir.path().join("audit.log")).unwrap().len();
        assert!(cur <= 4096);
        assert!(dir.path().join("audit.log.1").exists());
        assert!(dir.path().join("audit.log.2").exists());
        assert!(!dir.path().join("audit.log.3").exists());
        assert!(a.counters.rotations.load(Ordering::Relaxed) > 2);
    }

    #[test]
    fn a_flood_is_one_record_per_window_per_key() {
        let a = Arc::new(Audit::build(
            AuditSettings {
                enabled: false,
                aggregation_window_secs: 3600,
                aggregation_sources: 2,
                ..Default::default()
            },
            None,
            None,
        ));
        for i in 0..1000 {
            a.record_aggregated(format!("10.0.0.{}", i % 5), event(Category::SciAuthFailure).field("i", i));
        }
        // Two keys tracked and one shared "(other sources)" key: three records written.
        assert_eq!(a.recent().len(), 3);
        assert_eq!(a.counters.suppressed.load(Ordering::Relaxed), 997);
    }

    #[test]
    fn records_also_go_to_syslog_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("log");
        let daemon = UnixDatagram::bind(&sock).unwrap();
        let a =
            Audit::open(dir.path(), AuditSettings { syslog: true, syslog_socket: sock, ..Default::default() }).unwrap();
        a.record(event(Category::Login).outcome("success").user("admin"));
        let mut buf = [0u8; 2048];
        let n = daemon.recv(&mut buf).unwrap();
        let msg = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(msg.starts_with("<85>cats-sma["), "{msg}");
        assert!(msg.contains("\"category\":\"login\""), "{msg}");
    }

    #[test]
    fn a_symlink_in_place_of_the_trail_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("audit.log")).unwrap();
        assert!(Audit::open(dir.path(), AuditSettings::default()).is_err());
    }
}

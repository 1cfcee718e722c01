//! Record and replay (issue 21).
//!
//! The agent records what goes into its metric engine, in the order the engine takes it:
//! every SCI report it received (accepted or not, with its transport, source address and
//! what its proof established), every message a transport refused, every authentication
//! failure, every quarantine decision, and the configuration (the whole running datastore,
//! at start and after every commit), each with the engine's monotonic time. The recording
//! is written from the engine task itself, so its order is the engine's order.
//!
//! `cats-sma replay FILE` (`replay.rs`) runs a fresh engine on a recording under injected
//! (paused) time and prints the advertisements and state changes it produces.
//!
//! # Format
//! JSON lines. The first line of every file is `{"t":0,"ev":"start","version":1,
//! "wall":…}`; the second the configuration at that moment; then one event per line, `t`
//! in microseconds since the file's start. Files rotate at `max_file_size` (the current
//! one becomes `FILE.1`, and so on, `max_files` kept); each file starts with its own header
//! and the configuration, so every file replays on its own.
//!
//! A recording holds the configuration, secrets included (as the startup datastore does):
//! it is created with mode 0600, and the docs say to keep it as the state directory is kept.

pub mod replay;

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::engine::core::{Proof, Sender};
use crate::engine::report::RawReport;

/// The format's version (the `version` of the start line).
pub const VERSION: u32 = 1;
/// The latest `t` a recording may have: a year, in microseconds (a longer idle gap would
/// replay as a year of heartbeats).
const MAX_T: u64 = 366 * 86_400 * 1_000_000;
/// The most reports one recorded message may stand for.
const MAX_REPORTS: usize = 1 << 20;

/// `[record]` in the bootstrap file (or `cats-sma run --record FILE`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RecordSettings {
    /// Where to record; no recording without it.
    pub path: Option<PathBuf>,
    /// Bytes after which the file is rotated.
    pub max_file_size: u64,
    /// Rotated files kept besides the current one.
    pub max_files: u32,
}

impl Default for RecordSettings {
    fn default() -> Self {
        RecordSettings { path: None, max_file_size: 64 * 1024 * 1024, max_files: 4 }
    }
}

impl RecordSettings {
    pub fn check(&self) -> Result<(), String> {
        if self.max_file_size < 64 * 1024 {
            return Err("record.max_file_size must be at least 65536 bytes".into());
        }
        Ok(())
    }
}

/// One line of a recording.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Line {
    /// Microseconds since the file's start.
    pub t: u64,
    #[serde(flatten)]
    pub ev: Event,
}

/// What went into the engine.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "ev", rename_all = "kebab-case")]
pub enum Event {
    /// The file's first line: the wall time of `t = 0`.
    Start { version: u32, wall: DateTime<Utc> },
    /// The running configuration (XML), whole.
    Config { xml: String },
    /// One message's reports, as the engine judged them.
    Reports {
        transport: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        address: Option<IpAddr>,
        /// The CSCI-ID the message came as (proven or attributed by the transport).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sender: Option<String>,
        /// `credential` or `certificate`, when the sender was proven.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proof: Option<String>,
        /// The credential that verified a credential proof.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        credential: Option<String>,
        /// The trust domain whose token verified it, and the CS-IDs it claims.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        domain: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claimed_cs_ids: Option<Vec<String>>,
        reports: Vec<RawReport>,
    },
    /// A message its transport refused before the report path (undecodable, too big).
    Refused { transport: String, reason: String, source: String },
    /// A message whose authentication failed.
    AuthFailure {
        transport: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        address: Option<IpAddr>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claimed: Option<String>,
        detail: String,
        reports: usize,
    },
    /// A clear-quarantine decision.
    Quarantine {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        csci_id: Option<String>,
        accept: bool,
    },
}

impl Event {
    /// The reports event of one message from `sender`.
    pub fn reports(reports: &[RawReport], sender: &Sender) -> Event {
        let grant = sender.grant.as_ref();
        Event::Reports {
            transport: sender.transport.to_owned(),
            address: sender.address,
            sender: sender.csci_id.clone(),
            proof: sender.proof.map(|p| {
                match p {
                    Proof::Credential => "credential",
                    Proof::Certificate => "certificate",
                }
                .to_owned()
            }),
            credential: grant.map(|g| g.credential.clone()),
            domain: grant.and_then(|g| g.domain.clone()),
            claimed_cs_ids: grant.and_then(|g| g.claimed_cs_ids.clone()),
            reports: reports.to_vec(),
        }
    }
}

/// The transports' names as `Sender::transport` holds them (a recording names them as
/// text; replay needs the static string back).
pub fn transport_name(s: &str) -> &'static str {
    crate::engine::rate_limit::TRANSPORTS.into_iter().find(|k| *k == s).unwrap_or("")
}

/// The recorder the engine task writes to.
pub struct Recorder {
    settings: RecordSettings,
    path: PathBuf,
    file: Option<BufWriter<File>>,
    size: u64,
    /// Monotonic time of the current file's `t = 0`.
    start: Instant,
    /// The configuration, repeated at the head of every file.
    config: Option<String>,
    last_flush: Instant,
    /// Written since the last flush.
    dirty: bool,
    /// Write errors so far (the first is logged).
    pub errors: u64,
}

impl Recorder {
    /// Starts a recording at `settings.path` (an existing file is rotated away first, so a
    /// restart never overwrites the last run's recording).
    pub fn open(settings: RecordSettings, now: Instant, wall: DateTime<Utc>) -> io::Result<Recorder> {
        let path = settings.path.clone().ok_or_else(|| io::Error::other("no record path"))?;
        let mut r = Recorder {
            settings,
            path,
            file: None,
            size: 0,
            start: now,
            config: None,
            last_flush: now,
            dirty: false,
            errors: 0,
        };
        if r.path.exists() {
            r.rotate()?;
        }
        r.begin(now, wall)?;
        Ok(r)
    }

    fn begin(&mut self, now: Instant, wall: DateTime<Utc>) -> io::Result<()> {
        // A new file, never one that is there: the last one was rotated away, and a file
        // someone else created at this path (to be handed the configuration's secrets) is
        // refused, as is a current recording that could not be rotated (kept, not truncated).
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .custom_flags(crate::datastore::persist::O_NOFOLLOW)
            .open(&self.path)?;
        self.file = Some(BufWriter::with_capacity(64 * 1024, file));
        self.size = 0;
        self.start = now;
        self.put(now, &Event::Start { version: VERSION, wall })?;
        if let Some(xml) = self.config.clone() {
            self.put(now, &Event::Config { xml })?;
        }
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.flush()?;
        }
        crate::datastore::persist::rotate_numbered(&self.path, self.settings.max_files)
    }

    fn put(&mut self, now: Instant, ev: &Event) -> io::Result<()> {
        let t = u64::try_from(now.saturating_duration_since(self.start).as_micros()).unwrap_or(u64::MAX);
        let mut line = serde_json::to_vec(&LineRef { t, ev }).map_err(io::Error::other)?;
        line.push(b'\n');
        let f = self.file.as_mut().ok_or_else(|| io::Error::other("the recording is closed"))?;
        f.write_all(&line)?;
        self.size += line.len() as u64;
        self.dirty = true;
        Ok(())
    }

    /// Records `ev` at `now` (rotating first when the file is full).
    pub fn record(&mut self, now: Instant, wall: DateTime<Utc>, ev: &Event) {
        if let Event::Config { xml } = ev {
            self.config = Some(xml.clone());
        }
        let result = (|| {
            if self.size >= self.settings.max_file_size {
                self.rotate()?;
                self.begin(now, wall)?;
                if matches!(ev, Event::Config { .. }) {
                    // begin() wrote it already.
                    return Ok(());
                }
            }
            self.put(now, ev)
        })();
        if let Err(e) = result {
            if self.errors == 0 {
                tracing::error!(path = %self.path.display(), "the recording failed: {e} (later failures are counted only)");
            }
            self.errors += 1;
            // A file that could not be rotated or written is reopened at the next event.
            if self.file.is_none() {
                let _ = self.begin(now, wall);
            }
        }
    }

    /// Writes out what is buffered when a second has passed since the last time (so a
    /// recording loses at most a second's events to a crash).
    pub fn flush_if_due(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_flush) >= Duration::from_secs(1) {
            self.flush(now);
        }
    }

    /// When buffered lines are due to be written out (None: nothing buffered).
    pub fn next_flush(&self) -> Option<Instant> {
        self.dirty.then(|| self.last_flush + Duration::from_secs(1))
    }

    pub fn flush(&mut self, now: Instant) {
        self.last_flush = now;
        self.dirty = false;
        if let Some(f) = self.file.as_mut() {
            if f.flush().is_err() {
                self.errors += 1;
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[derive(Serialize)]
struct LineRef<'a> {
    t: u64,
    #[serde(flatten)]
    ev: &'a Event,
}

/// The configuration as a recording holds it: the whole tree, XML.
pub fn config_xml(t: &yang2::data::DataTree<'static>) -> String {
    use yang2::data::{Data, DataFormat, DataPrinterFlags};
    t.print_string(DataFormat::XML, DataPrinterFlags::WITH_SIBLINGS | DataPrinterFlags::SHRINK)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Reads a recording: its start wall time and its events (the start line excluded).
pub fn read(path: &Path) -> Result<(DateTime<Utc>, Vec<Line>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}{e}", path.display()))
}

/// Parses a recording's text; an error starts with `:LINE: ` or `: `.
pub fn parse(text: &str) -> Result<(DateTime<Utc>, Vec<Line>), String> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let wall = match lines.next().map(|(i, l)| (i, serde_json::from_str::<Line>(l))) {
        Some((_, Ok(Line { ev: Event::Start { version: VERSION, wall }, .. }))) => {
            let (lo, hi): (DateTime<Utc>, DateTime<Utc>) = (
                "2000-01-01T00:00:00Z".parse().unwrap_or_default(),
                "2100-01-01T00:00:00Z".parse().unwrap_or_default(),
            );
            if wall < lo || wall > hi {
                return Err(": the start time is not between 2000 and 2100".into());
            }
            wall
        }
        Some((_, Ok(Line { ev: Event::Start { version, .. }, .. }))) => {
            return Err(format!(": recording format version {version}, this agent reads {VERSION}"))
        }
        _ => return Err(": not a cats-sma recording (no start line)".into()),
    };
    let mut out: Vec<Line> = Vec::new();
    for (i, l) in lines {
        let line: Line = serde_json::from_str(l).map_err(|e| format!(":{}: {e}", i + 1))?;
        if out.last().is_some_and(|p| p.t > line.t) {
            return Err(format!(":{}: time goes back", i + 1));
        }
        if matches!(line.ev, Event::Start { .. }) {
            return Err(format!(":{}: a second start line", i + 1));
        }
        if line.t > MAX_T {
            return Err(format!(":{}: t is more than a year after the start", i + 1));
        }
        if let Event::AuthFailure { reports, .. } = line.ev {
            if reports > MAX_REPORTS {
                return Err(format!(":{}: more than {MAX_REPORTS} reports in one message", i + 1));
            }
        }
        out.push(line);
    }
    Ok((wall, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(seq: u64) -> RawReport {
        RawReport {
            csci_id: "sci-1".into(),
            cs_id: "AR1".into(),
            sequence: seq,
            timestamp: "2026-12-01T00:00:00Z".parse().unwrap(),
            gas: 10,
            computing_time: 1,
            health: "HEALTHY".into(),
            cost: None,
            reputation: None,
            security_label: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn recording_rotates_and_every_file_starts_with_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let settings = RecordSettings { path: Some(path.clone()), max_file_size: 64 * 1024, max_files: 2 };
        let wall: DateTime<Utc> = "2026-12-01T00:00:00Z".parse().unwrap();
        let mut r = Recorder::open(settings, Instant::now(), wall).unwrap();
        r.record(Instant::now(), wall, &Event::Config { xml: "<config/>".into() });
        let sender = Sender { csci_id: Some("sci-1".into()), transport: "http", ..Sender::default() };
        for seq in 0..2000 {
            tokio::time::advance(Duration::from_millis(1)).await;
            r.record(Instant::now(), wall, &Event::reports(&[raw(seq)], &sender));
        }
        r.flush(Instant::now());
        for p in [path.clone(), dir.path().join("rec.jsonl.1")] {
            let (_, lines) = read(&p).unwrap();
            assert!(matches!(&lines[0].ev, Event::Config { xml } if xml == "<config/>"), "{}", p.display());
            assert!(lines.len() > 10);
        }
        assert!(!dir.path().join("rec.jsonl.3").exists());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // A restart rotates the last recording away instead of overwriting it.
        let first = std::fs::read_to_string(&path).unwrap();
        let settings = RecordSettings { path: Some(path.clone()), max_file_size: 64 * 1024, max_files: 2 };
        drop(r);
        let _r = Recorder::open(settings, Instant::now(), wall).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("rec.jsonl.1")).unwrap(), first);
    }

    #[test]
    fn a_file_that_is_not_a_recording_is_refused_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, "{\"hello\":1}\n").unwrap();
        assert!(read(&p).unwrap_err().contains("not a cats-sma recording"));
        std::fs::write(
            &p,
            "{\"t\":0,\"ev\":\"start\",\"version\":1,\"wall\":\"2026-12-01T00:00:00Z\"}\n{\"t\":5,\"ev\":\"bogus\"}\n",
        )
        .unwrap();
        assert!(read(&p).unwrap_err().contains(":2:"));
    }
}

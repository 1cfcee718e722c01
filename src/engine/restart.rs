//! The validator's memory across an agent restart (seed 004, Validator & Sanitizer: "old
//! reports are discarded"; issue 16: "the agent restarts mid-stream, the SCI reconnects,
//! nothing accepted twice").
//!
//! Within one run the validator refuses a report it has already accepted by its sequence
//! number and timestamp (`validate.rs`, `retained.rs`). A new process starts with an empty
//! cache, so without more a report accepted just before a restart, sent again by an SCI
//! that reconnects without its verdict (or replayed by someone who captured it), would be
//! accepted a second time while its timestamp is still inside the timestamp window. Two
//! things close that:
//!
//! - **A clean stop saves the memory.** [`save`] runs first in the agent's shutdown, the
//!   listeners still open: the engine refuses every report from that point (`Core::closed`,
//!   as `rate-limited`, "the agent is stopping", so the SCI sends it again to the next run;
//!   `clear-quarantine` is refused too), and the last accepted
//!   sequence number and timestamp of every SCI whose timestamp is still inside the window
//!   go to [`HISTORY_FILE`] in the state directory (0600, written atomically). [`begin`]
//!   reads it back at start, before any listener opens, and removes it: each SCI continues
//!   exactly where it stopped, and an SCI whose authentication method changed while the
//!   agent was down starts a new history, as within one run.
//! - **An unclean stop refuses what it cannot know.** [`RUNNING_MARKER`] exists while the
//!   engine runs and goes only after a successful save. Found at start, it means the last
//!   run ended without saving (killed, crashed, power lost): what it accepted at the end
//!   is unknown, so for one timestamp window every report timestamped before this start
//!   plus [`FLOOR_MARGIN`] is refused as `replay` (`Core::replay_floor`). The last run
//!   stopped before this one started, so that covers every report it accepted from SCIs
//!   whose clocks run at most the margin (plus this start's own duration) ahead of the
//!   agent's; a report of an SCI further ahead can be accepted again (documented). Reports
//!   made after the floor are accepted as usual; an SCI whose clock runs behind loses
//!   reports for its lag only. After the window the timestamp check covers such reports
//!   on its own. The same floor is set when saved histories do not fit the retained
//!   memory (`retained::CAPACITY`), so none is dropped silently.
//!
//! The file is the agent's own, but it is read as untrusted: at most as many lines as the
//! cache and the retained memory hold together, of at most [`MAX_LINE`] bytes, each a JSON
//! object with identifiers of their YANG types; a file that does not parse whole is treated
//! as an unclean stop (floor on), never half-applied silently. A first start after an
//! upgrade from an agent without this file (or with a fresh state directory) finds neither
//! file and sets no floor.

use std::io::{self, BufRead, Write as _};
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::core::Core;
use super::retained::AuthMethod;
use super::Engine;

/// The saved validator memory (JSON lines), in the state directory.
pub const HISTORY_FILE: &str = "validator-history.jsonl";
/// Present while an engine runs; removed by a successful [`save`].
pub const RUNNING_MARKER: &str = "engine.running";
/// A line holds a CSCI-ID and a credential name (each at most 255 bytes) and some numbers.
pub const MAX_LINE: usize = 2048;
/// After an unclean stop, reports timestamped before the start plus this are refused.
pub const FLOOR_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

/// One SCI's saved history: the fields of `retained::Record`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Saved {
    pub csci_id: String,
    pub sequence: Option<u64>,
    pub timestamp: Option<DateTime<Utc>>,
    /// How the SCI proved itself then; absent for an SCI not registered when saved.
    pub credential_ref: Option<String>,
    pub unauthenticated: Option<bool>,
}

impl Saved {
    pub fn auth(&self) -> Option<AuthMethod> {
        self.unauthenticated
            .map(|unauthenticated| AuthMethod { credential_ref: self.credential_ref.clone(), unauthenticated })
    }
}

/// How the last run ended, as [`begin`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// No earlier run left anything: nothing to restore, nothing to refuse.
    First,
    /// The last run saved its memory: this many SCI histories restored.
    Clean { restored: usize },
    /// The last run did not save (or its file was unreadable: `why`): reports timestamped
    /// before `floor` are refused for one timestamp window.
    Unclean { floor: DateTime<Utc>, why: String },
}

/// Reads what the last run left in `dir`, hands it to the engine, and marks this run as
/// running. Call before any collector starts.
pub async fn begin(engine: &Engine, dir: &Path) -> io::Result<Start> {
    let marker = dir.join(RUNNING_MARKER);
    let file = dir.join(HISTORY_FILE);
    crate::datastore::persist::remove_stale_temporaries(&marker);
    crate::datastore::persist::remove_stale_temporaries(&file);
    let crashed = marker.try_exists()?;
    // The marker first: if this start fails from here on, the next one sets the floor.
    crate::datastore::persist::write_atomic(&marker, b"")?;
    let max_lines = engine
        .query(|core| core.cache_config.max_entries + super::retained::CAPACITY)
        .await
        .ok_or_else(|| io::Error::other("the engine stopped"))?;
    let saved = match std::fs::File::open(&file) {
        Ok(f) => Some(read(io::BufReader::new(f), max_lines)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => Some(Err(format!("{}: {e}", file.display()))),
    };
    // Read once: the marker now stands for this run.
    if saved.is_some() {
        std::fs::remove_file(&file)?;
    }
    let mut why = match (&saved, crashed) {
        (Some(Err(e)), _) => Some(format!("the saved validator history is unreadable: {e}")),
        (_, true) => Some("the last run stopped without saving the validator history".to_owned()),
        _ => None,
    };
    let clean = matches!(saved, Some(Ok(_)));
    let records = match saved {
        Some(Ok(r)) => r,
        _ => Vec::new(),
    };
    let restored = records.len();
    engine
        .query(move |core| {
            let dropped = core.restore_validator_history(records);
            if dropped > 0 && why.is_none() {
                why = Some(format!("{dropped} saved histories did not fit the retained memory"));
            }
            match why {
                Some(why) => {
                    let margin = chrono::Duration::from_std(FLOOR_MARGIN).unwrap_or_default();
                    let floor = core.clock.wall() + margin;
                    core.replay_floor = Some(floor);
                    Start::Unclean { floor, why }
                }
                None if clean => Start::Clean { restored },
                None => Start::First,
            }
        })
        .await
        .ok_or_else(|| io::Error::other("the engine stopped"))
}

/// Closes the engine to reports and saves its memory in `dir`; the running marker goes
/// only when the file is written. Returns how many histories were saved.
pub async fn save(engine: &Engine, dir: &Path) -> io::Result<usize> {
    let saved = engine
        .query(|core| {
            core.closed = true;
            core.validator_history()
        })
        .await
        .ok_or_else(|| io::Error::other("the engine stopped before its history was saved"))?;
    let mut text = Vec::with_capacity(saved.len() * 96);
    for s in &saved {
        serde_json::to_writer(&mut text, s).map_err(io::Error::other)?;
        text.write_all(b"\n")?;
    }
    crate::datastore::persist::write_atomic(&dir.join(HISTORY_FILE), &text)?;
    std::fs::remove_file(dir.join(RUNNING_MARKER)).or_else(|e| match e.kind() {
        io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    })?;
    Ok(saved.len())
}

/// Parses a saved history of at most `max_lines` lines: all of it or an error.
pub fn read(mut r: impl BufRead, max_lines: usize) -> Result<Vec<Saved>, String> {
    let mut out = Vec::new();
    let mut line = Vec::new();
    for n in 1.. {
        line.clear();
        let got =
            io::Read::take(r.by_ref(), MAX_LINE as u64 + 1).read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
        if got == 0 {
            break;
        }
        if line.last() != Some(&b'\n') {
            return Err(if line.len() > MAX_LINE {
                format!("line {n} is longer than {MAX_LINE} bytes")
            } else {
                format!("line {n} is cut short")
            });
        }
        if n > max_lines {
            return Err(format!("more than {max_lines} lines"));
        }
        let s: Saved = serde_json::from_slice(&line).map_err(|e| format!("line {n}: {e}"))?;
        if let Err(e) = super::report::check_id(super::report::IdKind::CsciId, &s.csci_id) {
            return Err(format!("line {n}: {e}"));
        }
        // A credential name is a YANG string of 1..255 printable characters.
        if s.credential_ref.as_ref().is_some_and(|c| c.is_empty() || c.len() > 255 || c.chars().any(char::is_control)) {
            return Err(format!("line {n}: not a credential name"));
        }
        out.push(s);
    }
    Ok(out)
}

impl Core {
    /// What the validator remembers of every SCI whose last accepted report is still inside
    /// the timestamp window: cached entries and the retained histories.
    pub fn validator_history(&self) -> Vec<Saved> {
        use super::validate::Past as _;
        let (window, wall) = (self.validation.timestamp_window, self.clock.wall());
        let live = |t: Option<DateTime<Utc>>| !super::retained::covered(t, window, wall);
        let saved = |id: &str, sequence, timestamp, auth: Option<AuthMethod>| Saved {
            csci_id: id.to_owned(),
            sequence,
            timestamp,
            unauthenticated: auth.as_ref().map(|a| a.unauthenticated),
            credential_ref: auth.and_then(|a| a.credential_ref),
        };
        let mut out = Vec::new();
        for e in self.cache.entries() {
            let (sequence, timestamp) = (e.last_sequence(), e.last_timestamp());
            if live(timestamp) {
                out.push(saved(&e.csci_id, sequence, timestamp, self.auth_method(&e.csci_id)));
            }
        }
        for (id, r) in self.retained.records() {
            if live(r.timestamp) && self.cache.get(id).is_none() {
                out.push(saved(id, r.sequence, r.timestamp, r.auth.clone()));
            }
        }
        out
    }

    /// Gives back a saved memory through the retained histories, as for an SCI that left
    /// the cache: an SCI with a cache entry takes its record at once (`restore_history`:
    /// only if it still proves itself the same way), the others when they get one. Returns
    /// how many histories the retained memory had to drop (it is bounded).
    pub fn restore_validator_history(&mut self, saved: Vec<Saved>) -> u64 {
        let dropped = self.retained.dropped;
        let (window, wall) = (self.validation.timestamp_window, self.clock.wall());
        for s in saved {
            self.retained.keep(&s.csci_id, s.sequence, s.timestamp, s.auth(), window, wall);
            if self.cache.get(&s.csci_id).is_some() {
                self.restore_history(&s.csci_id);
            }
        }
        self.retained.dropped - dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str, seq: u64) -> String {
        format!("{{\"csci-id\":\"{id}\",\"sequence\":{seq},\"timestamp\":\"2026-12-03T10:00:00Z\",\"credential-ref\":\"k\",\"unauthenticated\":false}}\n")
    }

    #[test]
    fn seed004_validator_history_file_is_read_whole_or_refused() {
        let ok = format!("{}{}", line("a", 1), line("b", 2));
        let got = read(ok.as_bytes(), 10).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[1].csci_id.as_str(), got[1].sequence), ("b", Some(2)));
        assert_eq!(got[0].auth(), Some(AuthMethod { credential_ref: Some("k".into()), unauthenticated: false }));
        // Cut short, an unknown field, a bad CSCI-ID, an overlong line: refused whole.
        assert!(read(&ok.as_bytes()[..ok.len() - 3], 10).unwrap_err().contains("line 2"));
        assert!(read("{\"csci-id\":\"a\",\"x\":1}\n".as_bytes(), 10).is_err());
        assert!(read(line("", 1).as_bytes(), 10).is_err());
        let long = format!("{{\"csci-id\":\"{}\"}}\n", "a".repeat(MAX_LINE));
        assert!(read(long.as_bytes(), 10).unwrap_err().contains("longer"));
        assert_eq!(read(&b""[..], 10).unwrap(), Vec::new());
        // More lines than the cache and the retained memory hold: refused.
        assert!(read(ok.as_bytes(), 1).unwrap_err().contains("more than 1"));
        let bad_ref = line("a", 1).replace("\"k\"", "\"\"");
        assert!(read(bad_ref.as_bytes(), 10).unwrap_err().contains("credential"));
    }
}

//! Configuration in: `hierarchy` (YANG `cats-sma-hierarchy`) from datastore commits.

use std::sync::Arc;
use std::time::Duration;

use yang2::data::{Data, DataTree};

use super::Hierarchy;
use crate::datastore::tree::leaf;
use crate::datastore::{ConfigConsumer, Transaction};

pub const HIERARCHY: &str = "/cats-sma:cats-sma/cats-sma-hierarchy:hierarchy";

/// How the coordinator proves itself to a subordinate.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Password(String),
    PrivateKeyFile(String),
}

/// Never the password itself, wherever a setting is printed.
impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Password(_) => f.write_str("Password(..)"),
            Credential::PrivateKeyFile(p) => f.debug_tuple("PrivateKeyFile").field(p).finish(),
        }
    }
}

/// How a subordinate's host key is verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostKey {
    Key(String),
    Fingerprint(String),
}

/// One `hierarchy/subordinate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subordinate {
    pub name: String,
    pub enabled: bool,
    pub address: String,
    pub port: u16,
    pub username: String,
    pub credential: Credential,
    pub host_key: HostKey,
    /// SCIs it may contribute: more are refused, so that one subordinate cannot fill the
    /// coordinator's cache.
    pub max_scis: u32,
}

/// `hierarchy` as configured (the YANG defaults where nothing is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub withdraw_after: Duration,
    /// Subordinates share SCIs (agents of one MQTT shared-subscription group): an SCI may
    /// be held by several, the newest report wins (`engine::mirror`).
    pub shared_scis: bool,
    /// `role domain`: the subordinates are site C-SMAs whose per-service aggregates are
    /// mirrored, one entry per site and CS-ID (`hierarchy::site_entry`).
    pub domain: bool,
    pub connect_timeout: Duration,
    pub reconnect_initial: Duration,
    pub reconnect_max: Duration,
    pub subordinates: Vec<Subordinate>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            withdraw_after: Duration::from_secs(30),
            shared_scis: false,
            domain: false,
            connect_timeout: Duration::from_millis(5000),
            reconnect_initial: Duration::from_millis(1000),
            reconnect_max: Duration::from_millis(30_000),
            subordinates: Vec::new(),
        }
    }
}

/// The settings in a configuration tree.
pub fn settings(t: &DataTree<'static>) -> Settings {
    let d = Settings::default();
    let n = |p: &str| leaf(t, &format!("{HIERARCHY}/{p}")).and_then(|v| v.parse::<u64>().ok());
    let mut subordinates = Vec::new();
    if let Ok(set) = t.find_xpath(&format!("{HIERARCHY}/subordinate")) {
        for node in set {
            let mut s = Subordinate {
                name: String::new(),
                enabled: true,
                address: String::new(),
                port: 830,
                username: String::new(),
                credential: Credential::Password(String::new()),
                host_key: HostKey::Fingerprint(String::new()),
                max_scis: 100_000,
            };
            for c in node.children() {
                let v = c.value_canonical().unwrap_or_default();
                match c.schema().name() {
                    "name" => s.name = v,
                    "enabled" => s.enabled = v == "true",
                    "address" => s.address = v,
                    "port" => s.port = v.parse().unwrap_or(830),
                    "username" => s.username = v,
                    "password" => s.credential = Credential::Password(v),
                    "private-key-file" => s.credential = Credential::PrivateKeyFile(v),
                    "host-key" => s.host_key = HostKey::Key(v),
                    "host-key-fingerprint" => s.host_key = HostKey::Fingerprint(v),
                    "max-scis" => s.max_scis = v.parse().unwrap_or(100_000),
                    _ => {}
                }
            }
            subordinates.push(s);
        }
    }
    let reconnect_initial = n("reconnect/initial").map_or(d.reconnect_initial, Duration::from_millis);
    Settings {
        withdraw_after: n("withdraw-after").map_or(d.withdraw_after, Duration::from_secs),
        shared_scis: leaf(t, &format!("{HIERARCHY}/shared-scis")).is_some_and(|v| v == "true"),
        domain: leaf(t, &format!("{HIERARCHY}/role")).is_some_and(|v| v == "domain"),
        connect_timeout: n("connect-timeout").map_or(d.connect_timeout, Duration::from_millis),
        reconnect_initial,
        reconnect_max: n("reconnect/max").map_or(d.reconnect_max, Duration::from_millis).max(reconnect_initial),
        subordinates,
    }
}

/// Takes `hierarchy` from every commit that touches it.
pub struct HierarchyConsumer {
    pub hierarchy: Arc<Hierarchy>,
}

impl ConfigConsumer for HierarchyConsumer {
    fn name(&self) -> &str {
        "hierarchy"
    }

    fn prepare(&self, tx: &Transaction<'_>) -> Result<(), String> {
        // A key file must be readable now: a commit that would leave a subordinate
        // unreachable for a typo is refused with the reason.
        if tx.changes_under(HIERARCHY).next().is_none() {
            return Ok(());
        }
        for s in settings(tx.config).subordinates {
            if let Credential::PrivateKeyFile(f) = &s.credential {
                if let Err(e) = std::fs::metadata(f) {
                    return Err(format!("subordinate {}: private-key-file {f}: {e}", s.name));
                }
            }
        }
        Ok(())
    }

    fn apply(&self, tx: &Transaction<'_>) {
        if tx.changes_under(HIERARCHY).next().is_some() {
            self.hierarchy.configure(settings(tx.config));
        }
    }
}

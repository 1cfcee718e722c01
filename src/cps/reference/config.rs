//! The reference C-PS's configuration (a TOML file; see `examples/ref_cps.toml`): where it
//! listens, the pre-shared keys it accepts, the seed 000 weight and per-site indexes, and
//! the delays from each ingress to each site.

use std::collections::HashMap;
use std::net::SocketAddr;

use serde::Deserialize;

use crate::cps::auth::{unhex, Psk};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpsConfig {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Seed 000's w: above 0.5 load and capacity weigh more, below delay and preference.
    #[serde(default = "default_weight")]
    pub weight: f64,
    /// Accepted clock difference of signed requests, seconds (seed 004: ±30 s).
    #[serde(default = "default_window")]
    pub timestamp_window: u32,
    /// TLS: the server certificate chain and key (PEM); plain HTTP when absent.
    #[serde(default)]
    pub tls_cert: Option<String>,
    #[serde(default)]
    pub tls_key: Option<String>,
    /// PEM trust anchors for client certificates; when set a client certificate is required.
    #[serde(default)]
    pub client_ca: Option<String>,
    /// Pre-shared keys; when any is configured every /cats/metrics request must be signed.
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
    /// Public keys of the C-SMAs whose signed reports are accepted: the JWK the agent shows
    /// in `c-ps/signing-key/jwk` (Ed25519 or P-256), or for Ed25519 just its `x`
    /// (base64url); when any is configured,
    /// every /cats/metrics request must carry a valid `X-Cats-JWS` (seed 004, Metric
    /// Integrity: reports signed with the C-SMA's private key).
    #[serde(default)]
    pub trusted_csma_keys: Vec<String>,
    #[serde(default)]
    pub sites: Vec<SiteConfig>,
    #[serde(default)]
    pub delays: Vec<DelayConfig>,
    /// Seconds after which a site's entries are aged out unless refreshed by a report, an
    /// SCI row or a keepalive (seed 004, Periodic Synchronization); 0 keeps them forever.
    #[serde(default = "default_entry_ttl")]
    pub entry_ttl: u32,
    /// Whether `POST /cats/keepalive` is offered (and announced in the replies).
    #[serde(default = "yes")]
    pub keepalive: bool,
    /// Requests per second this C-PS considers full load: the refresh hint grows from
    /// entry_ttl / 4 at no load to entry_ttl / 2 at this rate and above.
    #[serde(default = "default_rated_load")]
    pub rated_load: f64,
    /// Where the gRPC stream (`cats.sma.v1.CpsLink`) is served; none when absent.
    #[serde(default)]
    pub grpc_listen: Option<SocketAddr>,
    /// gRPC only: milliseconds the C-PS waits before it takes each Advertisement (a slow
    /// C-PS, for tests and load experiments); 0 by default.
    #[serde(default)]
    pub ack_delay_ms: u64,
    /// Seed 003: this C-PS's SourceID in its overload answers and reports: the name its
    /// C-SMAs authenticate it as (their TLS server name, else their url's host). Default:
    /// the listen address's IP.
    #[serde(default)]
    pub source_id: Option<String>,
    /// Seed 003: /cats requests per second above which this C-PS reports overload to the
    /// C-SMAs that announced the peer report; the reduction asked is the share above it
    /// (1 - threshold / load). 0 (the default): only a forced report (tests).
    #[serde(default)]
    pub overload_threshold: f64,
    /// Validity of its overload reports, seconds (RFC 7683 default 30).
    #[serde(default = "default_overload_validity")]
    pub overload_validity: u32,
}

fn default_overload_validity() -> u32 {
    30
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    pub id: String,
    /// Hexadecimal.
    pub secret: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteConfig {
    pub id: String,
    /// Seed 000 capacity index (higher = more capacity). Default 1.
    #[serde(default = "one")]
    pub capacity: f64,
    /// Seed 000 preference index (higher = preferred). Default 1.
    #[serde(default = "one")]
    pub preference: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayConfig {
    pub ingress: String,
    pub site: String,
    /// RTT from the ingress to the site's egress, milliseconds.
    pub ms: f64,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9400))
}
fn default_weight() -> f64 {
    0.5
}
fn default_window() -> u32 {
    30
}
fn one() -> f64 {
    1.0
}
fn default_entry_ttl() -> u32 {
    180
}
fn yes() -> bool {
    true
}
fn default_rated_load() -> f64 {
    50.0
}

impl Default for CpsConfig {
    fn default() -> Self {
        CpsConfig {
            listen: default_listen(),
            weight: default_weight(),
            timestamp_window: default_window(),
            tls_cert: None,
            tls_key: None,
            client_ca: None,
            keys: Vec::new(),
            trusted_csma_keys: Vec::new(),
            sites: Vec::new(),
            delays: Vec::new(),
            entry_ttl: default_entry_ttl(),
            keepalive: true,
            rated_load: default_rated_load(),
            grpc_listen: None,
            ack_delay_ms: 0,
            source_id: None,
            overload_threshold: 0.0,
            overload_validity: default_overload_validity(),
        }
    }
}

impl CpsConfig {
    pub fn parse(text: &str) -> Result<CpsConfig, String> {
        let c: CpsConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        c.check()?;
        Ok(c)
    }

    /// Refuses values the algorithm cannot use.
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.weight) {
            return Err(format!("weight {} is not between 0 and 1", self.weight));
        }
        for s in &self.sites {
            if !(s.capacity > 0.0 && s.preference > 0.0 && s.capacity.is_finite() && s.preference.is_finite()) {
                return Err(format!("site '{}': capacity and preference must be positive", s.id));
            }
        }
        for d in &self.delays {
            if !(d.ms >= 0.0 && d.ms.is_finite()) {
                return Err(format!("delay {} -> {}: ms must be zero or more", d.ingress, d.site));
            }
        }
        if !(self.overload_threshold >= 0.0 && self.overload_threshold.is_finite()) {
            return Err("overload_threshold must be zero or more".into());
        }
        if self.overload_validity > crate::overload::wire::MAX_VALIDITY {
            return Err("overload_validity is at most 86400".into());
        }
        if !(self.rated_load > 0.0 && self.rated_load.is_finite()) {
            return Err("rated_load must be positive".into());
        }
        if self.entry_ttl > crate::cps::wire::MAX_HINT_SECS {
            return Err(format!("entry_ttl must be at most {} s", crate::cps::wire::MAX_HINT_SECS));
        }
        self.psks()?;
        self.csma_keys()?;
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err("tls_cert and tls_key go together".into());
        }
        Ok(())
    }

    pub fn psks(&self) -> Result<Vec<Psk>, String> {
        self.keys
            .iter()
            .map(|k| {
                let secret = unhex(&k.secret)
                    .filter(|s| s.len() >= 16)
                    .ok_or_else(|| format!("key '{}': the secret must be at least 16 bytes of hexadecimal", k.id))?;
                Ok(Psk { key_id: k.id.clone(), secret })
            })
            .collect()
    }

    /// The trusted C-SMA public keys by key id.
    pub fn csma_keys(&self) -> Result<Vec<(String, crate::cps::signing::TrustedKey)>, String> {
        self.trusted_csma_keys.iter().map(|k| crate::cps::signing::trusted_key(k)).collect()
    }

    pub fn delay(&self, ingress: &str, site: &str) -> Option<f64> {
        self.delays.iter().find(|d| d.ingress == ingress && d.site == site).map(|d| d.ms)
    }

    /// (capacity index, preference index) of a site; 1 and 1 when not configured.
    pub fn indexes(&self, site: &str) -> (f64, f64) {
        self.sites.iter().find(|s| s.id == site).map_or((1.0, 1.0), |s| (s.capacity, s.preference))
    }

    pub fn ingresses(&self) -> Vec<String> {
        let mut v: Vec<String> = self.delays.iter().map(|d| d.ingress.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// The entry TTL, `None` when entries never age out.
    pub fn ttl(&self) -> Option<std::time::Duration> {
        (self.entry_ttl > 0).then(|| std::time::Duration::from_secs(u64::from(self.entry_ttl)))
    }

    /// The refresh this C-PS asks for at `load` (requests per second):
    /// `max(1, floor(entry_ttl * (1 + min(1, load / rated_load)) / 4))` seconds, from a
    /// quarter of the TTL when idle to half of it at rated load (a busier C-PS wants fewer
    /// refreshes, yet at least two per TTL so one lost refresh does not age a site out).
    /// `None` without a TTL.
    pub fn refresh_interval(&self, load: f64) -> Option<u32> {
        if self.entry_ttl == 0 {
            return None;
        }
        let l = (load / self.rated_load).clamp(0.0, 1.0);
        Some(((f64::from(self.entry_ttl) * (1.0 + l) / 4.0).floor() as u32).max(1))
    }

    pub fn site_map(&self) -> HashMap<String, (f64, f64)> {
        self.sites.iter().map(|s| (s.id.clone(), (s.capacity, s.preference))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_bad_values() {
        let c = CpsConfig::parse(
            r#"
            listen = "127.0.0.1:0"
            weight = 0.7
            [[keys]]
            id = "k"
            secret = "000102030405060708090a0b0c0d0e0f"
            [[sites]]
            id = "a"
            capacity = 2.0
            [[delays]]
            ingress = "r1"
            site = "a"
            ms = 3.5
            "#,
        )
        .unwrap();
        assert_eq!(c.delay("r1", "a"), Some(3.5));
        assert_eq!(c.indexes("a"), (2.0, 1.0));
        assert_eq!(c.indexes("b"), (1.0, 1.0));
        assert!(CpsConfig::parse("weight = 1.5").is_err());
        assert!(CpsConfig::parse("[[keys]]\nid='k'\nsecret='00'").is_err());
        assert!(CpsConfig::parse("[[sites]]\nid='a'\ncapacity=0.0").is_err());
        assert!(CpsConfig::parse("typo = 1").is_err());
        assert!(CpsConfig::parse("rated_load = 0.0").is_err());
    }

    #[test]
    fn seed004_periodic_sync_refresh_interval_grows_with_load_within_the_ttl() {
        let c = CpsConfig { entry_ttl: 120, rated_load: 10.0, ..CpsConfig::default() };
        assert_eq!(c.refresh_interval(0.0), Some(30), "idle: a quarter of the TTL");
        assert_eq!(c.refresh_interval(5.0), Some(45));
        assert_eq!(c.refresh_interval(1e9), Some(60), "at or above rated load: half the TTL");
        assert_eq!(CpsConfig { entry_ttl: 2, ..c.clone() }.refresh_interval(0.0), Some(1), "never 0");
        assert_eq!(CpsConfig { entry_ttl: 0, ..c }.refresh_interval(0.0), None);
    }
}

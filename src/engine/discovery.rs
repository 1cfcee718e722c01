//! Dynamic SCI discovery (seed 004, SCI State Machine: "ACTIVE: the SCI has been discovered
//! but not yet confirmed healthy"), opt-in (YANG `scis/discovery`, off by default). An SCI
//! that is not in the registry but proves itself with a configured trust domain is
//! registered by the engine (not in running) as ACTIVE; its first accepted report moves it
//! to HEALTHY, which the update controller announces with the SCI discovery trigger.
//!
//! A trust domain is either a `jwt` credential (issuer and audience fixed by it; the token's
//! `sub` is the CSCI-ID; the CS-IDs it may report for are the domain's list, intersected
//! with a claim when one is configured; verified in the transport task by `auth/jwt.rs`), or
//! a TLS client certificate that cert-to-name maps to a CSCI-ID matching the domain's
//! pattern (HTTPS collector only). Bounded: at `max-discovered`, or while the cache is full,
//! a further SCI is refused `discovery-limit` and nothing is evicted for it. Discovered SCIs
//! that stay FAILED for `failed-retention` are removed (a withdrawal). A configured SCI of
//! the same CSCI-ID always wins: it is never discovered, and configuring one replaces the
//! discovered entry. Every discovery and removal is audited.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::core::{Core, EngineEvent, Proof, SciConfig, Sender};
use super::model::{CsId, CsciId, SciState};
use super::report::RawReport;
use super::validate::{self, Rejection, Verdict};

/// A CSCI-ID pattern: a regular expression matched against the whole CSCI-ID. The regex
/// crate matches in linear time, so a hostile name cannot make matching slow.
#[derive(Clone, Debug)]
pub struct Pattern {
    source: String,
    re: regex::Regex,
}

/// Largest compiled pattern (the regex crate's own default is 10 MiB).
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

impl Pattern {
    pub fn new(source: &str) -> Result<Pattern, String> {
        let build = |re: &str| regex::RegexBuilder::new(re).size_limit(PATTERN_SIZE_LIMIT).build();
        let refuse = |e: regex::Error| format!("csci-id-pattern {:?}: {e}", crate::text::truncate(source, 64));
        // The source alone first: one with unbalanced parentheses (`pod-1)|(.*`) would
        // otherwise close the anchoring group itself and match anything once wrapped.
        build(source).map_err(refuse)?;
        let re = build(&format!("^(?:{source})$")).map_err(refuse)?;
        Ok(Pattern { source: source.to_owned(), re })
    }

    pub fn matches(&self, csci_id: &str) -> bool {
        self.re.is_match(csci_id)
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl PartialEq for Pattern {
    fn eq(&self, o: &Self) -> bool {
        self.source == o.source
    }
}
impl Eq for Pattern {}

/// How a domain's SCIs prove themselves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DomainProof {
    /// A bearer token verified with this `jwt` credential.
    Jwt { credential: String },
    /// A TLS client certificate mapped to the CSCI-ID.
    Certificate,
}

impl DomainProof {
    pub fn yang(&self) -> &'static str {
        match self {
            DomainProof::Jwt { .. } => "jwt",
            DomainProof::Certificate => "certificate",
        }
    }
}

/// One trust domain (YANG `trust-domain`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustDomain {
    pub name: String,
    pub proof: DomainProof,
    /// Required for certificate domains; restricts token subjects in jwt domains.
    pub pattern: Option<Pattern>,
    /// jwt: the claim naming the CS-IDs (intersected with `cs_ids`).
    pub cs_id_claim: Option<String>,
    pub cs_ids: Vec<CsId>,
}

impl TrustDomain {
    fn admits(&self, csci_id: &str) -> bool {
        self.pattern.as_ref().is_none_or(|p| p.matches(csci_id))
    }
}

/// The discovery settings (YANG `scis/discovery`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryConfig {
    pub enabled: bool,
    pub max_discovered: usize,
    pub expected_interval: Duration,
    pub failed_retention: Duration,
    pub domains: Vec<TrustDomain>,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            enabled: false,
            max_discovered: 1024,
            expected_interval: Duration::from_millis(5000),
            failed_retention: Duration::from_secs(300),
            domains: Vec::new(),
        }
    }
}

/// What a verified credential proof (HMAC signature or bearer token) establishes beyond
/// its CSCI-ID: the credential that verified it, which must be the SCI's own
/// `credential-ref` (`Core::ingest_from`), and what a jwt trust domain's token grants a
/// subject without a credential of its own. Set by the transport's authentication step,
/// see `auth::AuthTable::verify_proof`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grant {
    /// The name of the credential that verified the proof.
    pub credential: String,
    /// The trust domain whose credential verified the token, when one did.
    pub domain: Option<String>,
    /// The CS-IDs of the domain's claim, when it has one (`None`: no claim configured).
    pub claimed_cs_ids: Option<Vec<CsId>>,
}

/// One discovered SCI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    pub domain: String,
    pub proof: &'static str,
    pub since: DateTime<Utc>,
}

/// The engine's discovery state: settings, the discovered SCIs, reminders for age-out.
#[derive(Default)]
pub struct Discovery {
    pub config: DiscoveryConfig,
    pub discovered: HashMap<CsciId, Discovered>,
    /// (due, CSCI-ID): a discovered SCI went FAILED; look again when its retention ends.
    reminders: BinaryHeap<Reverse<(Instant, CsciId)>>,
}

impl Discovery {
    pub fn get(&self, csci_id: &str) -> Option<&Discovered> {
        self.discovered.get(csci_id)
    }

    /// When the next age-out check is due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.reminders.peek().map(|Reverse((t, _))| *t)
    }
}

fn audit(csci_id: &str, d: &Discovered, outcome: &'static str, detail: &str) {
    crate::mgmt::audit::event(crate::mgmt::audit::Category::SciDiscovery)
        .outcome(outcome)
        .field("csci-id", csci_id)
        .field("trust-domain", d.domain.as_str())
        .field("proof", d.proof)
        .field("detail", detail)
        .emit();
}

/// An unregistered SCI's report: registers it when discovery is on and the sender proved
/// itself with a trust domain that admits it for the report's CS-ID, within the bound, and
/// the report passes validation (so a refused first report registers nothing). Otherwise
/// the refusal, counted: `unknown-sci` (no discovery, or no proof from a trust domain),
/// `unauthorized-cs-id`, `discovery-limit`, or the validator's reason.
pub fn admit(core: &mut Core, raw: &RawReport, sender: &Sender) -> Result<(), (Rejection, String)> {
    let unknown = |core: &mut Core, d: String| Err((core.reject(Rejection::UnknownSci, &raw.csci_id, &d), d));
    if !core.discovery.config.enabled {
        return unknown(core, format!("{} is not in the SCI registry", raw.csci_id));
    }
    let proven = sender.csci_id.as_deref() == Some(raw.csci_id.as_str());
    let cfg = &core.discovery.config;
    let found = match (sender.proof, &sender.grant) {
        (Some(Proof::Credential), Some(g)) if proven => cfg
            .domains
            .iter()
            .find(|d| {
                g.domain.as_deref() == Some(d.name.as_str())
                    && matches!(&d.proof, DomainProof::Jwt { credential } if *credential == g.credential)
                    && d.admits(&raw.csci_id)
            })
            .map(|d| {
                let cs_ids: Vec<CsId> = match &g.claimed_cs_ids {
                    Some(claim) => d.cs_ids.iter().filter(|c| claim.contains(c)).cloned().collect(),
                    None => d.cs_ids.clone(),
                };
                (d, cs_ids)
            }),
        // A client certificate of the HTTPS collector; a verified pull answer is the
        // agent's own choice of target, not a discovery.
        (Some(Proof::Certificate), _) if proven && sender.transport == "http" => cfg
            .domains
            .iter()
            .find(|d| d.proof == DomainProof::Certificate && d.admits(&raw.csci_id))
            .map(|d| (d, d.cs_ids.clone())),
        _ => None,
    };
    let Some((domain, cs_ids)) = found else {
        return unknown(
            core,
            format!(
                "{} is not in the SCI registry, and its message carries no proof from a discovery trust domain \
                 that admits it",
                raw.csci_id
            ),
        );
    };
    let (domain_name, proof) = (domain.name.clone(), domain.proof.clone());
    if !cs_ids.contains(&raw.cs_id) {
        let d = format!("trust domain {domain_name} does not let {} report for CS-ID {}", raw.csci_id, raw.cs_id);
        return Err((core.refuse_sender(Rejection::UnauthorizedCsId, raw, sender, d.clone()), d));
    }
    let (count, max) = (core.discovery.discovered.len(), core.discovery.config.max_discovered);
    let full = core.cache.len() >= core.cache.max_entries;
    if count >= max || full {
        let d = if full {
            format!("{} not discovered: the metric cache is full (discovered SCIs never evict)", raw.csci_id)
        } else {
            format!("{} not discovered: {count} SCIs are discovered already (max-discovered {max})", raw.csci_id)
        };
        return Err((core.reject(Rejection::DiscoveryLimit, &raw.csci_id, &d), d));
    }
    // A first report the validator refuses registers nothing (and is counted by its reason).
    let (now, wall) = (core.clock.now(), core.clock.wall());
    if let Verdict::Reject { reason, detail, .. } =
        validate::validate(raw, &validate::History::default(), &core.validation, now, wall)
    {
        return Err((core.reject(reason, &raw.csci_id, &detail), detail));
    }
    let sci = SciConfig {
        cs_ids,
        credential_ref: match &proof {
            DomainProof::Jwt { credential } => Some(credential.clone()),
            DomainProof::Certificate => None,
        },
        unauthenticated: false,
        expected_interval: core.discovery.config.expected_interval,
    };
    core.set_sci(&raw.csci_id, sci);
    let d = Discovered { domain: domain_name, proof: proof.yang(), since: wall };
    tracing::info!(csci_id = %raw.csci_id, trust_domain = %d.domain, proof = d.proof, "SCI discovered");
    let source = sender.address.map(|a| a.to_string()).unwrap_or_else(|| "in-process".into());
    audit(&raw.csci_id, &d, "discovered", &format!("from {source} over {}", sender.transport));
    core.discovery.discovered.insert(raw.csci_id.clone(), d);
    Ok(())
}

/// After a batch of work: discovered SCIs that went FAILED get an age-out reminder.
pub fn observe(core: &mut Core) {
    if core.discovery.discovered.is_empty() {
        return;
    }
    let due = core.clock.now() + core.discovery.config.failed_retention;
    for ev in &core.events {
        if let EngineEvent::SciStateChange { csci_id, to: SciState::Failed, .. } = ev {
            if core.discovery.discovered.contains_key(csci_id) {
                core.discovery.reminders.push(Reverse((due, csci_id.clone())));
            }
        }
    }
}

/// Removes the discovered SCIs whose retention as FAILED ended (a withdrawal).
pub fn expire(core: &mut Core) {
    let now = core.clock.now();
    let retention = chrono::Duration::from_std(core.discovery.config.failed_retention).unwrap_or(chrono::Duration::MAX);
    while let Some(Reverse((due, _))) = core.discovery.reminders.peek() {
        if *due > now {
            break;
        }
        let Some(Reverse((_, csci_id))) = core.discovery.reminders.pop() else { break };
        // Still discovered, still FAILED, and FAILED for the whole retention (a report in
        // between brought it back; a later failure has a reminder of its own).
        let failed_since =
            core.cache.get(&csci_id).filter(|e| e.state == SciState::Failed).map(|e| e.last_state_change);
        let aged = failed_since.is_some_and(|t| core.clock.wall() - t >= retention);
        if core.discovery.discovered.contains_key(&csci_id) && aged {
            withdraw(core, &csci_id, "aged-out", "FAILED for the whole failed-retention");
        }
    }
}

/// Removes a discovered SCI from the registry and the cache (its metrics are withdrawn).
fn withdraw(core: &mut Core, csci_id: &str, outcome: &'static str, why: &str) {
    let Some(d) = core.discovery.discovered.remove(csci_id) else { return };
    tracing::info!(csci_id, trust_domain = %d.domain, "discovered SCI removed: {why}");
    audit(csci_id, &d, outcome, why);
    core.remove_sci(csci_id);
}

/// A configured SCI of this CSCI-ID replaces the discovered one (configuration wins).
pub fn configured(core: &mut Core, csci_id: &str) {
    if let Some(d) = core.discovery.discovered.remove(csci_id) {
        audit(csci_id, &d, "superseded", "a configured SCI of the same CSCI-ID replaces the discovered one");
    }
}

/// A discovered SCI the cache evicted is no longer discovered (its withdrawal is the
/// cache's).
pub fn evicted(core: &mut Core, csci_id: &str) {
    if let Some(d) = core.discovery.discovered.remove(csci_id) {
        core.cache.remove_registration(csci_id);
        core.rate.forget(csci_id);
        audit(csci_id, &d, "evicted", "evicted from the full metric cache");
    }
}

/// Installs new settings: turning discovery off withdraws every discovered SCI; a domain
/// that is gone or changed (its proof, pattern, claim or CS-IDs) withdraws the SCIs
/// discovered through it, so a narrowed domain takes effect at once (they may be
/// discovered again under the new rules).
pub fn set_config(core: &mut Core, cfg: DiscoveryConfig) {
    let old = &core.discovery.config.domains;
    let keep = |d: &Discovered| {
        let named = |list: &[TrustDomain]| list.iter().find(|t| t.name == d.domain).cloned();
        cfg.enabled && named(&cfg.domains).is_some() && named(&cfg.domains) == named(old)
    };
    let gone: Vec<CsciId> =
        core.discovery.discovered.iter().filter(|(_, d)| !keep(d)).map(|(id, _)| id.clone()).collect();
    let expected_changed = cfg.expected_interval != core.discovery.config.expected_interval;
    core.discovery.config = cfg;
    for id in gone {
        withdraw(core, &id, "withdrawn", "discovery was turned off, or its trust domain removed or changed");
    }
    if expected_changed {
        let ids: Vec<CsciId> = core.discovery.discovered.keys().cloned().collect();
        for id in ids {
            if let Some(mut s) = core.sci(&id) {
                s.expected_interval = core.discovery.config.expected_interval;
                core.set_sci(&id, s);
                // set_sci counts as configuration: the SCI is still the discovered one.
            }
        }
    }
}

/// The `scis/discovery` settings of a configuration tree; an unusable pattern is an error
/// (a commit with one is refused in prepare).
pub fn settings(t: &yang2::data::DataTree<'static>) -> Result<DiscoveryConfig, String> {
    use crate::engine::northbound::{leaf, leaf_u64, ROOT};
    use yang2::data::Data;
    let base = format!("{ROOT}/scis/discovery");
    let d = DiscoveryConfig::default();
    let mut cfg = DiscoveryConfig {
        enabled: leaf(t, &format!("{base}/enabled")).as_deref() == Some("true"),
        max_discovered: leaf_u64(t, &format!("{base}/max-discovered")).map_or(d.max_discovered, |v| v as usize),
        expected_interval: leaf_u64(t, &format!("{base}/expected-interval"))
            .map_or(d.expected_interval, Duration::from_millis),
        failed_retention: leaf_u64(t, &format!("{base}/failed-retention"))
            .map_or(d.failed_retention, Duration::from_secs),
        domains: Vec::new(),
    };
    if let Ok(set) = t.find_xpath(&format!("{base}/trust-domain")) {
        for n in set {
            let (mut name, mut proof, mut cred, mut claim, mut pattern) = (None, None, None, None, None);
            let mut cs_ids = Vec::new();
            for c in n.children() {
                let v = c.value_canonical();
                match c.schema().name() {
                    "name" => name = v,
                    "proof" => proof = v,
                    "credential-ref" => cred = v,
                    "cs-id-claim" => claim = v,
                    "csci-id-pattern" => pattern = v,
                    "cs-id" => cs_ids.extend(v),
                    _ => {}
                }
            }
            let name = name.unwrap_or_default();
            let proof = match (proof.as_deref(), cred) {
                (Some("jwt"), Some(credential)) => DomainProof::Jwt { credential },
                (Some("certificate"), _) => DomainProof::Certificate,
                _ => return Err(format!("trust-domain {name}: a jwt domain needs a credential-ref")),
            };
            let pattern =
                pattern.map(|p| Pattern::new(&p)).transpose().map_err(|e| format!("trust-domain {name}: {e}"))?;
            cfg.domains.push(TrustDomain { name, proof, pattern, cs_id_claim: claim, cs_ids });
        }
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::Clock;

    fn domain(name: &str, proof: DomainProof, pattern: Option<&str>, cs: &[&str]) -> TrustDomain {
        TrustDomain {
            name: name.into(),
            proof,
            pattern: pattern.map(|p| Pattern::new(p).unwrap()),
            cs_id_claim: None,
            cs_ids: cs.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    fn enabled(max: usize, domains: Vec<TrustDomain>) -> DiscoveryConfig {
        DiscoveryConfig {
            enabled: true,
            max_discovered: max,
            failed_retention: Duration::from_secs(60),
            domains,
            ..DiscoveryConfig::default()
        }
    }

    fn raw(csci: &str, cs: &str, seq: u64) -> RawReport {
        RawReport {
            csci_id: csci.into(),
            cs_id: cs.into(),
            sequence: seq,
            timestamp: Utc::now(),
            gas: 100,
            computing_time: 5,
            health: "HEALTHY".into(),
            cost: None,
            reputation: None,
            security_label: None,
        }
    }

    fn by_cert(csci: &str) -> Sender {
        Sender { csci_id: Some(csci.into()), proof: Some(Proof::Certificate), transport: "http", ..Sender::default() }
    }

    fn by_token(csci: &str, domain: &str, claim: Option<&[&str]>) -> Sender {
        Sender {
            csci_id: Some(csci.into()),
            proof: Some(Proof::Credential),
            transport: "http",
            grant: Some(Grant {
                credential: "site-jwt".into(),
                domain: Some(domain.into()),
                claimed_cs_ids: claim.map(|c| c.iter().map(|s| (*s).to_owned()).collect()),
            }),
            ..Sender::default()
        }
    }

    fn rejected(core: &Core, r: Rejection) -> u64 {
        core.stats.rejected[r.index()]
    }

    #[test]
    fn seed004_sci_state_machine_discovery_is_off_by_default_and_needs_proof() {
        let mut core = Core::new(Clock::new());
        // Off: a proven certificate is not enough.
        let e = core.ingest_from(&raw("pod-1", "AR1", 1), &by_cert("pod-1")).unwrap_err();
        assert_eq!(e.0, Rejection::UnknownSci);
        set_config(&mut core, enabled(8, vec![domain("k8s", DomainProof::Certificate, Some("pod-[0-9]+"), &["AR1"])]));
        // On, but no proof, a claim of another CSCI-ID, a pull answer, a name the pattern
        // refuses: still unknown.
        let e = core.ingest_from(&raw("pod-1", "AR1", 1), &by_cert("pod-2")).unwrap_err();
        assert_eq!(e.0, Rejection::Unauthenticated, "proven as pod-2, reporting as pod-1");
        for sender in
            [Sender::default(), Sender { transport: "pull", ..by_cert("pod-1") }, by_token("pod-1", "k8s", None)]
        {
            let e = core.ingest_from(&raw("pod-1", "AR1", 1), &sender).unwrap_err();
            assert_eq!(e.0, Rejection::UnknownSci, "{sender:?}");
        }
        let e = core.ingest_from(&raw("other-1", "AR1", 1), &by_cert("other-1")).unwrap_err();
        assert_eq!(e.0, Rejection::UnknownSci);
        assert!(core.cache.registered() == 0 && core.cache.is_empty());
        // A CS-ID the domain does not allow: refused, nothing registered.
        let e = core.ingest_from(&raw("pod-1", "LLM1", 1), &by_cert("pod-1")).unwrap_err();
        assert_eq!(e.0, Rejection::UnauthorizedCsId);
        assert!(core.cache.registered() == 0);
        // A first report the validator refuses registers nothing either.
        let bad = RawReport { gas: -1, ..raw("pod-1", "AR1", 1) };
        assert_eq!(core.ingest_from(&bad, &by_cert("pod-1")).unwrap_err().0, Rejection::OutOfRange);
        assert!(core.cache.registered() == 0);
        // The proof, the pattern and the CS-ID fit: registered, then HEALTHY.
        core.ingest_from(&raw("pod-1", "AR1", 1), &by_cert("pod-1")).unwrap();
        let e = core.cache.get("pod-1").unwrap();
        assert_eq!(e.state, SciState::Healthy);
        assert!(core.events.iter().any(|e| matches!(e,
            EngineEvent::SciStateChange { csci_id, from: SciState::Active, to: SciState::Healthy, .. } if csci_id == "pod-1")));
        assert_eq!(core.discovery.get("pod-1").map(|d| (d.domain.as_str(), d.proof)), Some(("k8s", "certificate")));
        assert_eq!(core.sci("pod-1").unwrap().authentication(), "certificate");
        // Later messages need the same proof: a token is not a certificate.
        let e =
            core.ingest_from(&raw("pod-1", "AR1", 2), &Sender { csci_id: Some("pod-1".into()), ..Sender::default() });
        assert_eq!(e.unwrap_err().0, Rejection::Unauthenticated);
    }

    #[test]
    fn seed004_sci_state_machine_discovery_jwt_claim_intersects_the_allowed_list() {
        let mut core = Core::new(Clock::new());
        let jwt = DomainProof::Jwt { credential: "site-jwt".into() };
        let mut d = domain("tokens", jwt, None, &["AR1", "AR2"]);
        d.cs_id_claim = Some("cs_ids".into());
        set_config(&mut core, enabled(8, vec![d]));
        // The claim names AR2 and LLM1: only AR2 is both claimed and allowed.
        let sender = by_token("sci-9", "tokens", Some(&["AR2", "LLM1"]));
        let e = core.ingest_from(&raw("sci-9", "AR1", 1), &sender).unwrap_err();
        assert_eq!(e.0, Rejection::UnauthorizedCsId);
        let e = core.ingest_from(&raw("sci-9", "LLM1", 1), &sender).unwrap_err();
        assert_eq!(e.0, Rejection::UnauthorizedCsId);
        core.ingest_from(&raw("sci-9", "AR2", 1), &sender).unwrap();
        assert_eq!(core.sci("sci-9").unwrap().cs_ids, vec!["AR2".to_owned()]);
        assert_eq!(core.sci("sci-9").unwrap().authentication(), "credential");
        // A token of another domain name (not configured) does not discover.
        let e = core.ingest_from(&raw("sci-8", "AR2", 1), &by_token("sci-8", "nope", None)).unwrap_err();
        assert_eq!(e.0, Rejection::UnknownSci);
    }

    #[test]
    fn seed004_sci_state_machine_discovery_is_bounded_without_evicting_configured_scis() {
        let mut core = Core::new(Clock::new());
        let cfg_sci = SciConfig {
            cs_ids: vec!["AR1".into()],
            credential_ref: None,
            unauthenticated: true,
            expected_interval: Duration::from_secs(5),
        };
        core.set_sci("configured", cfg_sci);
        set_config(&mut core, enabled(2, vec![domain("k8s", DomainProof::Certificate, Some("pod-.*"), &["AR1"])]));
        for i in 0..2 {
            let id = format!("pod-{i}");
            core.ingest_from(&raw(&id, "AR1", 1), &by_cert(&id)).unwrap();
        }
        let e = core.ingest_from(&raw("pod-2", "AR1", 1), &by_cert("pod-2")).unwrap_err();
        assert_eq!(e.0, Rejection::DiscoveryLimit);
        assert_eq!(rejected(&core, Rejection::DiscoveryLimit), 1);
        // The cache bound holds too: with room for three entries, a raised max-discovered
        // still refuses rather than evicting the configured SCI.
        core.cache.max_entries = 3;
        set_config(&mut core, enabled(10, vec![domain("k8s", DomainProof::Certificate, Some("pod-.*"), &["AR1"])]));
        let e = core.ingest_from(&raw("pod-3", "AR1", 1), &by_cert("pod-3")).unwrap_err();
        assert_eq!(e.0, Rejection::DiscoveryLimit);
        assert!(core.is_registered("configured") && core.cache.get("configured").is_some());
    }

    #[test]
    fn seed004_sci_state_machine_configured_sci_wins() {
        let mut core = Core::new(Clock::new());
        set_config(&mut core, enabled(8, vec![domain("k8s", DomainProof::Certificate, Some("pod-.*"), &["AR1"])]));
        // Configured without a credential-ref (certificate) and for LLM1 only: the domain
        // does not widen what it may report for.
        let sci = SciConfig {
            cs_ids: vec!["LLM1".into()],
            credential_ref: None,
            unauthenticated: false,
            expected_interval: Duration::from_secs(5),
        };
        core.set_sci("pod-1", sci.clone());
        let e = core.ingest_from(&raw("pod-1", "AR1", 1), &by_cert("pod-1")).unwrap_err();
        assert_eq!(e.0, Rejection::UnauthorizedCsId);
        assert!(core.discovery.get("pod-1").is_none());
        // Discovered first, configured afterwards: the configured entry replaces it.
        core.ingest_from(&raw("pod-2", "AR1", 1), &by_cert("pod-2")).unwrap();
        assert!(core.discovery.get("pod-2").is_some());
        core.set_sci("pod-2", sci);
        configured(&mut core, "pod-2");
        assert!(core.discovery.get("pod-2").is_none());
        assert_eq!(core.sci("pod-2").unwrap().cs_ids, vec!["LLM1".to_owned()]);
        // A changed domain (here: its CS-IDs) withdraws the SCIs discovered through it.
        core.ingest_from(&raw("pod-4", "AR1", 1), &by_cert("pod-4")).unwrap();
        let narrowed = || enabled(8, vec![domain("k8s", DomainProof::Certificate, Some("pod-.*"), &["AR2"])]);
        set_config(&mut core, narrowed());
        assert!(!core.is_registered("pod-4") && core.discovery.get("pod-4").is_none());
        let e = core.ingest_from(&raw("pod-4", "AR1", 2), &by_cert("pod-4")).unwrap_err();
        assert_eq!(e.0, Rejection::UnauthorizedCsId);
        // An unchanged configuration keeps them.
        core.ingest_from(&raw("pod-5", "AR2", 1), &by_cert("pod-5")).unwrap();
        set_config(&mut core, narrowed());
        assert!(core.discovery.get("pod-5").is_some());
        // Turning discovery off withdraws what was discovered, never a configured SCI.
        core.ingest_from(&raw("pod-3", "AR2", 1), &by_cert("pod-3")).unwrap();
        set_config(&mut core, DiscoveryConfig::default());
        assert!(!core.is_registered("pod-3") && core.cache.get("pod-3").is_none());
        assert!(core.is_registered("pod-1") && core.is_registered("pod-2"));
        assert!(core.events.iter().any(|e| matches!(e, EngineEvent::Withdrawn { csci_id, .. } if csci_id == "pod-3")));
    }

    /// A core whose SCIs go STALE after 2 s and FAILED 1 s later, with pod-1 discovered by
    /// its certificate and reporting once.
    fn ageing_core() -> Core {
        let mut core = Core::new(Clock::new());
        core.set_cache_config(super::super::core::CacheConfig {
            ttl: Some(Duration::from_secs(2)),
            grace_period: Duration::from_secs(1),
            ..Default::default()
        });
        set_config(&mut core, enabled(8, vec![domain("k8s", DomainProof::Certificate, Some("pod-.*"), &["AR1"])]));
        core.ingest_from(&raw("pod-1", "AR1", 1), &by_cert("pod-1")).unwrap();
        core
    }

    /// One engine round as the loop runs it at a deadline; returns the round's events.
    fn run(core: &mut Core) -> Vec<EngineEvent> {
        core.tick();
        expire(core);
        core.settle();
        observe(core);
        std::mem::take(&mut core.events)
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_sci_state_machine_discovered_sci_ages_out_after_failed_retention() {
        let mut core = ageing_core();
        run(&mut core);
        // TTL, then grace: FAILED; the SCI is still registered through the retention.
        tokio::time::advance(Duration::from_secs(3)).await;
        run(&mut core);
        assert_eq!(core.cache.get("pod-1").map(|e| e.state), Some(SciState::Failed));
        assert!(core.discovery.next_deadline().is_some());
        tokio::time::advance(Duration::from_secs(59)).await;
        run(&mut core);
        assert!(core.is_registered("pod-1"));
        tokio::time::advance(Duration::from_secs(2)).await;
        let events = run(&mut core);
        assert!(!core.is_registered("pod-1") && core.discovery.get("pod-1").is_none());
        assert!(events.iter().any(|e| matches!(e, EngineEvent::Withdrawn { csci_id, .. } if csci_id == "pod-1")));
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_sci_state_machine_a_report_within_the_retention_keeps_the_sci() {
        let mut core = ageing_core();
        run(&mut core);
        tokio::time::advance(Duration::from_secs(3)).await;
        run(&mut core);
        assert_eq!(core.cache.get("pod-1").map(|e| e.state), Some(SciState::Failed));
        tokio::time::advance(Duration::from_secs(30)).await;
        let again = RawReport { timestamp: core.clock.wall(), ..raw("pod-1", "AR1", 2) };
        core.ingest_from(&again, &by_cert("pod-1")).unwrap();
        run(&mut core);
        assert_eq!(core.cache.get("pod-1").map(|e| e.state), Some(SciState::Healthy));
        // 61 s after the first failure: it failed again meanwhile (at 36 s), but not for the
        // whole retention, so the first failure's reminder removes nothing.
        tokio::time::advance(Duration::from_secs(31)).await;
        run(&mut core);
        assert!(core.is_registered("pod-1") && core.discovery.get("pod-1").is_some());
    }

    #[test]
    fn seed004_failure_detection_an_evicted_discovered_sci_keeps_its_replay_history() {
        let mut core = Core::new(Clock::new());
        let jwt = DomainProof::Jwt { credential: "site-jwt".into() };
        set_config(&mut core, enabled(8, vec![domain("tokens", jwt, None, &["AR1"])]));
        core.cache.max_entries = 2;
        let first = raw("pod-1", "AR1", 7);
        core.ingest_from(&first, &by_token("pod-1", "tokens", None)).unwrap();
        assert!(core.rate.retry_after("pod-1").is_some(), "a bucket while registered");
        // Two configured SCIs fill the cache: the discovered one, least recently used, goes.
        for id in ["a", "b"] {
            let sci = SciConfig {
                cs_ids: vec!["AR1".into()],
                credential_ref: None,
                unauthenticated: true,
                expected_interval: Duration::from_secs(5),
            };
            core.set_sci(id, sci);
            core.ingest(&raw(id, "AR1", 1), None).unwrap();
        }
        assert!(core.cache.get("pod-1").is_none() && !core.is_registered("pod-1"));
        assert!(core.discovery.get("pod-1").is_none());
        assert!(core.rate.retry_after("pod-1").is_none(), "the evicted SCI's rate bucket is forgotten");
        // Room again; the captured report, replayed with a token of the same domain, is
        // refused: the history kept at eviction is restored on re-discovery.
        core.cache.max_entries = 3;
        let e = core.ingest_from(&first, &by_token("pod-1", "tokens", None)).unwrap_err();
        assert!(matches!(e.0, Rejection::Duplicate | Rejection::Replay), "{e:?}");
    }

    #[test]
    fn seed004_sci_authentication_a_proof_counts_only_with_the_scis_own_credential() {
        use crate::engine::auth::{sign_jwt, AuthTable, Credential, JwtDomain, JwtRules, JwtSigner};
        let (key0, key1) = (b"d0-hs256-secret-of-32-bytes-or-more", b"d1-hs256-secret-of-32-bytes-or-more");
        let rules = JwtRules { issuer: "site-a".into(), audience: "csma-1".into(), ..JwtRules::default() };
        let mut t = AuthTable::default();
        t.credentials.insert("cred-0".into(), Credential::jwt(key0, rules.clone()));
        t.credentials.insert("cred-1".into(), Credential::jwt(key1, rules));
        let d0 = domain("d0", DomainProof::Jwt { credential: "cred-0".into() }, Some("pod-.*"), &["AR1"]);
        let d1 = domain("d1", DomainProof::Jwt { credential: "cred-1".into() }, Some("pod-[0-9]+"), &["AR1"]);
        let in_table = |d: &TrustDomain| JwtDomain {
            name: d.name.clone(),
            credential: match &d.proof {
                DomainProof::Jwt { credential } => credential.clone(),
                DomainProof::Certificate => unreachable!(),
            },
            pattern: d.pattern.clone(),
            cs_id_claim: None,
        };
        // The sender as the transports make it (`Engine::authenticate`).
        let sender = |t: &AuthTable, key: &[u8], sub: &str| {
            let token = sign_jwt(&JwtSigner::hs256(key), sub, "site-a", "csma-1", b"{}");
            let p = t.verify_proof(Some(&token), None, b"{}", Utc::now()).unwrap().unwrap();
            Sender {
                csci_id: Some(p.csci_id),
                proof: Some(Proof::Credential),
                transport: "http",
                grant: p.grant,
                ..Sender::default()
            }
        };
        let mut core = Core::new(Clock::new());
        t.domains = vec![in_table(&d1)];
        set_config(&mut core, enabled(8, vec![d1.clone()]));
        core.ingest_from(&raw("pod-1", "AR1", 1), &sender(&t, key1, "pod-1")).unwrap();
        assert_eq!(core.sci("pod-1").unwrap().credential_ref.as_deref(), Some("cred-1"));
        // A domain with an overlapping pattern goes ahead of d1 (d1 unchanged: pod-1 stays).
        t.domains = vec![in_table(&d0), in_table(&d1)];
        set_config(&mut core, enabled(8, vec![d0, d1]));
        assert!(core.discovery.get("pod-1").is_some());
        // A holder of d0 tokens with sub pod-1: verified (by d0), but not pod-1's proof.
        let forged = sender(&t, key0, "pod-1");
        assert_eq!(forged.grant.as_ref().map(|g| g.credential.as_str()), Some("cred-0"));
        let e = core.ingest_from(&raw("pod-1", "AR1", 2), &forged).unwrap_err();
        assert_eq!(e.0, Rejection::Unauthenticated, "{e:?}");
        assert!(e.1.contains("cred-1") && e.1.contains("cred-0"), "{}", e.1);
        // A configured SCI's own credential must be the one that verified, too.
        let sci = SciConfig {
            cs_ids: vec!["AR1".into()],
            credential_ref: Some("cred-1".into()),
            unauthenticated: false,
            expected_interval: Duration::from_secs(5),
        };
        core.set_sci("sci-1", sci);
        let with = |credential: &str| Sender {
            csci_id: Some("sci-1".into()),
            proof: Some(Proof::Credential),
            grant: Some(Grant { credential: credential.into(), ..Grant::default() }),
            ..Sender::default()
        };
        let e = core.ingest_from(&raw("sci-1", "AR1", 1), &with("cred-0")).unwrap_err();
        assert_eq!(e.0, Rejection::Unauthenticated);
        let unnamed = Sender { grant: None, ..with("cred-1") };
        assert_eq!(core.ingest_from(&raw("sci-1", "AR1", 1), &unnamed).unwrap_err().0, Rejection::Unauthenticated);
        core.ingest_from(&raw("sci-1", "AR1", 1), &with("cred-1")).unwrap();
    }

    #[test]
    fn patterns_match_the_whole_csci_id() {
        let p = Pattern::new("pod-[0-9]+").unwrap();
        assert!(p.matches("pod-12"));
        assert!(!p.matches("xpod-12") && !p.matches("pod-12x") && !p.matches("pod-1|x"));
        let p = Pattern::new("a|b").unwrap();
        assert!(p.matches("a") && !p.matches("ab"));
        assert!(Pattern::new("(").is_err());
    }

    #[test]
    fn seed004_sci_state_machine_discovery_pattern_cannot_escape_its_anchors() {
        // Unbalanced parentheses would close the anchoring group and match anything.
        for escape in ["pod-1)|(.*", "pod-1)|(?:.*", ".*)|(x"] {
            let e = Pattern::new(escape).unwrap_err();
            assert!(e.contains("csci-id-pattern"), "{escape}: {e}");
        }
        assert!(Pattern::new("pod-1|(.*)x").unwrap().matches("pod-1"));
        assert!(!Pattern::new("pod-1|(.*)x").unwrap().matches("anything"));
    }
}

//! Local steering decisions (seed 004, Network Partition: "If the C-SMA is co-located with
//! an Egress CATS-Forwarder, it MAY provide local steering decisions using cached metrics
//! until the partition heals"). The `local-steering` RPC answers "which SCI for CS-ID X"
//! from the Metric Cache under the active policy; it is the hook a co-located forwarder
//! calls (over NETCONF or RESTCONF, NACM-checked) while the C-PS cannot be reached, or
//! whenever it wants the agent's own view.
//!
//! Candidates are the SCIs that contribute to the site: state HEALTHY or STALE, health
//! (after SCI-scope policy) not UNHEALTHY, GAS (after SCI-scope policy) above 0. The choice:
//! the highest effective GAS, ties broken by the lowest computing time, then by the lowest
//! CSCI-ID (so the answer is deterministic). Weighting is policy: an SCI-scope rule such as
//! the seed's `IF SCI_Health = DEGRADED THEN REDUCE SCI_GAS BY 50%` changes the effective
//! GAS the choice compares. A service whose advertised GAS (after site-scope policy) is 0
//! has no SCI to offer either: the forwarder sees what a C-PS would.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::core::Core;
use super::model::{CsId, CsciId, Health, Metrics, SciState};
use super::sci_state;
use crate::error::{ErrorTag, RpcError};

/// The chosen SCI and the metrics behind the choice.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub csci_id: CsciId,
    pub cs_id: CsId,
    /// The SCI's metrics after SCI-scope policy (what the site aggregate counts).
    pub metrics: Metrics,
    pub state: SciState,
    /// When the SCI measured the metrics (its last accepted report).
    pub timestamp: Option<DateTime<Utc>>,
    /// How many SCIs were candidates.
    pub candidates: u32,
    /// The service's advertised GAS (after site-scope policy).
    pub site_gas: u32,
}

/// Why there is no decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoDecision {
    /// Neither registered for nor reported by any SCI.
    UnknownCsId,
    /// Known, but no SCI contributes (none reporting, all UNHEALTHY or at GAS 0), or the
    /// active policy advertises no capacity for it.
    NoneAvailable(String),
}

impl NoDecision {
    /// The rpc-error: `invalid-value` for a CS-ID the agent does not know, `resource-denied`
    /// when it has no SCI to offer (each with its error-app-tag).
    pub fn rpc_error(&self, cs_id: &str) -> RpcError {
        let shown = crate::text::printable(cs_id, 64);
        match self {
            NoDecision::UnknownCsId => RpcError::application(
                ErrorTag::InvalidValue,
                format!("CS-ID {shown} is not known: no SCI is registered for it or reports for it"),
            )
            .with_app_tag("unknown-cs-id"),
            NoDecision::NoneAvailable(why) => {
                RpcError::application(ErrorTag::ResourceDenied, format!("no SCI is available for CS-ID {shown}: {why}"))
                    .with_app_tag("no-sci-available")
            }
        }
    }
}

/// The decision for `cs_id` from the engine's state (runs in the engine task; costs the
/// service's members, not the cache).
pub fn decide(core: &Core, cs_id: &str) -> Result<Decision, NoDecision> {
    let mut best: Option<(&super::cache::Entry, Metrics)> = None;
    let mut candidates = 0u32;
    let mut members = 0u32;
    for e in core.cache.members(cs_id) {
        members += 1;
        let Some(m) = e.effective else { continue };
        if !sci_state::contributes(e.state) || m.health == Health::Unhealthy || m.gas == 0 {
            continue;
        }
        candidates += 1;
        let better = match &best {
            None => true,
            Some((b, bm)) => {
                (m.gas, std::cmp::Reverse(m.computing_time_ms), std::cmp::Reverse(&*e.csci_id))
                    > (bm.gas, std::cmp::Reverse(bm.computing_time_ms), std::cmp::Reverse(&*b.csci_id))
            }
        };
        if better {
            best = Some((e, m));
        }
    }
    if members == 0 && !core.cache.registrations().any(|(_, s)| s.may_report_for(cs_id)) {
        return Err(NoDecision::UnknownCsId);
    }
    let Some((e, metrics)) = best else {
        return Err(NoDecision::NoneAvailable(format!(
            "none of its {members} cached SCIs is reporting with a health other than UNHEALTHY and GAS above 0"
        )));
    };
    let site_gas = core.reported.get(cs_id).map(|(s, _)| s.gas).unwrap_or(0);
    if site_gas == 0 {
        return Err(NoDecision::NoneAvailable("the active policy advertises GAS 0 for it".into()));
    }
    Ok(Decision {
        csci_id: e.csci_id.to_string(),
        cs_id: cs_id.to_owned(),
        metrics,
        state: e.state,
        timestamp: e.timestamp(),
        candidates,
        site_gas,
    })
}

/// The RPC output (cats-sma `local-steering`), in schema order.
pub fn output_xml(d: &Decision) -> String {
    const NS: &str = "urn:cats-sma:yang:cats-sma";
    let esc = |s: &str| crate::text::xml(s).into_owned();
    let mut out = String::new();
    let mut leaf = |name: &str, v: &dyn std::fmt::Display| {
        let _ = write!(out, "<{name} xmlns=\"{NS}\">{v}</{name}>");
    };
    leaf("csci-id", &esc(&d.csci_id));
    leaf("cs-id", &esc(&d.cs_id));
    leaf("gas", &d.metrics.gas);
    leaf("computing-time", &d.metrics.computing_time_ms);
    leaf("health", &d.metrics.health.yang());
    leaf("state", &d.state.yang());
    if let Some(c) = d.metrics.cost {
        leaf("cost", &c);
    }
    if let Some(r) = d.metrics.reputation {
        leaf("reputation", &r);
    }
    if let Some(l) = d.metrics.security_label {
        leaf("security-label", &l);
    }
    if let Some(t) = d.timestamp {
        leaf("timestamp", &crate::datastore::tree::yang_time(t));
    }
    leaf("candidates", &d.candidates);
    leaf("site-gas", &d.site_gas);
    out
}

/// The `local-steering` RPC: the decision for the input's CS-ID, or its rpc-error.
pub fn rpc(engine: &super::Engine, cs_id: Option<String>) -> Result<String, RpcError> {
    // The schema makes cs-id mandatory; an absent one is refused like a missing element.
    let cs_id = cs_id.ok_or_else(|| {
        RpcError::protocol(ErrorTag::MissingElement, "local-steering needs a cs-id").with_bad_element("cs-id")
    })?;
    let id = cs_id.clone();
    let verdict = engine
        .query_blocking(move |core| decide(core, &id))
        .ok_or_else(|| RpcError::application(ErrorTag::OperationFailed, "the engine is not running"))?;
    match verdict {
        Ok(d) => Ok(output_xml(&d)),
        Err(e) => Err(e.rpc_error(&cs_id)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::engine::clock::Clock;
    use crate::engine::core::SciConfig;
    use crate::engine::policy::{Policy, PolicyConfig, RuleConfig};
    use crate::engine::report::RawReport;

    fn core_with(scis: &[(&str, &str)]) -> Core {
        let mut core = Core::new(Clock::new());
        for (csci, cs) in scis {
            let sci = SciConfig {
                cs_ids: vec![(*cs).into()],
                credential_ref: None,
                unauthenticated: true,
                expected_interval: Duration::from_secs(5),
            };
            core.set_sci(csci, sci);
        }
        core
    }

    fn report(core: &mut Core, csci: &str, cs: &str, gas: u32, ct: u32, health: &str) {
        let raw = RawReport {
            csci_id: csci.into(),
            cs_id: cs.into(),
            sequence: core.cache.get(csci).and_then(|e| e.sequence()).unwrap_or(0) + 1,
            timestamp: Utc::now(),
            gas: gas.into(),
            computing_time: ct.into(),
            health: health.into(),
            cost: None,
            reputation: None,
            security_label: None,
        };
        core.ingest(&raw, None).unwrap();
        core.settle();
    }

    /// The seed's Metric Cache table.
    fn seed_table() -> Core {
        let mut core = core_with(&[
            ("188.3.67.3:67", "AR1"),
            ("188.3.67.3:68", "AR2"),
            ("188.3.67.4:69", "AR1"),
            ("188.3.67.4:70", "LLM1"),
        ]);
        report(&mut core, "188.3.67.3:67", "AR1", 400, 5, "HEALTHY");
        report(&mut core, "188.3.67.3:68", "AR2", 100, 15, "HEALTHY");
        report(&mut core, "188.3.67.4:69", "AR1", 600, 6, "HEALTHY");
        report(&mut core, "188.3.67.4:70", "LLM1", 300, 12, "DEGRADED");
        core
    }

    #[test]
    fn seed004_network_partition_local_steering_picks_the_highest_gas() {
        let core = seed_table();
        let d = decide(&core, "AR1").unwrap();
        assert_eq!((d.csci_id.as_str(), d.metrics.gas, d.candidates, d.site_gas), ("188.3.67.4:69", 600, 2, 1000));
        let d = decide(&core, "LLM1").unwrap();
        assert_eq!((d.csci_id.as_str(), d.metrics.health), ("188.3.67.4:70", Health::Degraded));
        assert!(output_xml(&d).contains("<health xmlns=\"urn:cats-sma:yang:cats-sma\">degraded</health>"));
        assert_eq!(decide(&core, "NOPE"), Err(NoDecision::UnknownCsId));
    }

    #[test]
    fn seed004_network_partition_local_steering_ties_and_exclusions() {
        let mut core = core_with(&[("a", "S"), ("b", "S"), ("c", "S"), ("d", "T")]);
        report(&mut core, "a", "S", 100, 9, "HEALTHY");
        report(&mut core, "b", "S", 100, 4, "HEALTHY");
        report(&mut core, "c", "S", 500, 1, "UNHEALTHY");
        // Equal GAS: the lower computing time wins; UNHEALTHY is never chosen.
        let d = decide(&core, "S").unwrap();
        assert_eq!((d.csci_id.as_str(), d.candidates), ("b", 2));
        // Equal GAS and time: the lower CSCI-ID, whatever the order of the members.
        report(&mut core, "a", "S", 100, 4, "HEALTHY");
        assert_eq!(decide(&core, "S").unwrap().csci_id, "a");
        // Registered but never reported: known, nothing available.
        assert!(matches!(decide(&core, "T"), Err(NoDecision::NoneAvailable(_))));
        // GAS 0 is no candidate.
        report(&mut core, "d", "T", 0, 4, "HEALTHY");
        assert!(matches!(decide(&core, "T"), Err(NoDecision::NoneAvailable(_))));
        let e = NoDecision::NoneAvailable("x".into()).rpc_error("T");
        assert_eq!((e.tag, e.app_tag.as_deref()), (ErrorTag::ResourceDenied, Some("no-sci-available")));
        let e = NoDecision::UnknownCsId.rpc_error("NOPE");
        assert_eq!((e.tag, e.app_tag.as_deref()), (ErrorTag::InvalidValue, Some("unknown-cs-id")));
    }

    #[test]
    fn seed004_network_partition_local_steering_under_the_active_policy() {
        let mut core = core_with(&[("a", "S"), ("b", "S")]);
        report(&mut core, "a", "S", 300, 5, "DEGRADED");
        report(&mut core, "b", "S", 200, 5, "HEALTHY");
        assert_eq!(decide(&core, "S").unwrap().csci_id, "a");
        // The seed's SCI-scope rule halves the DEGRADED SCI: b now has more effective GAS.
        let cfg = PolicyConfig {
            rules: vec![RuleConfig::new("halve", 1, "SCI_Health = DEGRADED", "REDUCE SCI_GAS BY 50%")],
            ..PolicyConfig::default()
        };
        core.set_policy(Policy::compile(&cfg).unwrap());
        core.settle();
        let d = decide(&core, "S").unwrap();
        assert_eq!((d.csci_id.as_str(), d.metrics.gas), ("b", 200));
        // A site-scope rule that advertises nothing leaves nothing to steer to.
        let cfg = PolicyConfig {
            rules: vec![RuleConfig::new("off", 1, "Site_GAS > 0", "SET Site_GAS = 0")],
            ..PolicyConfig::default()
        };
        core.set_policy(Policy::compile(&cfg).unwrap());
        core.settle();
        assert!(matches!(decide(&core, "S"), Err(NoDecision::NoneAvailable(w)) if w.contains("policy")));
    }
}

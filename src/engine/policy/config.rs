//! The Policy Engine's configuration as typed values, mirroring `/cats-sma/policy` of
//! cats-sma-policy.yang. Independent of libyang: the northbound builds it from the
//! datastore and hands it to `Policy::compile`.

use super::rule::Metric;
use super::window::MaintenanceWindow;

/// `/cats-sma/policy`, plus the maintenance windows of `update-control` that rules refer
/// to with `Time IN …`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyConfig {
    /// `list rule`, in list (`ordered-by user`) order.
    pub rules: Vec<RuleConfig>,
    pub transforms: TransformsConfig,
    /// `update-control/maintenance-window`, in list order.
    pub maintenance_windows: Vec<MaintenanceWindow>,
}

/// One `rule` list entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleConfig {
    pub name: String,
    /// Lower is evaluated first; ties keep list order.
    pub priority: u32,
    /// The `<condition>` text; a leading `IF` is accepted.
    pub condition: String,
    /// The `<action>` text; a leading `THEN` is accepted.
    pub action: String,
    /// YANG default `true`.
    pub enabled: bool,
}

impl RuleConfig {
    /// An enabled rule.
    pub fn new(name: &str, priority: u32, condition: &str, action: &str) -> RuleConfig {
        RuleConfig {
            name: name.to_string(),
            priority,
            condition: condition.to_string(),
            action: action.to_string(),
            enabled: true,
        }
    }
}

/// `policy/transforms`.
#[derive(Clone, Debug, PartialEq)]
pub struct TransformsConfig {
    /// decimal64 (3 fraction digits), 0..1, YANG default 1.0.
    pub gas_safety_factor: f64,
    /// `list bounds`, keyed by metric.
    pub bounds: Vec<BoundsConfig>,
    pub ema: EmaConfig,
}

impl Default for TransformsConfig {
    fn default() -> Self {
        TransformsConfig { gas_safety_factor: 1.0, bounds: Vec::new(), ema: EmaConfig::default() }
    }
}

/// One `bounds` list entry; an absent `min`/`max` leaves that side open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundsConfig {
    pub metric: Metric,
    pub min: Option<u32>,
    pub max: Option<u32>,
}

/// `transforms/ema`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmaConfig {
    /// YANG default `false`.
    pub enabled: bool,
    /// decimal64 (3 fraction digits), 0.001..1, YANG default 0.3.
    pub alpha: f64,
}

impl Default for EmaConfig {
    fn default() -> Self {
        EmaConfig { enabled: false, alpha: 0.3 }
    }
}

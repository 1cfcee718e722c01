//! Why a policy configuration is refused at commit time. A rule error names the field and
//! the 1-based column (in characters), so the northbound can answer
//! `rule r1: action, column 5: Security_Label takes 0..10, got 11`.

use std::fmt;

use thiserror::Error;

use super::rule::Metric;

/// The part of a rule a [`RuleError`] points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Condition,
    Action,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Condition => "condition",
            Field::Action => "action",
        })
    }
}

/// A rule that does not parse or type-check.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{field}, column {column}: {kind}")]
pub struct RuleError {
    pub field: Field,
    /// 1-based, counted in characters.
    pub column: u32,
    pub kind: RuleErrorKind,
}

/// One variant per cause.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RuleErrorKind {
    #[error("empty; write TRUE for a rule that always applies")]
    EmptyCondition,
    #[error("empty; expected SET, REDUCE, CLAMP or SUPPRESS_UPDATES")]
    EmptyAction,
    #[error("longer than {max} characters")]
    TooLong { max: usize },
    #[error("unexpected character '{0}'")]
    UnexpectedChar(char),
    #[error("'{found}' is written {instead} here")]
    ForeignOperator { found: &'static str, instead: &'static str },
    #[error("unterminated quoted name")]
    UnterminatedQuote,
    #[error("expected {expected}, found {found}")]
    Expected { expected: &'static str, found: String },
    #[error("unknown variable '{0}'")]
    UnknownVariable(String),
    #[error("THEN and what follows belong in the action, not the condition")]
    ThenInCondition,
    #[error("nesting deeper than {max} levels")]
    TooDeep { max: usize },
    #[error("{var} is a health status: only = and != apply")]
    HealthOrdering { var: &'static str },
    #[error("{var} is a number, {found} is a health status")]
    HealthForNumber { var: &'static str, found: &'static str },
    #[error("{var} takes HEALTHY, DEGRADED or UNHEALTHY, got {found}")]
    NumberForHealth { var: &'static str, found: String },
    #[error("Time is only tested with IN, e.g. Time IN Maintenance_Window")]
    TimeWithoutIn,
    #[error("a comparison needs a variable on one side")]
    NoVariable,
    #[error("compare a variable with a constant, not with {0}")]
    TwoVariables(&'static str),
    #[error("no maintenance window named '{0}'")]
    UnknownWindow(String),
    #[error("{var} takes whole numbers, got {found}")]
    NotWhole { var: &'static str, found: String },
    #[error("{var} takes 0..{max}, got {found}")]
    OutOfRange { var: &'static str, max: u32, found: String },
    #[error("REDUCE takes a percentage above 0 and at most 100, with at most 3 decimals, got {0}%")]
    BadPercentage(String),
    #[error("empty range: {min} is above {max}")]
    EmptyRange { min: u32, max: u32 },
    #[error("{0} cannot be assigned; actions change GAS, computing time, Cost, Reputation or Security_Label")]
    NotAssignable(&'static str),
    #[error("cannot mix SCI_ and Site_ variables in one rule: {here} here, {other} in the {other_field} at column {other_column}")]
    MixedScope { here: &'static str, other: &'static str, other_field: Field, other_column: u32 },
    #[error("SUPPRESS_UPDATES acts on a service's updates, but {by} (in the {by_field}) makes this an SCI-scope rule")]
    SuppressAtSciScope { by: &'static str, by_field: Field },
}

/// A configuration `Policy::compile` refuses.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum PolicyError {
    #[error("rule {rule}: {error}")]
    Rule { rule: String, error: RuleError },
    #[error("rule name '{0}' must be 1..64 characters")]
    RuleName(String),
    #[error("rule {0} is configured twice")]
    DuplicateRule(String),
    #[error("maintenance window name '{0}' must be 1..64 characters")]
    WindowName(String),
    #[error("maintenance window {0} is configured twice")]
    DuplicateWindow(String),
    #[error("maintenance window {0}: end must be later than start")]
    WindowEndsBeforeStart(String),
    #[error("maintenance window {0}: no days set, the window would never open")]
    WindowNoDays(String),
    #[error("maintenance window {name}: duration must be 1..10080 minutes, got {minutes}")]
    WindowDuration { name: String, minutes: u32 },
    #[error("gas-safety-factor must lie in 0..1, got {0}")]
    SafetyFactor(f64),
    #[error("ema alpha must lie in 0.001..1, got {0}")]
    EmaAlpha(f64),
    #[error("bounds for {0} are configured twice")]
    DuplicateBounds(Metric),
    #[error("bounds for {metric}: min {min} exceeds max {max}")]
    BoundsEmpty { metric: Metric, min: u32, max: u32 },
    #[error("bounds for {metric}: min {min} is above the largest valid value {valid_max}")]
    BoundsOutOfRange { metric: Metric, min: u32, valid_max: u32 },
}

//! The compiled form of a rule (seed 004, "Policy Engine": `IF <condition> THEN <action>`):
//! variables, conditions and actions as typed values, resolved at commit time so that
//! evaluation only matches on small enums. `Display` writes the canonical spelling back.

use std::fmt;

use crate::engine::model::Health;

/// Where a rule is evaluated (see the module documentation of `policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// On each SCI's metrics, before aggregation.
    Sci,
    /// On the aggregate of a CS-ID at this site, after aggregation.
    Site,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Sci => "SCI",
            Scope::Site => "site",
        })
    }
}

/// A numeric metric a rule reads or writes, or a transform bounds (seed 004, "Validator &
/// Sanitizer" ranges).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    Gas,
    ComputingTime,
    Cost,
    Reputation,
    SecurityLabel,
}

impl Metric {
    pub const ALL: [Metric; 5] =
        [Metric::Gas, Metric::ComputingTime, Metric::Cost, Metric::Reputation, Metric::SecurityLabel];

    /// Largest valid value (seed 004: GAS and Cost 0..MAX_UINT32, Computing Time
    /// 0..3600000 ms, Reputation and Security Label 0..10).
    pub fn max(self) -> u32 {
        match self {
            Metric::Gas | Metric::Cost => u32::MAX,
            Metric::ComputingTime => 3_600_000,
            Metric::Reputation | Metric::SecurityLabel => 10,
        }
    }

    /// The cats-sma-types:metric-name value.
    pub fn yang(self) -> &'static str {
        match self {
            Metric::Gas => "gas",
            Metric::ComputingTime => "computing-time",
            Metric::Cost => "cost",
            Metric::Reputation => "reputation",
            Metric::SecurityLabel => "security-label",
        }
    }

    /// From a cats-sma-types:metric-name value; `health` is not numeric and gives `None`.
    pub fn from_yang(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.yang() == s)
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.yang())
    }
}

/// A variable of the rule language, spelled as in seed 004.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Var {
    SiteGas,
    SiteComputingTime,
    SiteHealth,
    SciGas,
    SciComputingTime,
    SciHealth,
    Cost,
    Reputation,
    SecurityLabel,
    Time,
}

/// What kind of value a variable holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarKind {
    Number(Metric),
    Health,
    Time,
}

impl Var {
    const ALL: [Var; 10] = [
        Var::SiteGas,
        Var::SiteComputingTime,
        Var::SiteHealth,
        Var::SciGas,
        Var::SciComputingTime,
        Var::SciHealth,
        Var::Cost,
        Var::Reputation,
        Var::SecurityLabel,
        Var::Time,
    ];

    /// Canonical spelling.
    pub fn name(self) -> &'static str {
        match self {
            Var::SiteGas => "Site_GAS",
            Var::SiteComputingTime => "Site_Computing_Time",
            Var::SiteHealth => "Site_Health",
            Var::SciGas => "SCI_GAS",
            Var::SciComputingTime => "SCI_Computing_Time",
            Var::SciHealth => "SCI_Health",
            Var::Cost => "Cost",
            Var::Reputation => "Reputation",
            Var::SecurityLabel => "Security_Label",
            Var::Time => "Time",
        }
    }

    /// Case-insensitive lookup.
    pub fn lookup(word: &str) -> Option<Var> {
        Var::ALL.into_iter().find(|v| v.name().eq_ignore_ascii_case(word))
    }

    pub fn kind(self) -> VarKind {
        match self {
            Var::SiteGas | Var::SciGas => VarKind::Number(Metric::Gas),
            Var::SiteComputingTime | Var::SciComputingTime => VarKind::Number(Metric::ComputingTime),
            Var::Cost => VarKind::Number(Metric::Cost),
            Var::Reputation => VarKind::Number(Metric::Reputation),
            Var::SecurityLabel => VarKind::Number(Metric::SecurityLabel),
            Var::SiteHealth | Var::SciHealth => VarKind::Health,
            Var::Time => VarKind::Time,
        }
    }

    /// The scope a variable forces on its rule; `None` for variables valid in both.
    pub fn scope(self) -> Option<Scope> {
        match self {
            Var::SiteGas | Var::SiteComputingTime | Var::SiteHealth => Some(Scope::Site),
            Var::SciGas | Var::SciComputingTime | Var::SciHealth => Some(Scope::Sci),
            Var::Cost | Var::Reputation | Var::SecurityLabel | Var::Time => None,
        }
    }
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Comparison operators on numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl CmpOp {
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "=",
            CmpOp::Ne => "!=",
        }
    }

    /// The operator with its operands swapped: `5 < x` is `x > 5`.
    pub fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            CmpOp::Eq => CmpOp::Eq,
            CmpOp::Ne => CmpOp::Ne,
        }
    }

    #[inline]
    pub fn test(self, a: u32, b: u32) -> bool {
        match self {
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
        }
    }
}

/// A compiled condition. `All`/`Any` are n-ary so long AND/OR chains stay flat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cond {
    Const(bool),
    /// `var op value`, `var` numeric.
    Cmp {
        var: Var,
        op: CmpOp,
        value: u32,
    },
    /// `var = value` (`equal`) or `var != value`, `var` a health variable.
    Health {
        var: Var,
        equal: bool,
        value: Health,
    },
    /// `Time IN Maintenance_Window`: any configured window is active.
    InAnyWindow,
    /// `Time IN <name>`: `index` into the policy's maintenance windows.
    InWindow {
        index: u32,
        name: Box<str>,
    },
    Not(Box<Cond>),
    All(Box<[Cond]>),
    Any(Box<[Cond]>),
}

/// A compiled action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Set {
        var: Var,
        value: u32,
    },
    /// `REDUCE var BY p%`, `milli_percent` = p × 1000 in 1..=100 000.
    Reduce {
        var: Var,
        milli_percent: u32,
    },
    Clamp {
        var: Var,
        min: u32,
        max: u32,
    },
    SuppressUpdates,
}

impl Action {
    /// The metric the action writes, if any.
    pub fn target(&self) -> Option<Var> {
        match *self {
            Action::Set { var, .. } | Action::Reduce { var, .. } | Action::Clamp { var, .. } => Some(var),
            Action::SuppressUpdates => None,
        }
    }
}

fn health_word(h: Health) -> &'static str {
    match h {
        Health::Healthy => "HEALTHY",
        Health::Degraded => "DEGRADED",
        Health::Unhealthy => "UNHEALTHY",
    }
}

fn is_plain_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !name.eq_ignore_ascii_case("Maintenance_Window")
}

impl Cond {
    fn fmt_operand(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cond::All(_) | Cond::Any(_) => write!(f, "({self})"),
            _ => write!(f, "{self}"),
        }
    }
}

impl fmt::Display for Cond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cond::Const(true) => f.write_str("TRUE"),
            Cond::Const(false) => f.write_str("FALSE"),
            Cond::Cmp { var, op, value } => write!(f, "{var} {} {value}", op.symbol()),
            Cond::Health { var, equal, value } => {
                write!(f, "{var} {} {}", if *equal { "=" } else { "!=" }, health_word(*value))
            }
            Cond::InAnyWindow => f.write_str("Time IN Maintenance_Window"),
            Cond::InWindow { name, .. } if is_plain_name(name) => write!(f, "Time IN {name}"),
            Cond::InWindow { name, .. } => {
                f.write_str("Time IN \"")?;
                for c in name.chars() {
                    if matches!(c, '"' | '\\') {
                        f.write_str("\\")?;
                    }
                    write!(f, "{c}")?;
                }
                f.write_str("\"")
            }
            Cond::Not(inner) => {
                f.write_str("NOT ")?;
                inner.fmt_operand(f)
            }
            Cond::All(items) | Cond::Any(items) => {
                let sep = if matches!(self, Cond::All(_)) { " AND " } else { " OR " };
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(sep)?;
                    }
                    item.fmt_operand(f)?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Set { var, value } => write!(f, "SET {var} = {value}"),
            Action::Reduce { var, milli_percent } => {
                write!(f, "REDUCE {var} BY {}", milli_percent / 1000)?;
                let frac = milli_percent % 1000;
                if frac != 0 {
                    let digits = format!("{frac:03}");
                    write!(f, ".{}", digits.trim_end_matches('0'))?;
                }
                f.write_str("%")
            }
            Action::Clamp { var, min, max } => write!(f, "CLAMP {var} TO {min}..{max}"),
            Action::SuppressUpdates => f.write_str("SUPPRESS_UPDATES"),
        }
    }
}

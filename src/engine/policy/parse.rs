//! The rule grammar and its type checks (seed 004, "Policy Engine", rule format). Runs at
//! commit time only; every refusal carries the field and column it points at.
//!
//! ```text
//! condition := ["IF"] or
//! or        := and ("OR" and)*
//! and       := not ("AND" not)*
//! not       := "NOT" not | "(" or ")" | "TRUE" | "FALSE" | "Time" "IN" window | operand cmp operand
//! window    := "Maintenance_Window" | name | quoted-name
//! cmp       := "<" | "<=" | ">" | ">=" | "=" | "!="
//! action    := ["THEN"] ( "SET" var "=" n | "REDUCE" var "BY" n "%" | "CLAMP" var "TO" n ".." n
//!                        | "SUPPRESS_UPDATES" )
//! ```
//! Keywords, variables and health constants are case-insensitive; window names are not.

use super::error::{Field, RuleError, RuleErrorKind};
use super::lex::{lex, Tok, Token};
use super::rule::{Action, CmpOp, Cond, Metric, Scope, Var, VarKind};
use super::window::MaintenanceWindow;
use crate::engine::model::Health;

/// Longest condition or action accepted (the YANG `length "1..1024"`).
pub const MAX_LEN: usize = 1024;
/// Deepest nesting of parentheses and NOTs; keeps parsing and evaluation recursion bounded.
pub const MAX_DEPTH: usize = 32;

const KEYWORDS: [&str; 15] = [
    "IF",
    "THEN",
    "AND",
    "OR",
    "NOT",
    "TRUE",
    "FALSE",
    "IN",
    "SET",
    "REDUCE",
    "BY",
    "CLAMP",
    "TO",
    "SUPPRESS_UPDATES",
    "MAINTENANCE_WINDOW",
];

/// A rule that parsed and type-checked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ParsedRule {
    pub condition: Cond,
    pub action: Action,
    pub scope: Scope,
}

/// A variable as written, for the scope checks that need both fields.
#[derive(Clone, Copy)]
struct Mention {
    var: Var,
    field: Field,
    column: u32,
}

/// Parses and checks one rule; `windows` are the configured maintenance windows that
/// `Time IN <name>` may refer to.
pub(crate) fn parse_rule(
    condition: &str,
    action: &str,
    windows: &[MaintenanceWindow],
) -> Result<ParsedRule, RuleError> {
    let mut mentions = Vec::new();
    let cond = Parser::new(condition, Field::Condition, windows)?.condition(&mut mentions)?;
    let p = Parser::new(action, Field::Action, windows)?;
    let suppress_column = p.peek_after_then_column();
    let action = p.action(&mut mentions)?;

    let mut first_sci: Option<Mention> = None;
    let mut first_site: Option<Mention> = None;
    for m in &mentions {
        let (mine, other) = match m.var.scope() {
            Some(Scope::Sci) => (&mut first_sci, first_site),
            Some(Scope::Site) => (&mut first_site, first_sci),
            None => continue,
        };
        if let Some(o) = other {
            return Err(RuleError {
                field: m.field,
                column: m.column,
                kind: RuleErrorKind::MixedScope {
                    here: m.var.name(),
                    other: o.var.name(),
                    other_field: o.field,
                    other_column: o.column,
                },
            });
        }
        mine.get_or_insert(*m);
    }
    let scope = match first_sci {
        Some(by) => {
            if action == Action::SuppressUpdates {
                return Err(RuleError {
                    field: Field::Action,
                    column: suppress_column,
                    kind: RuleErrorKind::SuppressAtSciScope { by: by.var.name(), by_field: by.field },
                });
            }
            Scope::Sci
        }
        None => Scope::Site,
    };
    Ok(ParsedRule { condition: cond, action, scope })
}

struct Parser<'a, 'w> {
    toks: Vec<Token<'a>>,
    pos: usize,
    field: Field,
    depth: usize,
    windows: &'w [MaintenanceWindow],
}

/// One side of a comparison.
enum Operand<'a> {
    Var(Var),
    Value(Value<'a>),
}

/// A constant side of a comparison.
enum Value<'a> {
    /// Whole and fractional digits, as written.
    Number(&'a str, &'a str),
    /// The value and its canonical spelling.
    Health(Health, &'static str),
}

impl<'a, 'w> Parser<'a, 'w> {
    fn new(src: &'a str, field: Field, windows: &'w [MaintenanceWindow]) -> Result<Self, RuleError> {
        if src.chars().count() > MAX_LEN {
            let column = u32::try_from(MAX_LEN + 1).unwrap_or(u32::MAX);
            return Err(RuleError { field, column, kind: RuleErrorKind::TooLong { max: MAX_LEN } });
        }
        let toks = lex(src).map_err(|(column, kind)| RuleError { field, column, kind })?;
        Ok(Parser { toks, pos: 0, field, depth: 0, windows })
    }

    fn peek(&self) -> &Token<'a> {
        // The token list always ends with End, and `pos` never moves past it.
        &self.toks[self.pos.min(self.toks.len() - 1)]
    }

    fn bump(&mut self) -> Token<'a> {
        let t = self.peek().clone();
        if t.tok != Tok::End {
            self.pos += 1;
        }
        t
    }

    fn at_word(&self, keyword: &str) -> bool {
        matches!(self.peek().tok, Tok::Word(w) if w.eq_ignore_ascii_case(keyword))
    }

    fn eat_word(&mut self, keyword: &str) -> bool {
        let hit = self.at_word(keyword);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn error(&self, column: u32, kind: RuleErrorKind) -> RuleError {
        RuleError { field: self.field, column, kind }
    }

    fn expected(&self, expected: &'static str) -> RuleError {
        let end = match self.field {
            Field::Condition => "end of condition",
            Field::Action => "end of action",
        };
        let t = self.peek();
        self.error(t.column, RuleErrorKind::Expected { expected, found: t.tok.describe(end) })
    }

    fn expect(&mut self, tok: Tok<'static>, expected: &'static str) -> Result<(), RuleError> {
        if self.peek().tok == tok {
            self.bump();
            Ok(())
        } else {
            Err(self.expected(expected))
        }
    }

    fn expect_word(&mut self, keyword: &str, expected: &'static str) -> Result<(), RuleError> {
        if self.eat_word(keyword) {
            Ok(())
        } else {
            Err(self.expected(expected))
        }
    }

    /// Enters one nesting level opened by the token at `column`.
    fn enter(&mut self, column: u32) -> Result<(), RuleError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(column, RuleErrorKind::TooDeep { max: MAX_DEPTH }));
        }
        Ok(())
    }

    // ---- conditions ----

    fn condition(mut self, mentions: &mut Vec<Mention>) -> Result<Cond, RuleError> {
        if self.peek().tok == Tok::End {
            return Err(self.error(1, RuleErrorKind::EmptyCondition));
        }
        self.eat_word("IF");
        let cond = self.or(mentions)?;
        if self.at_word("THEN") {
            return Err(self.error(self.peek().column, RuleErrorKind::ThenInCondition));
        }
        if self.peek().tok != Tok::End {
            return Err(self.expected("AND, OR or end of condition"));
        }
        Ok(cond)
    }

    fn or(&mut self, mentions: &mut Vec<Mention>) -> Result<Cond, RuleError> {
        let mut items = vec![self.and(mentions)?];
        while self.eat_word("OR") {
            items.push(self.and(mentions)?);
        }
        Ok(if items.len() == 1 { items.remove(0) } else { Cond::Any(items.into_boxed_slice()) })
    }

    fn and(&mut self, mentions: &mut Vec<Mention>) -> Result<Cond, RuleError> {
        let mut items = vec![self.not(mentions)?];
        while self.eat_word("AND") {
            items.push(self.not(mentions)?);
        }
        Ok(if items.len() == 1 { items.remove(0) } else { Cond::All(items.into_boxed_slice()) })
    }

    fn not(&mut self, mentions: &mut Vec<Mention>) -> Result<Cond, RuleError> {
        let column = self.peek().column;
        if self.eat_word("NOT") {
            self.enter(column)?;
            let inner = self.not(mentions)?;
            self.depth -= 1;
            return Ok(Cond::Not(Box::new(inner)));
        }
        if self.peek().tok == Tok::LParen {
            self.bump();
            self.enter(column)?;
            let inner = self.or(mentions)?;
            self.expect(Tok::RParen, "')'")?;
            self.depth -= 1;
            return Ok(inner);
        }
        if self.eat_word("TRUE") {
            return Ok(Cond::Const(true));
        }
        if self.eat_word("FALSE") {
            return Ok(Cond::Const(false));
        }
        self.comparison(mentions)
    }

    fn comparison(&mut self, mentions: &mut Vec<Mention>) -> Result<Cond, RuleError> {
        let left_column = self.peek().column;
        let left = self.operand(mentions)?;
        if let Operand::Var(Var::Time) = left {
            if !self.eat_word("IN") {
                return Err(self.error(left_column, RuleErrorKind::TimeWithoutIn));
            }
            return self.window();
        }
        let op_column = self.peek().column;
        let op = match self.peek().tok {
            Tok::Lt => CmpOp::Lt,
            Tok::Le => CmpOp::Le,
            Tok::Gt => CmpOp::Gt,
            Tok::Ge => CmpOp::Ge,
            Tok::Eq => CmpOp::Eq,
            Tok::Ne => CmpOp::Ne,
            _ => return Err(self.expected("a comparison operator (<, <=, >, >=, =, !=)")),
        };
        self.bump();
        let right_column = self.peek().column;
        let right = self.operand(mentions)?;
        let (var, var_column, op, value, value_column) = match (left, right) {
            (Operand::Var(_), Operand::Var(v)) => {
                return Err(self.error(right_column, RuleErrorKind::TwoVariables(v.name())));
            }
            (Operand::Var(v), Operand::Value(value)) => (v, left_column, op, value, right_column),
            (Operand::Value(value), Operand::Var(v)) => (v, right_column, op.flipped(), value, left_column),
            (Operand::Value(_), Operand::Value(_)) => return Err(self.error(left_column, RuleErrorKind::NoVariable)),
        };
        match (var.kind(), value) {
            (VarKind::Time, _) => Err(self.error(var_column, RuleErrorKind::TimeWithoutIn)),
            (VarKind::Number(metric), Value::Number(whole, frac)) => {
                let value = self.whole_number(var, metric, whole, frac, value_column)?;
                Ok(Cond::Cmp { var, op, value })
            }
            (VarKind::Number(_), Value::Health(_, word)) => {
                Err(self.error(value_column, RuleErrorKind::HealthForNumber { var: var.name(), found: word }))
            }
            (VarKind::Health, value) => {
                let equal = match op {
                    CmpOp::Eq => true,
                    CmpOp::Ne => false,
                    _ => return Err(self.error(op_column, RuleErrorKind::HealthOrdering { var: var.name() })),
                };
                match value {
                    Value::Health(h, _) => Ok(Cond::Health { var, equal, value: h }),
                    Value::Number(whole, frac) => Err(self.error(
                        value_column,
                        RuleErrorKind::NumberForHealth { var: var.name(), found: number_text(whole, frac) },
                    )),
                }
            }
        }
    }

    fn operand(&mut self, mentions: &mut Vec<Mention>) -> Result<Operand<'a>, RuleError> {
        const EXPECTED: &str = "a variable, a number or a health status";
        let t = self.peek().clone();
        match t.tok {
            Tok::Word(w) => {
                if let Some(var) = Var::lookup(w) {
                    self.bump();
                    mentions.push(Mention { var, field: self.field, column: t.column });
                    return Ok(Operand::Var(var));
                }
                for (h, word) in
                    [(Health::Healthy, "HEALTHY"), (Health::Degraded, "DEGRADED"), (Health::Unhealthy, "UNHEALTHY")]
                {
                    if w.eq_ignore_ascii_case(word) {
                        self.bump();
                        return Ok(Operand::Value(Value::Health(h, word)));
                    }
                }
                if KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(w)) {
                    return Err(self.expected(EXPECTED));
                }
                Err(self.error(t.column, RuleErrorKind::UnknownVariable(w.to_string())))
            }
            Tok::Number { whole, frac } => {
                self.bump();
                Ok(Operand::Value(Value::Number(whole, frac)))
            }
            _ => Err(self.expected(EXPECTED)),
        }
    }

    fn window(&mut self) -> Result<Cond, RuleError> {
        let t = self.peek().clone();
        let name: &str = match &t.tok {
            Tok::Word(w) if w.eq_ignore_ascii_case("Maintenance_Window") => {
                self.bump();
                return Ok(Cond::InAnyWindow);
            }
            Tok::Word(w) => w,
            Tok::Quoted(s) => s,
            _ => return Err(self.expected("Maintenance_Window or a maintenance window name")),
        };
        let Some(index) = self.windows.iter().position(|w| w.name == name) else {
            return Err(self.error(t.column, RuleErrorKind::UnknownWindow(name.to_string())));
        };
        self.bump();
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        Ok(Cond::InWindow { index, name: name.into() })
    }

    // ---- actions ----

    /// Column of the action keyword, for errors about the action as a whole.
    fn peek_after_then_column(&self) -> u32 {
        match self.toks.as_slice() {
            [Token { tok: Tok::Word(w), .. }, next, ..] if w.eq_ignore_ascii_case("THEN") => next.column,
            [first, ..] => first.column,
            [] => 1,
        }
    }

    fn action(mut self, mentions: &mut Vec<Mention>) -> Result<Action, RuleError> {
        if self.peek().tok == Tok::End {
            return Err(self.error(1, RuleErrorKind::EmptyAction));
        }
        self.eat_word("THEN");
        let action = if self.eat_word("SET") {
            let (var, metric) = self.target(mentions)?;
            self.expect(Tok::Eq, "'='")?;
            let (whole, frac, column) = self.number()?;
            Action::Set { var, value: self.whole_number(var, metric, whole, frac, column)? }
        } else if self.eat_word("REDUCE") {
            let (var, _) = self.target(mentions)?;
            self.expect_word("BY", "BY")?;
            let (whole, frac, column) = self.number()?;
            let milli_percent = milli_percent(whole, frac)
                .ok_or_else(|| self.error(column, RuleErrorKind::BadPercentage(number_text(whole, frac))))?;
            self.expect(Tok::Percent, "'%'")?;
            Action::Reduce { var, milli_percent }
        } else if self.eat_word("CLAMP") {
            let (var, metric) = self.target(mentions)?;
            self.expect_word("TO", "TO")?;
            let (whole, frac, min_column) = self.number()?;
            let min = self.whole_number(var, metric, whole, frac, min_column)?;
            self.expect(Tok::DotDot, "'..'")?;
            let (whole, frac, column) = self.number()?;
            let max = self.whole_number(var, metric, whole, frac, column)?;
            if min > max {
                return Err(self.error(min_column, RuleErrorKind::EmptyRange { min, max }));
            }
            Action::Clamp { var, min, max }
        } else if self.eat_word("SUPPRESS_UPDATES") {
            Action::SuppressUpdates
        } else {
            return Err(self.expected("SET, REDUCE, CLAMP or SUPPRESS_UPDATES"));
        };
        if self.peek().tok != Tok::End {
            return Err(self.expected("end of action"));
        }
        Ok(action)
    }

    fn target(&mut self, mentions: &mut Vec<Mention>) -> Result<(Var, Metric), RuleError> {
        let t = self.peek().clone();
        let Tok::Word(w) = t.tok else {
            return Err(self.expected("a variable"));
        };
        let Some(var) = Var::lookup(w) else {
            if KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(w)) {
                return Err(self.expected("a variable"));
            }
            return Err(self.error(t.column, RuleErrorKind::UnknownVariable(w.to_string())));
        };
        let VarKind::Number(metric) = var.kind() else {
            return Err(self.error(t.column, RuleErrorKind::NotAssignable(var.name())));
        };
        self.bump();
        mentions.push(Mention { var, field: self.field, column: t.column });
        Ok((var, metric))
    }

    fn number(&mut self) -> Result<(&'a str, &'a str, u32), RuleError> {
        let t = self.peek().clone();
        match t.tok {
            Tok::Number { whole, frac } => {
                self.bump();
                Ok((whole, frac, t.column))
            }
            _ => Err(self.expected("a number")),
        }
    }

    /// A constant for `var`: whole, and within the metric's valid range.
    fn whole_number(&self, var: Var, metric: Metric, whole: &str, frac: &str, column: u32) -> Result<u32, RuleError> {
        if frac.bytes().any(|b| b != b'0') {
            return Err(
                self.error(column, RuleErrorKind::NotWhole { var: var.name(), found: number_text(whole, frac) })
            );
        }
        let digits = whole.trim_start_matches('0');
        let value = match digits.len() {
            0 => Some(0),
            1..=10 => digits.parse::<u64>().ok(),
            _ => None,
        };
        match value.and_then(|v| u32::try_from(v).ok()).filter(|&v| v <= metric.max()) {
            Some(v) => Ok(v),
            None => Err(self.error(
                column,
                RuleErrorKind::OutOfRange { var: var.name(), max: metric.max(), found: number_text(whole, frac) },
            )),
        }
    }
}

/// `p` in thousandths of a percent, for 0 < p <= 100 with at most three decimals.
fn milli_percent(whole: &str, frac: &str) -> Option<u32> {
    let frac = frac.trim_end_matches('0');
    let digits = whole.trim_start_matches('0');
    if frac.len() > 3 || digits.len() > 3 {
        return None;
    }
    let whole: u32 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
    let mut thousandths = 0;
    for (i, b) in frac.bytes().enumerate() {
        thousandths += u32::from(b - b'0') * [100, 10, 1][i];
    }
    Some(whole * 1000 + thousandths).filter(|&m| m > 0 && m <= 100_000)
}

fn number_text(whole: &str, frac: &str) -> String {
    if frac.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::policy::window::{Schedule, Suppress, TimeOfDay, Weekdays};

    fn windows() -> Vec<MaintenanceWindow> {
        ["nightly", "patch tuesday"]
            .into_iter()
            .map(|name| MaintenanceWindow {
                name: name.into(),
                schedule: Schedule::Recurring {
                    days: Weekdays::from_bits(0x7f),
                    start: TimeOfDay::new(2, 0).unwrap(),
                    duration_minutes: 60,
                },
                suppress: Suppress::NonCritical,
            })
            .collect()
    }

    fn ok(condition: &str, action: &str) -> ParsedRule {
        parse_rule(condition, action, &windows()).unwrap_or_else(|e| panic!("{condition} / {action}: {e}"))
    }

    fn err(condition: &str, action: &str) -> (Field, u32, RuleErrorKind) {
        let e = parse_rule(condition, action, &windows()).expect_err(condition);
        (e.field, e.column, e.kind)
    }

    fn cond_err(condition: &str) -> (u32, RuleErrorKind) {
        let (field, column, kind) = err(condition, "SET Cost = 1");
        assert_eq!(field, Field::Condition, "{condition}");
        (column, kind)
    }

    fn action_err(action: &str) -> (u32, RuleErrorKind) {
        let (field, column, kind) = err("TRUE", action);
        assert_eq!(field, Field::Action, "{action}");
        (column, kind)
    }

    #[test]
    fn seed_policy_engine_examples_parse() {
        let r = ok("Site_GAS < 100", "SET Security_Label = 5");
        assert_eq!(r.condition, Cond::Cmp { var: Var::SiteGas, op: CmpOp::Lt, value: 100 });
        assert_eq!(r.action, Action::Set { var: Var::SecurityLabel, value: 5 });
        assert_eq!(r.scope, Scope::Site);

        let r = ok("SCI_Health = DEGRADED", "REDUCE SCI_GAS BY 50%");
        assert_eq!(r.condition, Cond::Health { var: Var::SciHealth, equal: true, value: Health::Degraded });
        assert_eq!(r.action, Action::Reduce { var: Var::SciGas, milli_percent: 50_000 });
        assert_eq!(r.scope, Scope::Sci);

        let r = ok("Time IN Maintenance_Window", "SUPPRESS_UPDATES");
        assert_eq!((r.condition, r.action, r.scope), (Cond::InAnyWindow, Action::SuppressUpdates, Scope::Site));

        let r = ok("Cost > 100", "SET Cost = 100");
        assert_eq!(r.condition, Cond::Cmp { var: Var::Cost, op: CmpOp::Gt, value: 100 });
        assert_eq!(r.scope, Scope::Site);
    }

    #[test]
    fn seed_rule_format_if_then_keywords_are_optional_and_case_is_free() {
        assert_eq!(
            ok("IF Site_GAS < 100", "THEN SET Security_Label = 5"),
            ok("Site_GAS < 100", "SET Security_Label = 5")
        );
        assert_eq!(
            ok("if site_gas < 100", "then set SECURITY_LABEL = 5"),
            ok("Site_GAS < 100", "SET Security_Label = 5")
        );
        assert_eq!(
            ok("sci_health = degraded", "reduce sci_gas by 50%").condition,
            ok("SCI_Health = DEGRADED", "SET SCI_GAS = 1").condition
        );
    }

    #[test]
    fn constant_first_comparisons_are_flipped() {
        assert_eq!(ok("100 > Site_GAS", "SET Cost = 1").condition, ok("Site_GAS < 100", "SET Cost = 1").condition);
        assert_eq!(
            ok("DEGRADED != SCI_Health", "SET SCI_GAS = 1").condition,
            Cond::Health { var: Var::SciHealth, equal: false, value: Health::Degraded }
        );
    }

    #[test]
    fn boolean_structure_and_precedence() {
        let r = ok("NOT Site_GAS < 5 AND (Cost = 1 OR TRUE) OR FALSE", "SET Cost = 2");
        assert_eq!(
            r.condition,
            Cond::Any(Box::new([
                Cond::All(Box::new([
                    Cond::Not(Box::new(Cond::Cmp { var: Var::SiteGas, op: CmpOp::Lt, value: 5 })),
                    Cond::Any(Box::new([Cond::Cmp { var: Var::Cost, op: CmpOp::Eq, value: 1 }, Cond::Const(true)])),
                ])),
                Cond::Const(false),
            ]))
        );
    }

    #[test]
    fn named_and_quoted_windows_resolve_to_their_index() {
        assert_eq!(
            ok("Time IN nightly", "SUPPRESS_UPDATES").condition,
            Cond::InWindow { index: 0, name: "nightly".into() }
        );
        assert_eq!(
            ok("time in 'patch tuesday'", "SUPPRESS_UPDATES").condition,
            Cond::InWindow { index: 1, name: "patch tuesday".into() }
        );
    }

    #[test]
    fn actions_reduce_clamp_and_decimals() {
        assert_eq!(
            ok("TRUE", "REDUCE Site_GAS BY 12.5%").action,
            Action::Reduce { var: Var::SiteGas, milli_percent: 12_500 }
        );
        assert_eq!(
            ok("TRUE", "REDUCE Site_GAS BY 100%").action,
            Action::Reduce { var: Var::SiteGas, milli_percent: 100_000 }
        );
        assert_eq!(
            ok("TRUE", "CLAMP Site_Computing_Time TO 1..10000").action,
            Action::Clamp { var: Var::SiteComputingTime, min: 1, max: 10_000 }
        );
        assert_eq!(ok("TRUE", "SET Cost = 4294967295").action, Action::Set { var: Var::Cost, value: u32::MAX });
        assert_eq!(ok("Site_GAS > 7.000", "SET Cost = 007").condition, ok("Site_GAS > 7", "SET Cost = 7").condition);
    }

    #[test]
    fn scope_follows_the_variables_mentioned() {
        assert_eq!(ok("Cost > 1", "SET SCI_GAS = 0").scope, Scope::Sci, "an SCI_ target makes the rule SCI-scope");
        assert_eq!(ok("Reputation < 3", "SET SCI_GAS = 0").scope, Scope::Sci);
        assert_eq!(ok("Reputation < 3 AND SCI_GAS > 0", "SET Reputation = 3").scope, Scope::Sci);
        assert_eq!(ok("TRUE", "SET Cost = 1").scope, Scope::Site);
        assert_eq!(ok("Time IN nightly", "SET Security_Label = 0").scope, Scope::Site);
    }

    #[test]
    fn display_writes_canonical_text_that_parses_back() {
        for (c, a) in [
            ("if not (site_gas<5 or cost!=3) and time in 'patch tuesday'", "then reduce site_gas by 12.50%"),
            ("Site_Health = healthy OR 10 <= Site_Computing_Time", "clamp cost to 0..10"),
            ("sci_health != unhealthy AND NOT NOT TRUE", "SET SCI_Computing_Time = 3600000"),
        ] {
            let r = ok(c, a);
            let again = ok(&r.condition.to_string(), &r.action.to_string());
            assert_eq!(r, again, "{} / {}", r.condition, r.action);
        }
        let r = ok("IF NOT (Site_GAS < 5 OR Cost != 3)", "REDUCE Site_GAS BY 12.5%");
        assert_eq!(r.condition.to_string(), "NOT (Site_GAS < 5 OR Cost != 3)");
        assert_eq!(r.action.to_string(), "REDUCE Site_GAS BY 12.5%");
    }

    // ---- every error class, with its column ----

    #[test]
    fn error_empty_fields() {
        assert_eq!(cond_err(""), (1, RuleErrorKind::EmptyCondition));
        assert_eq!(cond_err("   "), (1, RuleErrorKind::EmptyCondition));
        assert_eq!(action_err(""), (1, RuleErrorKind::EmptyAction));
        let (column, kind) = action_err("THEN");
        assert_eq!(column, 5);
        assert!(matches!(kind, RuleErrorKind::Expected { found, .. } if found == "end of action"));
    }

    #[test]
    fn error_too_long() {
        let long = format!("Site_GAS < 1{}", " ".repeat(1100));
        assert_eq!(cond_err(&long), (1025, RuleErrorKind::TooLong { max: 1024 }));
    }

    #[test]
    fn error_lexical() {
        assert_eq!(cond_err("Site_GAS < 1#"), (13, RuleErrorKind::UnexpectedChar('#')));
        assert_eq!(cond_err("Site_GAS == 1"), (10, RuleErrorKind::ForeignOperator { found: "==", instead: "'='" }));
        assert_eq!(cond_err("Site_GAS <> 1"), (10, RuleErrorKind::ForeignOperator { found: "<>", instead: "'!='" }));
        assert_eq!(cond_err("TRUE || FALSE"), (6, RuleErrorKind::ForeignOperator { found: "||", instead: "OR" }));
        assert_eq!(cond_err("Time IN \"nightly"), (9, RuleErrorKind::UnterminatedQuote));
        assert_eq!(cond_err("Site_GAS < 1é"), (13, RuleErrorKind::UnexpectedChar('é')));
    }

    #[test]
    fn error_syntax_expected() {
        let (column, kind) = cond_err("Site_GAS 100");
        assert_eq!(column, 10);
        assert_eq!(kind.to_string(), "expected a comparison operator (<, <=, >, >=, =, !=), found '100'");
        let (column, kind) = cond_err("(Site_GAS < 1");
        assert_eq!((column, kind.to_string()), (14, "expected ')', found end of condition".into()));
        let (column, kind) = cond_err("Site_GAS < 1 Cost > 2");
        assert_eq!((column, kind.to_string()), (14, "expected AND, OR or end of condition, found 'Cost'".into()));
        let (column, kind) = cond_err("Site_GAS < AND");
        assert_eq!(
            (column, kind.to_string()),
            (12, "expected a variable, a number or a health status, found 'AND'".into())
        );
        let (column, kind) = action_err("SET Cost 5");
        assert_eq!((column, kind.to_string()), (10, "expected '=', found '5'".into()));
        let (column, kind) = action_err("REDUCE Cost 5%");
        assert_eq!((column, kind.to_string()), (13, "expected BY, found '5'".into()));
        let (column, kind) = action_err("REDUCE Cost BY 5");
        assert_eq!((column, kind.to_string()), (17, "expected '%', found end of action".into()));
        let (column, kind) = action_err("CLAMP Cost TO 1 5");
        assert_eq!((column, kind.to_string()), (17, "expected '..', found '5'".into()));
        let (column, kind) = action_err("DELETE Cost");
        assert_eq!(
            (column, kind.to_string()),
            (1, "expected SET, REDUCE, CLAMP or SUPPRESS_UPDATES, found 'DELETE'".into())
        );
        let (column, kind) = action_err("SUPPRESS_UPDATES now");
        assert_eq!((column, kind.to_string()), (18, "expected end of action, found 'now'".into()));
        let (column, kind) = action_err("SET = 5");
        assert_eq!((column, kind.to_string()), (5, "expected a variable, found '='".into()));
    }

    #[test]
    fn error_unknown_variable() {
        assert_eq!(cond_err("Site_Gass < 1"), (1, RuleErrorKind::UnknownVariable("Site_Gass".into())));
        assert_eq!(action_err("SET Price = 1"), (5, RuleErrorKind::UnknownVariable("Price".into())));
    }

    #[test]
    fn error_then_in_condition() {
        assert_eq!(cond_err("IF Site_GAS < 100 THEN SET Cost = 1"), (19, RuleErrorKind::ThenInCondition));
    }

    #[test]
    fn error_too_deep() {
        let deep = format!("{}TRUE{}", "(".repeat(40), ")".repeat(40));
        assert_eq!(cond_err(&deep), (33, RuleErrorKind::TooDeep { max: MAX_DEPTH }));
        let nots = "NOT ".repeat(40) + "TRUE";
        assert_eq!(cond_err(&nots), (129, RuleErrorKind::TooDeep { max: MAX_DEPTH }));
        let fine = format!("{}TRUE{}", "(".repeat(32), ")".repeat(32));
        ok(&fine, "SET Cost = 1");
    }

    #[test]
    fn error_types() {
        assert_eq!(cond_err("SCI_Health < 5"), (12, RuleErrorKind::HealthOrdering { var: "SCI_Health" }));
        assert_eq!(
            cond_err("SCI_GAS = DEGRADED"),
            (11, RuleErrorKind::HealthForNumber { var: "SCI_GAS", found: "DEGRADED" })
        );
        assert_eq!(
            cond_err("SCI_Health = 5"),
            (14, RuleErrorKind::NumberForHealth { var: "SCI_Health", found: "5".into() })
        );
        assert_eq!(cond_err("Time < 5"), (1, RuleErrorKind::TimeWithoutIn));
        assert_eq!(cond_err("5 < Time"), (5, RuleErrorKind::TimeWithoutIn));
        assert_eq!(cond_err("5 < 6"), (1, RuleErrorKind::NoVariable));
        assert_eq!(cond_err("HEALTHY = DEGRADED"), (1, RuleErrorKind::NoVariable));
        assert_eq!(cond_err("SCI_GAS < SCI_Computing_Time"), (11, RuleErrorKind::TwoVariables("SCI_Computing_Time")));
        assert_eq!(cond_err("Time IN weekly"), (9, RuleErrorKind::UnknownWindow("weekly".into())));
        assert_eq!(cond_err("Time IN Nightly"), (9, RuleErrorKind::UnknownWindow("Nightly".into())), "names are exact");
        assert_eq!(action_err("SET SCI_Health = 1"), (5, RuleErrorKind::NotAssignable("SCI_Health")));
        assert_eq!(action_err("SET Time = 1"), (5, RuleErrorKind::NotAssignable("Time")));
    }

    #[test]
    fn error_constants_out_of_the_seed_ranges() {
        let e = parse_rule("TRUE", "SET Security_Label = 11", &[]).unwrap_err();
        assert_eq!(e.to_string(), "action, column 22: Security_Label takes 0..10, got 11");
        assert_eq!(
            cond_err("Site_GAS < 4294967296"),
            (12, RuleErrorKind::OutOfRange { var: "Site_GAS", max: u32::MAX, found: "4294967296".into() })
        );
        assert_eq!(
            action_err("SET Site_Computing_Time = 3600001"),
            (27, RuleErrorKind::OutOfRange { var: "Site_Computing_Time", max: 3_600_000, found: "3600001".into() })
        );
        assert_eq!(
            action_err("CLAMP Reputation TO 0..99999999999999999999999"),
            (24, RuleErrorKind::OutOfRange { var: "Reputation", max: 10, found: "99999999999999999999999".into() })
        );
        assert_eq!(cond_err("Site_GAS < 1.5"), (12, RuleErrorKind::NotWhole { var: "Site_GAS", found: "1.5".into() }));
        assert_eq!(action_err("SET Cost = 0.25"), (12, RuleErrorKind::NotWhole { var: "Cost", found: "0.25".into() }));
    }

    #[test]
    fn error_bad_percentages_and_ranges() {
        assert_eq!(action_err("REDUCE Site_GAS BY 0%"), (20, RuleErrorKind::BadPercentage("0".into())));
        assert_eq!(action_err("REDUCE Site_GAS BY 100.001%"), (20, RuleErrorKind::BadPercentage("100.001".into())));
        assert_eq!(action_err("REDUCE Site_GAS BY 12.3456%"), (20, RuleErrorKind::BadPercentage("12.3456".into())));
        assert_eq!(action_err("CLAMP Cost TO 10..5"), (15, RuleErrorKind::EmptyRange { min: 10, max: 5 }));
    }

    #[test]
    fn error_mixed_scope_names_both_places() {
        let (field, column, kind) = err("SCI_Health = DEGRADED", "REDUCE Site_GAS BY 10%");
        assert_eq!((field, column), (Field::Action, 8));
        assert_eq!(
            kind.to_string(),
            "cannot mix SCI_ and Site_ variables in one rule: Site_GAS here, SCI_Health in the condition at column 1"
        );
        let (field, column, _) = err("Site_GAS > 0 AND SCI_GAS > 0", "SET Cost = 1");
        assert_eq!((field, column), (Field::Condition, 18));
    }

    #[test]
    fn seed004_policy_engine_reputation_at_site_scope() {
        // Site metrics carry the lowest reputation of the contributing SCIs (aggregate.rs).
        assert_eq!(ok("Reputation < 3", "SET Cost = 1").scope, Scope::Site);
        assert_eq!(ok("Site_GAS > 3", "SET Reputation = 1").scope, Scope::Site);
    }

    #[test]
    fn error_suppress_updates_at_sci_scope() {
        assert_eq!(
            err("SCI_Health = UNHEALTHY", "THEN SUPPRESS_UPDATES"),
            (Field::Action, 6, RuleErrorKind::SuppressAtSciScope { by: "SCI_Health", by_field: Field::Condition })
        );
    }

    use crate::testing::Rng;

    const VARS: [&str; 10] = [
        "Site_GAS",
        "site_computing_time",
        "Site_Health",
        "SCI_GAS",
        "SCI_Computing_Time",
        "sci_health",
        "Cost",
        "Reputation",
        "Security_Label",
        "Time",
    ];
    const NUMBERS: [&str; 8] = ["0", "5", "10", "11", "100", "3600001", "4294967295", "2.5"];

    fn gen_cond(rng: &mut Rng, depth: usize) -> String {
        match rng.below(if depth > 3 { 3 } else { 7 }) {
            0 => {
                let ops = ["<", "<=", ">", ">=", "=", "!="];
                let (v, op, n) = (VARS[rng.below(10)], ops[rng.below(6)], NUMBERS[rng.below(8)]);
                if rng.below(4) == 0 {
                    format!("{n} {op} {v}")
                } else {
                    format!("{v} {op} {n}")
                }
            }
            1 => {
                let h = ["HEALTHY", "degraded", "Unhealthy"][rng.below(3)];
                format!("{} {} {h}", ["SCI_Health", "Site_Health"][rng.below(2)], ["=", "!="][rng.below(2)])
            }
            2 => ["Time IN Maintenance_Window", "Time IN nightly", "TIME in 'patch tuesday'", "TRUE"][rng.below(4)]
                .into(),
            3 => format!("NOT {}", gen_cond(rng, depth + 1)),
            4 => format!("({})", gen_cond(rng, depth + 1)),
            5 => format!("{} AND {}", gen_cond(rng, depth + 1), gen_cond(rng, depth + 1)),
            _ => format!("{} OR {}", gen_cond(rng, depth + 1), gen_cond(rng, depth + 1)),
        }
    }

    fn gen_action(rng: &mut Rng) -> String {
        let v = VARS[rng.below(9)];
        match rng.below(4) {
            0 => format!("SET {v} = {}", NUMBERS[rng.below(8)]),
            1 => format!("REDUCE {v} BY {}%", ["50", "12.5", "100", "0.001"][rng.below(4)]),
            2 => format!("CLAMP {v} TO {}..{}", NUMBERS[rng.below(4)], NUMBERS[rng.below(8)]),
            _ => "THEN SUPPRESS_UPDATES".into(),
        }
    }

    /// Deletes, inserts or replaces one character.
    fn mutate(rng: &mut Rng, s: &str) -> String {
        let mut chars: Vec<char> = s.chars().collect();
        let at = rng.below(chars.len() + 1);
        let c = "()<>=!.%'\"_ aZ9é\u{0}"[..].chars().nth(rng.below(17)).unwrap_or('x');
        match rng.below(3) {
            0 if at < chars.len() => {
                chars.remove(at);
            }
            1 if at < chars.len() => chars[at] = c,
            _ => chars.insert(at, c),
        }
        chars.into_iter().collect()
    }

    #[test]
    fn fuzz_random_input_never_panics() {
        const PIECES: [&str; 48] = [
            "IF",
            "THEN",
            "AND",
            "OR",
            "NOT",
            "TRUE",
            "FALSE",
            "(",
            ")",
            "Site_GAS",
            "SCI_GAS",
            "SCI_Health",
            "Site_Health",
            "Cost",
            "Reputation",
            "Security_Label",
            "Time",
            "IN",
            "Maintenance_Window",
            "nightly",
            "'patch tuesday'",
            "\"",
            "'",
            "\\",
            "<",
            "<=",
            ">",
            ">=",
            "=",
            "!=",
            "!",
            "==",
            "..",
            ".",
            "%",
            "SET",
            "REDUCE",
            "BY",
            "CLAMP",
            "TO",
            "SUPPRESS_UPDATES",
            "DEGRADED",
            "0",
            "100",
            "4294967296",
            "1.5",
            "99999999999999999999999999",
            "é",
        ];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let windows = windows();
        for _ in 0..20_000 {
            let mut cond = String::new();
            let mut action = String::new();
            for s in [&mut cond, &mut action] {
                for _ in 0..rng.below(12) {
                    if rng.below(5) == 0 {
                        // Any character, including control and non-ASCII ones.
                        s.push(char::from_u32(rng.below(0x3000) as u32).unwrap_or('?'));
                    } else {
                        s.push_str(PIECES[rng.below(PIECES.len())]);
                    }
                    if rng.below(3) != 0 {
                        s.push(' ');
                    }
                }
            }
            if let Ok(r) = parse_rule(&cond, &action, &windows) {
                let again = parse_rule(&r.condition.to_string(), &r.action.to_string(), &windows);
                assert_eq!(again.as_ref(), Ok(&r), "{cond:?} / {action:?}");
            }
        }
    }

    #[test]
    fn fuzz_generated_rules_round_trip_and_their_mutants_never_panic() {
        let mut rng = Rng(0x0123_4567_89ab_cdef);
        let windows = windows();
        let mut accepted = 0;
        for _ in 0..5_000 {
            let (cond, action) = (gen_cond(&mut rng, 0), gen_action(&mut rng));
            if let Ok(r) = parse_rule(&cond, &action, &windows) {
                accepted += 1;
                let again = parse_rule(&r.condition.to_string(), &r.action.to_string(), &windows);
                assert_eq!(again.as_ref(), Ok(&r), "{cond:?} / {action:?}");
            }
            for _ in 0..4 {
                let (c, a) = (mutate(&mut rng, &cond), mutate(&mut rng, &action));
                if let Err(e) = parse_rule(&c, &a, &windows) {
                    let len = match e.field {
                        Field::Condition => c.chars().count(),
                        Field::Action => a.chars().count(),
                    };
                    assert!(e.column >= 1 && e.column as usize <= len + 1, "{c:?} / {a:?}: {e}");
                }
            }
        }
        assert!(accepted > 1_000, "only {accepted} generated rules were valid");
    }
}

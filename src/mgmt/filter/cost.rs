//! What a filter may cost (issue 11 class 3): a static check of the expression before any
//! data is touched, and a bounded pool of evaluators.
//!
//! libyang evaluates XPath with no budget of time or visited nodes (its only bound is a
//! nesting depth of 100 blocks), and an evaluation cannot be interrupted. So the cost is
//! bounded before evaluation: an expression is refused with `resource-denied` when it is
//! longer than `xpath_max_length`, nests predicates deeper than `xpath_max_predicate_depth`,
//! has more than `xpath_max_scans` steps that visit a whole subtree or start at the root,
//! or — inside a predicate, which is evaluated once per candidate node — leaves the
//! candidate's own subtree (an absolute path, `//` or a descendant/ancestor/sibling/parent
//! axis, `..`, `current()`, `deref()`). What remains is linear in the tree: a predicate can
//! only look at the candidate's children and their descendants by child steps.
//! Subtree filters are bounded by their number of elements (`subtree_max_nodes`).
//! Evaluation then holds one of `evaluators` permits, waiting at most `queue_timeout_ms`.

use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::error::{ErrorTag, RpcError};
use crate::xml::Element;

/// The `[filters]` table of the bootstrap configuration.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FilterLimits {
    /// Longest accepted XPath filter / selection, in bytes.
    pub xpath_max_length: usize,
    /// Deepest nesting of predicates (`a[b[c]]` is 2).
    pub xpath_max_predicate_depth: usize,
    /// Most steps that visit a whole subtree (`//`, descendant axes) or start a location
    /// path at the root, in the whole expression.
    pub xpath_max_scans: usize,
    /// Most elements in a subtree filter.
    pub subtree_max_nodes: usize,
    /// Filter evaluations running at once (the rest wait for a permit).
    pub evaluators: usize,
    /// How long an evaluation waits for a permit before it is refused (resource-denied).
    pub queue_timeout_ms: u64,
}

impl Default for FilterLimits {
    fn default() -> Self {
        FilterLimits {
            xpath_max_length: 4096,
            xpath_max_predicate_depth: 4,
            xpath_max_scans: 16,
            subtree_max_nodes: 1024,
            evaluators: std::thread::available_parallelism().map(|n| (n.get() / 2).max(1)).unwrap_or(1),
            queue_timeout_ms: 10_000,
        }
    }
}

static LIMITS: OnceLock<FilterLimits> = OnceLock::new();

/// Sets the limits (once, at start; later calls are ignored).
pub fn configure(l: FilterLimits) {
    let _ = LIMITS.set(l);
}

pub fn limits() -> &'static FilterLimits {
    LIMITS.get_or_init(FilterLimits::default)
}

fn denied(why: impl std::fmt::Display) -> RpcError {
    let why = why.to_string();
    // Aggregated per reason: a client retrying a refused filter is one record per window.
    crate::mgmt::audit::event(crate::mgmt::audit::Category::InputRefused)
        .outcome("refused")
        .field("input", "filter")
        .field("reason", why.clone())
        .emit_aggregated(format!("filter {why}"));
    RpcError::application(ErrorTag::ResourceDenied, format!("filter refused: {why}")).with_bad_element("filter")
}

/// Axes that leave the candidate node's subtree or visit all of it.
const FAR_AXES: &[&str] = &[
    "ancestor",
    "ancestor-or-self",
    "descendant",
    "descendant-or-self",
    "following",
    "following-sibling",
    "parent",
    "preceding",
    "preceding-sibling",
];

/// The static cost check of an XPath expression (module-name prefixes or XML prefixes:
/// names do not matter here).
pub fn check_xpath(expr: &str) -> Result<(), RpcError> {
    check_xpath_with(expr, limits())
}

pub fn check_xpath_with(expr: &str, l: &FilterLimits) -> Result<(), RpcError> {
    if expr.len() > l.xpath_max_length {
        return Err(denied(format_args!("the XPath is longer than {} bytes", l.xpath_max_length)));
    }
    if expr.contains('\0') {
        return Err(
            RpcError::protocol(ErrorTag::InvalidValue, "an XPath cannot contain NUL").with_bad_element("filter")
        );
    }
    let b = expr.as_bytes();
    // Open brackets: true for a predicate '[', false for a parenthesis.
    let mut stack: Vec<bool> = Vec::new();
    // The function name of each open parenthesis ("" for a plain group), and of the group
    // closed last: a location path may only follow a group that yields a node-set.
    let mut groups: Vec<String> = Vec::new();
    let mut closed_group: Option<String> = None;
    let mut scans = 0usize;
    // The last significant character outside literals, and the last word.
    let mut prev: u8 = 0;
    let mut last_word = String::new();
    let mut i = 0;
    // XPath 1.0 section 3.7: a `*` is the multiply operator when a token precedes it that is
    // not @, ::, (, [, , or an operator; otherwise it is a name test. A path after a
    // multiply starts at the root, like one after `+`.
    let mut star_is_operator = false;
    while i < b.len() {
        let c = b[i];
        let in_pred = stack.iter().any(|p| *p);
        if c == b'*' {
            let word_op = prev.is_ascii_alphabetic() && matches!(last_word.as_str(), "and" | "or" | "div" | "mod");
            star_is_operator = prev != 0
                && !word_op
                && !matches!(
                    prev,
                    b'@' | b':' | b'(' | b'[' | b',' | b'/' | b'|' | b'+' | b'-' | b'=' | b'<' | b'>' | b'!' | b'*'
                );
        }
        match c {
            b'\'' | b'"' => {
                let end = b[i + 1..].iter().position(|&x| x == c).map(|p| i + 1 + p).unwrap_or(b.len());
                i = end + 1;
                prev = b'\'';
                last_word.clear();
                continue;
            }
            b'[' => {
                stack.push(true);
                if stack.iter().filter(|p| **p).count() > l.xpath_max_predicate_depth {
                    return Err(denied(format_args!("predicates nest deeper than {}", l.xpath_max_predicate_depth)));
                }
            }
            b'(' => {
                if in_pred && matches!(last_word.as_str(), "current" | "deref") {
                    return Err(denied(format_args!("{last_word}() inside a predicate")));
                }
                let name = if prev.is_ascii_alphanumeric() { last_word.clone() } else { String::new() };
                groups.push(name);
                stack.push(false);
            }
            b']' | b')' if stack.pop() == Some(false) => closed_group = groups.pop(),
            b']' | b')' => {}
            b'/' => {
                // A location path applied to a number, a string or the result of a function
                // that is not a node-set is a type error in XPath 1.0; libyang does not report
                // it but asserts, which aborts the whole process (found by the xpath_filter
                // fuzz target: `2//o`). Refused before libyang sees it.
                // Names never start with a digit, '.' or '-': such a word is a number.
                let number = last_word.trim_start_matches('-');
                let after_number = prev.is_ascii_digit()
                    && number.bytes().any(|d| d.is_ascii_digit())
                    && number.bytes().all(|d| d.is_ascii_digit() || d == b'.');
                let after_group =
                    prev == b')' && !closed_group.as_deref().is_some_and(|f| matches!(f, "current" | "deref"));
                if prev == b'\'' || after_number || after_group {
                    return Err(RpcError::protocol(
                        ErrorTag::InvalidValue,
                        "a location path may only follow a node-set (a path, current() or deref()), \
                         not a number, a string, a function result or a parenthesized expression",
                    )
                    .with_bad_element("filter"));
                }
                let descendant = b.get(i + 1) == Some(&b'/');
                // A location path starts here when nothing before it can end a step.
                let starts_path =
                    matches!(prev, 0 | b'[' | b'(' | b',' | b'|' | b'=' | b'<' | b'>' | b'!' | b'+' | b'-')
                        || (prev == b'*' && star_is_operator)
                        || (prev.is_ascii_alphabetic() && matches!(last_word.as_str(), "and" | "or" | "div" | "mod"));
                if descendant || starts_path {
                    scans += 1;
                    if in_pred {
                        return Err(denied(if descendant {
                            "a descendant step (//) inside a predicate"
                        } else {
                            "an absolute location path inside a predicate"
                        }));
                    }
                }
                if descendant {
                    i += 2;
                    prev = b'/';
                    last_word.clear();
                    continue;
                }
            }
            b'.' if b.get(i + 1) == Some(&b'.') => {
                if in_pred {
                    return Err(denied("a parent step (..) inside a predicate"));
                }
                i += 2;
                prev = b'.';
                last_word.clear();
                continue;
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                let axis = last_word.as_str();
                if FAR_AXES.contains(&axis) {
                    if in_pred {
                        return Err(denied(format_args!("the {axis} axis inside a predicate")));
                    }
                    if axis.starts_with("descendant") || axis.starts_with("following") || axis.starts_with("preceding")
                    {
                        scans += 1;
                    }
                }
                i += 2;
                prev = b':';
                last_word.clear();
                continue;
            }
            _ => {}
        }
        let word_char = |x: u8| x.is_ascii_alphanumeric() || x == b'-' || x == b'_' || x == b'.';
        if word_char(c) {
            // A word continues only straight after a word character (no space between).
            if i == 0 || !word_char(b[i - 1]) {
                last_word.clear();
            }
            last_word.push(c as char);
        } else if !c.is_ascii_whitespace() {
            last_word.clear();
        }
        if !c.is_ascii_whitespace() {
            prev = c;
        }
        i += 1;
    }
    if scans > l.xpath_max_scans {
        return Err(denied(format_args!(
            "more than {} steps visit whole subtrees or start at the root",
            l.xpath_max_scans
        )));
    }
    Ok(())
}

/// The size check of a subtree filter (the `<filter>` element or its equivalent).
pub fn check_subtree(filter: &Element) -> Result<(), RpcError> {
    let max = limits().subtree_max_nodes;
    let mut stack: Vec<&Element> = filter.children.iter().collect();
    let mut n = 0usize;
    while let Some(e) = stack.pop() {
        n += 1;
        if n > max {
            return Err(denied(format_args!("the subtree filter has more than {max} elements")));
        }
        stack.extend(e.children.iter());
    }
    Ok(())
}

/// The evaluator pool: a counting semaphore.
pub struct Pool {
    busy: Mutex<usize>,
    freed: Condvar,
}

static POOL: Pool = Pool::new();

/// One running evaluation; the permit returns to its pool when dropped.
pub struct Permit(&'static Pool);

impl Drop for Permit {
    fn drop(&mut self) {
        let mut busy = self.0.busy.lock().unwrap_or_else(|e| e.into_inner());
        *busy = busy.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new()
    }
}

impl Pool {
    pub const fn new() -> Pool {
        Pool { busy: Mutex::new(0), freed: Condvar::new() }
    }

    /// Waits for one of `max` permits, at most `timeout`.
    pub fn acquire(&'static self, max: usize, timeout: Duration) -> Result<Permit, RpcError> {
        let max = max.max(1);
        let deadline = Instant::now() + timeout;
        {
            let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
            if *busy < max {
                *busy += 1;
                return Ok(Permit(self));
            }
        }
        // Waiting blocks this thread: on the agent's (multi-threaded) runtime the worker is
        // handed over first, so tasks that filter notifications never park the runtime.
        let wait = || {
            let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
            while *busy >= max {
                let now = Instant::now();
                if now >= deadline {
                    return Err(denied(format_args!("all {max} filter evaluators are busy; try again later")));
                }
                busy = self.freed.wait_timeout(busy, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            }
            *busy += 1;
            Ok(Permit(self))
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)
            }
            _ => wait(),
        }
    }
}

/// Waits for an evaluator permit of the agent's pool.
pub fn permit() -> Result<Permit, RpcError> {
    let l = limits();
    POOL.acquire(l.evaluators, Duration::from_millis(l.queue_timeout_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(x: &str) -> bool {
        check_xpath_with(x, &FilterLimits::default()).is_ok()
    }

    #[test]
    fn cheap_expressions_pass() {
        for x in [
            "/",
            "/cats-sma:cats-sma",
            "/cats-sma:cats-sma/scis/sci[csci-id='a']/cs-id",
            "/cats-sma:cats-sma/scis/sci[starts-with(csci-id,'a') and cs-id = 'x']",
            "//sci",
            "count(//*) > 0",
            "/a:b/c[d/e = 'x'][f]",
            "/cats-sma:cats-sma/metric-cache/entry[gas > 10 or health != 'healthy']",
            "/x:a | /x:b",
            "/a:b/c[contains(., '//..[')]",
            "/ietf-netconf-notifications:netconf-config-change/edit[operation='create']",
            "/a:b[count(c) > 2 * 3]",
        ] {
            assert!(ok(x), "{x}");
        }
    }

    #[test]
    fn paths_after_non_node_sets_are_refused_before_libyang_aborts() {
        // Each of these made libyang assert and the whole agent abort (SIGABRT).
        for x in [
            "2//o",
            "1/a",
            "'a'/b",
            "\"a\"//b",
            "count(/x)/y",
            "(1)/a",
            "string(/a)//b",
            "-1/a",
            "(/a)/b",
            "1.5/a",
            ".5/a",
            "- 1/a",
        ] {
            let e = check_xpath_with(x, &FilterLimits::default()).unwrap_err();
            assert_eq!(e.tag, ErrorTag::InvalidValue, "{x}");
        }
        for x in ["./a", "/a/b2/c", "/a[1]/b", "current()/a", "deref(../x)/y", "/a[x='1']/b", "/a/b-1/c", "/x:a1/b"] {
            assert!(check_xpath_with(x, &FilterLimits::default()).is_ok(), "{x}");
        }
    }

    #[test]
    fn an_absolute_path_after_a_multiply_counts_as_one() {
        let l = FilterLimits::default();
        let x = "/cats-sma:cats-sma/scis/sci[1 * /cats-sma:cats-sma/scis/sci/cs-id > 0]";
        assert_eq!(check_xpath_with(x, &l).unwrap_err().tag, ErrorTag::ResourceDenied, "{x}");
        // A wildcard is not a multiply.
        for ok in ["/a/c[*/x]", "/a/*/b", "/a[x * 2 > 3]", "/a/@*"] {
            assert!(check_xpath_with(ok, &l).is_ok(), "{ok}");
        }
    }

    #[test]
    fn quadratic_expressions_are_refused() {
        for x in [
            "//*[count(//*)>=0]",
            "/a:b/c[count(/a:b/c) > 1]",
            "/a:b/c[. = /a:b/d]",
            "/a:b/c[x and /a:d]",
            "/a:b/c[count(../c) > 1]",
            "/a:b/c[following-sibling::c]",
            "/a:b/c[preceding::*]",
            "/a:b/c[ancestor::*]",
            "/a:b/c[descendant::*]",
            "/a:b/c[current()/d]",
            "/a:b/c[deref(d)]",
            "/a:b/c[count(.//x)>0]",
            "/a[b[c[d[e[f]]]]]",
        ] {
            let e = check_xpath_with(x, &FilterLimits::default()).expect_err(x);
            assert_eq!(e.tag, ErrorTag::ResourceDenied, "{x}");
        }
        assert!(!ok(&"//a|".repeat(20)));
        assert!(!ok(&format!("/a:b[c='{}']", "x".repeat(5000))));
        assert_eq!(check_xpath_with("/a\0", &FilterLimits::default()).unwrap_err().tag, ErrorTag::InvalidValue);
    }

    #[test]
    fn the_filters_table_parses() {
        let b: crate::config::Bootstrap =
            toml::from_str("[filters]\nxpath_max_length = 100\nevaluators = 3\nqueue_timeout_ms = 5\n").unwrap();
        assert_eq!(b.filters.xpath_max_length, 100);
        assert_eq!(b.filters.evaluators, 3);
        assert_eq!(b.filters.subtree_max_nodes, FilterLimits::default().subtree_max_nodes);
        assert!(toml::from_str::<crate::config::Bootstrap>("[filters]\nno_such_knob = 1\n").is_err());
    }

    #[test]
    fn the_pool_is_bounded() {
        let pool: &'static Pool = Box::leak(Box::new(Pool::new()));
        let wait = Duration::from_millis(20);
        let a = pool.acquire(1, wait).expect("first permit");
        assert_eq!(pool.acquire(1, wait).err().map(|e| e.tag), Some(ErrorTag::ResourceDenied));
        drop(a);
        assert!(pool.acquire(1, wait).is_ok());
    }
}

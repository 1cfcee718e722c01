//! RFC 8040 section 4.8 query parameters: parsed once, checked against the method they came
//! with (an unknown parameter, a repeated one or one the method does not take is a 400
//! invalid-value), and typed.

use hyper::Method;

use super::error::Failure;
use super::path::percent_decode;
use crate::error::ErrorTag;
use crate::mgmt::with_defaults::WithDefaults;

/// `a=b&c=d` → decoded pairs, in order ('+' is a space only in form encoding, not here).
pub fn split(raw: &str) -> Result<Vec<(String, String)>, Failure> {
    let mut out = Vec::new();
    for part in raw.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        out.push((percent_decode(k)?, percent_decode(v)?));
    }
    Ok(out)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Content {
    All,
    Config,
    Nonconfig,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    First,
    Last,
    Before,
    After,
}

impl Insert {
    pub fn as_str(self) -> &'static str {
        match self {
            Insert::First => "first",
            Insert::Last => "last",
            Insert::Before => "before",
            Insert::After => "after",
        }
    }
}

/// The parameters of one request.
#[derive(Debug)]
pub struct Params {
    pub content: Content,
    /// None = unbounded.
    pub depth: Option<usize>,
    pub fields: Option<String>,
    pub filter: Option<String>,
    pub insert: Option<Insert>,
    pub point: Option<String>,
    pub start_time: Option<chrono::DateTime<chrono::Utc>>,
    pub stop_time: Option<chrono::DateTime<chrono::Utc>>,
    pub with_defaults: Option<WithDefaults>,
}

fn bad(msg: impl Into<String>) -> Failure {
    Failure::bad(ErrorTag::InvalidValue, msg)
}

fn time(v: &str, name: &str) -> Result<chrono::DateTime<chrono::Utc>, Failure> {
    chrono::DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|_| bad(format!("{name}=\"{v}\" is not a date-and-time")))
}

/// Which parameters a method may carry (RFC 8040 section 4.8 table). `stream` is true for
/// an event stream resource (filter, start-time, stop-time).
fn allowed(method: &Method, name: &str, stream: bool) -> bool {
    let read = *method == Method::GET || *method == Method::HEAD;
    match name {
        "content" | "depth" | "fields" | "with-defaults" => read && !stream,
        "filter" | "start-time" | "stop-time" => read && stream,
        "insert" | "point" => *method == Method::POST || *method == Method::PUT,
        _ => false,
    }
}

impl Params {
    pub fn parse(method: &Method, q: &[(String, String)], stream: bool) -> Result<Params, Failure> {
        let mut p = Params {
            content: Content::All,
            depth: None,
            fields: None,
            filter: None,
            insert: None,
            point: None,
            start_time: None,
            stop_time: None,
            with_defaults: None,
        };
        let mut seen: Vec<&str> = Vec::new();
        for (k, v) in q {
            if seen.contains(&k.as_str()) {
                return Err(bad(format!("query parameter \"{k}\" is given more than once")));
            }
            seen.push(k);
            let known = matches!(
                k.as_str(),
                "content"
                    | "depth"
                    | "fields"
                    | "filter"
                    | "insert"
                    | "point"
                    | "start-time"
                    | "stop-time"
                    | "with-defaults"
            );
            if !known {
                return Err(bad(format!("unknown query parameter \"{k}\"")));
            }
            if !allowed(method, k, stream) {
                return Err(bad(format!("query parameter \"{k}\" is not allowed with {method} on this resource")));
            }
            match k.as_str() {
                "content" => {
                    p.content = match v.as_str() {
                        "all" => Content::All,
                        "config" => Content::Config,
                        "nonconfig" => Content::Nonconfig,
                        _ => return Err(bad(format!("content=\"{v}\": expected all, config or nonconfig"))),
                    }
                }
                "depth" => {
                    p.depth = match v.as_str() {
                        "unbounded" => None,
                        n if !n.bytes().all(|b| b.is_ascii_digit()) => {
                            return Err(bad(format!("depth=\"{v}\": expected 1..65535 or unbounded")))
                        }
                        n => match n.parse::<u16>() {
                            Ok(d) if d >= 1 => Some(d as usize),
                            _ => return Err(bad(format!("depth=\"{v}\": expected 1..65535 or unbounded"))),
                        },
                    }
                }
                "fields" => {
                    if v.is_empty() {
                        return Err(bad("fields needs a value"));
                    }
                    p.fields = Some(v.clone());
                }
                "filter" => p.filter = Some(v.clone()),
                "insert" => {
                    p.insert = Some(match v.as_str() {
                        "first" => Insert::First,
                        "last" => Insert::Last,
                        "before" => Insert::Before,
                        "after" => Insert::After,
                        _ => return Err(bad(format!("insert=\"{v}\": expected first, last, before or after"))),
                    })
                }
                "point" => p.point = Some(v.clone()),
                "start-time" => p.start_time = Some(time(v, k)?),
                "stop-time" => p.stop_time = Some(time(v, k)?),
                "with-defaults" => {
                    p.with_defaults = Some(match v.as_str() {
                        "report-all" => WithDefaults::ReportAll,
                        "report-all-tagged" => WithDefaults::ReportAllTagged,
                        "trim" => WithDefaults::Trim,
                        "explicit" => WithDefaults::Explicit,
                        _ => return Err(bad(format!("with-defaults=\"{v}\" is not a with-defaults mode"))),
                    })
                }
                _ => {}
            }
        }
        // RFC 8040 4.8.6: point goes with insert=before/after, and they need it.
        match (p.insert, &p.point) {
            (Some(Insert::Before | Insert::After), None) => {
                return Err(bad("insert=before/after needs the point parameter"))
            }
            (Some(Insert::First | Insert::Last) | None, Some(_)) => {
                return Err(bad("point is only allowed with insert=before or insert=after"))
            }
            _ => {}
        }
        if p.stop_time.is_some() && p.start_time.is_none() {
            return Err(bad("stop-time needs start-time"));
        }
        Ok(p)
    }
}

/// A parsed `fields` expression (RFC 8040 section 4.8.3): `a;b/c(d;e)`.
#[derive(Debug, Default, PartialEq)]
pub struct Fields {
    /// Selected child names (optionally module-qualified) with what is selected below each;
    /// an empty sub-selection keeps the whole subtree.
    pub children: Vec<(String, Fields)>,
}

impl Fields {
    /// Parses a `fields` value; the selection may nest (path steps and parentheses
    /// together) no deeper than the message depth limit, so nothing built from it recurses
    /// further.
    pub fn parse(s: &str) -> Result<Fields, Failure> {
        let chars: Vec<char> = s.chars().collect();
        let mut pos = 0;
        let f = Self::parse_list(&chars, &mut pos, 0, crate::config::message_limits::get().max_depth)?;
        if pos != chars.len() {
            return Err(bad(format!("fields=\"{s}\": unexpected \"{}\" at {pos}", chars[pos])));
        }
        Ok(f)
    }

    fn parse_list(c: &[char], pos: &mut usize, depth: usize, max: usize) -> Result<Fields, Failure> {
        let mut out = Fields::default();
        loop {
            // One path: name ("/" name)* optionally followed by "(" list ")".
            let mut names = Vec::new();
            loop {
                let start = *pos;
                while *pos < c.len() && !matches!(c[*pos], '/' | ';' | '(' | ')') {
                    *pos += 1;
                }
                let name: String = c[start..*pos].iter().collect();
                if name.is_empty() {
                    return Err(bad("fields: an empty node name"));
                }
                names.push(name);
                if depth + names.len() > max {
                    return Err(bad(format!("fields nests deeper than {max} levels")));
                }
                if *pos < c.len() && c[*pos] == '/' {
                    *pos += 1;
                    continue;
                }
                break;
            }
            let mut sub = Fields::default();
            if *pos < c.len() && c[*pos] == '(' {
                *pos += 1;
                sub = Self::parse_list(c, pos, depth + names.len(), max)?;
                if *pos >= c.len() || c[*pos] != ')' {
                    return Err(bad("fields: unbalanced parenthesis"));
                }
                *pos += 1;
            }
            // Build the nested selection for a/b/c(sub).
            let mut node = sub;
            for n in names.iter().skip(1).rev() {
                node = Fields { children: vec![(n.clone(), node)] };
            }
            out.merge(names[0].clone(), node);
            if *pos < c.len() && c[*pos] == ';' {
                *pos += 1;
                continue;
            }
            return Ok(out);
        }
    }

    fn merge(&mut self, name: String, sub: Fields) {
        if let Some((_, existing)) = self.children.iter_mut().find(|(n, _)| *n == name) {
            if existing.children.is_empty() || sub.children.is_empty() {
                existing.children.clear();
            } else {
                for (n, s) in sub.children {
                    existing.merge(n, s);
                }
            }
        } else {
            self.children.push((name, sub));
        }
    }

    /// Checks every selected name against the schema below `base` (the target's schema
    /// path, empty for the datastore root): a name that selects no data node is a 400
    /// invalid-value (RFC 8040 section 4.8.3), not an empty 200. Iterative.
    pub fn check(&self, base: &str, base_module: Option<&str>) -> Result<(), Failure> {
        let ctx = crate::yang::context();
        let mut pending: Vec<(&Fields, String, Option<String>)> =
            vec![(self, base.to_owned(), base_module.map(str::to_owned))];
        while let Some((f, path, module)) = pending.pop() {
            for (name, sub) in &f.children {
                let (explicit, local) = match name.split_once(':') {
                    Some((m, n)) => (Some(m), n),
                    None => (None, name.as_str()),
                };
                let try_module = |m: &str| {
                    let p = format!("{path}/{m}:{local}");
                    ctx.find_path(&p).ok().map(|_| (p, m.to_owned()))
                };
                let found = match explicit {
                    Some(m) => ctx.get_module_implemented(m).and_then(|_| try_module(m)),
                    // Unqualified: the parent's module, else (as for augmented nodes and at
                    // the datastore root) any implemented module.
                    None => module.as_deref().and_then(try_module).or_else(|| {
                        ctx.modules(true).filter(|m| m.is_implemented()).find_map(|m| try_module(m.name()))
                    }),
                };
                let Some((p, m)) = found else {
                    let at = if path.is_empty() { "the datastore root" } else { path.as_str() };
                    return Err(bad(format!("fields: \"{name}\" is not a data node below {at}")));
                };
                if !sub.children.is_empty() {
                    pending.push((sub, p, Some(m)));
                }
            }
        }
        Ok(())
    }

    /// The selection below child `name` of module `module`, when it is selected.
    pub fn child(&self, module: &str, name: &str) -> Option<&Fields> {
        self.children.iter().find_map(|(n, f)| {
            let hit = match n.split_once(':') {
                Some((m, l)) => m == module && l == name,
                None => n == name,
            };
            hit.then_some(f)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_checked_per_method() {
        let q = split("depth=2&content=config&with-defaults=report-all").unwrap();
        let p = Params::parse(&Method::GET, &q, false).unwrap();
        assert_eq!((p.depth, p.content), (Some(2), Content::Config));
        assert!(Params::parse(&Method::PUT, &q, false).is_err(), "depth is for GET");
        assert!(Params::parse(&Method::GET, &split("depth=0").unwrap(), false).is_err());
        assert!(Params::parse(&Method::GET, &split("nosuch=1").unwrap(), false).is_err());
        assert!(Params::parse(&Method::GET, &split("depth=1&depth=2").unwrap(), false).is_err());
        assert!(Params::parse(&Method::POST, &split("insert=before").unwrap(), false).is_err());
        assert!(Params::parse(&Method::POST, &split("insert=after&point=%2Fa%3Ab").unwrap(), false).is_ok());
        assert!(Params::parse(&Method::GET, &split("start-time=2026-01-01T00:00:00Z").unwrap(), true).is_ok());
        assert!(Params::parse(&Method::GET, &split("start-time=yesterday").unwrap(), true).is_err());
    }

    #[test]
    fn fields_expression() {
        let f = Fields::parse("agent;scis/sci(csci-id;cs-id)").unwrap();
        assert!(f.child("cats-sma", "agent").unwrap().children.is_empty());
        let sci = f.child("cats-sma", "scis").unwrap().child("x", "sci").unwrap();
        assert_eq!(sci.children.len(), 2);
        assert!(Fields::parse("a(b").is_err());
        assert!(Fields::parse("a;;b").is_err());
        // Nesting by path steps counts as much as by parentheses.
        let deep = vec!["a"; 100_000].join("/");
        assert!(Fields::parse(&deep).is_err());
        assert!(Fields::parse(&format!("{}{}", "a(".repeat(300), ")".repeat(300))).is_err());
        assert!(Fields::parse(&vec!["a"; 256].join("/")).is_ok());
    }
}

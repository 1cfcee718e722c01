//! RFC 8040 section 3.5.3: the data resource identifier of a URI
//! (`/cats-sma:cats-sma/scis/sci=188.3.67.3%3A67`) resolved against the schema into the
//! instance path libyang understands (`/cats-sma:cats-sma/scis/sci[csci-id='188.3.67.3:67']`),
//! and back (Location of a created resource).

use yang2::schema::{SchemaNode, SchemaNodeKind};

use super::error::Failure;
use crate::error::{ErrorTag, RpcError};

/// One step of a resolved path.
#[derive(Clone, Debug)]
pub struct Step {
    pub module: String,
    pub name: String,
    pub kind: SchemaNodeKind,
    /// Key leaf names and values (lists), or the value (a leaf-list instance).
    pub keys: Vec<(String, String)>,
}

/// A resolved data resource.
#[derive(Clone, Debug)]
pub struct Target {
    pub steps: Vec<Step>,
}

fn bad_path(msg: impl Into<String>) -> Failure {
    Failure::bad(ErrorTag::InvalidValue, msg)
}

/// Decodes %XX escapes (RFC 3986); a malformed escape or non-UTF-8 result is refused.
pub fn percent_decode(s: &str) -> Result<String, Failure> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or_else(|| bad_path(format!("bad percent-encoding in \"{s}\"")))?;
            let v = u8::from_str_radix(hex, 16).map_err(|_| bad_path(format!("bad percent-encoding in \"{s}\"")))?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    if out.contains(&0) {
        return Err(bad_path("a NUL character is not allowed in a path"));
    }
    String::from_utf8(out).map_err(|_| bad_path(format!("\"{s}\" does not decode to UTF-8")))
}

/// Percent-encodes a key value for a URI (everything but RFC 3986 unreserved characters).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A predicate value in quotes libyang accepts; a value holding both quote characters
/// cannot be written in a path.
fn quoted(v: &str) -> Result<String, Failure> {
    if !v.contains('\'') {
        Ok(format!("'{v}'"))
    } else if !v.contains('"') {
        Ok(format!("\"{v}\""))
    } else {
        Err(bad_path(format!("the key value {v:?} holds both quote characters")))
    }
}

impl Target {
    /// The datastore root (`{+restconf}/data` itself).
    pub fn root() -> Target {
        Target { steps: Vec::new() }
    }

    pub fn is_root(&self) -> bool {
        self.steps.is_empty()
    }

    /// Resolves the part of a URI path after `/data` (still percent-encoded).
    pub fn parse(raw: &str) -> Result<Target, Failure> {
        let raw = raw.strip_prefix('/').unwrap_or(raw);
        let raw = raw.strip_suffix('/').unwrap_or(raw);
        if raw.is_empty() {
            return Ok(Target::root());
        }
        if raw.split('/').any(str::is_empty) {
            return Err(bad_path(format!("\"{raw}\" has an empty path segment")));
        }
        let ctx = crate::yang::context();
        let mut steps: Vec<Step> = Vec::new();
        let mut schema_path = String::new();
        let segs: Vec<&str> = raw.split('/').collect();
        for (i, seg) in segs.iter().enumerate() {
            let (ident, keys) = match seg.split_once('=') {
                Some((a, k)) => (a, Some(k)),
                None => (*seg, None),
            };
            let ident = percent_decode(ident)?;
            let (module, name) = match ident.split_once(':') {
                Some((m, n)) => (m.to_owned(), n.to_owned()),
                None => match steps.last() {
                    Some(p) => (p.module.clone(), ident.clone()),
                    None => return Err(bad_path(format!("the first path step \"{ident}\" needs its module name"))),
                },
            };
            if module.is_empty() || name.is_empty() {
                return Err(bad_path(format!("\"{ident}\" is not a module-name:node-name identifier")));
            }
            if ctx.get_module_implemented(&module).is_none() {
                return Err(Failure::from(
                    RpcError::protocol(ErrorTag::UnknownElement, format!("no implemented YANG module \"{module}\""))
                        .with_bad_element(ident.clone()),
                ));
            }
            schema_path.push_str(&format!("/{module}:{name}"));
            let schema = ctx.find_path(&schema_path).map_err(|_| {
                Failure::from(
                    RpcError::protocol(
                        ErrorTag::UnknownElement,
                        format!("{schema_path} is not a data node of the schema"),
                    )
                    .with_bad_element(name.clone()),
                )
            })?;
            let kind = schema.kind();
            let last = i + 1 == segs.len();
            let keys = match kind {
                SchemaNodeKind::List => list_keys(&schema, keys, &schema_path, last)?,
                SchemaNodeKind::LeafList => match keys {
                    Some(v) => vec![(name.clone(), percent_decode(v)?)],
                    None if last => Vec::new(),
                    None => return Err(bad_path(format!("{schema_path}: a leaf-list step needs its value"))),
                },
                SchemaNodeKind::Rpc | SchemaNodeKind::Notification | SchemaNodeKind::Input | SchemaNodeKind::Output => {
                    return Err(bad_path(format!("{schema_path} is not a data resource")));
                }
                _ if keys.is_some() => {
                    return Err(bad_path(format!("{schema_path} is not a list or leaf-list: it takes no \"=\" value")))
                }
                _ => Vec::new(),
            };
            if !last && matches!(kind, SchemaNodeKind::Leaf | SchemaNodeKind::LeafList) {
                return Err(bad_path(format!("{schema_path} is a leaf: nothing is below it")));
            }
            steps.push(Step { module, name, kind, keys });
        }
        Ok(Target { steps })
    }

    /// The schema node of the target (None for the root).
    pub fn schema(&self) -> Option<SchemaNode<'static>> {
        if self.steps.is_empty() {
            return None;
        }
        let p: String = self.steps.iter().map(|s| format!("/{}:{}", s.module, s.name)).collect();
        crate::yang::context().find_path(&p).ok()
    }

    pub fn last(&self) -> Option<&Step> {
        self.steps.last()
    }

    /// The instance path (JSON module prefixes where the module changes).
    pub fn data_path(&self) -> Result<String, Failure> {
        Self::path_of(&self.steps)
    }

    /// The instance path of the parent (None for a top-level target or the root).
    pub fn parent_path(&self) -> Result<Option<String>, Failure> {
        if self.steps.len() < 2 {
            return Ok(None);
        }
        Self::path_of(&self.steps[..self.steps.len() - 1]).map(Some)
    }

    pub fn parent(&self) -> Target {
        let mut t = self.clone();
        t.steps.pop();
        t
    }

    /// Whether the target selects one instance (a list without keys or a whole leaf-list
    /// selects several).
    pub fn is_single_instance(&self) -> bool {
        self.steps
            .iter()
            .all(|s| !matches!(s.kind, SchemaNodeKind::List | SchemaNodeKind::LeafList) || !s.keys.is_empty())
    }

    fn path_of(steps: &[Step]) -> Result<String, Failure> {
        let mut out = String::new();
        let mut module: Option<&str> = None;
        for s in steps {
            out.push('/');
            if module != Some(s.module.as_str()) {
                out.push_str(&s.module);
                out.push(':');
            }
            out.push_str(&s.name);
            match s.kind {
                SchemaNodeKind::LeafList => {
                    if let Some((_, v)) = s.keys.first() {
                        out.push_str(&format!("[.={}]", quoted(v)?));
                    }
                }
                _ => {
                    for (k, v) in &s.keys {
                        out.push_str(&format!("[{k}={}]", quoted(v)?));
                    }
                }
            }
            module = Some(&s.module);
        }
        Ok(out)
    }

    /// The RESTCONF URI path of this target (for Location).
    pub fn uri(&self) -> String {
        let mut out = String::new();
        let mut module: Option<&str> = None;
        for s in &self.steps {
            out.push('/');
            if module != Some(s.module.as_str()) {
                out.push_str(&s.module);
                out.push(':');
            }
            out.push_str(&s.name);
            if !s.keys.is_empty() {
                out.push('=');
                let vals: Vec<String> = s.keys.iter().map(|(_, v)| percent_encode(v)).collect();
                out.push_str(&vals.join(","));
            }
            module = Some(&s.module);
        }
        out
    }

    /// A child step of this target named after a data node (used for POST's Location).
    pub fn child_of_node(&self, node: &yang2::data::DataNodeRef<'_, '_>) -> Target {
        let s = node.schema();
        let kind = s.kind();
        let keys = match kind {
            SchemaNodeKind::List => node
                .list_keys()
                .map(|k| (k.schema().name().to_owned(), k.value_canonical().unwrap_or_default()))
                .collect(),
            SchemaNodeKind::LeafList => vec![(s.name().to_owned(), node.value_canonical().unwrap_or_default())],
            _ => Vec::new(),
        };
        let mut t = self.clone();
        t.steps.push(Step { module: s.module().name().to_owned(), name: s.name().to_owned(), kind, keys });
        t
    }
}

fn list_keys(
    schema: &SchemaNode<'_>,
    raw: Option<&str>,
    schema_path: &str,
    last: bool,
) -> Result<Vec<(String, String)>, Failure> {
    let names: Vec<String> = schema.list_keys().map(|k| k.name().to_owned()).collect();
    let Some(raw) = raw else {
        if names.is_empty() || last {
            // A keyless list, or all entries of a list (GET of the whole list).
            return Ok(Vec::new());
        }
        return Err(bad_path(format!("{schema_path}: the list step needs its key values (name=k1,k2)")));
    };
    if names.is_empty() {
        return Err(bad_path(format!("{schema_path} is a list without keys: it takes no \"=\" value")));
    }
    let values: Vec<&str> = raw.split(',').collect();
    if values.len() != names.len() {
        return Err(bad_path(format!(
            "{schema_path} has {} key(s) ({}) but the URI gives {}",
            names.len(),
            names.join(", "),
            values.len()
        )));
    }
    names.into_iter().zip(values).map(|(n, v)| Ok((n, percent_decode(v)?))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_to_instance_path_and_back() {
        let t = Target::parse("/cats-sma:cats-sma/scis/sci=188.3.67.3%3A67/description").unwrap();
        assert_eq!(t.data_path().unwrap(), "/cats-sma:cats-sma/scis/sci[csci-id='188.3.67.3:67']/description");
        assert_eq!(t.uri(), "/cats-sma:cats-sma/scis/sci=188.3.67.3%3A67/description");
        assert_eq!(t.parent_path().unwrap().unwrap(), "/cats-sma:cats-sma/scis/sci[csci-id='188.3.67.3:67']");
        assert!(Target::parse("").unwrap().is_root());
    }

    #[test]
    fn bad_paths_are_400() {
        for p in [
            "/cats-sma",
            "/nosuch:x",
            "/cats-sma:cats-sma/nosuch",
            "/cats-sma:cats-sma/scis/sci=a,b",
            "/cats-sma:cats-sma/agent=x",
            "/cats-sma:cats-sma/scis/sci=%zz",
            "/cats-sma:cats-sma/agent/csma-id/x",
        ] {
            let f = Target::parse(p).unwrap_err();
            assert_eq!(f.status, 400, "{p}: {:?}", f.errors);
        }
    }
}

//! XPath filters (RFC 6241 section 8.9): the expression's XML prefixes are resolved in the
//! `<filter>` element's namespace scope and rewritten as the module names libyang expects.

use yang2::data::{Data, DataTree};

use super::{check_xpath, select_xpath, Readable};
use crate::error::{ErrorTag, RpcError};
use crate::xml::Scope;

/// Rewrites `prefix:name` steps to `module:name`, leaving string literals alone.
pub fn to_json_prefixes(expr: &str, scope: &Scope) -> Result<String, RpcError> {
    let ctx = crate::yang::context();
    let mut out = String::with_capacity(expr.len() + 16);
    let mut chars = expr.char_indices().peekable();
    let mut quote: Option<char> = None;
    while let Some((i, c)) = chars.next() {
        if let Some(q) = quote {
            out.push(c);
            if c == q {
                quote = None;
            }
            continue;
        }
        if c == '\'' || c == '"' {
            quote = Some(c);
            out.push(c);
            continue;
        }
        let prev_is_name = out.chars().last().is_some_and(|p| p.is_alphanumeric() || p == '-' || p == '_' || p == '.');
        if (c.is_alphabetic() || c == '_') && !prev_is_name {
            let rest = &expr[i..];
            let len = rest
                .find(|ch: char| !(ch.is_alphanumeric() || ch == '-' || ch == '_' || ch == '.'))
                .unwrap_or(rest.len());
            let word = &rest[..len];
            for _ in 1..word.chars().count() {
                chars.next();
            }
            let after = &rest[len..];
            // A prefix is a word followed by ':' that is not '::' (an axis).
            if after.starts_with(':') && !after.starts_with("::") {
                let ns = scope.resolve(Some(word)).ok_or_else(|| {
                    RpcError::protocol(ErrorTag::InvalidValue, format!("XPath prefix \"{word}\" is not declared"))
                        .with_bad_element("filter")
                })?;
                let module = ctx.get_module_latest_ns(ns).ok_or_else(|| {
                    RpcError::protocol(ErrorTag::UnknownNamespace, format!("no YANG module has namespace \"{ns}\""))
                        .with_bad_element("filter")
                })?;
                out.push_str(module.name());
            } else {
                out.push_str(word);
            }
            continue;
        }
        out.push(c);
    }
    Ok(out)
}

/// Evaluates an XPath filter over readable data (cost-checked, with an evaluator permit).
pub fn apply(expr: &str, tree: &Readable) -> Result<Readable, RpcError> {
    check_xpath(expr)?;
    let mut out = DataTree::new(crate::yang::context());
    if tree.is_empty() {
        return Ok(Readable::pruned(out));
    }
    let _permit = super::cost::permit()?;
    select_xpath(tree.tree(), expr, &mut out)?;
    Ok(Readable::pruned(out))
}

/// Whether an XPath selects anything of readable data (notification filters).
pub fn selects(expr: &str, tree: &Readable) -> Result<bool, RpcError> {
    check_xpath(expr)?;
    if tree.is_empty() {
        return Ok(false);
    }
    let _permit = super::cost::permit()?;
    let set = tree.tree().find_xpath(expr).map_err(|e| {
        RpcError::protocol(ErrorTag::InvalidValue, format!("invalid XPath \"{expr}\": {e}")).with_bad_element("filter")
    })?;
    let mut set = set;
    Ok(set.next().is_some())
}

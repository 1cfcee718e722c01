//! YANG Patch (RFC 8072): PATCH with `application/yang-patch+json|xml`, a list of edits
//! (create, delete, insert, merge, move, replace, remove) applied in order as one
//! transaction, answered with `yang-patch-status` naming the edit that failed.

use yang2::data::{Data, DataTree};

use super::data::{deletion_tree, parse_body_under, Store};
use super::error::{error_list_json, error_list_xml, Failure};
use super::media::Encoding;
use super::path::Target;
use super::{reply, Caller, Reply, Req, Restconf};
use crate::datastore::{Datastore, EditOptions};
use crate::error::{ErrorTag, RpcError};

pub const NS_YANG_PATCH: &str = "urn:ietf:params:xml:ns:yang:ietf-yang-patch";

/// One edit of a patch, as received.
#[derive(Debug)]
struct Edit {
    id: String,
    operation: String,
    target: String,
    point: Option<String>,
    where_: Option<String>,
    /// The value's content in the request's encoding.
    value: Option<Vec<u8>>,
}

#[derive(Debug)]
struct Patch {
    id: String,
    edits: Vec<Edit>,
}

fn bad(msg: impl Into<String>) -> Failure {
    Failure::bad(ErrorTag::InvalidValue, msg)
}

fn parse_json(body: &[u8]) -> Result<Patch, Failure> {
    super::data::check_syntax(body, super::media::Encoding::Json)?;
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| Failure::bad(ErrorTag::MalformedMessage, format!("the body is not JSON: {e}")))?;
    let p = v.get("ietf-yang-patch:yang-patch").ok_or_else(|| bad("the body must be an ietf-yang-patch:yang-patch"))?;
    let id = p.get("patch-id").and_then(|x| x.as_str()).ok_or_else(|| bad("yang-patch needs a patch-id"))?.to_owned();
    let mut edits = Vec::new();
    for e in p.get("edit").and_then(|x| x.as_array()).map(|a| a.as_slice()).unwrap_or(&[]) {
        let s = |k: &str| e.get(k).and_then(|x| x.as_str()).map(str::to_owned);
        edits.push(Edit {
            id: s("edit-id").ok_or_else(|| bad("an edit needs an edit-id"))?,
            operation: s("operation").ok_or_else(|| bad("an edit needs an operation"))?,
            target: s("target").ok_or_else(|| bad("an edit needs a target"))?,
            point: s("point"),
            where_: s("where"),
            value: e.get("value").map(|v| v.to_string().into_bytes()),
        });
    }
    Ok(Patch { id, edits })
}

fn too_big(e: crate::xml::XmlError) -> Failure {
    Failure::status(413, ErrorTag::TooBig, e.0)
}

fn parse_xml(body: &[u8]) -> Result<Patch, Failure> {
    let text =
        std::str::from_utf8(body).map_err(|_| Failure::bad(ErrorTag::MalformedMessage, "the body is not UTF-8"))?;
    let root = crate::xml::parse_with(text, crate::config::message_limits::get())
        .map_err(|e| Failure::bad(ErrorTag::MalformedMessage, format!("the XML body is refused: {}", e.0)))?;
    if root.name != "yang-patch" || root.ns.as_deref() != Some(NS_YANG_PATCH) {
        return Err(bad(format!("the body must be a yang-patch element in {NS_YANG_PATCH}")));
    }
    let child = |el: &crate::xml::Element, n: &str| el.child(NS_YANG_PATCH, n).map(|c| c.trimmed().to_owned());
    let id = child(&root, "patch-id").ok_or_else(|| bad("yang-patch needs a patch-id"))?;
    let mut edits = Vec::new();
    for e in root.children.iter().filter(|c| c.name == "edit" && c.ns.as_deref() == Some(NS_YANG_PATCH)) {
        edits.push(Edit {
            id: child(e, "edit-id").ok_or_else(|| bad("an edit needs an edit-id"))?,
            operation: child(e, "operation").ok_or_else(|| bad("an edit needs an operation"))?,
            target: child(e, "target").ok_or_else(|| bad("an edit needs a target"))?,
            point: child(e, "point"),
            where_: child(e, "where"),
            value: e
                .child(NS_YANG_PATCH, "value")
                .map(|v| v.children_text(text).map(String::into_bytes))
                .transpose()
                .map_err(too_big)?,
        });
    }
    Ok(Patch { id, edits })
}

/// The target of an edit: the PATCH target plus the edit's relative path.
fn edit_target(base: &Target, rel: &str) -> Result<Target, Failure> {
    let base_uri = base.uri();
    Target::parse(&format!("{base_uri}/{}", rel.trim_start_matches('/')))
}

/// Builds the edit tree of one YANG Patch edit.
fn build(rc: &Restconf, ds: Datastore, base: &Target, e: &Edit, enc: Encoding) -> Result<DataTree<'static>, Failure> {
    let target = edit_target(base, &e.target)?;
    if target.is_root() {
        return Err(bad("an edit cannot target the whole datastore"));
    }
    let op = match e.operation.as_str() {
        "delete" | "remove" => return deletion_tree(rc, ds, &target, &e.operation),
        "create" | "insert" => "create",
        "merge" | "move" => "merge",
        "replace" => "replace",
        other => return Err(bad(format!("edit {}: unknown operation \"{other}\"", e.id))),
    };
    let tree = if e.operation == "move" {
        // move names an existing entry; it carries no value.
        let mut t = DataTree::new(crate::yang::context());
        t.new_path(&target.data_path()?, None, false).map_err(|e| RpcError::from_libyang(&e))?;
        t
    } else {
        let value =
            e.value.as_deref().ok_or_else(|| bad(format!("edit {}: operation {} needs a value", e.id, e.operation)))?;
        let (tree, paths) = parse_body_under(rc, &target.parent(), value, enc)?;
        let want = target.data_path()?;
        if paths.len() != 1 || tree.find_path(&want).map(|n| n.path()).ok().as_deref() != Some(paths[0].as_str()) {
            return Err(
                bad(format!("edit {}: the value must be exactly the target resource {want}", e.id)).with_path(&want)
            );
        }
        tree
    };
    let node = target.data_path()?;
    super::yangdata::add_meta(&tree, &node, "ietf-netconf:operation", op)?;
    if matches!(e.operation.as_str(), "insert" | "move") {
        let where_ = e.where_.as_deref().unwrap_or("last");
        let schema = target.schema().ok_or_else(|| bad("unknown target"))?;
        if !schema.is_user_ordered() {
            return Err(bad(format!("edit {}: {} is not an ordered-by user list", e.id, e.target)));
        }
        super::yangdata::add_meta(&tree, &node, "yang:insert", where_)?;
        if matches!(where_, "before" | "after") {
            let point =
                e.point.as_deref().ok_or_else(|| bad(format!("edit {}: where={where_} needs a point", e.id)))?;
            let anchor = edit_target(base, point)?;
            let last =
                anchor.last().filter(|s| !s.keys.is_empty()).ok_or_else(|| bad(format!("edit {}: bad point", e.id)))?;
            if schema.kind() == yang2::schema::SchemaNodeKind::List {
                let pred: String = last.keys.iter().map(|(k, v)| format!("[{k}='{v}']")).collect();
                super::yangdata::add_meta(&tree, &node, "yang:key", &pred)?;
            } else {
                super::yangdata::add_meta(&tree, &node, "yang:value", &last.keys[0].1)?;
            }
        } else if !matches!(where_, "first" | "last") {
            return Err(bad(format!("edit {}: where=\"{where_}\"", e.id)));
        }
    }
    Ok(tree)
}

fn status_body(patch_id: &str, enc: Encoding, failed: Option<(Option<&str>, &[RpcError])>) -> String {
    match enc {
        Encoding::Json => {
            let mut m = serde_json::Map::new();
            m.insert("patch-id".into(), patch_id.into());
            match failed {
                None => {
                    m.insert("ok".into(), serde_json::json!([null]));
                }
                Some((None, errors)) => {
                    m.insert("errors".into(), serde_json::json!({ "error": error_list_json(errors) }));
                }
                Some((Some(id), errors)) => {
                    m.insert(
                        "edit-status".into(),
                        serde_json::json!({ "edit": [{ "edit-id": id, "errors": { "error": error_list_json(errors) } }] }),
                    );
                }
            }
            serde_json::json!({ "ietf-yang-patch:yang-patch-status": m }).to_string()
        }
        Encoding::Xml => {
            let id = crate::xml::escape_text(patch_id);
            let inner = match failed {
                None => "<ok/>".to_owned(),
                Some((None, errors)) => format!("<errors>{}</errors>", error_list_xml(errors)),
                Some((Some(eid), errors)) => format!(
                    "<edit-status><edit><edit-id>{}</edit-id><errors>{}</errors></edit></edit-status>",
                    crate::xml::escape_text(eid),
                    error_list_xml(errors)
                ),
            };
            format!("<yang-patch-status xmlns=\"{NS_YANG_PATCH}\"><patch-id>{id}</patch-id>{inner}</yang-patch-status>")
        }
    }
}

/// Applies a YANG Patch to `ds` below `target`.
pub fn apply(
    rc: &Restconf,
    caller: &Caller,
    req: &Req,
    _store: Store,
    ds: Datastore,
    target: &Target,
    enc: Encoding,
) -> Result<Reply, Failure> {
    let patch = match enc {
        Encoding::Json => parse_json(&req.body)?,
        Encoding::Xml => parse_xml(&req.body)?,
    };
    if patch.edits.is_empty() {
        return Err(bad("a yang-patch needs at least one edit"));
    }
    let mut ids = std::collections::HashSet::new();
    for e in &patch.edits {
        if !ids.insert(e.id.as_str()) {
            return Err(bad(format!("edit-id \"{}\" is used twice", e.id)));
        }
    }
    let out = req.accept;
    let mut trees = Vec::with_capacity(patch.edits.len());
    for e in &patch.edits {
        match build(rc, ds, target, e, enc) {
            Ok(t) => trees.push(t),
            Err(f) => return Ok(reply(f.status, out, status_body(&patch.id, out, Some((Some(&e.id), &f.errors))))),
        }
    }
    match rc.core.datastores.edit_all_owned(caller.session, ds, trees, EditOptions::default()) {
        Ok(_) => Ok(reply(200, out, status_body(&patch.id, out, None))),
        Err((which, errors)) => {
            let f = Failure::from(errors);
            let id = which.and_then(|i| patch.edits.get(i)).map(|e| e.id.as_str());
            Ok(reply(f.status, out, status_body(&patch.id, out, Some((id, &f.errors)))))
        }
    }
}

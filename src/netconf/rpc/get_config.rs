//! `<get-config>` (RFC 6241 section 7.1), with subtree/XPath filters and with-defaults.

use super::get::{self, readable_covering};
use super::{data_element, datastore_param, filter_param, one, readable, with_defaults, Body, OpResult, SessionCtx};
use crate::mgmt::filter::{cost, subtree, Filter};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let source = datastore_param(op, "source")?;
    let filter = filter_param(op)?;
    let wd = with_defaults(op)?;
    let ds = &ctx.server.datastores;
    let nacm = &ctx.server.nacm;
    let user = &ctx.info.username;
    match &filter {
        None => {
            // Unfiltered, nothing to hide: print the datastore tree itself, no copy
            // (printing costs what the tree holds, whoever asks).
            let direct = ds
                .with_tree(source, |tree| nacm.whole(user, tree).is_some().then(|| data_element(tree, wd)))
                .map_err(one)?;
            if let Some(data) = direct {
                return Ok(Body::Data(data?));
            }
        }
        Some(Filter::Subtree(el)) if small(el) => {
            if let Some(data) = print_tops(ds, source, nacm, user, el, wd, false)? {
                return Ok(Body::Data(data));
            }
            if let Some(selected) = select_whole(ds, source, nacm, user, el)? {
                return Ok(Body::Data(data_element(selected.tree(), wd)?));
            }
        }
        Some(Filter::Subtree(_)) => {}
        Some(Filter::XPath(_)) => {}
    }
    // NACM first, then the filter, on a copy of what the filter's selection covers: the
    // lock is not held while they run.
    let tree = match &filter {
        None => readable(ctx, source)?,
        Some(f) => readable_covering(ctx, source, &get::selection(f))?,
    };
    let tree = match &filter {
        None => tree,
        Some(f) => f.apply(&tree).map_err(one)?,
    };
    Ok(Body::Data(data_element(tree.tree(), wd)?))
}

/// A subtree filter of top-level selection nodes only (`<nacm/>`: no children, no content
/// match, no attribute), read by a user NACM hides nothing from, selects whole top-level
/// nodes: each is printed straight from the datastore under its lock (no copy), in the
/// datastore's order. With `state` (a `<get>`), the state the providers give as text for
/// that node is put inside it, after its configuration (RFC 7950 section 7.5.7: a
/// container's children may come in any order); state there is only shown to a user NACM
/// does not apply to (it may be `nacm:default-deny-all`, like NACM's counters). The
/// `<data>` element, or None when the general path must answer: another filter, a
/// restricted reader, state a provider cannot give as text, state in a node that is not a
/// container.
pub(crate) fn print_tops(
    ds: &crate::datastore::Datastores,
    source: crate::datastore::Datastore,
    nacm: &crate::nacm::Nacm,
    user: &str,
    filter: &Element,
    wd: crate::mgmt::with_defaults::WithDefaults,
    state: bool,
) -> Result<Option<String>, Vec<crate::error::RpcError>> {
    use crate::yang::PrintText as _;
    use yang2::data::{DataFormat, DataPrinterFlags};
    let tops = &filter.children;
    if tops.is_empty()
        || !tops.iter().all(|f| {
            f.children.is_empty()
                && f.text.trim().is_empty()
                && f.attrs.is_empty()
                && f.ns.as_deref().is_some_and(|ns| !ns.is_empty())
        })
    {
        return Ok(None);
    }
    // The providers' text first, outside the datastore's lock: (namespace, name, text).
    let mut texts: Vec<(&str, &str, String)> = Vec::new();
    if state {
        let ctx = crate::yang::context();
        for f in tops {
            let ns = f.ns.as_deref().unwrap_or_default();
            if texts.iter().any(|(n, name, _)| *n == ns && *name == f.name) {
                continue;
            }
            // A namespace no module has selects nothing.
            let Some(module) = ctx.get_module_latest_ns(ns) else { continue };
            let Some(text) = ds.state_text(module.name(), &f.name) else { return Ok(None) };
            if !text.is_empty() {
                // State inside a list entry would go into every entry: the general path.
                let container = module
                    .data()
                    .find(|n| n.name() == f.name)
                    .is_some_and(|n| n.kind() == yang2::schema::SchemaNodeKind::Container);
                if !container {
                    return Ok(None);
                }
                texts.push((ns, &f.name, text));
            }
        }
    }
    let flags = (DataPrinterFlags::SHRINK | wd.printer_flags()).bits();
    let printed = ds
        .with_tree(source, |tree| -> Option<Result<String, yang2::Error>> {
            nacm.whole(user, tree)?;
            // Decided under the lock with the configuration's test: a commit of NACM
            // between the two cannot split them.
            if !texts.is_empty() && !nacm.reads_everything(user) {
                return None;
            }
            let mut out = String::new();
            let mut placed = vec![false; texts.len()];
            let first = tree.reference();
            for node in first.iter().flat_map(|f| f.inclusive_siblings()) {
                let schema = node.schema();
                let (name, module) = (schema.name(), schema.module());
                let ns = module.namespace();
                if !tops.iter().any(|f| f.name == name && f.ns.as_deref() == Some(ns)) {
                    continue;
                }
                let text = match node.print_text(DataFormat::XML, DataPrinterFlags::from_bits_retain(flags)) {
                    Ok(t) => t.unwrap_or_default(),
                    Err(e) => return Some(Err(e)),
                };
                match texts.iter().position(|(n, top, _)| *n == ns && *top == name) {
                    None => out.push_str(&text),
                    // A container (checked above): printed whole, as an empty element, or
                    // not at all when it holds only defaults the mode leaves out.
                    Some(i) => {
                        let (inside, close) = (&texts[i].2, format!("</{name}>"));
                        let body = text.trim_end();
                        if let Some(head) = body.strip_suffix(close.as_str()) {
                            out.push_str(head);
                        } else if let Some(head) = body.strip_suffix("/>") {
                            out.push_str(head);
                            out.push('>');
                        } else if body.is_empty() {
                            open_element(&mut out, name, ns);
                        } else {
                            return None;
                        }
                        out.push_str(inside);
                        out.push_str(&close);
                        placed[i] = true;
                    }
                }
            }
            // Containers with state and no configuration at all.
            for ((ns, name, inside), _) in texts.iter().zip(&placed).filter(|(_, p)| !**p) {
                open_element(&mut out, name, ns);
                out.push_str(inside);
                out.push_str("</");
                out.push_str(name);
                out.push('>');
            }
            Some(Ok(out))
        })
        .map_err(one)?;
    let body = match printed {
        None => return Ok(None),
        Some(r) => r.map_err(|e| one(crate::error::RpcError::from_libyang(&e)))?,
    };
    if body.is_empty() {
        return Ok(Some("<data/>".to_owned()));
    }
    let body = if wd == crate::mgmt::with_defaults::WithDefaults::ReportAllTagged {
        crate::mgmt::with_defaults::fix_default_attribute_ns(body)
    } else {
        body
    };
    Ok(Some(format!("<data>{body}</data>")))
}

/// `<name xmlns="ns">` (the namespace of a module is a URI: no character to escape but `&`,
/// `<` and `"`, escaped anyway).
fn open_element(out: &mut String, name: &str, ns: &str) {
    out.push('<');
    out.push_str(name);
    out.push_str(" xmlns=\"");
    out.push_str(&crate::xml::escape_attr(ns));
    out.push_str("\">");
}

/// A small subtree filter walks only the branches it names, each at most once per
/// sibling: for a reader who may read everything of the datastore `source` it selects
/// straight from the datastore tree, one copy of what it selects. None: NACM hides
/// something of it from `user`. The evaluation permit is taken before the datastore's
/// lock, never waited for under it.
pub(crate) fn select_whole(
    ds: &crate::datastore::Datastores,
    source: crate::datastore::Datastore,
    nacm: &crate::nacm::Nacm,
    user: &str,
    filter: &Element,
) -> Result<Option<crate::mgmt::filter::Readable>, Vec<crate::error::RpcError>> {
    let permit = cost::permit().map_err(one)?;
    let direct = ds
        .with_tree(source, |tree| nacm.whole(user, tree).map(|w| subtree::apply_whole(filter, w, &permit)))
        .map_err(one)?;
    direct.transpose().map_err(one)
}

/// At most this many elements in a subtree filter evaluated under the datastore's lock
/// (`small`): the walk costs at most that many passes over the siblings it meets, about
/// what printing them costs; a larger filter runs on a copy, off the lock.
const MAX_FILTER_ELEMENTS_UNDER_LOCK: usize = 16;

pub(crate) fn small(filter: &Element) -> bool {
    let mut stack: Vec<&Element> = filter.children.iter().collect();
    let mut n = 0;
    while let Some(e) = stack.pop() {
        n += 1;
        if n > MAX_FILTER_ELEMENTS_UNDER_LOCK {
            return false;
        }
        stack.extend(e.children.iter());
    }
    true
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::print_tops;
    use crate::datastore::{Datastore, Datastores, Source};
    use crate::mgmt::with_defaults::WithDefaults;

    const ACM: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-acm";
    const COUNTERS: &str = "<denied-operations>0</denied-operations><denied-data-writes>0</denied-data-writes>\
                            <denied-notifications>0</denied-notifications>";

    fn filter(inner: &str) -> crate::xml::Element {
        crate::xml::parse(&format!("<filter type=\"subtree\">{inner}</filter>")).unwrap()
    }

    /// Running with a NACM group; NACM (recovery user `root`) renders its counters.
    fn setup() -> (Datastores, Arc<crate::nacm::Nacm>) {
        let ds = Datastores::open(crate::yang::context(), None).unwrap();
        let xml = format!(
            "<nacm xmlns=\"{ACM}\"><groups><group><name>ops</name><user-name>bob</user-name></group></groups></nacm>"
        );
        let cfg = ds.parse_config(xml.as_bytes(), yang2::data::DataFormat::XML).unwrap();
        ds.copy(1, Source::Config(&cfg), Datastore::Running).unwrap();
        let nacm = crate::nacm::Nacm::new(Some("root".into()));
        ds.register_state_provider(nacm.clone());
        (ds, nacm)
    }

    #[test]
    fn rfc6241_7_7_a_whole_top_level_node_is_printed_from_running_with_its_state_inside() {
        let (ds, nacm) = setup();
        let f = filter(&format!("<nacm xmlns=\"{ACM}\"/>"));
        let get =
            print_tops(&ds, Datastore::Running, &nacm, "root", &f, WithDefaults::Explicit, true).unwrap().unwrap();
        assert!(get.starts_with(&format!("<data><nacm xmlns=\"{ACM}\">")), "{get}");
        assert!(get.contains("<group><name>ops</name><user-name>bob</user-name></group>"), "{get}");
        assert!(get.ends_with(&format!("{COUNTERS}</nacm></data>")), "the counters after the configuration: {get}");
        // get-config: the same configuration, no state.
        let config =
            print_tops(&ds, Datastore::Running, &nacm, "root", &f, WithDefaults::Explicit, false).unwrap().unwrap();
        assert_eq!(config, get.replace(COUNTERS, ""));
        // A filter naming the node twice selects it once.
        let twice = filter(&format!("<nacm xmlns=\"{ACM}\"/><nacm xmlns=\"{ACM}\"/>"));
        assert_eq!(
            print_tops(&ds, Datastore::Running, &nacm, "root", &twice, WithDefaults::Explicit, true).unwrap(),
            Some(get)
        );
        // A top-level node of a module with nothing in running: nothing.
        let other = filter("<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"/>");
        assert_eq!(
            print_tops(&ds, Datastore::Running, &nacm, "root", &other, WithDefaults::Explicit, false).unwrap(),
            Some("<data/>".into())
        );
    }

    #[test]
    fn rfc8341_3_4_5_printed_top_level_nodes_only_for_readers_nacm_hides_nothing_from() {
        let (ds, nacm) = setup();
        let f = filter(&format!("<nacm xmlns=\"{ACM}\"/>"));
        // `alice` is subject to NACM and /nacm is default-deny-all: the general path prunes.
        assert_eq!(
            print_tops(&ds, Datastore::Running, &nacm, "alice", &f, WithDefaults::Explicit, true).unwrap(),
            None
        );
        assert_eq!(
            print_tops(&ds, Datastore::Running, &nacm, "alice", &f, WithDefaults::Explicit, false).unwrap(),
            None
        );
        // Anything but whole top-level selection nodes: the general path.
        for inner in [
            format!("<nacm xmlns=\"{ACM}\"><groups/></nacm>"),
            format!("<nacm xmlns=\"{ACM}\">x</nacm>"),
            "<nacm/>".to_owned(),
        ] {
            let f = filter(&inner);
            assert_eq!(
                print_tops(&ds, Datastore::Running, &nacm, "root", &f, WithDefaults::Explicit, true).unwrap(),
                None,
                "{inner}"
            );
        }
    }

    #[test]
    fn rfc6243_a_container_of_defaults_only_still_carries_its_state() {
        // Running without NACM configuration: /nacm holds only defaults, which explicit and
        // trim leave out, so the counters come in an element of their own.
        let ds = Datastores::open(crate::yang::context(), None).unwrap();
        let nacm = crate::nacm::Nacm::new(Some("root".into()));
        ds.register_state_provider(nacm.clone());
        let f = filter(&format!("<nacm xmlns=\"{ACM}\"/>"));
        let get = |wd| print_tops(&ds, Datastore::Running, &nacm, "root", &f, wd, true).unwrap().unwrap();
        let only = format!("<data><nacm xmlns=\"{ACM}\">{COUNTERS}</nacm></data>");
        assert_eq!(get(WithDefaults::Explicit), only);
        assert_eq!(get(WithDefaults::Trim), only);
        let all = get(WithDefaults::ReportAll);
        assert!(
            all.contains("<enable-nacm>true</enable-nacm>") && all.ends_with(&format!("{COUNTERS}</nacm></data>")),
            "{all}"
        );
    }

    #[test]
    fn rfc8341_3_4_5_with_nacm_switched_off_every_reader_gets_the_printed_answer() {
        let (ds, nacm) = setup();
        let off = format!("<nacm xmlns=\"{ACM}\"><enable-nacm>false</enable-nacm></nacm>\0");
        let t = yang2::data::DataTree::parse_string(
            crate::yang::context(),
            off.as_bytes(),
            yang2::data::DataFormat::XML,
            yang2::data::DataParserFlags::NO_VALIDATION,
            yang2::data::DataValidationFlags::empty(),
        )
        .unwrap();
        nacm.load(&t);
        let f = filter(&format!("<nacm xmlns=\"{ACM}\"/>"));
        let alice = print_tops(&ds, Datastore::Running, &nacm, "alice", &f, WithDefaults::Explicit, true).unwrap();
        let root = print_tops(&ds, Datastore::Running, &nacm, "root", &f, WithDefaults::Explicit, true).unwrap();
        assert!(alice.as_deref().is_some_and(|a| a.ends_with(&format!("{COUNTERS}</nacm></data>"))), "{alice:?}");
        assert_eq!(alice, root);
        // The candidate (get-config only): the same configuration as running here.
        let cand = print_tops(&ds, Datastore::Candidate, &nacm, "alice", &f, WithDefaults::Explicit, false).unwrap();
        assert_eq!(cand, root.map(|r| r.replace(COUNTERS, "")));
    }

    /// A provider with state inside /nacm and no text for it.
    struct Opaque;
    impl crate::datastore::StateProvider for Opaque {
        fn render(
            &self,
            _: &mut yang2::data::DataTree<'static>,
            _: Option<&str>,
        ) -> Result<(), crate::error::RpcError> {
            Ok(())
        }
        fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
            Some(&[("ietf-netconf-acm", "nacm")])
        }
    }

    #[test]
    fn state_a_provider_cannot_give_as_text_takes_the_general_path() {
        let (ds, nacm) = setup();
        ds.register_state_provider(Arc::new(Opaque));
        let f = filter(&format!("<nacm xmlns=\"{ACM}\"/>"));
        assert_eq!(print_tops(&ds, Datastore::Running, &nacm, "root", &f, WithDefaults::Explicit, true).unwrap(), None);
        // The configuration alone does not ask the providers.
        assert!(print_tops(&ds, Datastore::Running, &nacm, "root", &f, WithDefaults::Explicit, false)
            .unwrap()
            .is_some());
    }
}

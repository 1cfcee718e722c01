//! Datastore behaviour (RFC 6241 sections 7 and 8, RFC 8342), including every Appendix A
//! error-tag the datastore layer can raise.

use std::sync::{Arc, Mutex};

use cats_sma::datastore::{
    Change, ChangeOp, ConfigConsumer, Datastore, Datastores, EditOp, EditOptions, ErrorOption, Source, TestOption,
    Transaction,
};
use cats_sma::error::ErrorTag;
use yang2::data::{Data, DataFormat};

const NS: &str = "urn:cats-sma:yang:cats-sma";
const POL: &str = "urn:cats-sma:yang:cats-sma-policy";
const NC: &str = "urn:ietf:params:xml:ns:netconf:base:1.0";

fn open() -> Datastores {
    Datastores::open(cats_sma::yang::context(), None).unwrap()
}

fn cfg(inner: &str) -> String {
    format!(r#"<cats-sma xmlns="{NS}" xmlns:nc="{NC}" xmlns:pol="{POL}">{inner}</cats-sma>"#)
}

fn sci(id: &str, cs: &str) -> String {
    format!("<scis><sci><csci-id>{id}</csci-id><cs-id>{cs}</cs-id></sci></scis>")
}

fn edit(ds: &Datastores, target: Datastore, xml: &str) -> Result<Vec<Change>, Vec<cats_sma::error::RpcError>> {
    edit_opts(ds, target, xml, EditOptions::default())
}

fn edit_opts(
    ds: &Datastores,
    target: Datastore,
    xml: &str,
    opts: EditOptions,
) -> Result<Vec<Change>, Vec<cats_sma::error::RpcError>> {
    let tree = ds.parse_edit(xml.as_bytes(), DataFormat::XML).map_err(|e| vec![e])?;
    ds.edit(1, target, &tree, opts)
}

fn value(ds: &Datastores, store: Datastore, path: &str) -> Option<String> {
    ds.with_tree(store, |t| t.find_path(path).ok().and_then(|n| n.value_canonical())).unwrap()
}

const SCI_A: &str = "/cats-sma:cats-sma/scis/sci[csci-id='a']";

#[test]
fn merge_creates_and_reports_typed_changes() {
    let ds = open();
    let changes = edit(&ds, Datastore::Running, &cfg(&sci("a", "AR1"))).unwrap();
    let created: Vec<_> = changes.iter().map(|c| (c.op, &*c.schema_path)).collect();
    assert!(created.contains(&(ChangeOp::Create, "/cats-sma:cats-sma/scis/sci")));
    assert!(created.contains(&(ChangeOp::Create, "/cats-sma:cats-sma/scis/sci/cs-id")));
    // The default of expected-interval (5000 ms) is present after validation.
    assert_eq!(value(&ds, Datastore::Running, &format!("{SCI_A}/expected-interval")).as_deref(), Some("5000"));

    let changes = edit(
        &ds,
        Datastore::Running,
        &cfg("<scis><sci><csci-id>a</csci-id><expected-interval>7000</expected-interval></sci></scis>"),
    )
    .unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].op, ChangeOp::Modify);
    assert_eq!(changes[0].value.as_deref(), Some("7000"));
    assert_eq!(changes[0].old_value.as_deref(), Some("5000"));
}

#[test]
fn create_on_existing_is_data_exists_and_delete_on_missing_is_data_missing() {
    // RFC 6241 7.2 operation "create" / "delete".
    let ds = open();
    edit(&ds, Datastore::Running, &cfg(&sci("a", "AR1"))).unwrap();
    let err = edit(
        &ds,
        Datastore::Running,
        &cfg(r#"<scis><sci nc:operation="create"><csci-id>a</csci-id><cs-id>AR1</cs-id></sci></scis>"#),
    )
    .unwrap_err();
    assert_eq!(err[0].tag, ErrorTag::DataExists);
    assert_eq!(err[0].path.as_deref(), Some(SCI_A));

    let err =
        edit(&ds, Datastore::Running, &cfg(r#"<scis><sci nc:operation="delete"><csci-id>zz</csci-id></sci></scis>"#))
            .unwrap_err();
    assert_eq!(err[0].tag, ErrorTag::DataMissing);

    // remove on a missing node is fine, and delete on an existing one deletes it.
    edit(&ds, Datastore::Running, &cfg(r#"<scis><sci nc:operation="remove"><csci-id>zz</csci-id></sci></scis>"#))
        .unwrap();
    let changes =
        edit(&ds, Datastore::Running, &cfg(r#"<scis><sci nc:operation="delete"><csci-id>a</csci-id></sci></scis>"#))
            .unwrap();
    assert!(changes.iter().all(|c| c.op == ChangeOp::Delete));
    assert_eq!(value(&ds, Datastore::Running, &format!("{SCI_A}/csci-id")), None);
}

#[test]
fn replace_swaps_the_whole_subtree() {
    let ds = open();
    edit(
        &ds,
        Datastore::Running,
        &cfg("<scis><sci><csci-id>a</csci-id><cs-id>AR1</cs-id><cs-id>AR2</cs-id><description>x</description></sci></scis>"),
    )
    .unwrap();
    edit(
        &ds,
        Datastore::Running,
        &cfg(r#"<scis><sci nc:operation="replace"><csci-id>a</csci-id><cs-id>LLM1</cs-id></sci></scis>"#),
    )
    .unwrap();
    let xml = ds.with_tree(Datastore::Running, |t| cats_sma::datastore::print_xml(t).unwrap()).unwrap();
    assert!(xml.contains("LLM1") && !xml.contains("AR1") && !xml.contains("<description>"), "{xml}");
}

#[test]
fn default_operation_none_does_not_create_parents_of_a_delete() {
    let ds = open();
    edit(&ds, Datastore::Running, &cfg(&sci("a", "AR1"))).unwrap();
    let opts = EditOptions { default_operation: EditOp::None, ..Default::default() };
    let err = edit_opts(
        &ds,
        Datastore::Running,
        &cfg(r#"<scis><sci><csci-id>b</csci-id><description nc:operation="delete"/></sci></scis>"#),
        opts,
    )
    .unwrap_err();
    assert_eq!(err[0].tag, ErrorTag::DataMissing);
}

#[test]
fn bad_values_unknown_elements_and_namespaces_are_refused_with_their_tags() {
    let ds = open();
    // Type check (RFC 6241 Appendix A invalid-value): expected-interval is a uint32.
    let e = ds
        .parse_edit(
            cfg("<scis><sci><csci-id>a</csci-id><expected-interval>-5</expected-interval></sci></scis>").as_bytes(),
            DataFormat::XML,
        )
        .unwrap_err();
    assert_eq!(e.tag, ErrorTag::InvalidValue, "{e}");
    let e = ds.parse_edit(cfg("<no-such-node>1</no-such-node>").as_bytes(), DataFormat::XML).unwrap_err();
    assert_eq!(e.tag, ErrorTag::UnknownElement, "{e}");
    let e = ds.parse_edit(br#"<x xmlns="urn:example:nope">1</x>"#, DataFormat::XML).unwrap_err();
    assert_eq!(e.tag, ErrorTag::UnknownNamespace, "{e}");
    assert_eq!(e.bad_namespace.as_deref(), Some("urn:example:nope"));
    // Bad operation attribute value: bad-attribute.
    let tree = ds.parse_edit(
        cfg(r#"<scis><sci nc:operation="frobnicate"><csci-id>a</csci-id></sci></scis>"#).as_bytes(),
        DataFormat::XML,
    );
    match tree {
        Ok(t) => {
            let e = ds.edit(1, Datastore::Running, &t, EditOptions::default()).unwrap_err();
            assert_eq!(e[0].tag, ErrorTag::BadAttribute);
        }
        Err(e) => assert!(matches!(e.tag, ErrorTag::BadAttribute | ErrorTag::InvalidValue), "{e}"),
    }
}

#[test]
fn state_data_cannot_be_configured() {
    let ds = open();
    let r = ds.parse_edit(
        cfg("<metric-cache><entry><csci-id>a</csci-id><gas>5</gas></entry></metric-cache>").as_bytes(),
        DataFormat::XML,
    );
    let e = match r {
        Ok(t) => ds.edit(1, Datastore::Running, &t, EditOptions::default()).unwrap_err().remove(0),
        Err(e) => e,
    };
    assert!(matches!(e.tag, ErrorTag::InvalidValue | ErrorTag::UnknownElement), "{e}");
}

#[test]
fn validation_errors_map_to_rfc7950_section15_tags_and_leave_running_untouched() {
    let ds = open();
    edit(&ds, Datastore::Running, &cfg(&sci("a", "AR1"))).unwrap();
    // must violation: min-interval <= heartbeat-interval → operation-failed / must-violation.
    let e = edit(
        &ds,
        Datastore::Running,
        &cfg("<pol:policy><pol:update-control><pol:min-interval>120</pol:min-interval></pol:update-control></pol:policy>"),
    )
    .unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::OperationFailed, "{}", e[0]);
    assert_eq!(
        value(&ds, Datastore::Running, "/cats-sma:cats-sma/cats-sma-policy:policy/update-control/min-interval")
            .as_deref(),
        Some("5")
    );
    // leafref require-instance: a pull target for an unregistered SCI → data-missing.
    let e = edit(
        &ds,
        Datastore::Running,
        &cfg("<collection><pull><target><csci-id>nobody</csci-id><url>http://127.0.0.1:1/m</url></target></pull></collection>"),
    )
    .unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::DataMissing, "{}", e[0]);
    assert_eq!(e[0].app_tag.as_deref(), Some("instance-required"));
    // mandatory leaf missing (a rule without priority) → data-missing.
    let e = edit(&ds, Datastore::Running, &cfg("<pol:policy><pol:rule><pol:name>r</pol:name></pol:rule></pol:policy>"))
        .unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::DataMissing, "{}", e[0]);
    assert_eq!(value(&ds, Datastore::Running, "/cats-sma:cats-sma/cats-sma-policy:policy/rule[name='r']/name"), None);
}

#[test]
fn error_options() {
    let ds = open();
    edit(&ds, Datastore::Running, &cfg(&sci("a", "AR1"))).unwrap();
    let two = cfg(
        r#"<scis><sci><csci-id>b</csci-id><cs-id>X</cs-id></sci><sci nc:operation="create"><csci-id>a</csci-id><cs-id>AR1</cs-id></sci></scis>"#,
    );
    // stop-on-error and rollback-on-error are atomic.
    for eo in [ErrorOption::StopOnError, ErrorOption::RollbackOnError] {
        let e = edit_opts(&ds, Datastore::Running, &two, EditOptions { error_option: eo, ..Default::default() })
            .unwrap_err();
        assert_eq!(e[0].tag, ErrorTag::DataExists);
        assert_eq!(value(&ds, Datastore::Running, "/cats-sma:cats-sma/scis/sci[csci-id='b']/csci-id"), None);
    }
    // continue-on-error keeps what succeeded and reports the rest.
    let e = edit_opts(
        &ds,
        Datastore::Running,
        &two,
        EditOptions { error_option: ErrorOption::ContinueOnError, ..Default::default() },
    )
    .unwrap_err();
    assert_eq!(e.len(), 1);
    assert_eq!(
        value(&ds, Datastore::Running, "/cats-sma:cats-sma/scis/sci[csci-id='b']/csci-id").as_deref(),
        Some("b")
    );
}

#[test]
fn test_only_changes_nothing() {
    let ds = open();
    for target in [Datastore::Running, Datastore::Candidate] {
        let opts = EditOptions { test_option: TestOption::TestOnly, ..Default::default() };
        edit_opts(&ds, target, &cfg(&sci("a", "AR1")), opts).unwrap();
        assert_eq!(value(&ds, target, &format!("{SCI_A}/csci-id")), None);
        let bad = cfg("<pol:policy><pol:update-control><pol:min-interval>120</pol:min-interval></pol:update-control></pol:policy>");
        assert!(edit_opts(&ds, target, &bad, opts).is_err(), "test-only validates on {target:?}");
    }
}

#[test]
fn candidate_commit_and_discard() {
    let ds = open();
    edit(&ds, Datastore::Candidate, &cfg(&sci("a", "AR1"))).unwrap();
    assert!(ds.candidate_modified());
    assert_eq!(value(&ds, Datastore::Running, &format!("{SCI_A}/csci-id")), None);
    let changes = ds.commit(1, false).unwrap();
    assert!(changes.iter().any(|c| c.path == SCI_A && c.op == ChangeOp::Create));
    assert_eq!(value(&ds, Datastore::Running, &format!("{SCI_A}/csci-id")).as_deref(), Some("a"));
    assert!(!ds.candidate_modified());

    // The next candidate edit starts from the new running (the spare copy kept in step).
    edit(&ds, Datastore::Candidate, &cfg(&sci("b", "AR1"))).unwrap();
    assert_eq!(value(&ds, Datastore::Candidate, &format!("{SCI_A}/csci-id")).as_deref(), Some("a"));
    ds.discard(1).unwrap();
    assert_eq!(value(&ds, Datastore::Candidate, "/cats-sma:cats-sma/scis/sci[csci-id='b']/csci-id"), None);

    // An invalid candidate does not commit and stays as it is.
    edit(&ds, Datastore::Candidate, &cfg("<pol:policy><pol:update-control><pol:min-interval>120</pol:min-interval></pol:update-control></pol:policy>")).unwrap();
    let e = ds.commit(1, false).unwrap_err();
    assert_eq!(e.tag, ErrorTag::OperationFailed);
    assert!(ds.candidate_modified());
}

#[test]
fn confirmed_commit_rollback_restores_previous_running() {
    let ds = open();
    edit(&ds, Datastore::Running, &cfg(&sci("a", "AR1"))).unwrap();
    edit(&ds, Datastore::Candidate, &cfg(r#"<scis><sci nc:operation="delete"><csci-id>a</csci-id></sci></scis>"#))
        .unwrap();
    ds.commit(1, true).unwrap();
    assert_eq!(value(&ds, Datastore::Running, &format!("{SCI_A}/csci-id")), None);
    assert!(ds.has_rollback());
    let changes = ds.rollback().unwrap();
    assert!(changes.iter().any(|c| c.op == ChangeOp::Create && c.path == SCI_A));
    assert_eq!(value(&ds, Datastore::Running, &format!("{SCI_A}/csci-id")).as_deref(), Some("a"));
    assert_eq!(ds.rollback().unwrap_err().tag, ErrorTag::OperationFailed);
}

#[test]
fn locks_lock_denied_in_use_and_release() {
    let ds = open();
    ds.lock(1, Datastore::Running).unwrap();
    // RFC 6241 7.5: lock-denied carries the holder's session-id.
    let e = ds.lock(2, Datastore::Running).unwrap_err();
    assert_eq!(e.tag, ErrorTag::LockDenied);
    assert_eq!(e.session_id, Some(1));
    // An edit by another session: in-use.
    let tree = ds.parse_edit(cfg(&sci("a", "AR1")).as_bytes(), DataFormat::XML).unwrap();
    let e = ds.edit(2, Datastore::Running, &tree, EditOptions::default()).unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::InUse);
    assert_eq!(e[0].session_id, Some(1));
    // Unlock by a non-holder fails; the session end releases the lock.
    assert_eq!(ds.unlock(2, Datastore::Running).unwrap_err().tag, ErrorTag::OperationFailed);
    ds.release_session(1);
    ds.edit(2, Datastore::Running, &tree, EditOptions::default()).unwrap();
    assert_eq!(ds.unlock(2, Datastore::Running).unwrap_err().tag, ErrorTag::OperationFailed);

    // No lock on a modified candidate.
    edit(&ds, Datastore::Candidate, &cfg(&sci("b", "AR1"))).unwrap();
    assert_eq!(ds.lock(3, Datastore::Candidate).unwrap_err().tag, ErrorTag::LockDenied);
    ds.discard(3).unwrap();
    ds.lock(3, Datastore::Candidate).unwrap();
    edit_as(&ds, 3, Datastore::Candidate, &cfg(&sci("c", "AR1")));
    // Releasing the candidate lock discards its changes.
    ds.unlock(3, Datastore::Candidate).unwrap();
    assert!(!ds.candidate_modified());
    // The operational datastore cannot be locked.
    assert_eq!(ds.lock(1, Datastore::Operational).unwrap_err().tag, ErrorTag::InvalidValue);
}

fn edit_as(ds: &Datastores, session: u32, target: Datastore, xml: &str) {
    let tree = ds.parse_edit(xml.as_bytes(), DataFormat::XML).unwrap();
    ds.edit(session, target, &tree, EditOptions::default()).unwrap();
}

struct Recorder {
    veto: Option<&'static str>,
    seen: Mutex<Vec<String>>,
}

impl ConfigConsumer for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn prepare(&self, tx: &Transaction<'_>) -> Result<(), String> {
        self.seen.lock().unwrap().push(format!("prepare {}", tx.changes.len()));
        match self.veto {
            Some(m) if tx.changes_under("/cats-sma:cats-sma/scis").next().is_some() => Err(m.into()),
            _ => Ok(()),
        }
    }
    fn apply(&self, tx: &Transaction<'_>) {
        assert!(tx.config.find_path("/cats-sma:cats-sma").is_ok());
        self.seen.lock().unwrap().push("apply".into());
    }
    fn abort(&self, _tx: &Transaction<'_>) {
        self.seen.lock().unwrap().push("abort".into());
    }
}

#[test]
fn consumers_prepare_apply_and_veto() {
    let ds = open();
    let ok = Arc::new(Recorder { veto: None, seen: Mutex::new(vec![]) });
    ds.register_consumer(ok.clone());
    edit(&ds, Datastore::Candidate, &cfg(&sci("a", "AR1"))).unwrap();
    ds.commit(1, false).unwrap();
    assert_eq!(ok.seen.lock().unwrap().last().map(String::as_str), Some("apply"));

    let veto = Arc::new(Recorder { veto: Some("cannot take this SCI"), seen: Mutex::new(vec![]) });
    ds.register_consumer(veto);
    edit(&ds, Datastore::Candidate, &cfg(&sci("b", "AR1"))).unwrap();
    let e = ds.commit(1, false).unwrap_err();
    assert_eq!(e.tag, ErrorTag::OperationFailed);
    assert!(e.message.contains("cannot take this SCI"), "{e}");
    assert_eq!(ok.seen.lock().unwrap().last().map(String::as_str), Some("abort"));
    assert_eq!(value(&ds, Datastore::Running, "/cats-sma:cats-sma/scis/sci[csci-id='b']/csci-id"), None);
    // The same veto refuses a direct running edit, leaving running as it was.
    let e = edit(&ds, Datastore::Running, &cfg(&sci("c", "AR1"))).unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::OperationFailed);
    assert_eq!(value(&ds, Datastore::Running, "/cats-sma:cats-sma/scis/sci[csci-id='c']/csci-id"), None);
}

#[test]
fn user_ordered_rules_honour_insert() {
    let ds = open();
    let rule = |n: &str, extra: &str| {
        format!(
            r#"<pol:policy><pol:rule {extra}><pol:name>{n}</pol:name><pol:priority>1</pol:priority><pol:condition>Cost &gt; 100</pol:condition><pol:action>SET Cost = 100</pol:action></pol:rule></pol:policy>"#
        )
    };
    edit(&ds, Datastore::Running, &cfg(&rule("r1", ""))).unwrap();
    edit(&ds, Datastore::Running, &cfg(&rule("r2", ""))).unwrap();
    let yang = r#"xmlns:yang="urn:ietf:params:xml:ns:yang:1" yang:insert="first""#;
    edit(&ds, Datastore::Running, &cfg(&rule("r3", yang))).unwrap();
    let yang = r#"xmlns:yang="urn:ietf:params:xml:ns:yang:1" yang:insert="after" yang:key="[pol:name='r3']""#;
    edit(&ds, Datastore::Running, &cfg(&rule("r4", yang))).unwrap();
    let names = ds
        .with_tree(Datastore::Running, |t| {
            t.find_xpath("/cats-sma:cats-sma/cats-sma-policy:policy/rule/name")
                .unwrap()
                .map(|n| n.value_canonical().unwrap())
                .collect::<Vec<_>>()
        })
        .unwrap();
    assert_eq!(names, ["r3", "r4", "r1", "r2"]);
    // An anchor that does not exist: bad-attribute / missing-instance (RFC 7950 15.7).
    let yang = r#"xmlns:yang="urn:ietf:params:xml:ns:yang:1" yang:insert="before" yang:key="[pol:name='nope']""#;
    let e = edit(&ds, Datastore::Running, &cfg(&rule("r5", yang))).unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::BadAttribute, "{}", e[0]);
    assert_eq!(e[0].app_tag.as_deref(), Some("missing-instance"));
}

#[test]
fn copy_delete_and_startup_persistence() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("startup.xml");
    {
        let ds = Datastores::open(cats_sma::yang::context(), Some(file.clone())).unwrap();
        edit(&ds, Datastore::Running, &cfg(&sci("a", "AR1"))).unwrap();
        assert!(!file.exists(), "running is not startup (RFC 6241 :startup)");
        ds.copy(1, Source::Datastore(Datastore::Running), Datastore::Startup).unwrap();
        // running can't be deleted; same-datastore copy is refused.
        assert_eq!(ds.delete(1, Datastore::Running).unwrap_err().tag, ErrorTag::OperationFailed);
        assert_eq!(
            ds.copy(1, Source::Datastore(Datastore::Running), Datastore::Running).unwrap_err().tag,
            ErrorTag::InvalidValue
        );
    }
    // A restart loads startup into running.
    let ds = Datastores::open(cats_sma::yang::context(), Some(file.clone())).unwrap();
    assert_eq!(value(&ds, Datastore::Running, &format!("{SCI_A}/csci-id")).as_deref(), Some("a"));
    // Inline config replaces running and reports the difference.
    let inline = ds.parse_config(cfg(&sci("z", "LLM1")).as_bytes(), DataFormat::XML).unwrap();
    let changes = ds.copy(1, Source::Config(&inline), Datastore::Running).unwrap();
    assert!(changes.iter().any(|c| c.op == ChangeOp::Delete && c.path == SCI_A));
    assert!(changes.iter().any(|c| c.op == ChangeOp::Create && c.path.contains("'z'")));
    ds.delete(1, Datastore::Startup).unwrap();
    drop(ds);
    let ds = Datastores::open(cats_sma::yang::context(), Some(file)).unwrap();
    assert_eq!(value(&ds, Datastore::Running, &format!("{SCI_A}/csci-id")), None);
}

#[test]
fn operational_view_has_config_and_yang_library() {
    let ds = open();
    edit(&ds, Datastore::Running, &cfg(&sci("a", "AR1"))).unwrap();
    let op = ds.read(Datastore::Operational, None).unwrap();
    assert!(op.find_path(&format!("{SCI_A}/csci-id")).is_ok());
    assert!(op.find_path("/ietf-yang-library:yang-library/content-id").is_ok());
    let sel = ds.read(Datastore::Running, Some("/cats-sma:cats-sma/scis")).unwrap();
    assert!(sel.find_path(&format!("{SCI_A}/cs-id[.='AR1']")).is_ok());
    let e = ds.read(Datastore::Running, Some("/cats-sma:cats-sma/[[[")).unwrap_err();
    assert_eq!(e.tag, ErrorTag::InvalidValue);
}

#[test]
fn fast_path_still_catches_must_referenced_leaves() {
    // heartbeat-interval appears in a must expression, so modifying it takes the full
    // validation pass even though it is a plain leaf modification.
    let ds = open();
    edit(&ds, Datastore::Running, &cfg("<pol:policy><pol:update-control><pol:heartbeat-interval>60</pol:heartbeat-interval></pol:update-control></pol:policy>")).unwrap();
    let e = edit(&ds, Datastore::Running, &cfg("<pol:policy><pol:update-control><pol:heartbeat-interval>1</pol:heartbeat-interval></pol:update-control></pol:policy>")).unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::OperationFailed);
}

struct DenyScis;

impl cats_sma::datastore::WriteGuard for DenyScis {
    fn check(&self, session: u32, _t: Datastore, changes: &[Change]) -> Result<(), cats_sma::error::RpcError> {
        match changes.iter().find(|c| session == 9 && c.path.contains("/scis")) {
            Some(c) => {
                Err(cats_sma::error::RpcError::application(ErrorTag::AccessDenied, "no").with_path(c.path.clone()))
            }
            None => Ok(()),
        }
    }
}

#[test]
fn remaining_appendix_a_tags_the_datastore_raises() {
    let ds = open();
    // missing-attribute: insert="after" without the key attribute (RFC 7950 7.8.6).
    let yang = r#"xmlns:yang="urn:ietf:params:xml:ns:yang:1" yang:insert="after""#;
    let rule = format!(
        r#"<pol:policy><pol:rule {yang}><pol:name>r</pol:name><pol:priority>1</pol:priority><pol:condition>Cost &gt; 1</pol:condition><pol:action>SET Cost = 1</pol:action></pol:rule></pol:policy>"#
    );
    let e = edit(&ds, Datastore::Running, &cfg(&rule)).unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::MissingAttribute, "{}", e[0]);
    assert_eq!(e[0].bad_attribute.as_deref(), Some("key"));
    // missing-element: a list entry without its key.
    let e = ds.parse_edit(cfg("<scis><sci><cs-id>AR1</cs-id></sci></scis>").as_bytes(), DataFormat::XML).unwrap_err();
    assert_eq!(e.tag, ErrorTag::MissingElement, "{e}");
    // access-denied from the write guard, for every datastore, leaving nothing behind.
    ds.set_write_guard(Arc::new(DenyScis));
    let tree = ds.parse_edit(cfg(&sci("a", "AR1")).as_bytes(), DataFormat::XML).unwrap();
    for target in [Datastore::Running, Datastore::Candidate, Datastore::Startup] {
        let e = ds.edit(9, target, &tree, EditOptions::default()).unwrap_err();
        assert_eq!(e[0].tag, ErrorTag::AccessDenied, "{target:?}");
        assert_eq!(value(&ds, target, &format!("{SCI_A}/csci-id")), None);
    }
    let inline = ds.parse_config(cfg(&sci("z", "LLM1")).as_bytes(), DataFormat::XML).unwrap();
    assert_eq!(ds.copy(9, Source::Config(&inline), Datastore::Running).unwrap_err().tag, ErrorTag::AccessDenied);
    ds.edit(1, Datastore::Running, &tree, EditOptions::default()).unwrap();
    // operation-not-supported: the operational datastore is a view, not a tree.
    assert_eq!(ds.with_tree(Datastore::Operational, |_| ()).unwrap_err().tag, ErrorTag::OperationNotSupported);
    // rollback-failed: a consumer refusing the rollback of a confirmed commit.
    edit(&ds, Datastore::Candidate, &cfg(&sci("b", "AR1"))).unwrap();
    ds.commit(1, true).unwrap();
    ds.register_consumer(Arc::new(Recorder { veto: Some("not now"), seen: Mutex::new(vec![]) }));
    let e = ds.rollback().unwrap_err();
    assert_eq!(e.tag, ErrorTag::RollbackFailed);
    assert!(ds.has_rollback(), "the rollback point is kept for a later attempt");
}

#[test]
fn a_refused_edit_leaves_default_leaves_implicit() {
    // A must violation rolls back a change that also touched a leaf holding its default:
    // afterwards the leaf is implicit again, not an explicit copy of the default.
    let ds = open();
    edit(&ds, Datastore::Running, &cfg(&sci("a", "AR1"))).unwrap();
    let before = ds.with_tree(Datastore::Running, |t| cats_sma::datastore::print_xml(t).unwrap()).unwrap();
    let bad = cfg("<scis><sci><csci-id>a</csci-id><expected-interval>7000</expected-interval></sci></scis>\
         <pol:policy><pol:update-control><pol:min-interval>120</pol:min-interval></pol:update-control></pol:policy>");
    assert!(edit(&ds, Datastore::Running, &bad).is_err());
    let after = ds.with_tree(Datastore::Running, |t| cats_sma::datastore::print_xml(t).unwrap()).unwrap();
    assert_eq!(before, after);
    assert!(!after.contains("expected-interval") && !after.contains("min-interval"), "{after}");
}

// ----- issue 22: edits that stay linear (correctness only; timing lives in examples/) -----

const NACM_NS: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-acm";

fn running_xml(ds: &Datastores) -> String {
    ds.with_tree(Datastore::Running, |t| cats_sma::datastore::print_xml(t).unwrap()).unwrap()
}

fn nacm(inner: &str) -> String {
    format!(r#"<nacm xmlns="{NACM_NS}" xmlns:nc="{NC}">{inner}</nacm>"#)
}

fn group_names(ds: &Datastores) -> Vec<String> {
    ds.with_tree(Datastore::Running, |t| {
        t.find_xpath("/ietf-netconf-acm:nacm/groups/group/name")
            .map(|s| s.map(|n| n.value_canonical().unwrap()).collect())
            .unwrap_or_default()
    })
    .unwrap()
}

#[test]
fn issue22_failed_bulk_delete_restores_every_entry_and_the_user_order() {
    let ds = open();
    let rule = |n: usize| {
        format!(
            "<pol:rule><pol:name>r{n}</pol:name><pol:priority>1</pol:priority><pol:condition>Cost &gt; 100</pol:condition><pol:action>SET Cost = 100</pol:action></pol:rule>"
        )
    };
    let rules: String = (0..10).map(rule).collect();
    let scis: String = (0..1000).map(|i| format!("<sci><csci-id>s{i}</csci-id><cs-id>CS{i}</cs-id></sci>")).collect();
    edit(&ds, Datastore::Running, &cfg(&format!("<scis>{scis}</scis><pol:policy>{rules}</pol:policy>"))).unwrap();
    let before = running_xml(&ds);
    // Deletes user-ordered rules from the front, the middle and the end, every SCI, and
    // then one SCI that does not exist: the whole edit fails and nothing may be lost or
    // reordered.
    let del_rules: String = [2, 5, 0, 9, 1]
        .iter()
        .map(|n| format!(r#"<pol:rule nc:operation="delete"><pol:name>r{n}</pol:name></pol:rule>"#))
        .collect();
    let mut del_scis: String =
        (0..1000).map(|i| format!(r#"<sci nc:operation="delete"><csci-id>s{i}</csci-id></sci>"#)).collect();
    del_scis.push_str(r#"<sci nc:operation="delete"><csci-id>missing</csci-id></sci>"#);
    let e =
        edit(&ds, Datastore::Running, &cfg(&format!("<pol:policy>{del_rules}</pol:policy><scis>{del_scis}</scis>")))
            .unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::DataMissing, "{}", e[0]);
    assert_eq!(running_xml(&ds), before, "a failed edit leaves running byte for byte as it was");
    // The same through the candidate: the failed edit leaves it equal to running.
    let e =
        edit(&ds, Datastore::Candidate, &cfg(&format!("<pol:policy>{del_rules}</pol:policy><scis>{del_scis}</scis>")))
            .unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::DataMissing);
    let cand = ds.with_tree(Datastore::Candidate, |t| cats_sma::datastore::print_xml(t).unwrap()).unwrap();
    assert_eq!(cand, before);
}

#[test]
fn issue22_bulk_create_and_delete_of_20k_entries_in_one_edit() {
    let ds = open();
    let n = 20_000;
    let groups: String =
        (0..n).map(|i| format!("<group><name>g{i}</name><user-name>u{i}</user-name></group>")).collect();
    let changes = edit(&ds, Datastore::Running, &nacm(&format!("<groups>{groups}</groups>"))).unwrap();
    // Per entry: the entry, its key, its user-name (nacm and groups are non-presence
    // containers that exist already).
    assert_eq!(changes.iter().filter(|c| c.op == ChangeOp::Create).count(), 3 * n);
    let names = group_names(&ds);
    assert_eq!(names.len(), n);
    assert!(names.contains(&"g0".to_owned()) && names.contains(&format!("g{}", n - 1)));
    // A create of one that exists among many new ones fails whole.
    let mut again: String = (n..2 * n).map(|i| format!("<group><name>g{i}</name></group>")).collect();
    again.push_str(r#"<group nc:operation="create"><name>g7</name></group>"#);
    let e = edit(&ds, Datastore::Running, &nacm(&format!("<groups>{again}</groups>"))).unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::DataExists);
    assert_eq!(group_names(&ds).len(), n);
    let dels: String = (0..n).map(|i| format!(r#"<group nc:operation="delete"><name>g{i}</name></group>"#)).collect();
    let changes = edit(&ds, Datastore::Running, &nacm(&format!("<groups>{dels}</groups>"))).unwrap();
    assert_eq!(changes.iter().filter(|c| c.op == ChangeOp::Delete).count(), 3 * n);
    assert!(group_names(&ds).is_empty());
}

/// A deterministic pseudo-random sequence (no seed file, reproducible failures).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn issue22_random_edits_match_a_model_and_failures_change_nothing() {
    use std::collections::BTreeMap;
    let ds = open();
    let mut model: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut rng = Lcg(22);
    for round in 0..60 {
        let before = running_xml(&ds);
        let mut next = model.clone();
        let mut body = String::new();
        let mut fails = false;
        for _ in 0..rng.next(200) + 1 {
            let g = rng.next(300);
            let users: Vec<u64> = (0..rng.next(3)).map(|_| rng.next(5)).collect();
            let user_xml: String = users.iter().map(|u| format!("<user-name>u{u}</user-name>")).collect();
            match rng.next(6) {
                0 => {
                    fails |= next.contains_key(&g);
                    body.push_str(&format!(r#"<group nc:operation="create"><name>g{g}</name>{user_xml}</group>"#));
                    next.entry(g).or_default().extend(users);
                }
                1 => {
                    fails |= !next.contains_key(&g);
                    body.push_str(&format!(r#"<group nc:operation="delete"><name>g{g}</name></group>"#));
                    next.remove(&g);
                }
                2 => {
                    body.push_str(&format!(r#"<group nc:operation="remove"><name>g{g}</name></group>"#));
                    next.remove(&g);
                }
                3 => {
                    body.push_str(&format!(r#"<group nc:operation="replace"><name>g{g}</name>{user_xml}</group>"#));
                    next.insert(g, users);
                }
                _ => {
                    body.push_str(&format!("<group><name>g{g}</name>{user_xml}</group>"));
                    next.entry(g).or_default().extend(users);
                }
            }
        }
        for v in next.values_mut() {
            v.sort();
            v.dedup();
        }
        let result = edit(&ds, Datastore::Running, &nacm(&format!("<groups>{body}</groups>")));
        if fails {
            assert!(result.is_err(), "round {round}: the edit should fail");
            assert_eq!(running_xml(&ds), before, "round {round}: a failed edit changed running");
            continue;
        }
        result.unwrap_or_else(|e| panic!("round {round}: {}", e[0]));
        model = next;
        let got: BTreeMap<u64, Vec<u64>> = ds
            .with_tree(Datastore::Running, |t| {
                let mut m = BTreeMap::new();
                if let Ok(set) = t.find_xpath("/ietf-netconf-acm:nacm/groups/group") {
                    for g in set {
                        let mut name = 0;
                        let mut users = Vec::new();
                        for c in g.children() {
                            let v = c.value_canonical().unwrap();
                            match c.schema().name() {
                                "name" => name = v[1..].parse().unwrap(),
                                "user-name" => users.push(v[1..].parse().unwrap()),
                                _ => {}
                            }
                        }
                        users.sort();
                        m.insert(name, users);
                    }
                }
                m
            })
            .unwrap();
        assert_eq!(got, model, "round {round}");
    }
}

/// Review of issue 22's in-place deletes: libyang's validation frees the data of a choice's
/// other case, which may be the parent of a subtree the edit removed; when the edit is then
/// refused, the rollback must put that subtree back under a parent looked up again (created
/// anew), never under the freed one (before the fix: SIGSEGV).
#[test]
fn issue22_rollback_after_validation_removed_the_other_case_puts_the_deleted_leaf_back() {
    const NCS: &str = "urn:cats-sma:yang:cats-sma-netconf-server";
    let ds = open();
    let client = |inner: &str| {
        cfg(&format!(
            "<netconf-server xmlns=\"{NCS}\"><call-home><netconf-client><name>c</name>{inner}</netconf-client>\
             </call-home></netconf-server>"
        ))
    };
    edit(
        &ds,
        Datastore::Running,
        &client(
            "<endpoint><name>e</name><transport>ssh</transport><remote-address>127.0.0.1</remote-address></endpoint>\
             <periodic><period>60</period></periodic>",
        ),
    )
    .unwrap();
    let period =
        "/cats-sma:cats-sma/cats-sma-netconf-server:netconf-server/call-home/netconf-client[name='c']/periodic/period";
    assert_eq!(value(&ds, Datastore::Running, period).as_deref(), Some("60"));
    // Delete the period, choose the persistent case, and add a TLS endpoint without the TLS
    // trust anchors its must asks for: validation removes `periodic`, then refuses the edit.
    let refused = client(
        "<periodic><period nc:operation=\"delete\">60</period></periodic><persistent/>\
         <endpoint><name>t</name><transport>tls</transport><remote-address>127.0.0.1</remote-address></endpoint>",
    );
    let err = edit(&ds, Datastore::Running, &refused).unwrap_err();
    assert_eq!(err[0].app_tag.as_deref(), Some("must-violation"), "refused by validation: {err:?}");
    assert_eq!(value(&ds, Datastore::Running, period).as_deref(), Some("60"), "the deleted leaf is back");
    // The tree is whole: a later edit and a full validation work on it.
    edit(&ds, Datastore::Running, &client("<periodic><period>120</period></periodic>")).unwrap();
    assert_eq!(value(&ds, Datastore::Running, period).as_deref(), Some("120"));
}

use cats_sma::testing::Rng;

trait Pick {
    fn pick(&mut self, n: u64) -> u64;
}

impl Pick for Rng {
    fn pick(&mut self, n: u64) -> u64 {
        self.below(n as usize) as u64
    }
}

/// One random edit of the SCI registry and what it references: SCIs (with or without
/// cs-id, credential-ref, authentication none), credentials (valid or missing their key),
/// pull and probe targets (leafrefs to an SCI), jwt trust domains (user-ordered), plain leaf
/// changes; valid and invalid alike.
fn random_edit(r: &mut Rng) -> String {
    let sci_id = format!("s{}", r.pick(6));
    let cred = format!("k{}", r.pick(3));
    let sci_body = |r: &mut Rng| {
        let mut b = format!("<csci-id>{sci_id}</csci-id>");
        if r.pick(8) != 0 {
            b += &format!("<cs-id>cs{}</cs-id>", r.pick(3));
        }
        if r.pick(2) == 0 {
            b += &format!("<credential-ref>{cred}</credential-ref>");
        }
        if r.pick(5) == 0 {
            b += "<authentication>none</authentication>";
        }
        if r.pick(3) == 0 {
            b += &format!("<expected-interval>{}</expected-interval>", 1000 + r.pick(5000));
        }
        b
    };
    match r.pick(13) {
        // A jwt credential turned hmac: validation removes its when-false leaves.
        11 => cfg(&format!(
            "<collection><authentication><credential><name>{cred}</name><type>hmac-sha256</type></credential></authentication></collection>"
        )),
        0 | 1 => cfg(&format!(r#"<scis><sci nc:operation="create">{}</sci></scis>"#, sci_body(r))),
        2 => cfg(&format!(r#"<scis><sci nc:operation="delete"><csci-id>{sci_id}</csci-id></sci></scis>"#)),
        3 if r.pick(3) == 0 => cfg(&format!(
            r#"<collection><authentication><credential nc:operation="create"><name>{cred}</name><type>jwt</type><algorithm>HS256</algorithm><key>MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=</key><issuer>i</issuer>{}</credential></authentication></collection>"#,
            if r.pick(4) == 0 { "" } else { "<audience>a</audience>" }
        )),
        3 => {
            let key = if r.pick(5) == 0 { String::new() } else { "<key>MDEyMzQ1Njc4OWFiY2RlZg==</key>".into() };
            cfg(&format!(
                r#"<collection><authentication><credential nc:operation="create"><name>{cred}</name><type>hmac-sha256</type>{key}</credential></authentication></collection>"#
            ))
        }
        4 => cfg(&format!(
            r#"<collection><authentication><credential nc:operation="delete"><name>{cred}</name></credential></authentication></collection>"#
        )),
        5 => cfg(&format!(
            r#"<collection><pull><target nc:operation="create"><csci-id>{sci_id}</csci-id><url>http://127.0.0.1:1/m</url></target></pull></collection>"#
        )),
        6 => cfg(&format!(
            r#"<collection><pull><target nc:operation="delete"><csci-id>{sci_id}</csci-id></target></pull></collection>"#
        )),
        7 => cfg(&format!(
            "<scis><sci><csci-id>{sci_id}</csci-id><expected-interval>{}</expected-interval></sci></scis>",
            1000 + r.pick(5000)
        )),
        8 => {
            let other = format!("s{}", 6 + r.pick(3));
            cfg(&format!(
                r#"<scis><sci nc:operation="create">{}</sci><sci nc:operation="create"><csci-id>{other}</csci-id><cs-id>cs1</cs-id></sci></scis>"#,
                sci_body(r)
            ))
        }
        9 => cfg(&format!(
            r#"<scis><discovery><trust-domain nc:operation="create"><name>d{}</name><proof>jwt</proof><credential-ref>{cred}</credential-ref><csci-id-pattern>pod-*</csci-id-pattern><cs-id>cs1</cs-id></trust-domain></discovery></scis>"#,
            r.pick(3)
        )),
        _ => cfg(&format!(
            r#"<scis><discovery><trust-domain nc:operation="delete"><name>d{}</name></trust-domain></discovery></scis>"#,
            r.pick(3)
        )),
    }
}

/// Running as printed with explicit values only and with every default tagged; asserts that
/// running is what libyang's validation of a copy of it gives (valid, defaults in place).
fn running_text(ds: &Datastores, what: &str) -> (String, String) {
    use yang2::data::{DataPrinterFlags as F, DataTree, DataValidationFlags};
    let print = |t: &DataTree<'static>| {
        let p = |f| t.print_string(DataFormat::XML, F::WITH_SIBLINGS | f).unwrap().unwrap_or_default();
        (p(F::WD_EXPLICIT), p(F::from_bits_retain(yang2::ffi::LYD_PRINT_WD_ALL_TAG)))
    };
    ds.with_tree(Datastore::Running, |t| {
        let mut copy = t.duplicate().unwrap();
        if let Err(e) = copy.validate(DataValidationFlags::NO_STATE) {
            panic!("{what}: running is not valid: {e:?}\n{}", print(t).0);
        }
        let text = print(t);
        assert_eq!(text, print(&copy), "{what}: running is not what its validation gives");
        text
    })
    .unwrap()
}

/// RFC 7950 section 8 (constraint enforcement at commit): validation that looks only at the
/// created or deleted entries and what they reach (`datastore/local.rs`) accepts and
/// refuses exactly what libyang's full validation does, and leaves the same tree (defaults
/// and default flags included), over random sequences of valid and invalid edits on running
/// and through the candidate.
#[test]
fn rfc7950_8_validation_of_changed_entries_agrees_with_full_validation() {
    let local = open();
    let full = open();
    full.set_local_validation(false);
    for seed in 1..=8u64 {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        for step in 0..150 {
            let xml = random_edit(&mut r);
            // Edits of running and of the candidate interleave; the candidate is committed
            // (or discarded when its commit fails) now and then, with running edited since.
            let (via_candidate, commit) = match r.pick(8) {
                0 | 1 => (true, false),
                2 => (true, true),
                _ => (false, r.pick(6) == 0),
            };
            let run = |ds: &Datastores| -> Result<(), String> {
                let target = if via_candidate { Datastore::Candidate } else { Datastore::Running };
                let e = edit(ds, target, &xml).map_err(|e| format!("edit {e:?}"));
                if commit {
                    let c = ds.commit(1, false);
                    if c.is_err() {
                        ds.discard(1).unwrap();
                    }
                    c.map_err(|e| format!("commit {e:?}"))?;
                }
                e.map(|_| ())
            };
            let (a, b) = (run(&local), run(&full));
            assert_eq!(a, b, "seed {seed} step {step}: the two validations disagree on\n{xml}");
            let what = |side| {
                format!("{side} seed {seed} step {step} (candidate {via_candidate}, commit {commit}) after\n{xml}\n")
            };
            assert_eq!(
                running_text(&local, &what("local")),
                running_text(&full, &what("full")),
                "seed {seed} step {step}: running differs after\n{xml}"
            );
        }
    }
    eprintln!("validated on the changed entries: {} commits", local.local_validations());
    assert!(
        local.local_validations() >= 100,
        "the local path was taken for {} commits only",
        local.local_validations()
    );
    assert_eq!(full.local_validations(), 0);
}

/// RFC 6241 8.3: a candidate edit that failed leaves the candidate unmodified — it is
/// running, follows later edits of running, and can be locked (8.3.5.1 refuses a lock only
/// for a modified candidate). Before, the failed edit left a copy of running behind that a
/// later commit wrote over running, losing what had been configured there meanwhile.
#[test]
fn rfc6241_8_3_a_failed_candidate_edit_leaves_no_stale_candidate() {
    let ds = open();
    let missing = cfg(r#"<scis><sci nc:operation="delete"><csci-id>x</csci-id></sci></scis>"#);
    let e = edit(&ds, Datastore::Candidate, &missing).unwrap_err();
    assert_eq!(e[0].tag, ErrorTag::DataMissing);
    assert!(!ds.candidate_modified());
    ds.lock(2, Datastore::Candidate).unwrap();
    ds.unlock(2, Datastore::Candidate).unwrap();
    edit(&ds, Datastore::Running, &cfg(&sci("a", "cs1"))).unwrap();
    assert_eq!(value(&ds, Datastore::Candidate, &format!("{SCI_A}/csci-id")).as_deref(), Some("a"));
    edit(&ds, Datastore::Candidate, &cfg(&sci("b", "cs1"))).unwrap();
    ds.commit(1, false).unwrap();
    for id in ["a", "b"] {
        let path = format!("/cats-sma:cats-sma/scis/sci[csci-id='{id}']/csci-id");
        assert_eq!(value(&ds, Datastore::Running, &path).as_deref(), Some(id), "SCI {id} lost by the commit");
    }
}

/// RFC 6241 7.2 (an edit is applied whole or not at all) with RFC 7950 8.2 (validation
/// removes nodes whose when became false): an edit refused by validation or by a consumer
/// after validation had already removed such nodes leaves running exactly as it was.
/// Before, the jwt leaves validation had removed stayed removed and running was left
/// invalid (a jwt credential without an algorithm).
#[test]
fn rfc6241_7_2_a_refused_edit_leaves_nothing_validation_removed() {
    let ds = open();
    let jwt = r#"<collection><authentication><credential><name>k</name><type>jwt</type><algorithm>HS256</algorithm><key>MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=</key><issuer>i</issuer><audience>a</audience></credential></authentication></collection>"#;
    edit(&ds, Datastore::Running, &cfg(jwt)).unwrap();
    let domain = r#"<scis><discovery><trust-domain><name>d</name><proof>jwt</proof><credential-ref>k</credential-ref><csci-id-pattern>p-*</csci-id-pattern><cs-id>cs1</cs-id></trust-domain></discovery></scis>"#;
    edit(&ds, Datastore::Running, &cfg(domain)).unwrap();
    let before = ds.with_tree(Datastore::Running, |t| cats_sma::datastore::print_xml(t).unwrap()).unwrap();
    let to_hmac = cfg("<collection><authentication><credential><name>k</name><type>hmac-sha256</type></credential></authentication></collection>");
    // The trust domain's must wants a jwt credential: refused after the when-false leaves
    // were removed by validation.
    let e = edit(&ds, Datastore::Running, &to_hmac).unwrap_err();
    assert_eq!(e[0].app_tag.as_deref(), Some("must-violation"), "{e:?}");
    let after = ds.with_tree(Datastore::Running, |t| cats_sma::datastore::print_xml(t).unwrap()).unwrap();
    assert_eq!(after, before, "the refused edit left a trace");
    ds.validate(Source::Datastore(Datastore::Running)).unwrap();
    // Without the domain the edit validates, and a consumer refuses it: same.
    edit(
        &ds,
        Datastore::Running,
        &cfg(
            r#"<scis><discovery><trust-domain nc:operation="delete"><name>d</name></trust-domain></discovery></scis>"#,
        ),
    )
    .unwrap();
    struct Veto;
    impl ConfigConsumer for Veto {
        fn name(&self) -> &str {
            "veto"
        }
        fn prepare(&self, tx: &Transaction<'_>) -> Result<(), String> {
            match tx.changes_under("/cats-sma:cats-sma/collection").next() {
                Some(_) => Err("no".into()),
                None => Ok(()),
            }
        }
        fn apply(&self, _: &Transaction<'_>) {}
    }
    ds.register_consumer(Arc::new(Veto));
    let before = ds.with_tree(Datastore::Running, |t| cats_sma::datastore::print_xml(t).unwrap()).unwrap();
    edit(&ds, Datastore::Running, &to_hmac).unwrap_err();
    let after = ds.with_tree(Datastore::Running, |t| cats_sma::datastore::print_xml(t).unwrap()).unwrap();
    assert_eq!(after, before, "the vetoed edit left a trace");
    ds.validate(Source::Datastore(Datastore::Running)).unwrap();
    // Through the candidate, a vetoed commit leaves the candidate as it was edited.
    edit(&ds, Datastore::Candidate, &to_hmac).unwrap();
    ds.commit(1, false).unwrap_err();
    let algorithm = "/cats-sma:cats-sma/collection/authentication/credential[name='k']/algorithm[.='HS256']";
    assert!(ds.with_tree(Datastore::Candidate, |t| t.find_path(algorithm).is_ok()).unwrap());
}

/// A new entry's defaults come with validation, not with the edit that created it: a later
/// edit of the same transaction (YANG Patch) or of the same unvalidated candidate that writes
/// a defaulted leaf creates it, and the candidate holds no defaults of uncommitted entries.
#[test]
fn issue22_new_entries_get_their_defaults_at_validation_only() {
    let ds = open();
    let owned = |xml: &str| ds.parse_edit(xml.as_bytes(), DataFormat::XML).unwrap();
    let interval = |id: &str| {
        format!("<scis><sci><csci-id>{id}</csci-id><expected-interval>5000</expected-interval></sci></scis>")
    };
    let leaf = |changes: &[Change], id: &str| {
        let path = format!("/cats-sma:cats-sma/scis/sci[csci-id='{id}']/expected-interval");
        changes.iter().find(|c| c.path == path).map(|c| (c.op, c.old_value.clone()))
    };
    // Candidate: created by one edit-config (moved whole into the tree), written by the next.
    ds.edit_owned(1, Datastore::Candidate, owned(&cfg(&sci("a", "AR1"))), EditOptions::default()).unwrap();
    assert_eq!(value(&ds, Datastore::Candidate, &format!("{SCI_A}/expected-interval")), None);
    let changes = ds.edit_owned(1, Datastore::Candidate, owned(&cfg(&interval("a"))), EditOptions::default()).unwrap();
    assert_eq!(leaf(&changes, "a"), Some((ChangeOp::Create, None)));
    // One transaction of two edits on running: the second creates the leaf.
    let edits = vec![owned(&cfg(&sci("b", "AR1"))), owned(&cfg(&interval("b")))];
    let changes = ds.edit_all_owned(1, Datastore::Running, edits, EditOptions::default()).unwrap();
    assert_eq!(leaf(&changes, "b"), Some((ChangeOp::Create, None)));
    // Validated running has the defaults of what was created whole.
    ds.edit_owned(1, Datastore::Running, owned(&cfg(&sci("c", "AR1"))), EditOptions::default()).unwrap();
    let c = "/cats-sma:cats-sma/scis/sci[csci-id='c']";
    assert_eq!(value(&ds, Datastore::Running, &format!("{c}/expected-interval")).as_deref(), Some("5000"));
    assert_eq!(value(&ds, Datastore::Running, &format!("{c}/authentication")).as_deref(), Some("required"));
}

/// A random edit of the SCI list for [`rfc6241_7_2_edits_moved_into_running_equal_edits_copied`]:
/// runs of new entries (the editor moves them into running as one run when the list is
/// empty), entries that exist, per-entry operations, an operation below an entry, a value
/// validation refuses (a `credential-ref` to no credential), and the whole list replaced or
/// removed, so that the list is often empty again.
fn random_sci_edit(rng: &mut Lcg) -> String {
    let mut body = String::new();
    let top = match rng.next(8) {
        0 => r#" nc:operation="replace""#,
        1 | 2 => return cfg(r#"<scis nc:operation="remove"/>"#),
        _ => "",
    };
    // Half the edits only create or merge plain entries (what a bulk create sends): each
    // SCI and CS-ID once, but now and then one repeated (the child-by-child walk merges a
    // repeat, or refuses a repeated create).
    let plain = rng.next(2) == 0;
    let mut used = std::collections::HashSet::new();
    for _ in 0..rng.next(30) + 1 {
        let mut id = rng.next(60);
        while plain && rng.next(20) != 0 && !used.insert(id) {
            id = rng.next(60);
        }
        let op = match rng.next(if plain { 20 } else { 12 }) {
            0 => r#" nc:operation="create""#,
            1 => r#" nc:operation="merge""#,
            2 => r#" nc:operation="replace""#,
            3 => r#" nc:operation="delete""#,
            4 => r#" nc:operation="remove""#,
            _ => "",
        };
        let op = if plain && (op.contains("delete") || op.contains("remove")) { "" } else { op };
        let mut inner = format!("<csci-id>s{id}</csci-id>");
        let first = rng.next(4);
        let count = rng.next(3) + 1;
        for k in 0..count {
            let cs = if plain && rng.next(30) != 0 { (first + k) % 4 } else { rng.next(4) };
            inner.push_str(&format!("<cs-id>CS{cs}</cs-id>"));
        }
        match rng.next(if plain { 80 } else { 25 }) {
            0 => inner.push_str("<credential-ref>missing</credential-ref>"),
            1 if !plain => inner.push_str(r#"<expected-interval nc:operation="replace">7000</expected-interval>"#),
            2 | 3 => inner.push_str(&format!("<expected-interval>{}</expected-interval>", 1000 + rng.next(5))),
            4 => inner.push_str("<authentication>none</authentication>"),
            _ => {}
        }
        body.push_str(&format!("<sci{op}>{inner}</sci>"));
    }
    cfg(&format!("<scis{top}>{body}</scis>"))
}

/// Running with every default printed, marked as such (a default flag lost or gained shows).
fn running_all(ds: &Datastores) -> String {
    use yang2::data::DataPrinterFlags;
    ds.with_tree(Datastore::Running, |t| {
        let flags = DataPrinterFlags::from_bits_retain(
            (DataPrinterFlags::WITH_SIBLINGS | DataPrinterFlags::KEEP_EMPTY_CONT).bits()
                | yang2::ffi::LYD_PRINT_WD_ALL_TAG,
        );
        t.print_string(DataFormat::XML, flags).unwrap().unwrap_or_default()
    })
    .unwrap()
}

/// RFC 6241 7.2: an edit handed over whole (NETCONF and RESTCONF parse each edit for one
/// use) has its new subtrees moved into running — a run of new list entries as one run of
/// siblings — where an edit that is only borrowed has them copied. The same random edits
/// through both leave running the same (with defaults and their flags) and report the same
/// changes in the same order, or the same errors with nothing kept.
#[test]
fn rfc6241_7_2_edits_moved_into_running_equal_edits_copied() {
    let (copied, moved) = (open(), open());
    let mut rng = Lcg(7);
    let (mut ok, mut refused) = (0, 0);
    for round in 0..300 {
        let xml = random_sci_edit(&mut rng);
        let before = running_all(&moved);
        let a = edit(&copied, Datastore::Running, &xml);
        let b = moved
            .parse_edit(xml.as_bytes(), DataFormat::XML)
            .map_err(|e| vec![e])
            .and_then(|t| moved.edit_owned(1, Datastore::Running, t, EditOptions::default()));
        match (&a, &b) {
            (Ok(x), Ok(y)) => {
                assert_eq!(x, y, "round {round}: the changes differ\n{xml}");
                ok += 1;
            }
            (Err(x), Err(y)) => {
                assert_eq!(x, y, "round {round}: the errors differ\n{xml}");
                assert_eq!(running_all(&moved), before, "round {round}: a refused edit changed running\n{xml}");
                refused += 1;
            }
            _ => panic!("round {round}: copied {a:?}, moved {b:?}\n{xml}"),
        }
        assert_eq!(running_all(&copied), running_all(&moved), "round {round}\n{xml}");
    }
    assert!(ok > 60 && refused > 30, "accepted {ok}, refused {refused}");
    // The one-step move was taken (the copying path never takes it).
    assert_eq!(copied.adopted_runs(), 0);
    assert!(moved.adopted_runs() > 20, "runs moved in one step: {}", moved.adopted_runs());
}

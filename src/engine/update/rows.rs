//! Per-SCI rows for the C-PSes that take metrics per CSCI-ID (`Advertisement::scis`): the
//! current row of every SCI while some C-PS wants them (`UpdateEvent::SciDetail(true)`),
//! and the row each C-PS was last told, so a delta carries only the rows that changed and a
//! suppressed service's rows stay what was advertised.
//!
//! Bounded by the metric cache: rows come only from cache entries (`UpdateEvent::SciRows`),
//! one per CSCI-ID, and an SCI that leaves the cache (`SciChange::Removed`) drops its row.

use std::collections::{BTreeMap, HashMap};

use super::advertisement::SciMetrics;
use crate::engine::model::{CsId, CsciId};

#[derive(Clone, Debug)]
struct Row {
    current: SciMetrics,
    /// What an advertisement to all last carried for this SCI in this service.
    sent: Option<SciMetrics>,
}

/// The rows, by service then CSCI-ID.
#[derive(Debug, Default)]
pub struct Rows {
    by_service: BTreeMap<CsId, BTreeMap<CsciId, Row>>,
    service_of: HashMap<CsciId, CsId>,
}

impl Rows {
    /// Number of SCIs with a row.
    pub fn len(&self) -> usize {
        self.service_of.len()
    }

    /// New rows from the engine; an SCI that moved to another CS-ID leaves the old one.
    pub fn apply(&mut self, rows: Vec<SciMetrics>) {
        for row in rows {
            if self.service_of.get(&row.csci_id).is_some_and(|cs| *cs != row.cs_id) {
                self.remove(&row.csci_id);
            }
            self.service_of.insert(row.csci_id.clone(), row.cs_id.clone());
            let service = self.by_service.entry(row.cs_id.clone()).or_default();
            match service.get_mut(&row.csci_id) {
                Some(r) => r.current = row,
                None => {
                    service.insert(row.csci_id.clone(), Row { current: row, sent: None });
                }
            }
        }
    }

    /// The SCI left the cache.
    pub fn remove(&mut self, csci_id: &str) {
        let Some(cs) = self.service_of.remove(csci_id) else { return };
        if let Some(service) = self.by_service.get_mut(&cs) {
            service.remove(csci_id);
            if service.is_empty() {
                self.by_service.remove(&cs);
            }
        }
    }

    /// A full snapshot's rows of one service: the current ones, or (`frozen`: the service is
    /// suppressed) those last advertised. `to_all` records them as advertised.
    pub fn full(&mut self, cs_id: &str, frozen: bool, to_all: bool, out: &mut Vec<SciMetrics>) {
        let Some(service) = self.by_service.get_mut(cs_id) else { return };
        for row in service.values_mut() {
            if frozen {
                out.extend(row.sent.clone());
            } else {
                out.push(row.current.clone());
                if to_all {
                    row.sent = Some(row.current.clone());
                }
            }
        }
    }

    /// A delta's rows of one service: those that changed since they were last advertised,
    /// recorded as advertised now.
    pub fn changed(&mut self, cs_id: &str, out: &mut Vec<SciMetrics>) {
        let Some(service) = self.by_service.get_mut(cs_id) else { return };
        for row in service.values_mut() {
            if row.sent.as_ref() != Some(&row.current) {
                out.push(row.current.clone());
                row.sent = Some(row.current.clone());
            }
        }
    }
}

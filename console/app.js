// The cats-sma operator console. Everything it shows comes from the RESTCONF API with the
// user's own credentials (so the agent's authentication and NACM decide what is seen and
// done): one GET of /restconf/data/cats-sma:cats-sma at login, then three RFC 8650
// subscriptions read as server-sent events through fetch (EventSource cannot send an
// Authorization header):
//   data   YANG-Push on-change (RFC 8641) of the metric cache, the services and the SCIs
//   state  YANG-Push periodic of what is not on-change capable: quarantine, C-PS sessions,
//          statistics, audit counters
//   events the NETCONF event stream (RFC 8639), with a replay of the last hour
// Every value reaches the DOM as text (textContent / text nodes), never as markup.
"use strict";

(() => {
  const API = "/restconf";
  const YANG_JSON = "application/yang-data+json";
  const ROOT = "/cats-sma:cats-sma";
  const MAX_POINTS = 720; // chart points kept per service / SCI
  const MAX_REPORTS = 50; // last accepted reports kept per SCI
  const MAX_EVENTS = 300; // notifications and audit lines kept
  const PERIOD_CS = 200; // the periodic subscription's period, centiseconds (RFC 8641)

  // List keys of the lists the data subscription edits (RFC 8072 targets carry values only).
  const KEYS = { entry: ["csci-id"], service: ["cs-id"], sci: ["csci-id"], peer: ["name"], quarantine: ["id"] };

  const SUBSCRIPTIONS = {
    data: {
      label: "metric cache, services, SCIs (on-change)",
      input: () => ({
        "ietf-yang-push:datastore": "ietf-datastores:operational",
        "ietf-yang-push:datastore-xpath-filter": `${ROOT}/metric-cache | ${ROOT}/services | ${ROOT}/scis/sci`,
        "ietf-yang-push:on-change": { "dampening-period": 20 },
      }),
      parts: ["metric-cache", "services", "scis"],
    },
    state: {
      label: "quarantine, C-PS sessions, statistics, audit (periodic)",
      input: () => ({
        "ietf-yang-push:datastore": "ietf-datastores:operational",
        "ietf-yang-push:datastore-xpath-filter":
          `${ROOT}/quarantine | ${ROOT}/statistics | ${ROOT}/audit | ${ROOT}/cats-sma-cps:c-ps/peer/session`,
        "ietf-yang-push:periodic": { period: PERIOD_CS },
      }),
      parts: ["quarantine", "statistics", "audit", "c-ps"],
      // A periodic stream that stays silent this long is taken as lost.
      watchdogMs: PERIOD_CS * 10 * 5,
    },
    events: {
      label: "NETCONF event stream",
      input: () => ({ stream: "NETCONF", "replay-start-time": S.replayFrom }),
    },
  };

  let S = null; // the session: credentials, data, history; null when logged out

  function newSession(user, password) {
    return {
      user,
      auth: "Basic " + base64(`${user}:${password}`),
      stop: new AbortController(),
      data: {}, // the cats-sma container, module prefixes stripped from member names
      since: Date.now(),
      replayFrom: null,
      svcSeries: new Map(), // cs-id -> [{t, gas, reported, ct, health}]
      sciSeries: new Map(), // csci-id -> [{t, gas, ct, health, state}]
      reports: new Map(), // csci-id -> [entry snapshot], newest first
      notifications: [], // newest first
      auditCounts: null,
      auditLog: [], // newest first
      streams: {},
      lastUpdate: null,
      snapshotAt: 0, // when the login snapshot was taken
    };
  }

  // ----- small helpers -------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  function base64(text) {
    let bin = "";
    for (const b of new TextEncoder().encode(text)) bin += String.fromCharCode(b);
    return btoa(bin);
  }

  // An element with attributes and children; strings become text nodes.
  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  const unprefix = (name) => name.slice(name.indexOf(":") + 1);

  // RFC 7951 JSON without the module prefixes of member names (values are kept as sent).
  function strip(v) {
    if (Array.isArray(v)) return v.map(strip);
    if (v === null || typeof v !== "object") return v;
    const out = {};
    for (const [k, x] of Object.entries(v)) out[unprefix(k)] = strip(x);
    return out;
  }

  const sleep = (ms, signal) =>
    new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
    });

  function clock(iso) {
    if (iso === undefined || iso === null || iso === "") return "";
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleTimeString([], { hour12: false });
  }

  // A date-and-time to the millisecond, with the date when it is not today.
  function when(iso) {
    if (iso === undefined || iso === null) return undefined;
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    const ms = `${clock(iso)}.${String(d.getMilliseconds()).padStart(3, "0")}`;
    return d.toDateString() === new Date().toDateString() ? ms : `${d.toLocaleDateString()} ${ms}`;
  }

  const num = (v) => (v === undefined || v === null || v === "" ? NaN : Number(v));
  const show = (v) => (v === undefined || v === null ? "–" : String(v));
  const sciLink = (id) => h("a", { href: `#/sci/${encodeURIComponent(id)}` }, id);
  const svcLink = (id) => h("a", { href: `#/service/${encodeURIComponent(id)}` }, id);
  const pill = (value, kind) => h("span", { class: `pill ${kind}-${String(value || "none")}` }, show(value));

  // ----- the API ---------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, body) {
      let err = null;
      try { err = JSON.parse(body)["ietf-restconf:errors"].error[0]; } catch (_) { /* not an RFC 8040 error */ }
      super(err ? err["error-message"] || err["error-tag"] : body.trim() || `HTTP ${status}`);
      this.status = status;
      this.tag = err ? err["error-tag"] : "";
    }
    describe() {
      return `${this.message} (HTTP ${this.status}${this.tag ? ", " + this.tag : ""})`;
    }
  }

  function request(path, init, signal) {
    return fetch(path, {
      ...init,
      headers: { Authorization: S.auth, ...init.headers },
      // Never the browser's own credentials or its Basic prompt: only our header.
      credentials: "omit",
      cache: "no-store",
      signal,
    });
  }

  async function api(method, path, body) {
    const init = { method, headers: { Accept: YANG_JSON } };
    if (body !== undefined) {
      init.headers["Content-Type"] = YANG_JSON;
      init.body = JSON.stringify(body);
    }
    const r = await request(API + path, init, S.stop.signal);
    const text = await r.text();
    if (!r.ok) throw new ApiError(r.status, text);
    return { json: text ? JSON.parse(text) : null, date: r.headers.get("date") };
  }

  // ----- the model: applying snapshots and YANG Patch edits ---------------------------------

  const entries = () => S.data["metric-cache"]?.entry || [];
  const services = () => S.data.services?.service || [];
  const configured = () => S.data.scis?.sci || [];
  const entry = (id) => entries().find((e) => e["csci-id"] === id);

  // A RESTCONF target (`/m:a/b=k1,k2/c`) as segments {name, keys}.
  function parseTarget(target) {
    return target.split("/").filter(Boolean).map((seg) => {
      const eq = seg.indexOf("=");
      if (eq < 0) return { name: unprefix(seg), keys: null };
      return { name: unprefix(seg.slice(0, eq)), keys: seg.slice(eq + 1).split(",").map(decodeURIComponent) };
    });
  }

  // Applies one RFC 8072 edit of a push-change-update to S.data.
  function applyEdit(edit) {
    const segs = parseTarget(edit.target);
    if (segs.length < 2 || segs[0].name !== "cats-sma") return;
    const removing = edit.operation === "delete" || edit.operation === "remove";
    const value = edit.value ? Object.values(strip(edit.value))[0] : undefined;
    let node = S.data;
    for (let i = 1; i < segs.length; i++) {
      const { name, keys } = segs[i];
      const last = i === segs.length - 1;
      if (!keys) {
        if (last) {
          if (removing) delete node[name];
          else if (edit.operation === "merge" && typeof node[name] === "object") Object.assign(node[name], value);
          else node[name] = value;
          return;
        }
        if (typeof node[name] !== "object" || node[name] === null) node[name] = {};
        node = node[name];
        continue;
      }
      if (!Array.isArray(node[name])) node[name] = [];
      const list = node[name];
      const keyNames = KEYS[name];
      if (!keyNames) {
        // A leaf-list value (`cs-id=LLM1`).
        const at = list.indexOf(keys[0]);
        if (removing && at >= 0) list.splice(at, 1);
        if (!removing && at < 0) list.push(keys[0]);
        return;
      }
      let at = list.findIndex((o) => keyNames.every((k, j) => String(o[k]) === keys[j]));
      if (last) {
        const item = Array.isArray(value) ? value[0] : value;
        if (removing) { if (at >= 0) list.splice(at, 1); }
        else if (at < 0) list.push(item);
        else if (edit.operation === "merge") Object.assign(list[at], item);
        else list[at] = item;
        return;
      }
      if (at < 0) {
        const created = {};
        keyNames.forEach((k, j) => { created[k] = keys[j]; });
        list.push(created);
        at = list.length - 1;
      }
      node = list[at];
    }
  }

  // Keeps the points charts are drawn from, and each SCI's last reports.
  function sample(now) {
    for (const s of services()) {
      push(S.svcSeries, s["cs-id"], {
        t: now, gas: num(s["site-gas"]), reported: num(s["reported-gas"]),
        ct: num(s["computing-time"]), health: s.health,
      });
    }
    for (const e of entries()) {
      const id = e["csci-id"];
      push(S.sciSeries, id, { t: now, gas: num(e.gas), ct: num(e["computing-time"]), health: e.health, state: e.state });
      if (e["sequence-number"] === undefined) continue; // no report accepted yet
      const reports = S.reports.get(id) || [];
      const newest = reports[0];
      // The same instant may be written differently by a snapshot and by an edit.
      if (!newest || newest["sequence-number"] !== e["sequence-number"] ||
          !Object.is(Date.parse(newest.timestamp), Date.parse(e.timestamp)) || newest.state !== e.state ||
          newest.health !== e.health) {
        reports.unshift({ ...e, seenAt: now });
        reports.length = Math.min(reports.length, MAX_REPORTS);
        S.reports.set(id, reports);
      }
    }
  }

  // Adds a point when a value differs from the series' last one.
  function push(map, key, point) {
    const pts = map.get(key) || [];
    const last = pts[pts.length - 1];
    const same = last && Object.keys(point).every((k) => k === "t" || Object.is(last[k], point[k]));
    if (!same) {
      pts.push(point);
      if (pts.length > MAX_POINTS) pts.splice(0, pts.length - MAX_POINTS);
      map.set(key, pts);
    }
  }

  // Lines of the audit trail written since login, from its per-category counters.
  function noteAudit(now) {
    const counts = {};
    for (const c of S.data.audit?.category || []) counts[c.name] = num(c.records);
    if (S.auditCounts) {
      for (const [name, n] of Object.entries(counts)) {
        const before = S.auditCounts[name] || 0;
        if (n > before) S.auditLog.unshift({ t: now, category: name, added: n - before, total: n });
      }
      S.auditLog.length = Math.min(S.auditLog.length, MAX_EVENTS);
    }
    S.auditCounts = counts;
  }

  function onDataMessage(msg, sub) {
    const n = msg["ietf-restconf:notification"];
    if (!n) return;
    const now = Date.now();
    const update = n["ietf-yang-push:push-update"];
    const change = n["ietf-yang-push:push-change-update"];
    if (update) {
      // A complete snapshot of the selection: what it lacks is gone.
      const contents = strip(update["datastore-contents"] || {})["cats-sma"] || {};
      for (const part of sub.parts) S.data[part] = contents[part];
      sub.incomplete = "incomplete-update" in update;
    } else if (change) {
      for (const edit of change["datastore-changes"]?.["yang-patch"]?.edit || []) applyEdit(edit);
      if ("incomplete-update" in change) resync(sub);
    } else {
      return subscriptionState(n, sub);
    }
    if (sub.parts.includes("audit")) noteAudit(now);
    sample(now);
    S.lastUpdate = now;
    render();
  }

  // RFC 8639 subscription state notifications: an end means re-establishing.
  function subscriptionState(n, sub) {
    const ended = ["subscription-terminated", "subscription-suspended"].find(
      (k) => n[`ietf-subscribed-notifications:${k}`]);
    if (ended) {
      const reason = n[`ietf-subscribed-notifications:${ended}`].reason;
      sub.error = `${ended}${reason ? ": " + unprefix(reason) : ""}`;
      sub.abort?.abort();
    }
  }

  async function resync(sub) {
    try {
      await api("POST", "/operations/ietf-yang-push:resync-subscription", { "ietf-yang-push:input": { id: sub.id } });
    } catch (e) {
      sub.error = `resync: ${e.message}`;
    }
  }

  function onEventMessage(msg, sub, raw) {
    const n = msg["ietf-restconf:notification"];
    if (!n) return;
    const [name, body] = Object.entries(n).find(([k]) => k !== "eventTime") || [];
    if (!name || name.startsWith("ietf-subscribed-notifications:")) {
      if (name) subscriptionState(n, sub);
      return;
    }
    // After a reconnection the replay (from the last event time seen) overlaps what is shown.
    if (S.notifications.some((x) => x.raw === raw)) return;
    S.notifications.unshift({ time: n.eventTime, name: unprefix(name), module: name.split(":")[0], body: strip(body), raw });
    S.notifications.sort((a, b) => (a.time < b.time ? 1 : a.time > b.time ? -1 : 0));
    S.notifications.length = Math.min(S.notifications.length, MAX_EVENTS);
    S.replayFrom = S.notifications[0].time;
    render();
  }

  // ----- subscriptions over RESTCONF (RFC 8650) ---------------------------------------------

  // Reads a text/event-stream body and calls onEvent with the data of each event.
  async function readEvents(body, onEvent) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      for (;;) {
        const m = /\r\n|\r|\n/.exec(buf);
        // A CR at the very end may be half of a CRLF: wait for the next chunk.
        if (!m || (m[0] === "\r" && m.index === buf.length - 1)) break;
        const line = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        if (line === "") {
          if (data.length) onEvent(data.join("\n"));
          data = [];
        } else if (line.startsWith("data:")) {
          data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
        }
      }
    }
  }

  // Establishes a subscription, reads its notifications, and when the stream is lost shows
  // it and establishes a new one (with back-off) until logout.
  async function follow(name, onMessage) {
    const spec = SUBSCRIPTIONS[name];
    const sub = { name, label: spec.label, parts: spec.parts || [], state: "connecting", error: "", id: null, tries: 0 };
    S.streams[name] = sub;
    const session = S;
    while (!session.stop.signal.aborted) {
      sub.abort = new AbortController();
      const stopSub = () => sub.abort.abort();
      session.stop.signal.addEventListener("abort", stopSub, { once: true });
      let watchdog = null;
      try {
        sub.state = sub.tries ? "reconnecting" : "connecting";
        renderLive();
        const r = await api("POST", "/operations/ietf-subscribed-notifications:establish-subscription",
          { "ietf-subscribed-notifications:input": spec.input() });
        const out = r.json["ietf-subscribed-notifications:output"];
        sub.id = out.id;
        // The URI names the server as it bound its listener; this page talks to the
        // address it was loaded from, so only the path is used.
        const path = new URL(out["ietf-restconf-subscribed-notifications:uri"], location.href).pathname;
        const resp = await request(path, { headers: { Accept: "text/event-stream" } }, sub.abort.signal);
        if (!resp.ok) throw new ApiError(resp.status, await resp.text());
        sub.state = "live";
        sub.error = "";
        sub.tries = 0;
        renderLive();
        const kick = () => {
          clearTimeout(watchdog);
          if (spec.watchdogMs) watchdog = setTimeout(() => { sub.error = "no update in time"; stopSub(); }, spec.watchdogMs);
        };
        kick();
        await readEvents(resp.body, (data) => {
          kick();
          let msg;
          try { msg = JSON.parse(data); } catch (_) { return; }
          onMessage(msg, sub, data);
        });
        if (!sub.error) sub.error = "the agent ended the stream";
      } catch (e) {
        if (session.stop.signal.aborted) return;
        if (e.status === 401) return logout("The agent no longer accepts your credentials: log in again.");
        if (!sub.abort.signal.aborted || !sub.error) sub.error = e instanceof ApiError ? e.describe() : e.message;
      } finally {
        clearTimeout(watchdog);
        session.stop.signal.removeEventListener("abort", stopSub);
      }
      if (session.stop.signal.aborted) return;
      sub.state = "lost";
      sub.tries += 1;
      renderLive();
      const wait = Math.min(15000, 1000 * 2 ** Math.min(sub.tries - 1, 4));
      sub.retryAt = Date.now() + wait;
      await sleep(wait, session.stop.signal);
    }
  }

  // ----- actions ----------------------------------------------------------------------------

  function flash(text, kind) {
    const f = $("flash");
    f.textContent = text;
    f.className = `flash ${kind}`;
    f.hidden = false;
  }

  // clear-quarantine: releases (accept=true) or rejects the held reports of one SCI, or all.
  async function clearQuarantine(csciId, accept, button) {
    const input = { accept };
    if (csciId) input["csci-id"] = csciId;
    const what = `${accept ? "Release" : "Reject"} of ${csciId ? "the reports of " + csciId : "all held reports"}`;
    if (button) button.disabled = true;
    try {
      const r = await api("POST", "/operations/cats-sma:clear-quarantine", { "cats-sma:input": input });
      const n = r.json?.["cats-sma:output"]?.released ?? 0;
      flash(`${what}: ${n} report${n === 1 ? "" : "s"} ${accept ? "released to the cache" : "discarded"}.`, "ok");
      // Shown at once rather than at the next periodic update.
      const q = await api("GET", `/data${ROOT}/quarantine`).catch((e) => (e.status === 404 ? { json: {} } : null));
      if (q) S.data.quarantine = strip(q.json || {}).quarantine;
    } catch (e) {
      if (e.status === 401) return logout("The agent no longer accepts your credentials: log in again.");
      flash(`${what} refused by the agent: ${e instanceof ApiError ? e.describe() : e.message}`, "error");
    } finally {
      if (button) button.disabled = false;
      render();
    }
  }

  // ----- views -------------------------------------------------------------------------------

  function chartWindow() {
    const to = Date.now();
    return { from: Math.max(S.since, to - 3600 * 1000), to };
  }

  function serviceChart(csId, width) {
    const pts = S.svcSeries.get(csId) || [];
    const series = [{ name: "site GAS", points: pts.map((p) => [p.t, p.gas]) }];
    if (pts.some((p) => Number.isFinite(p.reported))) {
      series.push({ name: "reported GAS", points: pts.map((p) => [p.t, p.reported]) });
    }
    const gas = Chart.line({ title: `${csId}: GAS`, width, height: 170, ...chartWindow(), series,
      band: pts.map((p) => [p.t, p.health]) });
    const ct = Chart.line({ title: `${csId}: computing time (ms)`, width, height: 150, ...chartWindow(),
      series: [{ name: "computing time", points: pts.map((p) => [p.t, p.ct]) }] });
    return h("div", { class: "charts" }, gas, ct);
  }

  function sciTable(list) {
    const byId = new Map(configured().map((c) => [c["csci-id"], c]));
    const cached = new Map(entries().map((e) => [e["csci-id"], e]));
    const ids = new Set(list.map((e) => e["csci-id"]));
    return h("table", { class: "grid", id: "sci-table" },
      h("thead", {}, h("tr", {}, ["CSCI-ID", "Service", "State", "Health", "GAS", "Computing time", "Seq",
        "Last report", "Flags"].map((c) => h("th", {}, c)))),
      h("tbody", {}, [...ids].sort().map((id) => {
        const e = cached.get(id) || {};
        return h("tr", { "data-sci": id },
          h("td", {}, sciLink(id)),
          h("td", {}, e["cs-id"] ? svcLink(e["cs-id"]) : show((byId.get(id) || {})["cs-id"])),
          h("td", {}, pill(e.state || "no report", "state")),
          h("td", {}, pill(e.health, "health")),
          h("td", { class: "n", "data-field": "gas" }, show(e.gas)),
          h("td", { class: "n" }, show(e["computing-time"])),
          h("td", { class: "n" }, show(e["sequence-number"])),
          h("td", {}, clock(e.timestamp)),
          h("td", { class: "flags" }, show(e.flags || "")));
      })));
  }

  function viewServices() {
    const list = [...services()].sort((a, b) => a["cs-id"].localeCompare(b["cs-id"]));
    const st = S.data.statistics || {};
    const cards = h("div", { class: "cards" },
      card("Services", list.length),
      card("SCIs reporting", entries().length),
      card("Configured SCIs", configured().length),
      card("Quarantined reports", (S.data.quarantine || []).length, "#/quarantine"),
      card("Reports received", show(st["reports-received"])),
      card("Reports accepted", show(st["reports-accepted"])));
    const table = h("table", { class: "grid", id: "service-table" },
      h("thead", {}, h("tr", {}, ["Service (CS-ID)", "Site GAS", "Reported GAS", "Computing time", "Health",
        "SCIs (healthy)", "Last change"].map((c) => h("th", {}, c)))),
      h("tbody", {}, list.map((s) => h("tr", { "data-service": s["cs-id"] },
        h("td", {}, svcLink(s["cs-id"])),
        h("td", { class: "n", "data-field": "site-gas" }, show(s["site-gas"])),
        h("td", { class: "n", "data-field": "reported-gas" }, show(s["reported-gas"])),
        h("td", { class: "n" }, `${show(s["computing-time"])} ms (${show(s["computing-time-function"])})`),
        h("td", {}, pill(s.health, "health")),
        h("td", { class: "n" }, `${show(s["sci-count"])} (${show(s["healthy-sci-count"])})`),
        h("td", {}, clock(lastChange(s)))))));
    return [
      h("h2", {}, "Services"), cards,
      list.length ? table : h("p", { class: "empty" }, "No service has metrics yet (or you may not read them)."),
      list.map((s) => h("section", { class: "service-chart" }, serviceChart(s["cs-id"], 560))),
    ];
  }

  // The agent's last-change when it gives one, else when this page saw the last change.
  function lastChange(s) {
    const pts = S.svcSeries.get(s["cs-id"]) || [];
    const t = pts.length ? pts[pts.length - 1].t : 0;
    return s["last-change"] ?? (t > S.snapshotAt ? new Date(t).toISOString() : undefined);
  }

  function card(label, value, href) {
    const v = h("div", { class: "value" }, show(value));
    return h("div", { class: "card" }, h("div", { class: "label" }, label), href ? h("a", { href }, v) : v);
  }

  function viewService(csId) {
    const s = services().find((x) => x["cs-id"] === csId);
    const scis = entries().filter((e) => e["cs-id"] === csId);
    return [
      h("p", { class: "crumbs" }, h("a", { href: "#/" }, "Services"), " / ", csId),
      h("h2", {}, `Service ${csId}`),
      s ? h("dl", { class: "facts" }, fact("Site GAS", s["site-gas"]), fact("Reported GAS", s["reported-gas"]),
        fact("Computing time", `${show(s["computing-time"])} ms (${show(s["computing-time-function"])})`),
        fact("Health", pill(s.health, "health")), fact("SCIs / healthy", `${show(s["sci-count"])} / ${show(s["healthy-sci-count"])}`),
        fact("Cost", s.cost), fact("Reputation", s.reputation), fact("Security label", s["security-label"]),
        fact("Last change", when(lastChange(s))))
        : h("p", { class: "empty" }, "This service has no aggregate now."),
      serviceChart(csId, 760),
      h("h3", {}, "SCIs"), sciTable(scis),
    ];
  }

  const fact = (label, value) => [h("dt", {}, label), h("dd", {}, value instanceof Node ? value : show(value))];

  function viewScis() {
    const ids = new Set([...entries().map((e) => e["csci-id"]), ...configured().map((c) => c["csci-id"])]);
    return [h("h2", {}, "SCIs"), ids.size ? sciTable([...ids].map((id) => ({ "csci-id": id })))
      : h("p", { class: "empty" }, "No SCI is configured or reporting.")];
  }

  function viewSci(id) {
    const e = entry(id);
    const c = configured().find((x) => x["csci-id"] === id);
    const pts = S.sciSeries.get(id) || [];
    const held = (S.data.quarantine || []).filter((q) => q["csci-id"] === id);
    const about = S.notifications.filter((n) => n.body && n.body["csci-id"] === id);
    return [
      h("p", { class: "crumbs" }, h("a", { href: "#/scis" }, "SCIs"), " / ", id),
      h("h2", {}, `SCI ${id}`),
      h("div", { class: "two" },
        h("div", {}, h("h3", {}, "Cache entry"), e ? h("dl", { class: "facts", id: "sci-entry" },
          fact("State", pill(e.state, "state")), fact("Health", pill(e.health, "health")), fact("Service", e["cs-id"]),
          fact("GAS", e.gas), fact("Computing time", e["computing-time"]), fact("Sequence number", e["sequence-number"]),
          fact("Last report", when(e.timestamp)), fact("Last state change", when(e["last-state-change"])),
          fact("Flags", e.flags), fact("Cost", e.cost), fact("Reputation", e.reputation), fact("Security label", e["security-label"]))
          : h("p", { class: "empty" }, "No accepted report in the cache.")),
        h("div", {}, h("h3", {}, "Configuration"), c ? h("dl", { class: "facts" },
          fact("Services", (c["cs-id"] || []).join(", ")), fact("Authentication", c.authentication),
          fact("Credential", c["credential-ref"]), fact("Expected interval (ms)", c["expected-interval"]),
          fact("Description", c.description))
          : h("p", { class: "empty" }, "Not configured (discovered, mirrored, or not readable)."))),
      Chart.line({ title: `${id}: GAS`, width: 760, height: 170, ...chartWindow(),
        series: [{ name: "GAS", points: pts.map((p) => [p.t, p.gas]) }], band: pts.map((p) => [p.t, p.health]) }),
      Chart.line({ title: `${id}: computing time (ms)`, width: 760, height: 150, ...chartWindow(),
        series: [{ name: "computing time", points: pts.map((p) => [p.t, p.ct]) }] }),
      h("h3", {}, "Last reports (since you logged in)"),
      table(["Accepted at", "Seq", "GAS", "Computing time", "Health", "State", "Flags"],
        (S.reports.get(id) || []).map((r) => [when(r.timestamp), r["sequence-number"], r.gas, r["computing-time"],
          pill(r.health, "health"), pill(r.state, "state"), r.flags])),
      h("h3", {}, "Held in quarantine"), quarantineTable(held),
      h("h3", {}, "Notifications about this SCI"), notificationTable(about.slice(0, 30)),
    ];
  }

  function table(head, rows, attrs) {
    return h("table", { class: "grid", ...attrs },
      h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
      h("tbody", {}, rows.length ? rows.map((r) => h("tr", {}, r.map((v) => h("td", {}, v instanceof Node ? v : show(v)))))
        : h("tr", {}, h("td", { colspan: head.length, class: "empty" }, "none"))));
  }

  function quarantineTable(list) {
    const rows = [...list].sort((a, b) => num(a.id) - num(b.id)).map((q) => [
      q.id, sciLink(q["csci-id"]), q["cs-id"], q["sequence-number"], unprefix(String(q.reason || "")),
      clock(q["received-at"]), q.detail,
      h("span", { class: "actions" },
        h("button", { type: "button", class: "release", "data-sci": q["csci-id"],
          title: "clear-quarantine with accept=true: apply the SCI's held reports if still newer than the cache",
          onclick: (ev) => clearQuarantine(q["csci-id"], true, ev.currentTarget) }, "Release"),
        h("button", { type: "button", class: "reject", "data-sci": q["csci-id"],
          title: "clear-quarantine with accept=false: discard the SCI's held reports",
          onclick: (ev) => clearQuarantine(q["csci-id"], false, ev.currentTarget) }, "Reject")),
    ]);
    return table(["Id", "SCI", "Service", "Seq", "Reason", "Received", "Detail", "Action"], rows,
      { id: "quarantine-table" });
  }

  function viewQuarantine() {
    const list = S.data.quarantine || [];
    return [
      h("h2", {}, "Quarantine"),
      h("p", { class: "hint" }, "Anomalous reports held for review. Release applies an SCI's held reports to the " +
        "cache (when still newer than its entry), Reject discards them; both act on every held report of that SCI " +
        "(the clear-quarantine operation selects by SCI) and are checked by NACM."),
      list.length ? h("p", { class: "actions" },
        h("button", { type: "button", onclick: (ev) => clearQuarantine(null, true, ev.currentTarget) }, "Release all"),
        h("button", { type: "button", onclick: (ev) => clearQuarantine(null, false, ev.currentTarget) }, "Reject all"))
        : null,
      quarantineTable(list),
    ];
  }

  function viewCps() {
    const peers = S.data["c-ps"]?.peer || [];
    const rows = peers.map((p) => {
      const s = p.session || {};
      const size = num(s["effective-buffer-size"]);
      const queued = num(s["buffered-updates"]);
      const meter = h("meter", { min: 0, max: Number.isFinite(size) && size > 0 ? size : 1,
        value: Number.isFinite(queued) ? queued : 0 });
      return [p.name, pill(s.state, "cps"), h("span", {}, meter, ` ${show(s["buffered-updates"])} / ${show(s["effective-buffer-size"])}`),
        s["dropped-updates"], s["sent-updates"], s["last-sequence-sent"], s["last-acked-sequence"],
        s["failed-requests"], clock(s["connected-since"]), s["last-error"]];
    });
    return [h("h2", {}, "C-PS sessions"),
      table(["C-PS", "State", "Queue (buffered / size)", "Dropped", "Sent", "Last sent seq", "Last acked seq",
        "Failed requests", "Connected since", "Last error"], rows, { id: "cps-table" })];
  }

  function summary(n) {
    const b = n.body || {};
    const s = (v) => (v === undefined ? "" : unprefix(String(v)));
    switch (n.name) {
      case "sci-state-change": return `${b["csci-id"]}: ${s(b["old-state"])} → ${s(b["new-state"])} ${s(b.reason)}`;
      case "metric-anomaly":
        return `${b["csci-id"]}${b["cs-id"] ? " (" + b["cs-id"] + ")" : ""}: ${b.metric} ${b["old-value"]} → ` +
          `${b["new-value"]}, ${s(b.action)}`;
      case "auth-failure": return `${s(b.transport)} from ${s(b["source-address"])}: ${s(b.reason)} ${s(b.detail)}`;
      case "c-ps-unreachable":
        return `${b["c-ps"]} (${b.url}) unreachable: back-off ${show(b.backoff)} s, ${show(b["buffered-updates"])} updates buffered`;
      case "netconf-config-change":
        return `by ${b["changed-by"]?.username || "the server"}: ${(b.edit || []).map((e) => `${e.operation} ${e.target}`).join("; ")}`;
      case "netconf-session-start":
      case "netconf-session-end": return `${b.username} (session ${b["session-id"]}) ${s(b["termination-reason"])}`;
      default: {
        const text = JSON.stringify(b);
        return text.length > 240 ? text.slice(0, 240) + "…" : text;
      }
    }
  }

  const notificationTable = (list) => table(["Time", "Notification", "What"],
    list.map((n) => [clock(n.time), `${n.module}:${n.name}`, summary(n)]), { class: "grid events" });

  function viewEvents() {
    const audit = S.data.audit || {};
    const cats = [...(audit.category || [])].filter((c) => num(c.records) > 0);
    return [
      h("h2", {}, "Recent notifications"),
      h("p", { class: "hint" }, "The NETCONF event stream, from an hour before login, newest first."),
      notificationTable(S.notifications.slice(0, 100)),
      h("h2", {}, "Audit trail"),
      h("p", { class: "hint" }, `Records written since start-up: ${show(audit.records)} (suppressed ${show(audit.suppressed)}, ` +
        `write errors ${show(audit["write-errors"])}). The records themselves are in audit.log on the agent; the ` +
        "API publishes their counts per category, so this page lists what was written since you logged in."),
      h("div", { class: "two" },
        table(["Time", "Category", "Records added", "Total"], S.auditLog.slice(0, 100).map((a) =>
          [new Date(a.t).toLocaleTimeString([], { hour12: false }), a.category, `+${a.added}`, a.total]), { id: "audit-log" }),
        table(["Category", "Records"], cats.map((c) => [c.name, c.records]))),
    ];
  }

  // ----- rendering -----------------------------------------------------------------------------

  let pending = false;
  let pointerDown = false;

  // Renders on the next frame; never between a press and its click (the click would be lost).
  function render() {
    if (pending || !S) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      if (pointerDown) return setTimeout(render, 50);
      draw();
    });
  }

  function draw() {
    if (!S) return;
    let route = location.hash.replace(/^#\/?/, "");
    try { route = decodeURIComponent(route); } catch (_) { /* shown as typed */ }
    route = route.split("/");
    const arg = route.slice(1).join("/");
    let content;
    switch (route[0]) {
      case "service": content = viewService(arg); break;
      case "scis": content = viewScis(); break;
      case "sci": content = viewSci(arg); break;
      case "quarantine": content = viewQuarantine(); break;
      case "cps": content = viewCps(); break;
      case "events": content = viewEvents(); break;
      default: content = viewServices();
    }
    const next = h("div", { class: "page", "data-route": route[0] || "services" }, content);
    const view = $("view");
    if (!view.firstChild || !view.firstChild.isEqualNode(next)) view.replaceChildren(next);
    const section = { service: "", sci: "scis" }[route[0]] ?? route[0];
    for (const a of document.querySelectorAll("#nav a")) {
      a.classList.toggle("current", a.getAttribute("href").slice(2) === section);
    }
    const q = (S.data.quarantine || []).length;
    $("quarantine-count").textContent = q ? String(q) : "";
    renderLive();
  }

  function renderLive() {
    if (!S) return;
    const subs = Object.values(S.streams);
    const live = subs.length && subs.every((s) => s.state === "live");
    const el = $("live");
    el.className = `live ${live ? "ok" : subs.some((s) => s.state === "lost") ? "lost" : "wait"}`;
    el.textContent = live ? `live · updated ${S.lastUpdate ? clock(new Date(S.lastUpdate)) : "–"}`
      : subs.filter((s) => s.state !== "live").map((s) => `${s.name}: ${s.state}${s.error ? " (" + s.error + ")" : ""}`).join(" · ");
    el.title = subs.map((s) => `${s.label}: ${s.state}${s.id ? ", subscription " + s.id : ""}${s.error ? ", " + s.error : ""}`).join("\n");
  }

  // ----- login and logout ------------------------------------------------------------------------

  async function login(user, password) {
    S = newSession(user, password);
    let snapshot;
    for (let attempt = 0; ; attempt++) {
      try {
        snapshot = await api("GET", `/data${ROOT}`);
        break;
      } catch (e) {
        // An idle unauthenticated connection may have just been closed by the agent: retry once.
        if (e instanceof TypeError && attempt === 0) continue;
        if (e.status === 404) { snapshot = { json: {}, date: null }; break; }
        S = null;
        throw e;
      }
    }
    S.data = strip(snapshot.json || {})["cats-sma"] || {};
    const serverNow = snapshot.date ? Date.parse(snapshot.date) : Date.now();
    S.replayFrom = new Date(serverNow - 3600 * 1000).toISOString();
    S.snapshotAt = S.lastUpdate = Date.now();
    noteAudit(S.snapshotAt);
    sample(S.snapshotAt);
    $("login").hidden = true;
    $("view").hidden = $("nav").hidden = $("session").hidden = false;
    $("who").textContent = user;
    draw();
    follow("data", onDataMessage);
    follow("state", onDataMessage);
    follow("events", onEventMessage);
  }

  function logout(message) {
    if (S) S.stop.abort();
    S = null;
    $("view").replaceChildren();
    $("view").hidden = $("nav").hidden = $("session").hidden = true;
    $("flash").hidden = true;
    $("login").hidden = false;
    $("password").value = "";
    const err = $("login-error");
    err.textContent = message || "";
    err.hidden = !message;
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("login-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const button = $("login-button");
      button.disabled = true;
      $("login-error").hidden = true;
      try {
        await login($("user").value, $("password").value);
        $("password").value = "";
      } catch (e) {
        const err = $("login-error");
        err.textContent = e.status === 401 ? "Wrong user name or password."
          : `Login failed: ${e instanceof ApiError ? e.describe() : e.message}`;
        err.hidden = false;
      } finally {
        button.disabled = false;
      }
    });
    $("logout").addEventListener("click", () => logout());
    window.addEventListener("hashchange", () => { $("flash").hidden = true; render(); });
    document.addEventListener("pointerdown", () => { pointerDown = true; }, true);
    document.addEventListener("pointerup", () => { setTimeout(() => { pointerDown = false; }, 0); }, true);
    // Charts run to "now": redraw them as time passes even when nothing changes.
    setInterval(render, 5000);
  });
})();

// Browser test of the operator console (issue 21), run by tests/console.rs against a real
// agent: headless Debian chromium driven by playwright-core. Each step prints "ok - ..." or
// fails the run with the step's name and what was seen. Screenshots of the main pages go to
// $CONSOLE_SCREENSHOTS when it is set.
//
// Environment (set by tests/console.rs): CONSOLE_URL, SCI_REPORT_URL, OPERATOR / OPERATOR_PW,
// VIEWER / VIEWER_PW (may not run clear-quarantine), ADMIN / ADMIN_PW (kills subscriptions
// to check that the page re-establishes them), SCI1, SCI2, SCI3, SERVICE.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const env = (name) => {
  const v = process.env[name];
  if (!v) fail("setup", `environment variable ${name} is not set`);
  return v;
};
const CONSOLE = env("CONSOLE_URL");
const REPORTS = env("SCI_REPORT_URL");
const [SCI1, SCI2, SCI3, SERVICE] = ["SCI1", "SCI2", "SCI3", "SERVICE"].map(env);
const SHOTS = process.env.CONSOLE_SCREENSHOTS || "";
const TIMEOUT = 20000;

function fail(step, message) {
  console.error(`FAILED at step "${step}": ${message}`);
  process.exit(1);
}

let browser;
async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
  } catch (e) {
    if (page) {
      const text = await page.locator("body").innerText().catch(() => "(no page text)");
      console.error(`--- page text at failure ---\n${text.slice(0, 3000)}\n---`);
    }
    await browser?.close().catch(() => {});
    fail(name, e && e.stack ? e.stack : String(e));
  }
  console.log(`ok - ${name} (${Date.now() - t0} ms)`);
}

let seq = { [SCI1]: 0, [SCI2]: 0, [SCI3]: 0 };
// POSTs one SCI report to the agent's collector; returns the HTTP status.
async function report(csci, cs, gas, computingTime = 40, health = "HEALTHY") {
  seq[csci] += 1;
  const body = {
    "csci-id": csci, "cs-id": cs, seq: seq[csci], timestamp: new Date().toISOString(),
    gas, "computing-time": computingTime, health,
  };
  const r = await fetch(REPORTS, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, text: await r.text() };
}

async function accepted(csci, cs, gas, ct) {
  const r = await report(csci, cs, gas, ct);
  if (r.status !== 200) throw new Error(`report ${csci} gas ${gas}: HTTP ${r.status} ${r.text}`);
}

async function shot(name) {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  await page.waitForTimeout(300);
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

const cell = (service, field) => page.locator(`#service-table tr[data-service="${service}"] td[data-field="${field}"]`);

async function expectText(locator, want, what) {
  try {
    await locator.filter({ hasText: want }).first().waitFor({ timeout: TIMEOUT });
  } catch (_) {
    const seen = await locator.allInnerTexts().catch(() => []);
    throw new Error(`${what}: expected "${want}", the page shows ${JSON.stringify(seen)}`);
  }
}

async function login(user, password) {
  await page.goto(CONSOLE);
  await page.fill("#user", user);
  await page.fill("#password", password);
  await page.click("#login-button");
  await page.locator("#who", { hasText: user }).waitFor({ timeout: TIMEOUT });
  await page.locator("#live.ok").waitFor({ timeout: TIMEOUT });
}

// Requests the page makes, to check it reads data once and then only through subscriptions.
const requests = [];
const problems = [];
let page;

browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--ignore-certificate-errors"],
}).catch((e) => fail("launch chromium", e.message));
const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 860 } });
page = await context.newPage();
const origin = new URL(CONSOLE).origin;
page.on("request", (r) => {
  requests.push(`${r.method()} ${r.url()}`);
  if (!r.url().startsWith(origin) && !r.url().startsWith("data:")) problems.push(`request outside the agent: ${r.url()}`);
});
page.on("console", (m) => {
  // Refusals by the API (401, 403, an empty list's 404) are expected answers, not errors.
  const api = (m.location()?.url || "").includes("/restconf/") && /status of 40[134]/.test(m.text());
  if (m.type() === "error" && !api) problems.push(`console error: ${m.text()} at ${m.location()?.url}`);
});
page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
const dataReads = () => requests.filter((r) => r.startsWith("GET ") && r.includes("/restconf/data/")).length;
const navigations = () => requests.filter((r) => r.startsWith("GET ") && r.endsWith("/console/")).length;

await step("the console is served with its security headers", async () => {
  const r = await page.goto(CONSOLE);
  const h = r.headers();
  if (r.status() !== 200) throw new Error(`GET ${CONSOLE}: ${r.status()}`);
  if (!h["content-security-policy"]?.includes("script-src 'self'")) throw new Error(`CSP: ${h["content-security-policy"]}`);
  if (h["x-content-type-options"] !== "nosniff") throw new Error("no nosniff");
  await page.locator("#login-form").waitFor();
});

await step("a wrong password is refused on the login form", async () => {
  await page.fill("#user", env("OPERATOR"));
  await page.fill("#password", "not-the-password");
  await page.click("#login-button");
  await expectText(page.locator("#login-error"), "Wrong user name or password", "login error");
});

await step("the operator logs in and the live subscriptions come up", async () => {
  await login(env("OPERATOR"), env("OPERATOR_PW"));
});

await step("reports posted after login appear live: service GAS", async () => {
  await accepted(SCI1, SERVICE, 100, 40);
  await accepted(SCI2, SERVICE, 500, 60);
  await accepted(SCI3, "ASR1", 250, 15);
  await expectText(cell(SERVICE, "site-gas"), "600", `${SERVICE} site GAS`);
  await expectText(cell("ASR1", "site-gas"), "250", "ASR1 site GAS");
});

await step("a new report changes the GAS shown, without a reload", async () => {
  const [reads, loads] = [dataReads(), navigations()];
  await page.waitForTimeout(1200); // a visible step in the chart
  await accepted(SCI1, SERVICE, 120, 45);
  await expectText(cell(SERVICE, "site-gas"), "620", `${SERVICE} site GAS after the report`);
  if (dataReads() !== reads || navigations() !== loads) {
    throw new Error(`the page read data again or reloaded: ${JSON.stringify(requests)}`);
  }
  await page.waitForTimeout(1200);
  await accepted(SCI2, SERVICE, 560, 55);
  await expectText(cell(SERVICE, "site-gas"), "680", `${SERVICE} site GAS after the second report`);
  await page.locator("svg.chart").first().waitFor();
  await shot("services");
});

await step("a lost stream is shown and re-established", async () => {
  // The administrator kills the page's subscriptions (RFC 8639 kill-subscription).
  const killed = await page.evaluate(async ({ user, pw }) => {
    const auth = "Basic " + btoa(`${user}:${pw}`);
    const h = { Authorization: auth, Accept: "application/yang-data+json", "Content-Type": "application/yang-data+json" };
    const r = await fetch("/restconf/data/ietf-subscribed-notifications:subscriptions", { headers: h, credentials: "omit" });
    const subs = (await r.json())["ietf-subscribed-notifications:subscriptions"]?.subscription || [];
    const ids = subs.map((s) => s.id);
    for (const id of ids) {
      const k = await fetch("/restconf/operations/ietf-subscribed-notifications:kill-subscription", {
        method: "POST", headers: h, credentials: "omit",
        body: JSON.stringify({ "ietf-subscribed-notifications:input": { id } }),
      });
      if (k.status !== 204) throw new Error(`kill-subscription ${id}: ${k.status} ${await k.text()}`);
    }
    return ids;
  }, { user: env("ADMIN"), pw: env("ADMIN_PW") });
  if (killed.length < 3) throw new Error(`expected the page's 3 subscriptions, found ${JSON.stringify(killed)}`);
  await page.locator("#live.lost, #live.wait").waitFor({ timeout: TIMEOUT });
  const shown = await page.locator("#live").innerText();
  await page.locator("#live.ok").waitFor({ timeout: TIMEOUT });
  await accepted(SCI1, SERVICE, 130, 45);
  await expectText(cell(SERVICE, "site-gas"), "690", `${SERVICE} site GAS after re-establishing (was shown: ${shown})`);
});

await step("an anomalous report is quarantined and shown", async () => {
  const r = await report(SCI1, SERVICE, 900, 45);
  if (r.status !== 422 || !r.text.includes("quarantined")) throw new Error(`expected a quarantine, got ${r.status} ${r.text}`);
  await page.click('#nav a[href="#/quarantine"]');
  await expectText(page.locator("#quarantine-table tbody tr"), SCI1, "quarantine table");
  await expectText(page.locator("#quarantine-count"), "1", "quarantine badge");
  await shot("quarantine");
});

await step("the operator releases it from the page and the GAS follows", async () => {
  await page.locator(`#quarantine-table button.release[data-sci="${SCI1}"]`).click();
  await expectText(page.locator("#flash.ok"), "1 report released", "release message");
  await page.locator(`#quarantine-table button.release[data-sci="${SCI1}"]`).waitFor({ state: "detached", timeout: TIMEOUT });
  await page.click('#nav a[href="#/"]');
  await expectText(cell(SERVICE, "site-gas"), "1460", `${SERVICE} site GAS after the release`);
});

await step("the SCI page shows its state machine state and last reports", async () => {
  await page.click(`#service-table a[href="#/service/${SERVICE}"]`);
  await expectText(page.locator("#sci-table tr", { hasText: SCI1 }), "healthy", "SCI state on the service page");
  await shot("service");
  await page.click(`#sci-table a[href="#/sci/${encodeURIComponent(SCI1)}"]`);
  await expectText(page.locator("#sci-entry"), "900", "SCI entry GAS");
  await expectText(page.locator("table.grid").nth(0), "900", "last reports");
  await shot("sci");
});

await step("C-PS sessions, notifications and audit are shown", async () => {
  await page.click('#nav a[href="#/cps"]');
  await expectText(page.locator("#cps-table tbody tr"), "cps-lab", "C-PS table");
  await shot("cps");
  await page.click('#nav a[href="#/events"]');
  await expectText(page.locator("table.events"), "metric-anomaly", "notifications");
  await expectText(page.locator("#audit-log"), "rpc", "audit records written since login");
  await shot("events");
});

await step("a user whom NACM denies clear-quarantine is refused, with the agent's reason", async () => {
  const r = await report(SCI1, SERVICE, 3000, 45);
  if (r.status !== 422) throw new Error(`expected a quarantine, got ${r.status} ${r.text}`);
  await page.click("#logout");
  await login(env("VIEWER"), env("VIEWER_PW"));
  await page.click('#nav a[href="#/quarantine"]');
  await expectText(page.locator("#quarantine-table tbody tr"), SCI1, "quarantine table for the viewer");
  await page.locator(`#quarantine-table button.release[data-sci="${SCI1}"]`).click();
  await expectText(page.locator("#flash.error"), "access-denied", "refusal message");
  await expectText(page.locator("#flash.error"), "403", "refusal status");
  await expectText(page.locator("#flash.error"), "may not invoke", "the server's reason");
  await shot("refused");
  await page.waitForTimeout(2 * 2000 + 500); // two periodic updates: still held
  await expectText(page.locator("#quarantine-table tbody tr"), SCI1, "the report is still held");
});

await step("nothing was loaded from elsewhere and no script error happened", async () => {
  if (problems.length) throw new Error(problems.join("\n"));
});

await browser.close();
console.log(`console test passed (${requests.length} requests by the page)`);

// The console in real Chromium (Debian's, driven by playwright-core), against
// a running `local`: tests/tests/e2e/console.rs starts `local` with a fresh
// database, an SMTP sink and the simulator, then runs
//
//   node e2e/journey.mjs user <en|zh-CN>   a new user, sign-up to cluster removal
//   node e2e/journey.mjs admin             the back office
//
// with BASE_URL, MAILDIR (the sink's maildir), KUBECTL, JOIN_SANDBOX (a
// machine to join: bin/ shims and root/ files), SHOTS (where screenshots
// go), DATABASE_URL (the journey writes the metrics samples the simulator
// cannot give) and, for the admin, ADMIN_EMAIL and USER_EMAIL. Every page visited is
// checked with axe-core (no serious or critical violation) and
// photographed; a Content-Security-Policy violation fails the run.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { launch } from "./chromium.mjs";

const require = createRequire(import.meta.url);
const [, , journey, language = "en"] = process.argv;
const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const BASE = env("BASE_URL");
const SHOTS = env("SHOTS");
mkdirSync(SHOTS, { recursive: true });
// The shared catalog and every page's own (src/pages/<page>.<language>.json).
const pagesDir = new URL("../src/pages/", import.meta.url);
const catalog = Object.assign(
  JSON.parse(readFileSync(new URL(`../src/locales/${language}.json`, import.meta.url), "utf8")),
  ...readdirSync(pagesDir)
    .filter((file) => file.endsWith(`.${language}.json`))
    .map((file) => JSON.parse(readFileSync(new URL(file, pagesDir), "utf8"))),
);
/** The text the console shows for `key` in the journey's language. */
const T = (key, values = {}) => {
  const text = catalog[key] ?? catalog[`${key}_other`];
  assert.ok(text !== undefined, `no key ${key}`);
  return text.replace(/\{\{(\w+)\}\}/g, (_, name) => String(values[name]));
};
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
const PASSWORD = "correct horse battery staple 42";
const step = (what) => console.log(`[${journey} ${language}] ${what}`);

const browser = await launch();
const context = await browser.newContext({
  locale: language,
  acceptDownloads: true,
  viewport: { width: 1280, height: 860 },
  permissions: ["clipboard-read", "clipboard-write"],
});
// Generous: the suite runs this beside other tests on two cores.
context.setDefaultTimeout(45_000);
const page = await context.newPage();
const problems = [];
page.on("console", (message) => {
  const text = message.text();
  if (/Content.Security.Policy|Refused to/i.test(text)) problems.push(`CSP: ${text}`);
});
page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
const shown = new Set();

/** axe-core on the page as it is, then a screenshot named `name`. */
async function check(name, shownIn = language) {
  await page.waitForLoadState("networkidle");
  await page.locator("[role=status]:has-text('…')").waitFor({ state: "detached", timeout: 10_000 }).catch(() => {});
  await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const result = await axe.run(document, { resultTypes: ["violations"] });
    return result.violations
      .filter((v) => v.impact === "serious" || v.impact === "critical")
      .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.map((n) => n.target.join(" ")).slice(0, 3).join(", ")}`);
  });
  assert.deepEqual(violations, [], `accessibility of ${name}`);
  await page.screenshot({ path: join(SHOTS, `${shownIn}-${name}.png`), fullPage: true });
  shown.add(name);
}

/** Waits for `check` to hold, polling, for at most 30 s. */
async function until(check, what) {
  for (let i = 0; i < 300; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** The newest 6-digit code mailed to `to` that was not read before. */
const read = new Set();
async function codeFor(to) {
  const box = join(env("MAILDIR"), "new");
  for (let i = 0; i < 200; i++) {
    let files = [];
    try {
      files = readdirSync(box).map((f) => join(box, f));
    } catch {
      // The mailbox is not there yet: look again.
    }
    for (const file of files) {
      const text = readFileSync(file, "utf8");
      if (read.has(file) || !text.split("\n").some((l) => l.startsWith("To:") && l.includes(to))) continue;
      const code = /is (\d{6})/.exec(text)?.[1];
      if (code) {
        read.add(file);
        return code;
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no code mailed to ${to}`);
}

async function signUp(email, name) {
  await page.goto(`${BASE}/clusters`);
  await page.waitForURL(/\/sign-in\?return=%2Fclusters$/);
  await page.getByRole("heading", { name: T("auth.sign_in") }).waitFor();
  await check("sign-in");
  if (journey === "user") {
    // No OAuth provider is configured: no button that would fail.
    await page.locator("form").getByRole("button", { name: T("auth.sign_in") }).waitFor();
    assert.equal(await page.getByRole("link", { name: T("auth.with_github") }).count(), 0);
  }
  await page.getByRole("link", { name: T("auth.no_account") }).click();
  await page.getByLabel(T("auth.display_name")).fill(name);
  await page.getByLabel(T("auth.email")).fill(email);
  // A weak password is refused by the API, in words.
  await page.getByLabel(T("auth.password")).fill("password12");
  await page.getByRole("button", { name: T("auth.sign_up") }).click();
  await page.getByRole("alert").waitFor();
  await check("sign-up-refused");
  await page.getByLabel(T("auth.password")).fill(PASSWORD);
  await page.getByRole("button", { name: T("auth.sign_up") }).click();
  await page.waitForURL(/\/confirm\?email=/);
  await check("confirm");
  await page.getByLabel(T("auth.code")).fill(await codeFor(email));
  await page.getByLabel(T("auth.password")).fill(PASSWORD);
  await page.getByRole("button", { name: T("auth.confirm") }).click();
  await page.waitForURL(/\/clusters$/);
}

async function user() {
  const email = `${language.toLowerCase()}-${Date.now()}@example.test`;
  step("sign up with the emailed code");
  // A name that would run script if the console wrote it as HTML.
  const displayName = language === "en" ? `Ada <img src=x onerror="window.__xss=1">` : "李雷";
  await signUp(email, displayName);
  await page.getByText(T("clusters.empty")).waitFor();
  await check("clusters-empty");

  step("create a cluster: the API's refusal shown in words, then the stages live");
  await page.getByRole("link", { name: T("clusters.create") }).first().click();
  await page.getByLabel(T("clusters.name"), { exact: true }).fill("Not A Name!");
  await page.getByRole("button", { name: T("clusters.create") }).click();
  const refusal = page.getByRole("alert");
  await refusal.waitFor();
  assert.match(await refusal.innerText(), /name/);
  await check("cluster-create-refused");
  const name = language === "en" ? "web" : "shop";
  await page.getByLabel(T("clusters.name"), { exact: true }).fill(name);
  await page.getByRole("button", { name: T("clusters.create") }).click();
  await page.waitForURL(/\/clusters\/[0-9a-f-]{36}$/);
  const clusterUrl = page.url();
  await page.locator("ol.stages li").first().waitFor();
  await page.locator(".page-head .badge", { hasText: T("status.ready") }).waitFor({ timeout: 60_000 });
  await page.locator("ol.stages li", { hasText: T("stage.done") }).waitFor();
  // Every stage the job recorded, in order, however quickly it passed.
  const stages = await page.locator("ol.stages li span.stage").allInnerTexts();
  for (const stage of ["creating the namespace", "installing the control plane", "registering the admission webhook"]) {
    assert.ok(stages.includes(T(`stage.${stage}`)), `${stage} among the stages: ${stages}`);
  }
  assert.equal(stages.at(-1), T("stage.done"), `${stages}`);
  assert.ok(stages.indexOf(T("stage.creating the namespace")) < stages.indexOf(T("stage.installing the control plane")));
  await check("cluster-overview");

  step("download the kubeconfig and use it with kubectl");
  await page.getByRole("link", { name: T("cluster.access") }).click();
  const download = page.waitForEvent("download");
  await page.getByRole("button", { name: T("kubeconfig.download") }).click();
  const file = join(SHOTS, `${language}-kubeconfig.yaml`);
  await (await download).saveAs(file);
  const namespaces = execFileSync(env("KUBECTL"), ["--kubeconfig", file, "get", "namespaces"], { encoding: "utf8" });
  assert.match(namespaces, /kube-system/);
  await page.getByRole("cell", { name: T("status.active") }).waitFor();
  await check("cluster-kubeconfig");
  if (language === "en") {
    // Revoked: the same file no longer opens the cluster.
    await page.getByRole("button", { name: T("common.revoke") }).click();
    await page.locator("tbody .badge", { hasText: new RegExp(`^(${T("status.revoking")}|${T("status.revoked")})$`) }).waitFor();
    await until(() => {
      try {
        execFileSync(env("KUBECTL"), ["--kubeconfig", file, "get", "namespaces"], { stdio: "pipe", timeout: 10_000 });
        return false;
      } catch {
        return true;
      }
    }, "the cluster to refuse the revoked kubeconfig");
  }

  step("create a join token, run its command, watch the checklist tick");
  await page.getByRole("link", { name: T("cluster.join") }).click();
  await page.getByText(T("join.no_attempts")).waitFor();
  await page.getByLabel(T("join.labels")).fill("zone=lab");
  await page.getByRole("button", { name: T("join.create") }).click();
  const command = (await page.locator(".copy pre").innerText()).trim();
  assert.match(command, /^curl -sS -H 'Authorization: Bearer [^']+' .*\/join \| sudo sh$/);
  await page.getByRole("button", { name: T("common.copy") }).click();
  await page.getByRole("button", { name: T("common.copied") }).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), command);
  await check("join-token");
  const sandbox = env("JOIN_SANDBOX");
  execFileSync("sh", ["-c", command.replace("| sudo sh", "| sh")], {
    env: { ...process.env, PATH: `${join(sandbox, "bin")}:${process.env.PATH}`, KUBEBYON_JOIN_ROOT: join(sandbox, "root") },
    stdio: "inherit",
    timeout: 60_000,
  });
  // ("done" is reported after the join, best effort: the attempt may be closed by then.)
  for (const s of ["os", "root", "swap", "api", "join"]) {
    await page.locator(`li.step[data-step="${s}"][data-status="ok"]`).first().waitFor({ timeout: 30_000 });
  }
  await page.locator(".attempt .badge", { hasText: T("status.succeeded") }).first().waitFor();
  await page.getByRole("cell", { name: "0 / 1" }).waitFor();
  await check("join-checklist");
  // A second token, revoked before use.
  await page.getByLabel(T("join.max_uses")).fill("3");
  await page.getByLabel(T("join.description")).fill("spare");
  await page.getByRole("button", { name: T("join.create") }).click();
  const spare = page.locator("tbody tr", { hasText: "spare" });
  await spare.getByRole("cell", { name: "3 / 3" }).waitFor();
  await spare.getByRole("button", { name: T("common.revoke") }).click();
  await spare.locator(".badge", { hasText: T("status.revoked") }).waitFor();

  step("the node appears; its timeline");
  await page.getByRole("link", { name: T("cluster.nodes"), exact: true }).click();
  const node = page.getByRole("link", { name: `worker-${language.toLowerCase()}` });
  await node.waitFor({ timeout: 30_000 });
  await check("nodes");
  await node.click();
  await page.getByRole("heading", { name: T("nodes.uptime") }).waitFor();
  await page.locator("ol.timeline li").first().waitFor();
  await check("node-timeline");
  await page.goBack();

  step("metrics: the range API's points drawn");
  await page.goto(`${clusterUrl}?tab=metrics`);
  // The simulator's control planes report no figures: an hour of samples as
  // sync-metrics records them from a real one.
  const clusterId = clusterUrl.split("/").at(-1);
  execFileSync("psql", [env("DATABASE_URL"), "-qc", `
    INSERT INTO control_plane_metrics_snapshots
      (cluster_id, available, namespace, pod_name, collected_at, load_average_1, load_average_5,
       load_average_15, total_cpu_percent, total_memory_rss_bytes, total_memory_virtual_bytes)
    SELECT c.id, true, c.namespace, c.vcluster_name || '-0', now() - make_interval(mins => m),
           0.4 + m % 7 * 0.1, 0.5, 0.5, 12 + m % 11, (300 + m) * 1048576::bigint, (900 + m) * 1048576::bigint
    FROM clusters c, generate_series(1, 60) m WHERE c.id = '${clusterId}'`]);
  await page.getByLabel(T("common.period")).selectOption("1");
  await page.locator("figure.chart canvas").nth(2).waitFor();
  assert.equal(await page.locator("figure.chart").count(), 3);
  await check("metrics");

  step("hostnames: a bad one refused, a good one bound");
  await page.goto(`${clusterUrl}?tab=hostnames`);
  await page.getByText(T("hostnames.empty")).waitFor();
  await page.getByLabel(T("hostnames.hostname")).fill("not a hostname");
  await page.getByRole("button", { name: T("hostnames.add") }).click();
  await page.getByRole("alert").waitFor();
  const hostname = `${name}-${language.toLowerCase()}.example.com`;
  await page.getByLabel(T("hostnames.hostname")).fill(hostname);
  await page.getByRole("button", { name: T("hostnames.add") }).click();
  await page.getByRole("article", { name: hostname }).waitFor();
  await check("hostnames");

  step("labels: a look-alike key refused in words, good ones set, the cluster found by a selector");
  await page.getByRole("link", { name: T("labels.nav"), exact: true }).click();
  await page.waitForURL(/\/labels$/);
  const row = page.locator("tbody tr").filter({ has: page.getByRole("link", { name, exact: true }) });
  await row.getByText(T("labels.unlabeled")).waitFor();
  await row.getByRole("button", { name: T("labels.edit") }).click();
  const editor = page.getByLabel(T("labels.edit_label", { name }));
  // A Cyrillic "е" in "env": refused, named, and nothing stored.
  await editor.fill("\u0435nv=prod");
  await page.getByRole("button", { name: T("common.save") }).click();
  assert.match(await page.getByRole("alert").innerText(), /labels\.\u0435nv/);
  await editor.fill(`env=prod\nexample.com/team=${language.toLowerCase()}`);
  await page.getByRole("button", { name: T("common.save") }).click();
  await row.getByText("env=prod").waitFor();
  await check("labels");
  await page.getByLabel(T("labels.selector")).fill(`env=prod,example.com/team in (${language.toLowerCase()})`);
  await page.getByRole("button", { name: T("labels.find") }).click();
  await page.waitForURL(/\/labels\?selector=/);
  await row.waitFor();
  await page.getByLabel(T("labels.selector")).fill("env!=prod");
  await page.getByRole("button", { name: T("labels.find") }).click();
  await page.getByText(T("labels.none_selected")).waitFor();

  if (language === "en") {
    step("remove the node, forced");
    await page.goto(`${clusterUrl}?tab=nodes`);
    await page.getByRole("link", { name: "worker-en" }).click();
    await page.getByLabel(T("nodes.force")).check();
    await page.getByRole("button", { name: T("nodes.remove") }).click();
    await page.getByRole("button", { name: T("common.confirm") }).click();
    await page.waitForURL(/tab=nodes$/);
    await page.getByText(T("nodes.empty")).waitFor({ timeout: 30_000 });
  } else {
    step("raise the CPU limit: an update, its stages");
    await page.goto(`${clusterUrl}?tab=settings`);
    await page.getByLabel(T("clusters.cpu_limit")).fill("3000");
    await page.getByRole("button", { name: T("settings.save") }).click();
    await page.waitForURL(/tab=overview$/);
    await page.getByRole("heading", { name: T("operation.update") }).waitFor();
    await page.locator("#live-operation .badge", { hasText: T("status.succeeded") }).waitFor({ timeout: 30_000 });
    await page.locator("dl.facts dd", { hasText: "3,000m" }).waitFor();
  }

  step("history, account, billing");
  await page.goto(`${clusterUrl}?tab=history`);
  await page.getByRole("heading", { name: T("history.jobs") }).waitFor();
  await page.getByRole("cell", { name: T("status.succeeded") }).first().waitFor();
  await check("history");
  await page.goto(`${clusterUrl}?tab=settings`);
  await check("cluster-settings");
  await page.getByRole("link", { name: T("nav.account") }).click();
  await page.locator("dl.facts dd", { hasText: email }).waitFor();
  await page.locator("dl.facts dd", { hasText: displayName }).waitFor();
  assert.equal(await page.evaluate(() => window.__xss), undefined, "the name is shown as text, never run");
  await check("account");
  await page.getByRole("link", { name: T("account.keys") }).click();
  await page.getByLabel(T("keys.name")).fill("ci");
  await page.getByLabel(T("account.current_password")).fill(PASSWORD);
  await page.getByRole("button", { name: T("keys.create") }).click();
  const key = (await page.locator(".copy pre").innerText()).trim();
  const me = await fetch(`${BASE}/api/auth/me`, { headers: { authorization: `Bearer ${key}` } });
  assert.equal(me.status, 200, "the key shown once works");
  await check("api-keys");
  for (const tab of ["notifications", "sessions", "logins", "activity"]) {
    await page.goto(`${BASE}/account?tab=${tab}`);
    await page.getByRole("table").or(page.locator("form.card, .empty")).first().waitFor();
    await check(`account-${tab}`);
  }
  // Notifications: a change saved is what the page shows after a reload.
  await page.goto(`${BASE}/account?tab=notifications`);
  const offline = page.getByLabel(T("notifications.notify_node_offline"));
  const before = await offline.isChecked();
  await offline.setChecked(!before);
  await page.getByRole("button", { name: T("common.save") }).click();
  await page.getByText(T("common.saved")).waitFor();
  await page.reload();
  assert.equal(await page.getByLabel(T("notifications.notify_node_offline")).isChecked(), !before);
  await page.getByRole("link", { name: T("nav.billing") }).click();
  await page.getByRole("heading", { name: T("billing.plan"), exact: true }).waitFor();
  await check("billing");

  if (language === "en") {
    // The Chinese journey keeps its cluster: the administrator's journey
    // retries a job of it.
    step("remove the cluster, confirmed");
    await page.goto(`${clusterUrl}?tab=settings`);
    await page.getByRole("button", { name: T("settings.delete") }).click();
    await page.getByRole("button", { name: T("common.confirm") }).click();
    await page.waitForURL(/tab=overview/);
    // Deleting, then gone: the page says so.
    await page.getByText(T("cluster.gone")).waitFor({ timeout: 60_000 });
    await check("cluster-gone");
    await page.getByRole("link", { name: T("nav.clusters") }).first().click();
    await page.getByText(T("clusters.empty")).waitFor();
  }

  step("a lost session sends the reader to sign in, and back");
  await context.clearCookies();
  await page.goto(`${clusterUrl}?tab=nodes`);
  await page.waitForURL(/\/sign-in\?return=/);
  await page.getByLabel(T("auth.email")).fill(email);
  await page.getByLabel(T("auth.password")).fill(PASSWORD);
  await page.getByRole("button", { name: T("auth.sign_in") }).click();
  await page.waitForURL(`${clusterUrl}?tab=nodes`);

  step("sign out; a return path to another site is not followed");
  await page.getByRole("button", { name: T("nav.sign_out") }).click();
  await page.waitForURL(/\/sign-in$/);
  for (const evil of ["//evil.example/x", "/\\evil.example/x", "https://evil.example/"]) {
    await page.goto(`${BASE}/sign-in?return=${encodeURIComponent(evil)}`);
    await page.getByLabel(T("auth.email")).fill(email);
    await page.getByLabel(T("auth.password")).fill(PASSWORD);
    await page.getByRole("button", { name: T("auth.sign_in") }).click();
    await page.waitForURL(`${BASE}/clusters`);
    await page.getByRole("button", { name: T("nav.sign_out") }).click();
    await page.waitForURL(/\/sign-in$/);
  }
  writeFileSync(join(SHOTS, `${language}-user.txt`), `${email}\n`);
}

async function admin() {
  step("the administrator signs up and sees the back office");
  await signUp(env("ADMIN_EMAIL"), "Root");
  await page.getByRole("link", { name: T("nav.admin") }).click();
  await page.waitForURL(/\/admin\/users$/);
  const target = env("USER_EMAIL");
  await page.getByLabel(T("admin.search")).fill(target);
  await page.getByRole("button", { name: T("admin.search") }).click();
  const row = page.locator(`tr[data-email="${target}"]`);
  await row.waitFor();
  await check("admin-users");

  step("disable a user: they cannot sign in; enable them again");
  await row.getByRole("button", { name: T("admin.disable") }).click();
  await row.locator(".badge", { hasText: T("status.disabled") }).waitFor();
  const login = await fetch(`${BASE}/api/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email: target, password: PASSWORD }),
  });
  assert.notEqual(login.status, 200, "a disabled user cannot sign in");
  await row.getByRole("button", { name: T("admin.enable") }).click();
  await row.locator(".badge", { hasText: T("status.active") }).waitFor();

  step("make the user an administrator, and back");
  const role = row.getByLabel(T("admin.role_of", { email: target }));
  const changeRole = async (to) => {
    const patched = page.waitForResponse(
      (r) => r.request().method() === "PATCH" && r.url().includes("/api/console/admin/users/"),
    );
    await role.selectOption(to);
    assert.equal((await patched).status(), 200);
    // The select shows the role the API answers once the list is fetched again.
    await until(async () => (await role.inputValue()) === to, `the role to read ${to}`);
  };
  await changeRole("admin");
  await page.reload();
  await page.getByLabel(T("admin.search")).fill(target);
  await page.getByRole("button", { name: T("admin.search") }).click();
  await until(async () => (await role.inputValue()) === "admin", "admin to be stored");
  await changeRole("user");

  step("delete users: refused while one has clusters, done when they have none");
  await page.getByLabel(T("admin.search")).fill("zh-cn-");
  await page.getByRole("button", { name: T("admin.search") }).click();
  const owner = page.locator('tr[data-email^="zh-cn-"]');
  await owner.getByRole("button", { name: T("common.delete") }).click();
  await owner.getByRole("button", { name: T("common.confirm") }).click();
  await page.getByRole("alert").getByText(T("errors.code", { code: "user_has_clusters" })).waitFor();
  await page.getByLabel(T("admin.search")).fill(target);
  await page.getByRole("button", { name: T("admin.search") }).click();
  await row.getByRole("button", { name: T("common.delete") }).click();
  await row.getByRole("button", { name: T("common.confirm") }).click();
  await page.getByText(T("admin.no_users")).waitFor();

  step("retry a failed job");
  await page.getByRole("link", { name: T("admin.jobs") }).click();
  await page.getByLabel(T("clusters.status")).selectOption("failed");
  const failed = page.locator("tbody tr", { has: page.locator(".badge", { hasText: T("status.failed") }) }).first();
  await failed.waitFor();
  await check("admin-jobs");
  await failed.getByRole("button", { name: T("common.retry") }).click();
  await page.getByLabel(T("clusters.status")).selectOption("");
  await page.locator("tbody tr .badge", { hasText: T("status.succeeded") }).first().waitFor();
  await page.getByLabel(T("clusters.status")).selectOption("failed");
  await page.getByText(T("history.no_jobs")).waitFor({ timeout: 30_000 });

  step("change a setting, and a secret that is never shown again");
  await page.getByRole("link", { name: T("admin.settings") }).click();
  await page.getByLabel(T("setting.managed_workload_ingress_dns_record_ttl")).fill("120");
  await page.getByLabel(T("setting.smtp_password")).fill("smtp-password-for-the-console-test");
  await page.getByLabel(T("setting.github_oauth_client_id")).fill("Iv1.console0test");
  await page.getByLabel(T("setting.github_oauth_client_secret")).fill("github-secret-for-the-console-test");
  await page.getByRole("button", { name: T("common.save") }).click();
  await page.getByText(T("common.saved")).waitFor();
  await page.reload();
  assert.equal(await page.getByLabel(T("setting.managed_workload_ingress_dns_record_ttl")).inputValue(), "120");
  assert.equal(await page.getByLabel(T("setting.smtp_password")).inputValue(), "");
  await page.getByText(T("admin.secret_set")).first().waitFor();
  assert.ok(!(await page.content()).includes("smtp-password-for-the-console-test"), "the secret is not sent back");
  await check("admin-settings");
  // GitHub is configured now: a visitor's sign-in page offers it, not Google.
  const visitor = await browser.newPage();
  await visitor.goto(`${BASE}/sign-in`);
  await visitor.getByRole("link", { name: T("auth.with_github") }).waitFor();
  assert.equal(await visitor.getByRole("link", { name: T("auth.with_google") }).count(), 0);
  assert.match(await visitor.getByRole("link", { name: T("auth.with_github") }).getAttribute("href"), /^\/api\/auth\/oauth\/github\/start\?return_to=/);
  await visitor.close();

  step("audit, plans, orders");
  await page.getByRole("link", { name: T("admin.audit") }).click();
  await page.getByRole("cell", { name: "admin.settings.update" }).first().waitFor();
  await check("admin-audit");
  await page.getByRole("link", { name: T("admin.plans") }).click();
  await page.getByLabel(T("plans.name"), { exact: true }).fill("Team");
  await page.getByLabel(T("plans.max_clusters"), { exact: true }).fill("3");
  await page.getByLabel(T("plans.max_nodes"), { exact: true }).fill("10");
  await page.getByLabel(T("plans.price_minor_units")).fill("1900");
  await page.getByRole("button", { name: T("common.save"), exact: true }).click();
  await page.getByRole("cell", { name: "Team" }).waitFor();
  // Billing's settings, beside the plans: Team could be the default plan
  // (left unlimited here: the other journeys share the platform), and the
  // Stripe webhook secret is set and never shown again.
  const billing = page.getByRole("form", { name: T("admin.billing_settings") });
  await billing.getByRole("option", { name: "Team" }).waitFor({ state: "attached" });
  await billing.getByLabel(T("setting.stripe_webhook_secret")).fill("whsec_consoletest123");
  await billing.getByRole("button", { name: T("admin.save_billing_settings") }).click();
  await billing.getByText(T("common.saved")).waitFor();
  await page.reload();
  const reloaded = page.getByRole("form", { name: T("admin.billing_settings") });
  await reloaded.getByText(T("admin.secret_set")).waitFor();
  assert.equal(await reloaded.getByLabel(T("setting.stripe_webhook_secret")).inputValue(), "");
  assert.ok(!(await page.content()).includes("whsec_consoletest123"), "the secret is not sent back");
  await check("admin-plans");
  await page.getByRole("link", { name: T("admin.orders") }).click();
  await page.getByText(T("billing.no_orders")).waitFor();
  await check("admin-orders");

  step("switch to Chinese: remembered, every section of the back office in it");
  const zh = JSON.parse(readFileSync(new URL("../src/locales/zh-CN.json", import.meta.url), "utf8"));
  await page.getByLabel(T("nav.language")).selectOption("zh-CN");
  await page.getByRole("link", { name: zh["nav.clusters"] }).waitFor();
  assert.equal(await page.evaluate(() => document.documentElement.lang), "zh-CN");
  await page.reload();
  await page.getByRole("heading", { name: zh["admin.title"] }).waitFor();
  for (const section of ["users", "jobs", "audit", "settings", "plans", "orders"]) {
    await page.getByRole("link", { name: zh[`admin.${section}`] }).click();
    await page.waitForURL(new RegExp(`/admin/${section}$`));
    await page.locator("main table, main form, main .empty").first().waitFor();
    await check(`admin-${section}`, "zh-CN");
  }
}

try {
  if (journey === "user") await user();
  else if (journey === "admin") await admin();
  else throw new Error(`unknown journey ${journey}: user or admin`);
  assert.deepEqual(problems, [], "no CSP violation or page error");
  step(`done: ${[...shown].join(", ")}`);
} catch (error) {
  await page.screenshot({ path: join(SHOTS, `${language}-${journey}-failure.png`), fullPage: true }).catch(() => {});
  console.error(`failed at ${page.url()}`);
  console.error(problems.join("\n"));
  throw error;
} finally {
  await browser.close();
}

// A new user, in JOURNEY_LANGUAGE: sign-up with the emailed code, a cluster
// created with its stages live, the kubeconfig used with kubectl, a join
// token's command run on a machine (and on one whose check fails), the node, its metrics, a hostname,
// labels, the history, the account and billing, and (in English) the
// cluster removed; a lost session and signing out.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PASSWORD, env, test } from "./support.mjs";

test("a new user, from sign-up to cluster removal", async ({ page, context, language, journey }) => {
  const { BASE, SHOTS, T, step, check, narrow, dark, until, signUp } = journey;
  const email = `${language.toLowerCase()}-${Date.now()}@example.test`;
  step("sign up with the emailed code");
  // A name that would run script if the console wrote it as HTML.
  const displayName = language === "en" ? `Ada <img src=x onerror="window.__xss=1">` : "李雷";
  await signUp(email, displayName);
  await page.getByText(T("clusters.empty")).waitFor();
  await check("clusters-empty");

  step("create a cluster: the API's refusal shown in words, then the stages live");
  await page.getByRole("link", { name: T("clusters.create") }).first().click();
  // The version is a choice of those the platform supports, its default chosen.
  const version = page.getByLabel(T("clusters.version"));
  await version.locator("option", { hasText: "1.34" }).waitFor({ state: "attached" });
  assert.equal(await version.inputValue(), "1.33");
  assert.deepEqual(await version.locator("option").evaluateAll((os) => os.map((o) => o.value)), ["1.34", "1.33", "1.32", "1.31"]);
  await page.getByLabel(T("clusters.name"), { exact: true }).fill("Not A Name!");
  await page.getByRole("button", { name: T("clusters.create") }).click();
  const refusal = page.getByRole("alert");
  await refusal.waitFor();
  // Its title by its code, in the reader's language; the bad field named by
  // its label, its message beside the field; the API's words folded away.
  assert.equal(await refusal.locator("strong").first().innerText(), T("problem.validation_failed.title"));
  assert.match(await refusal.innerText(), new RegExp(`${T("clusters.name")}: `));
  assert.ok(!(await refusal.innerText()).includes("workload_cpu_limit_milli_cores"));
  await page.locator(".field .error-text").first().waitFor();
  // The field's message by its code, in the reader's words.
  assert.equal(await page.locator(".field .error-text").first().innerText(), T("field_error.name", { max: 40 }));
  assert.equal(await page.getByLabel(T("clusters.name"), { exact: true }).getAttribute("aria-invalid"), "true");
  await check("cluster-create-refused");
  await narrow("cluster-create-refused");
  const name = language === "en" ? "web" : "shop";
  // A plan of no cluster, paid for a moment (as Stripe's webhook would
  // record it): the refusal is titled by its code and links the plans.
  const planned = execFileSync("psql", [env("DATABASE_URL"), "-Atqc", `
    WITH plan AS (
      INSERT INTO plans (name, max_clusters, max_nodes, max_cpu_milli_cores, max_memory_mib, max_hostnames,
                         price_minor_units, currency)
      VALUES ('No clusters ${language}', 0, 0, 0, 0, 0, 0, 'usd') RETURNING id)
    INSERT INTO orders (user_id, plan_id, status, amount, currency, paid_at)
    SELECT u.id, plan.id, 'paid', 0, 'usd', now() FROM users u, plan WHERE u.email = '${email}'
    RETURNING id, plan_id`], { encoding: "utf8" }).trim().split("|");
  await page.getByLabel(T("clusters.name"), { exact: true }).fill(name);
  await page.getByRole("button", { name: T("clusters.create") }).click();
  const limit = page.locator('[role=alert][data-code="plan_limit_exceeded"]');
  await limit.waitFor();
  assert.equal(await limit.locator("strong").first().innerText(), T("problem.plan_limit_exceeded.title"));
  assert.equal(await limit.getByRole("link", { name: T("errors.choose_plan") }).getAttribute("href"), "/billing");
  await check("plan-limit");
  execFileSync("psql", [env("DATABASE_URL"), "-qc",
    `DELETE FROM orders WHERE id = '${planned[0]}'; DELETE FROM plans WHERE id = '${planned[1]}'`]);
  await page.getByRole("button", { name: T("clusters.create") }).click();
  await page.waitForURL(/\/clusters\/[0-9a-f-]{36}$/);
  const clusterUrl = page.url();
  await page.locator("ol.stages li").first().waitFor();
  // Ready, and without a node yet: the header says so, and how to start.
  await page.locator('.page-head .badge[data-health="no_nodes"]').waitFor({ timeout: 60_000 });
  assert.equal(await page.locator(".page-head .badge").innerText(), T("health.no_nodes"));
  await page.getByRole("heading", { name: T("start.title") }).waitFor();
  await page.locator("ol.stages li", { hasText: T("stage.done") }).waitFor();
  // Every stage the job recorded, in order, however quickly it passed.
  const stages = await page.locator("ol.stages li span.stage").allInnerTexts();
  for (const stage of ["creating the namespace", "installing the control plane", "registering the admission webhook"]) {
    assert.ok(stages.includes(T(`stage.${stage}`)), `${stage} among the stages: ${stages}`);
  }
  assert.equal(stages.at(-1), T("stage.done"), `${stages}`);
  assert.ok(stages.indexOf(T("stage.creating the namespace")) < stages.indexOf(T("stage.installing the control plane")));
  await check("cluster-overview");
  await narrow("cluster-overview");
  await dark("cluster-overview");

  step("find the cluster by a part of its name, in capitals");
  await page.goto(`${BASE}/clusters`);
  await page.getByLabel(T("clusters.search")).fill(name.slice(0, 2).toUpperCase());
  await page.getByRole("button", { name: T("admin.search") }).click();
  await page.getByRole("link", { name, exact: true }).waitFor();
  await page.getByLabel(T("clusters.search")).fill("zzz");
  await page.getByRole("button", { name: T("admin.search") }).click();
  await page.getByText(T("clusters.no_match", { q: "zzz" })).waitFor();
  // Filtered by health: the new cluster has no node; none has failed.
  await page.getByLabel(T("clusters.search")).fill("");
  await page.getByRole("button", { name: T("admin.search") }).click();
  await page.getByLabel(T("clusters.health_filter")).selectOption("no_nodes");
  await page.getByRole("link", { name, exact: true }).waitFor();
  const listed = page.locator("tbody tr", { has: page.getByRole("link", { name, exact: true }) });
  assert.equal(await listed.locator(".badge").innerText(), T("health.no_nodes"));
  assert.equal(await listed.locator("td").nth(2).innerText(), T("health.count", { ready: 0, total: 0 }));
  await check("clusters");
  await narrow("clusters");
  await dark("clusters");
  await page.getByLabel(T("clusters.health_filter")).selectOption("failed");
  await page.getByText(T("clusters.no_health", { health: T("health.failed") })).waitFor();
  // By name: the list asks the API in that order (its order: clusters.rs).
  await page.getByLabel(T("clusters.health_filter")).selectOption("");
  const byName = page.waitForRequest((r) => /\/api\/console\/clusters\?.*sort=name/.test(r.url()));
  await page.getByLabel(T("clusters.sort")).selectOption("name");
  await byName;
  await page.getByRole("link", { name, exact: true }).waitFor();
  await page.goto(clusterUrl);

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
    await page.getByText(T("kubeconfig.revoke_question")).waitFor();
    await page.getByRole("button", { name: T("common.confirm") }).click();
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

  step("add a node in one step: the command at once, kept across tabs, a machine awaited");
  await page.getByRole("link", { name: T("cluster.join") }).click();
  await page.getByText(T("join.no_attempts")).waitFor();
  await page.getByRole("heading", { name: T("join.prerequisites") }).waitFor();
  await page.getByRole("button", { name: T("join.add_node") }).click();
  const command = (await page.locator(".copy pre").innerText()).trim();
  await page.getByTestId("waiting-for-machine").waitFor();
  await page.getByRole("link", { name: T("cluster.overview") }).click();
  await page.getByRole("link", { name: T("cluster.join") }).click();
  assert.equal((await page.locator(".copy pre").innerText()).trim(), command, "the command stays until dismissed");
  assert.match(command, /^curl -sS -H 'Authorization: Bearer [^']+' .*\/join \| sudo sh$/);
  await page.getByRole("button", { name: T("common.copy") }).click();
  await page.getByRole("button", { name: T("common.copied") }).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), command);
  await check("join-token");
  await narrow("join-token");
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
  // Five uses, a day: one taken.
  await page.getByRole("cell", { name: "4 / 5" }).waitFor();
  await page.locator('.arrivals li[data-outcome="succeeded"]').getByRole("link", { name: T("join.open_node") }).waitFor();
  await check("join-checklist");
  step("a machine with swap on: its failed check said in the reader's words");
  const swapRoot = mkdtempSync(join(tmpdir(), "kubebyon-swap-"));
  cpSync(join(sandbox, "root"), swapRoot, { recursive: true });
  writeFileSync(join(swapRoot, "proc", "swaps"), "Filename\tType\tSize\tUsed\tPriority\n/swapfile file 1048572 0 -2\n");
  assert.throws(() =>
    execFileSync("sh", ["-c", command.replace("| sudo sh", "| sh")], {
      env: { ...process.env, PATH: `${join(sandbox, "bin")}:${process.env.PATH}`, KUBEBYON_JOIN_ROOT: swapRoot },
      stdio: "pipe",
      timeout: 60_000,
    }),
  );
  rmSync(swapRoot, { recursive: true, force: true });
  const refused = page.locator(".attempt", { has: page.locator('[data-reason="step_failed"]') });
  await refused.waitFor({ timeout: 30_000 });
  assert.equal(await refused.locator("[data-reason]").innerText(), T("join.reason.step_failed", { step: T("step.swap") }));
  const swapStep = refused.locator('li.step[data-step="swap"][data-status="failed"] [data-code="swap_on"]');
  assert.ok((await swapStep.innerText()).includes(T("join.detail.swap_on", { devices: 1 })), await swapStep.innerText());
  // A failed check took no use of the token.
  await page.getByRole("cell", { name: "4 / 5" }).waitFor();
  await check("join-failed-check");
  await page.getByRole("button", { name: T("join.dismiss") }).click();
  await page.getByRole("button", { name: T("join.add_node") }).waitFor();
  // A second token with options of its own, revoked (confirmed) before use.
  await page.getByText(T("join.more_options")).click();
  await page.getByLabel(T("join.max_uses")).fill("3");
  await page.getByLabel(T("join.description")).fill("spare");
  await page.getByRole("button", { name: T("join.create") }).click();
  const spare = page.locator("tbody tr", { hasText: "spare" });
  await spare.getByRole("cell", { name: "3 / 3" }).waitFor();
  await spare.getByRole("button", { name: T("common.revoke") }).click();
  await spare.getByRole("button", { name: T("common.confirm") }).click();
  await spare.locator(".badge", { hasText: T("status.revoked") }).waitFor();

  step("the node appears; its timeline");
  await page.getByRole("link", { name: T("cluster.nodes"), exact: true }).click();
  const node = page.getByRole("link", { name: `worker-${language.toLowerCase()}` });
  await node.waitFor({ timeout: 30_000 });
  // Its node ready, the cluster is healthy, in the header and the list.
  await page.locator('.page-head .badge[data-health="healthy"]').waitFor({ timeout: 30_000 });
  assert.equal(
    await page.locator(".page-head .badge").innerText(),
    `${T("health.healthy")} · ${T("health.ready_one", { ready: 1, count: 1 })}`,
  );
  await check("nodes");
  await narrow("nodes");
  await node.click();
  await page.getByRole("heading", { name: T("nodes.uptime") }).waitFor();
  await page.locator("ol.timeline li").first().waitFor();
  await check("node-timeline");
  await page.goBack();

  step("metrics: the range API's points drawn");
  await page.goto(`${clusterUrl}?tab=metrics`);
  // The simulator's control planes report no figures: an hour of samples a
  // minute apart and a week of them ten minutes apart, as sync-metrics
  // records them from a real one.
  const clusterId = clusterUrl.split("/").at(-1);
  execFileSync("psql", [env("DATABASE_URL"), "-qc", `
    INSERT INTO control_plane_metrics_snapshots
      (cluster_id, available, namespace, pod_name, collected_at, load_average_1, load_average_5,
       load_average_15, total_cpu_percent, total_memory_rss_bytes, total_memory_virtual_bytes)
    SELECT c.id, true, c.namespace, c.vcluster_name || '-0', now() - make_interval(mins => m),
           0.4 + m % 7 * 0.1, 0.5, 0.5, 12 + m % 11, (300 + m % 60) * 1048576::bigint, (900 + m % 60) * 1048576::bigint
    FROM clusters c, (SELECT generate_series(1, 60) UNION SELECT generate_series(7, 1008) * 10) AS s(m)
    WHERE c.id = '${clusterId}'`]);
  await page.getByLabel(T("common.period")).selectOption("1");
  await page.locator("figure.chart canvas").nth(2).waitFor();
  assert.equal(await page.locator("figure.chart").count(), 3);
  await check("metrics");
  await narrow("metrics");
  // Six hours and a week: the time labels (hh:mm, then dates) spaced so
  // that none touches another, in the screenshots.
  for (const [hours, shot] of [["6", "metrics-6h"], ["168", "metrics-7d"]]) {
    await page.getByLabel(T("common.period")).selectOption(hours);
    await page.waitForLoadState("networkidle");
    await page.locator("figure.chart canvas").nth(2).waitFor();
    await check(shot);
  }

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

  step("switch the public access: the new address verified, the old one kept for a while");
  await page.goto(`${clusterUrl}?tab=settings`);
  // Nothing changed yet: nothing to apply.
  assert.ok(await page.getByRole("button", { name: T("settings.save") }).isDisabled());
  // Clusters are born `loadbalancer` here (the platform's default mode).
  await page.getByLabel(T("clusters.access"), { exact: true }).selectOption("nodeport");
  await page.getByRole("button", { name: T("settings.save") }).click();
  await page.waitForURL(/tab=overview$/);
  await page.locator("#live-operation .badge", { hasText: T("status.succeeded") }).waitFor({ timeout: 30_000 });
  const switched = await page.locator("ol.stages li span.stage").allInnerTexts();
  assert.ok(switched.includes(T("stage.verifying the new endpoint")), `the switch verified the address: ${switched}`);
  await page.goto(`${clusterUrl}?tab=settings`);
  const endpoint = page.getByTestId("endpoint");
  await endpoint.locator("dd", { hasText: T("access.nodeport") }).first().waitFor();
  const previous = endpoint.getByTestId("previous-endpoint");
  const served = await previous.innerText();
  assert.ok(
    served.includes("https://127.0.0.2:") && served.includes(T("access.loadbalancer")),
    `the previous address, still served: ${served}`,
  );
  await check("cluster-endpoint-switched");

  step("history, account, billing");
  await page.goto(`${clusterUrl}?tab=history`);
  await page.getByRole("heading", { name: T("history.jobs") }).waitFor();
  // Who did what: the cluster's create, by this user.
  await page.getByRole("heading", { name: T("history.activity") }).waitFor();
  await page.locator("tbody tr", { hasText: "cluster.create" }).filter({ hasText: email }).first().waitFor();
  await page.getByRole("cell", { name: T("status.succeeded") }).first().waitFor();
  await check("history");
  await narrow("history");
  await page.goto(`${clusterUrl}?tab=settings`);
  await check("cluster-settings");
  await narrow("cluster-settings");
  await page.getByRole("link", { name: T("nav.account") }).click();
  await page.locator("dl.facts dd", { hasText: email }).waitFor();
  await page.locator("dl.facts dd", { hasText: displayName }).waitFor();
  assert.equal(await page.evaluate(() => window.__xss), undefined, "the name is shown as text, never run");
  await check("account");
  await narrow("account");
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
  await narrow("billing");

  if (language === "en") {
    // The Chinese journey keeps its cluster: the administrator's journey
    // retries a job of it.
    step("remove the cluster, its name typed to confirm");
    await page.goto(`${clusterUrl}?tab=settings`);
    await page.getByRole("button", { name: T("settings.delete") }).click();
    const confirmDelete = page.getByRole("button", { name: T("settings.delete") });
    await page.getByLabel(T("common.type_name", { name })).fill(name.slice(0, -1));
    assert.ok(await confirmDelete.isDisabled(), "a name not quite the cluster's deletes nothing");
    await page.getByLabel(T("common.type_name", { name })).fill(name);
    await confirmDelete.click();
    await page.waitForURL(/tab=overview/);
    // Deleting, then gone: the page says so.
    await page.getByText(T("cluster.gone")).waitFor({ timeout: 60_000 });
    await check("cluster-gone");
    await page.getByRole("link", { name: T("nav.clusters") }).first().click();
    await page.getByText(T("clusters.empty")).waitFor();
  } else {
    // The cluster's create, failed as if the host had refused it (kept for
    // the administrator's journey, which retries it): the job's words once,
    // the failure's code in the reader's words in the history.
    step("a failed create: its words once, its code's words in the history");
    execFileSync("psql", [env("DATABASE_URL"), "-qc", `
      WITH job AS (
          UPDATE cluster_jobs SET status = 'failed', finished_at = now(), error_code = 'host_rejected',
                 last_error = 'the host cluster refused the control plane'
          WHERE id = (SELECT j.id FROM cluster_jobs j JOIN clusters c ON c.id = j.cluster_id
                      WHERE c.name = '${name}' AND j.type = 'cluster_create')
          RETURNING cluster_id, operation_id)
      , op AS (UPDATE cluster_operations SET status = 'failed', error_code = 'host_rejected',
                      error_message = 'the host cluster refused the control plane'
               WHERE id = (SELECT operation_id FROM job))
      UPDATE clusters SET status = 'failed', last_error_message = 'the host cluster refused the control plane'
      WHERE id = (SELECT cluster_id FROM job)`]);
    await page.goto(`${clusterUrl}?tab=overview`);
    await page.getByText(T("cluster.last_error")).waitFor();
    assert.equal(await page.getByText("the host cluster refused the control plane").count(), 1, "the job's words are shown once");
    await page.goto(`${clusterUrl}?tab=history`);
    const failedCreate = page.locator("tbody tr", { has: page.locator(".badge", { hasText: T("status.failed") }) }).first();
    assert.ok((await failedCreate.innerText()).includes(T("failure.host_rejected.title")));
    await failedCreate.getByText(T("errors.details")).click();
    await failedCreate.getByText(T("failure.host_rejected.hint")).waitFor();
    await check("operation-failed");
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

  step("signed-out pages ask for no session, and log no error");
  const logged = [];
  page.on("console", (message) => message.type() === "error" && logged.push(message.text()));
  for (const path of ["/sign-in", "/clusters", "/billing"]) {
    await page.goto(`${BASE}${path}`);
    await page.waitForURL(/\/sign-in/);
    await page.waitForLoadState("networkidle");
  }
  assert.deepEqual(logged, []);
  writeFileSync(join(SHOTS, `${language}-user.txt`), `${email}\n`);
});

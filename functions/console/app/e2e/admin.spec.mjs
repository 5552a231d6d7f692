// The administrator: the back office's users (disable, promote, delete),
// a failed job retried, settings and a secret never shown again, audit,
// plans and orders, and every section of it in Chinese, at 1280 and 390 px.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { PASSWORD, env, test } from "./support.mjs";

test("the administrator runs the back office", async ({ page, browser, journey }) => {
  const { BASE, SHOTS, T, step, check, narrow, dark, until, signUp } = journey;
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
  await narrow("admin-users");
  await dark("admin-users");

  step("the users list reads 100 at a time, and more on demand");
  await page.getByLabel(T("admin.search")).fill("");
  await page.getByRole("button", { name: T("admin.search") }).click();
  const rows = page.locator("main tbody tr");
  await until(async () => (await rows.count()) === 100, "a first page of 100 users");
  await page.getByRole("button", { name: T("common.more") }).click();
  // The oldest of the 120 paged users is on the second page, once.
  await page.locator('tr[data-email="page-119@example.test"]').waitFor();
  const emails = await rows.evaluateAll((all) => all.map((r) => r.dataset.email));
  assert.equal(new Set(emails).size, emails.length, "no user listed twice");
  assert.ok(emails.length > 100, `${emails.length} users after "more"`);
  await page.getByLabel(T("admin.search")).fill(target);
  await page.getByRole("button", { name: T("admin.search") }).click();
  await row.waitFor();

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
  await page.locator('[role=alert][data-code="user_has_clusters"]').getByText(T("problem.user_has_clusters.title"), { exact: true }).waitFor();
  await page.getByLabel(T("admin.search")).fill(target);
  await page.getByRole("button", { name: T("admin.search") }).click();
  await row.getByRole("button", { name: T("common.delete") }).click();
  await row.getByRole("button", { name: T("common.confirm") }).click();
  await page.getByText(T("admin.no_users")).waitFor();

  step("every organization's clusters, with their owners, found by name");
  await page.getByRole("navigation", { name: T("admin.title") }).getByRole("link", { name: T("admin.clusters") }).click();
  await page.waitForURL(/\/admin\/clusters$/);
  await page.locator("main tbody tr").first().waitFor();
  await page.getByLabel(T("clusters.search")).fill("shop");
  await page.getByRole("button", { name: T("admin.search") }).click();
  const shop = page.locator('tr[data-cluster="shop"]');
  await shop.waitFor();
  const shopId = await shop.locator("code").getAttribute("data-id");
  // The id copied whole with its button.
  await shop.getByRole("button", { name: `${T("common.copy")} ${shopId}` }).click();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), shopId);
  assert.match(await shop.innerText(), /zh-cn-/, "the owner's email");
  assert.equal(await page.locator("main tbody tr").count(), 1, "only the clusters named so");
  await check("admin-clusters");
  await narrow("admin-clusters");

  step("retry a failed job");
  await page.getByRole("link", { name: T("admin.jobs") }).click();
  await page.getByLabel(T("clusters.status")).selectOption("failed");
  const failed = page.locator("tbody tr", { has: page.locator(".badge", { hasText: T("status.failed") }) }).first();
  await failed.waitFor();
  await check("admin-jobs");
  await narrow("admin-jobs");
  await failed.getByRole("button", { name: T("common.retry") }).click();
  await page.getByLabel(T("clusters.status")).selectOption("");
  await page.locator("tbody tr .badge", { hasText: T("status.succeeded") }).first().waitFor();
  await page.getByLabel(T("clusters.status")).selectOption("failed");
  await page.getByText(T("history.no_jobs")).waitFor({ timeout: 30_000 });
  // One cluster's queue, the cluster picked by its name (and its owner's
  // email), not by an id typed in.
  await page.getByLabel(T("clusters.status")).selectOption("");
  const zhEmail = readFileSync(join(SHOTS, "zh-CN-user.txt"), "utf8").trim();
  await page.getByLabel(T("admin.cluster"), { exact: true }).fill(`shop (${zhEmail})`);
  await until(async () => {
    const shown = await page.locator("tbody tr td:nth-child(2) code").evaluateAll((codes) => codes.map((c) => c.dataset.id));
    return shown.length > 0 && shown.every((id) => id === shopId);
  }, "the picked cluster's jobs alone");
  await narrow("admin-jobs-picked");

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
  await narrow("admin-settings");
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
  // One person's actions, picked by email; each row names them.
  await page.getByLabel(T("admin.actor")).fill(env("ADMIN_EMAIL"));
  await until(async () => {
    const by = await page.locator("tbody tr td:nth-child(4)").allInnerTexts();
    return by.length > 0 && by.every((who) => who.trim() === env("ADMIN_EMAIL"));
  }, "the picked person's actions alone");
  await page.getByRole("cell", { name: "admin.settings.update" }).first().waitFor();
  await check("admin-audit");
  await narrow("admin-audit");
  await dark("admin-audit");
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
  await narrow("admin-plans");
  await page.getByRole("link", { name: T("admin.orders") }).click();
  await page.getByText(T("billing.no_orders")).waitFor();
  await check("admin-orders");
  await narrow("admin-orders");

  step("switch to Chinese: remembered, every section of the back office in it");
  const zh = JSON.parse(readFileSync(new URL("../src/locales/zh-CN.json", import.meta.url), "utf8"));
  await page.getByLabel(T("nav.language")).selectOption("zh-CN");
  // The header's link (the back office has a tab of the same name).
  await page.getByRole("link", { name: zh["nav.clusters"] }).first().waitFor();
  assert.equal(await page.evaluate(() => document.documentElement.lang), "zh-CN");
  await page.reload();
  await page.getByRole("heading", { name: zh["admin.title"] }).waitFor();
  const tabs = page.getByRole("navigation", { name: zh["admin.title"] });
  for (const section of ["users", "clusters", "jobs", "audit", "settings", "plans", "orders"]) {
    await tabs.getByRole("link", { name: zh[`admin.${section}`] }).click();
    await page.waitForURL(new RegExp(`/admin/${section}$`));
    await page.locator("main table, main form, main .empty").first().waitFor();
    await check(`admin-${section}`, "zh-CN");
    await narrow(`admin-${section}`, "zh-CN");
  }
});

// Tenant databases in the console, in JOURNEY_LANGUAGE: the administrator
// registers the PostgreSQL server the runner started (INSTANCE_PORT, its CA
// in INSTANCE_CA) — a wrong password refused with its code, then checked
// and saved, the check's result shown, the password never shown again —
// then, on a cluster of their own, asks for a database with an extension
// (a look-alike name refused first), sees it walk to ready with its
// Secret's name, adds an extension, rotates the credential and removes the
// database, each after a confirmation that names what it does.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { PASSWORD, env, test } from "./support.mjs";

test("tenant databases, from the back office to a cluster", async ({ page, language, journey }) => {
  const { BASE, T, step, check } = journey;
  const english = language === "en";

  step("the administrator signs in and opens the back office's databases");
  await page.goto(`${BASE}/sign-in`);
  await page.getByLabel(T("auth.email")).fill(env("ADMIN_EMAIL"));
  await page.getByLabel(T("auth.password")).fill(PASSWORD);
  await page.locator("form").getByRole("button", { name: T("auth.sign_in") }).click();
  await page.waitForURL(/\/clusters$/);
  await page.goto(`${BASE}/admin/databases`);
  await page.getByRole("heading", { name: T("instances.create") }).waitFor();

  step("register the server: a wrong password is refused, the right one checked and saved");
  const instance = english ? "main" : "zhu";
  const form = page.locator("form", { has: page.getByRole("heading", { name: T("instances.create") }) });
  await form.getByLabel(T("instances.name"), { exact: true }).fill(instance);
  await form.getByLabel(T("instances.host"), { exact: true }).fill("localhost");
  await form.getByLabel(T("instances.port")).fill(env("INSTANCE_PORT"));
  await form.getByLabel(T("instances.tls_mode")).selectOption("verify-full");
  await form.getByLabel(T("instances.ca_bundle")).fill(readFileSync(env("INSTANCE_CA"), "utf8"));
  await form.getByLabel(T("instances.admin_role")).fill("kbadmin");
  await form.getByLabel(T("instances.admin_password")).fill("not-the-password");
  if (english) await form.getByLabel(T("instances.default")).check();
  await form.getByRole("button", { name: T("instances.save") }).click();
  await form.locator('[role=alert][data-code="database_instance_unreachable"]').getByText(T("problem.database_instance_unreachable.title"), { exact: true }).waitFor();
  await check("admin-database-instance-refused");
  await form.getByLabel(T("instances.admin_password")).fill(env("INSTANCE_ADMIN_PASSWORD"));
  await form.getByRole("button", { name: T("instances.save") }).click();
  await page.getByRole("status").getByText(T("instances.can_create")).waitFor();
  const row = page.locator("main tbody tr", { hasText: instance });
  await row.waitFor();
  assert.match(await row.innerText(), /localhost:\d+/);
  assert.ok(!(await page.content()).includes(env("INSTANCE_ADMIN_PASSWORD")), "the password is never shown");
  await check("admin-database-instances");

  step("a cluster of one's own, and its databases tab");
  await page.goto(`${BASE}/clusters/new`);
  const cluster = english ? "ledger" : "vault";
  await page.getByLabel(T("clusters.name"), { exact: true }).fill(cluster);
  await page.getByRole("button", { name: T("clusters.create") }).click();
  await page.waitForURL(/\/clusters\/[0-9a-f-]{36}$/);
  await page.locator('.page-head .badge[data-health="no_nodes"]').waitFor({ timeout: 60_000 });
  await page.getByRole("link", { name: T("databases.tab") }).click();
  await page.getByText(T("databases.empty")).waitFor();

  step("a look-alike name is refused; a database with pgcrypto walks to ready");
  await page.getByLabel(T("databases.name"), { exact: true }).fill("оrders"); // Cyrillic о
  await page.getByRole("button", { name: T("databases.ask_button") }).click();
  await page.locator('[role=alert][data-code="validation_failed"]').getByText(T("problem.validation_failed.title"), { exact: true }).waitFor();
  await page.getByLabel(T("databases.name"), { exact: true }).fill("orders");
  await page.getByLabel(T("databases.extensions"), { exact: true }).fill("pgcrypto");
  await page.getByRole("button", { name: T("databases.ask_button") }).click();
  const card = page.getByRole("article", { name: "orders" });
  await card.locator(".badge", { hasText: T("status.ready") }).waitFor({ timeout: 60_000 });
  await card.getByText("default/orders-postgres").waitFor();
  await card.getByText(T("databases.policy_retain")).waitFor();
  await check("cluster-databases");

  step("an extension added: the list grows and the database is ready again");
  await card.getByLabel(T("databases.add_extensions")).fill("citext");
  await card.getByRole("button", { name: T("databases.add"), exact: true }).click();
  await card.getByText("pgcrypto, citext").waitFor();
  await card.locator(".badge", { hasText: T("status.ready") }).waitFor({ timeout: 60_000 });

  step("the credential rotated, after a confirmation");
  await card.getByRole("button", { name: T("databases.rotate") }).click();
  await card.getByText(T("databases.rotate_question", { name: "orders" })).waitFor();
  const rotated = page.waitForResponse((r) => r.url().endsWith("/rotate") && r.request().method() === "POST");
  await card.getByRole("button", { name: T("common.confirm") }).click();
  assert.equal((await rotated).status(), 202);
  await card.locator(".badge", { hasText: T("status.ready") }).waitFor({ timeout: 60_000 });

  step("removed, after a confirmation that names its policy");
  await card.getByRole("button", { name: T("common.delete") }).click();
  await card.getByText(T("databases.delete_retain_question", { name: "orders" })).waitFor();
  await check("cluster-database-remove");
  await card.getByRole("button", { name: T("common.confirm") }).click();
  await page.getByText(T("databases.empty")).waitFor({ timeout: 60_000 });
});

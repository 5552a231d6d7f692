// An organization shared, in JOURNEY_LANGUAGE, all in the console: its owner makes
// it, works in it (the header's switcher and the billing page say so),
// creates a cluster in it, makes, uses and revokes an API key of it, and
// invites someone (the link
// shown once and mailed); the invitee, signed out, opens the mailed link,
// signs up and confirms, comes back to it, accepts, opens the shared
// cluster and uses a kubeconfig of their own with kubectl; the owner
// removes them from the members page and their kubeconfig is refused.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { PASSWORD, env, test } from "./support.mjs";

/** The invitation link mailed to `to` (quoted-printable undone). */
async function mailedLink(to) {
  const box = join(env("MAILDIR"), "new");
  for (let i = 0; i < 200; i++) {
    for (const file of readdirSync(box)) {
      const text = readFileSync(join(box, file), "utf8").replace(/=\r?\n/g, "").replace(/=3D/g, "=");
      if (!text.split("\n").some((l) => l.startsWith("To:") && l.includes(to))) continue;
      const link = /(https?:\/\/\S+\/invitations#token=[\w-]+)/.exec(text)?.[1];
      if (link) return link;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no invitation mailed to ${to}`);
}

test("an invitation into an organization, taken up in the browser", async ({ page, browser, language, journey }) => {
  const { BASE, SHOTS, T, step, check, narrow, until, signUp } = journey;
  const stamp = Date.now();
  const owner = `owner-${stamp}@example.test`;
  const invitee = `invitee-${stamp}@example.test`;

  step("the owner, in the console: an organization, a cluster in it, an invitation");
  await signUp(owner, "Olive");
  await page.getByRole("link", { name: T("organizations.nav") }).click();
  await page.getByLabel(T("organizations.new_name")).fill("Acme");
  await page.getByRole("button", { name: T("organizations.create") }).click();
  await page.getByRole("heading", { name: T("organizations.members_of", { name: "Acme" }) }).waitFor();
  await page.locator("tr", { hasText: "Acme" }).getByText(T("organizations.working_here")).waitFor();
  // Every page's header says which organization the tab works in, and its
  // plan is Acme's.
  const switcher = page.getByLabel(T("nav.organization"), { exact: true });
  assert.equal((await switcher.locator("option:checked").innerText()).trim(), "Acme");
  await page.getByRole("link", { name: T("nav.billing") }).click();
  await page.getByRole("heading", { name: T("billing.for", { name: "Acme" }) }).waitFor();
  // Working in Acme: the cluster made now is the organization's.
  await page.getByRole("link", { name: T("nav.clusters") }).click();
  await page.getByText(T("clusters.empty")).waitFor();
  await page.getByRole("link", { name: T("clusters.create") }).first().click();
  await page.getByLabel(T("clusters.name"), { exact: true }).fill("team");
  await page.getByRole("button", { name: T("clusters.create") }).click();
  await page.waitForURL(/\/clusters\/[0-9a-f-]{36}$/);
  const clusterId = page.url().split("/").at(-1);
  await page.getByRole("link", { name: T("organizations.nav") }).click();
  await page.getByLabel(T("organizations.invite_email")).first().fill(invitee);
  await page.getByRole("button", { name: T("organizations.invite"), exact: true }).click();
  const shown = (await page.getByLabel(T("organizations.invitation_link")).innerText()).trim();
  await page.locator("td", { hasText: invitee }).waitFor();
  // The organization's activity names who invited whom, for its admins.
  const invited = page.locator("tr", { has: page.locator("code", { hasText: "organization.member_invited" }) });
  await invited.getByText(owner).waitFor();
  await check("organization-members");
  await narrow("organization-members");
  // A key of the organization for its automation, made here with the
  // password asked again, shown once, used as a script would, revoked.
  await page.getByLabel(T("organizations.key_name")).fill("ci");
  await page.getByLabel(T("organizations.key_password")).fill(PASSWORD);
  await page.getByRole("button", { name: T("organizations.make_key") }).click();
  const key = (await page.getByLabel(T("organizations.key"), { exact: true }).innerText()).trim();
  const asKey = () => fetch(`${BASE}/api/console/clusters`, { headers: { authorization: `Bearer ${key}` } });
  const listed = await asKey();
  assert.equal(listed.status, 200);
  assert.ok(
    (await listed.json()).items.some((c) => c.id === clusterId),
    "the key lists the organization's cluster without being told the organization",
  );
  await page.getByRole("button", { name: T("organizations.revoke_key", { name: "ci" }) }).click();
  await page.locator('tr[data-key="ci"]').getByText(T("organizations.key_revoked")).waitFor();
  assert.equal((await asKey()).status, 401, "a revoked key stops at once");
  const link = await mailedLink(invitee);
  assert.equal(link, shown, "the mail carries the link the page showed once");
  await page.getByRole("button", { name: T("nav.sign_out") }).click();
  await page.waitForURL(/\/sign-in/);

  step("the invitee opens the link signed out, signs up, and comes back to it");
  // The link's path and fragment, on the platform as this browser reaches it.
  await page.goto(`${BASE}/invitations${new URL(link).hash}`);
  await page.waitForURL(/\/sign-in\?return=%2Finvitations$/);
  assert.ok(!page.url().includes("token"), "the token stays out of the sign-in page's URL");
  await page.getByRole("link", { name: T("auth.no_account") }).click();
  await page.getByLabel(T("auth.display_name")).fill("Ivan");
  await page.getByLabel(T("auth.email")).fill(invitee);
  await page.getByLabel(T("auth.password")).fill(PASSWORD);
  await page.getByRole("button", { name: T("auth.sign_up") }).click();
  await page.waitForURL(/\/confirm\?email=/);
  await page.getByLabel(T("auth.code")).fill(await journey.codeFor(invitee));
  await page.getByLabel(T("auth.password")).fill(PASSWORD);
  await page.getByRole("button", { name: T("auth.confirm") }).click();
  await page.waitForURL(/\/invitations#token=/);
  await page.getByText(T("invitations.prompt", { email: invitee })).waitFor();
  await check("invitation");
  await page.getByRole("button", { name: T("invitations.accept") }).click();
  await page.getByText(T("invitations.accepted", { role: T("invitations.role.member") })).waitFor();
  await check("invitation-accepted");

  step("the shared cluster, and a kubeconfig of the invitee's own used with kubectl");
  await page.goto(`${BASE}/clusters/${clusterId}`);
  await page.locator('.page-head .badge[data-health="no_nodes"]').waitFor({ timeout: 60_000 });
  await page.getByRole("link", { name: T("cluster.access") }).click();
  const download = page.waitForEvent("download");
  await page.getByRole("button", { name: T("kubeconfig.download") }).click();
  const file = join(SHOTS, `${language}-invitee-kubeconfig.yaml`);
  await (await download).saveAs(file);
  const namespaces = execFileSync(env("KUBECTL"), ["--kubeconfig", file, "get", "namespaces"], { encoding: "utf8" });
  assert.match(namespaces, /kube-system/);

  step("the owner removes the invitee in the console: their kubeconfig is refused");
  const owners = await browser.newContext();
  const ownerPage = await owners.newPage();
  await ownerPage.goto(`${BASE}/sign-in`);
  await ownerPage.getByLabel(T("auth.email")).fill(owner);
  await ownerPage.getByLabel(T("auth.password")).fill(PASSWORD);
  await ownerPage.locator("form").getByRole("button", { name: T("auth.sign_in") }).click();
  await ownerPage.waitForURL(/\/clusters$/);
  await ownerPage.goto(`${BASE}/organizations`);
  // A new tab works in the personal organization until the header's
  // switcher says otherwise.
  await ownerPage.getByLabel(T("nav.organization"), { exact: true }).selectOption({ label: "Acme" });
  const row = ownerPage.locator(`tr[data-email="${invitee}"]`);
  await row.getByLabel(T("organizations.role_of", { email: invitee })).waitFor();
  await row.getByRole("button", { name: T("organizations.remove", { email: invitee }) }).click();
  await row.waitFor({ state: "detached" });
  await owners.close();
  await until(() => {
    try {
      execFileSync(env("KUBECTL"), ["--kubeconfig", file, "get", "namespaces"], { stdio: "pipe", timeout: 10_000 });
      return false;
    } catch {
      return true;
    }
  }, "the cluster to refuse the removed member's kubeconfig");
  // The cluster is out of their reach, as any other they are not a member for.
  await page.reload();
  await page.getByRole("heading", { name: T("cluster.gone_title") }).waitFor();
});

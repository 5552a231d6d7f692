// An organization shared, in English: its owner makes it, a cluster in it
// and an invitation; the invitee, signed out, opens the mailed link, signs
// up and confirms, comes back to it, accepts, opens the shared cluster and
// uses a kubeconfig of their own with kubectl; taken out of the
// organization, their kubeconfig is refused.
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

test("an invitation into an organization, taken up in the browser", async ({ page, journey }) => {
  const { BASE, SHOTS, T, step, check, until, signUp } = journey;
  const stamp = Date.now();
  const owner = `owner-${stamp}@example.test`;
  const invitee = `invitee-${stamp}@example.test`;

  step("the owner: an organization, a cluster in it, an invitation");
  await signUp(owner, "Olive");
  const csrf = (await page.context().cookies()).find((c) => c.name.endsWith("kb_csrf")).value;
  const api = async (method, path, body, headers = {}) => {
    const response = await page.request.fetch(`${BASE}${path}`, {
      method,
      data: body,
      headers: { "x-csrf-token": csrf, ...headers },
    });
    return { status: response.status(), body: await response.json().catch(() => null) };
  };
  // A key for what the owner does once they have signed out.
  const key = await api("POST", "/api/console/account/api-keys", { name: "journey", scope: "write", password: PASSWORD });
  assert.equal(key.status, 201, JSON.stringify(key.body));
  const asOwner = (method, path) =>
    fetch(`${BASE}${path}`, { method, headers: { authorization: `Bearer ${key.body.key}` } });
  const acme = await api("POST", "/api/console/organizations", { name: "Acme" });
  assert.equal(acme.status, 201, JSON.stringify(acme.body));
  const cluster = await api(
    "POST",
    "/api/console/clusters",
    { name: "team", workload_cpu_limit_milli_cores: 1000, workload_memory_limit_mib: 1024 },
    { "KubeBYON-Organization": acme.body.id },
  );
  assert.equal(cluster.status, 202, JSON.stringify(cluster.body));
  const made = await api("POST", `/api/console/organizations/${acme.body.id}/invitations`, { email: invitee, role: "member" });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const link = await mailedLink(invitee);
  assert.equal(link, made.body.invitation_url, "the mail carries the link");
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
  await page.goto(`${BASE}/clusters/${cluster.body.cluster.id}`);
  await page.locator(".page-head .badge", { hasText: T("status.ready") }).waitFor({ timeout: 60_000 });
  await page.getByRole("link", { name: T("cluster.access") }).click();
  const download = page.waitForEvent("download");
  await page.getByRole("button", { name: T("kubeconfig.download") }).click();
  const file = join(SHOTS, "en-invitee-kubeconfig.yaml");
  await (await download).saveAs(file);
  const namespaces = execFileSync(env("KUBECTL"), ["--kubeconfig", file, "get", "namespaces"], { encoding: "utf8" });
  assert.match(namespaces, /kube-system/);

  step("taken out of the organization, the invitee's kubeconfig is refused");
  const me = await (await page.request.get(`${BASE}/api/auth/me`)).json();
  const removed = await asOwner("DELETE", `/api/console/organizations/${acme.body.id}/members/${me.id}`);
  assert.equal(removed.status, 204);
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

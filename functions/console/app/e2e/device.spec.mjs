// Signing in a terminal, in JOURNEY_LANGUAGE: `kubebyon login` runs in the
// test (tests/tests/e2e/cli.rs) and shows a code (USER_CODE); the user
// (USER_EMAIL) signs in to the console, follows the link the terminal
// printed, sees which device asks, is refused with a wrong password, then
// approves with the right one (or, with DECISION=deny, denies it). A
// look-alike code (Cyrillic letters) names nothing.
import { PASSWORD, env, test } from "./support.mjs";

test("a terminal signs in with a code approved in the console", async ({ page, journey }) => {
  const { BASE, T, step, check } = journey;
  const code = env("USER_CODE");

  step("sign in, then open the link the terminal printed");
  await page.goto(`${BASE}/sign-in`);
  await page.getByLabel(T("auth.email")).fill(env("USER_EMAIL"));
  await page.getByLabel(T("auth.password")).fill(PASSWORD);
  await page.locator("form").getByRole("button", { name: T("auth.sign_in") }).click();
  await page.waitForURL(/\/clusters$/);

  step("a look-alike code names nothing");
  await page.goto(`${BASE}/device`);
  const cyrillic = { B: "В", C: "С", H: "Н", K: "К", M: "М", P: "Р", T: "Т", X: "Х" };
  const lookAlike = [...code].map((c) => cyrillic[c] ?? c).join("");
  await page.getByLabel(T("device.code")).fill(lookAlike === code ? `С${code.slice(1)}` : lookAlike);
  await page.getByRole("button", { name: T("device.look_up") }).click();
  await page.locator('[role=alert][data-code="not_found"]').getByText(T("problem.not_found.title"), { exact: true }).waitFor();

  step("the real code shows the device and where it asks from");
  await page.goto(`${BASE}/device?code=${code}`);
  await page.getByRole("button", { name: T("device.look_up") }).click();
  await page.getByRole("heading", { name: T("device.asking", { device: env("DEVICE_NAME") }) }).waitFor();
  await check("device-approve");

  if (process.env.DECISION === "deny") {
    step("deny it");
    await page.getByRole("button", { name: T("device.deny") }).click();
    await page.getByRole("status").getByText(T("device.denied")).waitFor();
    await check("device-denied");
    return;
  }
  step("a wrong password is refused; the right one approves");
  await page.getByLabel(T("account.current_password")).fill("not my password");
  await page.getByRole("button", { name: T("device.approve") }).click();
  await page.getByRole("alert").waitFor();
  await page.getByLabel(T("account.current_password")).fill(PASSWORD);
  await page.getByRole("button", { name: T("device.approve") }).click();
  await page.getByRole("status").getByText(T("device.approved", { device: env("DEVICE_NAME") })).waitFor();
  await check("device-approved");
});

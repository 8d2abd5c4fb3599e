import { expect, type Page } from "@playwright/test";
import { hydrated, idem, signIn, sqlite, test } from "./support";

const unique = () => `${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`;

async function openAdministration(page: Page) {
  await page.getByRole("link", { name: "Administration" }).click();
  await expect(page.getByRole("heading", { name: "Administration", level: 1 })).toBeVisible();
  await hydrated(page);
}

/** The secret the last change made, shown once. */
async function shownOnce(page: Page): Promise<string> {
  const secret = page.locator("[data-shown-once]");
  await expect(secret).toBeVisible();
  return (await secret.textContent()) ?? "";
}

/** A direct server-function call, as a script in the operator's session would make it. */
function administer(page: Page, change: object) {
  const origin = new URL(page.url()).origin;
  return page.request.post("/api/console/admin/change", {
    headers: { origin, "content-type": "application/json" },
    data: JSON.stringify({ change }),
  });
}

test("an admin manages an operator: created with a password shown once, role, disable, enable, reset, each audited", async ({
  page,
  browser,
}) => {
  const admin = await signIn(page, "admin");
  await openAdministration(page);
  const username = `op-${unique()}`;
  await page.getByLabel("Username").fill(username);
  await page.getByRole("form", { name: "New operator" }).getByLabel("Role").selectOption("operator");
  await page.getByRole("button", { name: "Create operator" }).click();
  await expect(page.locator("[data-admin-done]")).toContainText(`operator ${username} created as operator`);
  const password = await shownOnce(page);
  expect(password.length).toBeGreaterThanOrEqual(16);
  const row = page.locator(`[data-operator-row="${username}"]`);
  await expect(row).toContainText("operator");

  // The new operator signs in with it, in a browser of their own.
  const theirs = await (await browser.newContext()).newPage();
  await theirs.goto("/sign-in");
  await theirs.getByLabel("Username").fill(username);
  await theirs.getByLabel("Password").fill(password);
  await theirs.getByRole("button", { name: "Sign in" }).click();
  await expect(theirs.locator(`[data-operator="${username}"]`)).toContainText("operator");

  await row.getByLabel(`role of ${username}`).selectOption("viewer");
  await row.getByRole("button", { name: "Set role" }).click();
  await expect(page.locator("[data-admin-done]")).toContainText(`operator ${username} is now viewer`);
  await expect(row.locator("td").first()).toHaveText("viewer");

  await row.getByRole("button", { name: "Disable" }).click();
  await expect(row).toContainText("disabled");
  await theirs.reload();
  await expect(theirs).toHaveURL(/\/sign-in/);

  await row.getByRole("button", { name: "Enable" }).click();
  await expect(row).toContainText("enabled");
  const enabledWith = await shownOnce(page);
  expect(enabledWith).not.toBe(password);
  await row.getByRole("button", { name: "Reset password" }).click();
  await expect(page.locator("[data-admin-done]")).toContainText(`operator ${username} has a new password`);
  const reset = await shownOnce(page);
  expect(reset).not.toBe(enabledWith);
  await page.reload();
  await expect(page.locator("[data-shown-once]")).toHaveCount(0);

  expect(
    sqlite(
      `select count(*) from audit_log where actor = '${admin}' and target = 'operator ${username}' and action in ` +
        "('operator.create', 'operator.set_role', 'operator.disable', 'operator.enable', 'operator.reset_password')",
    ),
  ).toBe(5);

  // An admin's own standing is another admin's to change: no buttons, and the server refuses.
  await expect(page.locator(`[data-operator-row="${admin}"]`)).toContainText("another admin changes this");
  const own = await administer(page, { DisableOperator: { username: admin } });
  expect(own.status()).toBe(400);
  expect(await own.text()).toContain("another admin");
  // What the command line refuses, the console refuses in the same words.
  const taken = await administer(page, { CreateOperator: { username, role: "admin" } });
  expect(taken.status()).toBe(400);
  expect(await taken.text()).toContain(`an operator named "${username}" already exists`);
});

test("an admin creates a tenant and an API key that works, is listed with its use, and stops when revoked", async ({
  page,
  request,
}) => {
  const admin = await signIn(page, "admin");
  await openAdministration(page);
  const name = `adm-${unique()}`;
  await page.getByLabel("Tenant name").fill(name);
  await page.getByRole("button", { name: "Create tenant" }).click();
  const tenant = page.locator(`section[data-tenant="${name}"]`);
  await expect(tenant.locator("[data-keys-rule]")).toHaveText("Idempotency-Key required");
  idem("account", "create", "--tenant", name, "--id", "acc_1", "--currency", "EUR", "--balance", "100.00");

  await tenant.getByRole("button", { name: "Create API key" }).click();
  const key = await shownOnce(page);
  const keyId = key.split("_").slice(1, 3).join("_");
  const keyRow = tenant.locator(`[data-api-key="${keyId}"]`);
  await expect(keyRow).toContainText(admin);
  await expect(keyRow).toContainText("never");

  const pay = (reference: string, idempotencyKey?: string) =>
    request.post("/payments", {
      headers: {
        authorization: `Bearer ${key}`,
        "content-type": "application/json",
        ...(idempotencyKey ? { "idempotency-key": idempotencyKey } : {}),
      },
      data: JSON.stringify({ accountId: "acc_1", amount: "1.00", currency: "EUR", merchantReference: reference }),
    });
  expect((await pay("ref-1", "k-1")).status()).toBe(201);
  expect((await pay("ref-2")).status()).toBe(400);
  await expect(async () => {
    await page.reload();
    await expect(keyRow.locator("td").nth(2)).not.toHaveText("never");
  }).toPass({ timeout: 10_000 });

  await hydrated(page);
  await tenant.getByRole("button", { name: "Make keys optional" }).click();
  await expect(tenant.locator("[data-keys-rule]")).toHaveText("Idempotency-Key optional");
  await expect(async () => expect((await pay("ref-3")).status()).toBe(201)).toPass({ timeout: 10_000 });

  await keyRow.getByRole("button", { name: "Revoke" }).click();
  await expect(keyRow).toContainText("revoked");
  // Every instance refuses a revoked key within 5 seconds (verified keys are kept that long).
  await expect(async () => expect((await pay("ref-4", "k-4")).status()).toBe(401)).toPass({ timeout: 8_000 });

  expect(
    sqlite(
      `select count(*) from audit_log where actor = '${admin}' and action in ` +
        "('tenant.create', 'tenant.set_keys', 'api_key.create', 'api_key.revoke') " +
        `and (target = 'tenant ${name}' or target like 'tenant ten_%' or target = 'api key ${keyId}')`,
    ),
  ).toBe(4);
  await page.screenshot({ path: test.info().outputPath("administration.png"), fullPage: true });
});

for (const role of ["viewer", "operator"] as const) {
  test(`${role === "operator" ? "an" : "a"} ${role} has no administration, and the server refuses their calls`, async ({ page }) => {
    await signIn(page, role);
    await expect(page.getByRole("link", { name: "Administration" })).toHaveCount(0);
    await page.goto("/admin");
    await expect(page.getByRole("alert")).toContainText("needs the admin role");
    await expect(page.getByRole("button", { name: "Create operator" })).toHaveCount(0);

    const username = `sneaky-${unique()}`;
    const direct = await administer(page, { CreateOperator: { username, role: "admin" } });
    expect(direct.status()).toBe(403);
    expect(await direct.text()).toContain("needs the admin role");
    const read = await page.request.post("/api/console/admin", {
      headers: { origin: new URL(page.url()).origin },
    });
    expect(read.status()).toBe(403);
    expect(sqlite(`select count(*) from operators where username = '${username}'`)).toBe(0);
  });
}

test("without a session the administration answers 401 and changes nothing", async ({ page, request }) => {
  await page.goto("/sign-in");
  const username = `nobody-${unique()}`;
  const direct = await request.post("/api/console/admin/change", {
    headers: { origin: new URL(page.url()).origin, "content-type": "application/json" },
    data: JSON.stringify({ change: { CreateOperator: { username, role: "admin" } } }),
  });
  expect(direct.status()).toBe(401);
  expect(sqlite(`select count(*) from operators where username = '${username}'`)).toBe(0);
});

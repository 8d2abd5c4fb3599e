import { expect, type APIRequestContext } from "@playwright/test";
import { hydrated, openRecord, pay, signIn, tenantForThisFile, test, unknownPayment } from "./support";

// Records as operators find and reconcile them, one and a few at a time; the console without
// JavaScript.
const tenant = tenantForThisFile("e2e-records");

/** A payment made with `key`, its replay, and a retry with another amount refused as a conflict. */
async function paidReplayedAndConflicted(request: APIRequestContext, key: string) {
  expect((await pay(request, tenant, key)).status()).toBe(201);
  expect((await pay(request, tenant, key)).status()).toBe(201);
  expect((await pay(request, tenant, key, "100.00")).status()).toBe(409);
}

test("the dashboard shows replays and conflicts after traffic that produced them", async ({ page, request }) => {
  const key = `dash-${Date.now()}`;
  await paidReplayedAndConflicted(request, key);

  await signIn(page, "viewer");
  // Counts reach the database every 200 ms (--metrics-flush-ms); the page is read again.
  await expect(async () => {
    await page.goto(`/?range=15m&tenant=${tenant.id}`);
    expect(Number(await page.locator('[data-series="replay"]').getAttribute("data-total"))).toBeGreaterThanOrEqual(1);
    expect(
      Number(await page.locator('[data-series="conflict_different_request"]').getAttribute("data-total")),
    ).toBeGreaterThanOrEqual(1);
  }).toPass({ timeout: 10_000 });
  await expect(page.locator('[data-gauge="unknown"]')).toBeVisible();

  // Readable charts: a time axis under each, and every bar's value, rate and share on hover.
  const replays = page.locator('[data-series="replay"]');
  await expect(replays.locator(".chart-axis span")).toHaveCount(5);
  await expect(replays.locator(".chart-axis span").first()).toHaveText(/^\d\d:\d\d$/);
  await expect(replays.locator("rect title").first()).toContainText(/UTC, 1 min: \d+ \(\d+\.\d\/min, \d+\.\d% of requests\)/);
  await expect(replays.locator(".chart-summary")).toContainText("% of requests");
  await page.getByLabel("Show").selectOption("share");
  await page.getByRole("button", { name: "Apply" }).click();
  await expect(page).toHaveURL(/show=share/);
  await expect(page.locator('[data-series="replay"]')).toHaveAttribute("data-scale", "share");
  await expect(page.locator('[data-series="replay"] .chart-top')).toContainText("%");

  // The replay is a retry milliseconds after its first request, far inside the 24 h window:
  // no window from an hour up would have left it out.
  const retries = page.locator('.retry-window[data-operation="create_payment"]');
  await expect(async () => {
    await page.reload();
    expect(Number(await retries.getAttribute("data-retries"))).toBeGreaterThanOrEqual(1);
  }).toPass({ timeout: 10_000 });
  await expect(retries.locator('[data-quantile="window"] dd')).toHaveText("24 h");
  await expect(page.locator('[data-note="bucketed"]')).toContainText("log buckets");
  await expect(retries.locator('[data-quantile="p50"] dd')).toHaveText(/ms$|^\d+ s$/);
  await expect(retries.locator("tr.current")).toHaveAttribute("data-window", "86400");
  await expect(retries.locator("tr.current")).toContainText("current window");
  await expect(retries.locator("tr[data-window]")).toHaveCount(8);
  for (const outside of await retries.locator("td[data-outside]").allTextContents()) expect(outside).toBe("0");
  await expect(retries.locator("svg.delay-strip .window")).toContainText("window 24 h");
  await expect(retries.locator("svg.delay-strip line.mark")).toHaveCount(5);

  // Pictured as an operator uses it: hydrated, its refresh controls live.
  await hydrated(page);
  await page.screenshot({ path: test.info().outputPath("dashboard.png"), fullPage: true });
});

test("a record is found by its key and shows what a conflicting retry changed", async ({ page, request }) => {
  const key = `diff-${Date.now()}`;
  await paidReplayedAndConflicted(request, key);

  await signIn(page, "viewer");
  await page.goto("/records");
  await hydrated(page);
  await page.keyboard.press("/");
  await expect(page.locator("#search")).toBeFocused();
  await page.keyboard.type(key);
  await page.keyboard.press("Enter");
  await page.getByRole("link", { name: key }).first().click();
  await expect(page.getByRole("heading", { name: `Record ${key}` })).toBeVisible();
  // The journal is written in batches: read the page again until the conflict is there.
  await expect(async () => {
    await page.reload();
    await expect(page.locator('li[data-field="amount"]')).toContainText("10.00 -> 100.00", { timeout: 1_000 });
    // The replay is counted, not listed: one line says how many and when.
    await expect(page.locator("p.replays")).toContainText(/^1 replay at .* \(longest delay \d+\.\d s\)$/, { timeout: 1_000 });
  }).toPass({ timeout: 10_000 });
  await expect(page.locator("table.requests tbody tr")).toHaveCount(2);
  await page.screenshot({ path: test.info().outputPath("record.png"), fullPage: true });
});

test("an unknown outcome is reconciled through preview, reason and apply, with one audit entry", async ({ page, request }) => {
  const key = `unknown-${Date.now()}`;
  await unknownPayment(request, tenant, key);

  await signIn(page, "operator");
  await openRecord(page, tenant, key);
  await expect(page.locator("[data-record-status]")).toHaveAttribute("data-record-status", "UNKNOWN_REQUIRES_RECOVERY");
  const dialog = page.getByRole("dialog", { name: "Reconcile with the provider" });
  await dialog.getByRole("button", { name: "Preview" }).click();
  await expect(dialog.locator("[data-evidence]")).toContainText("succeeded");
  // The keyboard is on the first choice, ready to go on.
  await expect(dialog.getByRole("radio").first()).toBeFocused();
  await expect(dialog.locator("ul.changes")).toContainText("-> COMPLETED");
  const apply = dialog.getByRole("button", { name: "Apply" });
  await expect(apply).toBeDisabled();
  await dialog.getByLabel("Reason (goes into the audit log)").fill("provider shows the charge (e2e)");
  await page.screenshot({ path: test.info().outputPath("reconcile-dialog.png"), fullPage: true });
  await apply.click();
  await expect(page.locator("p[data-result]")).toHaveAttribute("data-result", "true");
  await expect(page.locator("p[data-result]")).toContainText("COMPLETED");
  await expect(page.locator("[data-record-status]")).toHaveAttribute("data-record-status", "COMPLETED");

  // The stored answer is masked until revealed; the reveal is audited.
  await page.getByRole("button", { name: "Reveal (audited)" }).click();
  await expect(page.locator("[data-revealed-status]")).toHaveText("201");
  await expect(page.locator("[data-revealed-body]")).toContainText('"status":"PENDING"');

  await page.goto("/audit");
  await expect(page.locator('tr[data-action="reveal_response"]', { hasText: key })).toHaveCount(1);
  const entries = page.locator(`tr[data-action="reconcile.apply_provider_result"]`, { hasText: key });
  await expect(entries).toHaveCount(1);
  await expect(entries.first()).toHaveAttribute("data-result", "ok");
});

test("a viewer cannot reconcile: no button, and the server refuses a direct call", async ({ page, request }) => {
  const key = `viewer-${Date.now()}`;
  await unknownPayment(request, tenant, key);

  await signIn(page, "viewer");
  await openRecord(page, tenant, key);
  await expect(page.getByRole("dialog", { name: "Reconcile with the provider" })).toHaveCount(0);
  await expect(page.getByRole("button", { name: "Preview" })).toHaveCount(0);

  const origin = new URL(page.url()).origin;
  const direct = await page.request.post("/api/console/reconcile/preview", {
    headers: { origin, "content-type": "application/x-www-form-urlencoded" },
    data: `record[tenant_id]=${tenant.id}&record[operation]=create_payment&record[key]=${key}`,
  });
  expect(direct.status()).toBe(403);
  expect(await direct.text()).toContain("needs the operator role");
});

test("a bulk reconciliation of three ticked records reports three results", async ({ page, request }) => {
  const keys = [1, 2, 3].map((n) => `bulk-${n}-${Date.now()}`);
  for (const key of keys) await unknownPayment(request, tenant, key);

  await signIn(page, "operator");
  await page.goto(`/recovery?tenant=${tenant.name}`);
  await hydrated(page);
  for (const key of keys) await page.getByLabel(`select ${key}`).check();
  await page.getByRole("button", { name: "Preview 3 ticked" }).click();
  const preview = page.getByRole("dialog", { name: "Bulk reconciliation" });
  await expect(preview.locator('tr[data-bulk-group="create_payment/succeeded"]')).toHaveAttribute("data-items", "3");
  await preview.getByLabel("Job name").fill("three by hand (e2e)");
  await preview.getByLabel("Reason (goes into the audit log)").fill("bulk: provider shows the charges");
  await preview.getByRole("button", { name: "Apply to the kept groups" }).click();
  // The job runs in the background; the page reads its progress until it is finished.
  const job = page.locator("[data-bulk-job]");
  await expect(job).toHaveAttribute("data-state", "finished", { timeout: 15_000 });
  await expect(job.locator('[data-bulk-results] li[data-ok="true"]')).toHaveCount(3);
});
test.describe("without JavaScript", () => {
  test.use({ javaScriptEnabled: false });

  test("an operator signs in and reads the dashboard, a record and the audit log", async ({ page, request }) => {
    const key = `nojs-${Date.now()}`;
    expect((await pay(request, tenant, key)).status()).toBe(201);
    expect((await pay(request, tenant, key, "100.00")).status()).toBe(409);

    await signIn(page, "viewer");
    await page.goto(`/?range=1h&tenant=${tenant.id}`);
    await expect(page.locator('[data-gauge="unknown"]')).toBeVisible();
    await page.goto(`/records?q=${key}`);
    await page.getByRole("link", { name: key }).first().click();
    await expect(page.getByRole("heading", { name: `Record ${key}` })).toBeVisible();
    await expect(page.locator("pre.command")).toContainText('"amount": "10.00"');
    await page.goto("/audit");
    await expect(page.locator('tr[data-action="sign_in"]').first()).toBeVisible();
  });
});

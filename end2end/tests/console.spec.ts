import { expect, type APIRequestContext, type Page } from "@playwright/test";
import { hydrated, idem, signIn, simUrl, sqlite, test } from "./support";

// One tenant for this file's traffic, made with the CLI as an operator of Idem would.
const tenant = `e2e-${Date.now().toString(36)}`;
let apiKey = "";
let tenantId = "";
let reference = 0;

test.beforeAll(() => {
  tenantId = idem("tenant", "create", tenant);
  apiKey = idem("api-key", "create", "--tenant", tenant);
  idem("account", "create", "--tenant", tenant, "--id", "acc_1", "--currency", "EUR", "--balance", "100000.00");
});

async function pay(request: APIRequestContext, key: string, amount = "10.00", merchantReference?: string) {
  reference += 1;
  return request.post("/payments", {
    headers: { authorization: `Bearer ${apiKey}`, "idempotency-key": key, "content-type": "application/json" },
    data: JSON.stringify({
      accountId: "acc_1",
      amount,
      currency: "EUR",
      merchantReference: merchantReference ?? `${key}-ref`,
    }),
  });
}

/** A payment whose provider answer is lost: the record is left UNKNOWN_REQUIRES_RECOVERY. */
async function unknownPayment(request: APIRequestContext, key: string) {
  const fault = await request.post(`${simUrl}/_sim/faults`, {
    data: { mode: "drop_response_after_accept", count: 1 },
  });
  expect(fault.status()).toBe(201);
  const response = await pay(request, key);
  expect(response.status()).toBe(202);
}

async function openRecord(page: Page, key: string) {
  await page.goto(`/records/${tenantId}/create_payment/${key}`);
  await expect(page.getByRole("heading", { name: `Record ${key}` })).toBeVisible();
  await hydrated(page);
}

test("the dashboard shows replays and conflicts after traffic that produced them", async ({ page, request }) => {
  const key = `dash-${Date.now()}`;
  expect((await pay(request, key)).status()).toBe(201);
  expect((await pay(request, key)).status()).toBe(201);
  expect((await pay(request, key, "100.00")).status()).toBe(409);

  await signIn(page, "viewer");
  // Counts reach the database every 200 ms (--metrics-flush-ms); the page is read again.
  await expect(async () => {
    await page.goto(`/?range=15m&tenant=${tenantId}`);
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
  expect((await pay(request, key)).status()).toBe(201);
  expect((await pay(request, key)).status()).toBe(201);
  expect((await pay(request, key, "100.00")).status()).toBe(409);

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
  await unknownPayment(request, key);

  await signIn(page, "operator");
  await openRecord(page, key);
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
  await unknownPayment(request, key);

  await signIn(page, "viewer");
  await openRecord(page, key);
  await expect(page.getByRole("dialog", { name: "Reconcile with the provider" })).toHaveCount(0);
  await expect(page.getByRole("button", { name: "Preview" })).toHaveCount(0);

  const origin = new URL(page.url()).origin;
  const direct = await page.request.post("/api/console/reconcile/preview", {
    headers: { origin, "content-type": "application/x-www-form-urlencoded" },
    data: `record[tenant_id]=${tenantId}&record[operation]=create_payment&record[key]=${key}`,
  });
  expect(direct.status()).toBe(403);
  expect(await direct.text()).toContain("needs the operator role");
});

test("a bulk reconciliation of three ticked records reports three results", async ({ page, request }) => {
  const keys = [1, 2, 3].map((n) => `bulk-${n}-${Date.now()}`);
  for (const key of keys) await unknownPayment(request, key);

  await signIn(page, "operator");
  await page.goto(`/recovery?tenant=${tenant}`);
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

/** A payment the provider (with `fault`) says it did not charge, released by an operator. */
async function payThenRelease(page: Page, request: APIRequestContext, key: string, fault: object) {
  expect((await request.post(`${simUrl}/_sim/faults`, { data: fault })).status()).toBe(201);
  expect((await pay(request, key)).status()).toBe(202);
  await signIn(page, "operator");
  await openRecord(page, key);
  const dialog = page.getByRole("dialog", { name: "Reconcile with the provider" });
  await dialog.getByRole("button", { name: "Preview" }).click();
  await expect(dialog.locator("[data-evidence]")).toContainText("no charge");
  await dialog.getByLabel("Mark failed and release the key").check();
  await dialog.getByLabel("Reason (goes into the audit log)").fill("customer left; the provider has no charge (e2e)");
  await dialog.getByRole("button", { name: "Apply" }).click();
  await expect(page.locator("p[data-result]")).toContainText("key released");
}

/**
 * A payment released as "nothing was charged" whose charge the provider then makes (after the
 * release), found by the settlement pass: its record page open, the late charge unresolved.
 */
async function lateChargeFound(page: Page, request: APIRequestContext, key: string) {
  await payThenRelease(page, request, key, { mode: "accept_late", count: 1, held: true });
  await releaseLateCharges(request);
  await expect(async () => {
    await openRecord(page, key);
    await expect(page.locator('[data-late-charge="unresolved"]')).toBeVisible({ timeout: 1_000 });
  }).toPass({ timeout: 30_000 });
}

/** The provider records the late charges it held (`accept_late` with `held`). */
async function releaseLateCharges(request: APIRequestContext) {
  const released = await request.post(`${simUrl}/_sim/late-charges`);
  expect(released.status()).toBe(200);
  expect((await released.json()).released).toBe(1);
}

test("a payment the provider never charged is marked failed and its key executes anew", async ({ page, request }) => {
  const key = `release-${Date.now()}`;
  await payThenRelease(page, request, key, { mode: "fail_before_accept", count: 1 });
  await expect(page.locator("[data-record-status]")).toHaveAttribute("data-record-status", "FAILED_RETRYABLE");

  const retried = await pay(request, key);
  expect(retried.status()).toBe(201);
  expect(retried.headers()["idempotent-replayed"]).toBeUndefined();
  await openRecord(page, key);
  await expect(page.locator("ol.steps li")).toHaveCount(5);
  await page.screenshot({ path: test.info().outputPath("released-record.png"), fullPage: true });
});

test("a charge the provider made after the release is found, refunded, and marked so", async ({ page, request }) => {
  const key = `late-${Date.now()}`;
  await lateChargeFound(page, request, key);
  await page.getByLabel("Refund reference (goes into the audit log)").fill("refund re_e2e (OPS-41)");
  await page.getByRole("button", { name: "Mark refunded" }).click();
  await expect(page.locator("p[data-result]")).toContainText("marked refunded");
  await expect(page.locator('[data-late-charge="resolved"]')).toContainText("refund re_e2e (OPS-41)");
});

test("a late charge is refunded from the record page, once, through the refunds operation", async ({ page, request }) => {
  const key = `late-refund-${Date.now()}`;
  await lateChargeFound(page, request, key);

  const refund = page.getByRole("group", { name: "Refund the late charge" });
  await refund.getByRole("button", { name: "Preview the refund" }).click();
  const preview = refund.locator("[data-refund-preview]");
  await expect(preview).toContainText("POST /v1/refunds");
  await expect(preview).toContainText("10.00 EUR");
  const refundKey = await preview.getAttribute("data-refund-preview");
  expect(refundKey).toMatch(/^late-charge-ch_/);
  const apply = refund.getByRole("button", { name: "Refund", exact: true });
  await expect(apply).toBeDisabled();
  await refund.getByLabel("Reason (goes into the audit log)").fill("customer charged twice (e2e)");
  // A double click: one refund.
  await apply.dblclick();
  await expect(page.locator("p[data-result]")).toContainText("is refunded by rf_");
  await expect(page.locator('[data-late-charge="resolved"]')).toContainText("rf_");

  const refunds = await (await request.get(`${simUrl}/_sim/refunds`)).json();
  const made = refunds.refunds.filter((made: { idempotencyKey: string; chargeId: string }) =>
    refundKey?.endsWith(made.chargeId),
  );
  expect(made).toHaveLength(1);
  expect(made[0].createCalls).toBe(1);

  // The refund has a record of its own, under the charge's key.
  await page.goto(`/records/${tenantId}/create_refund/${refundKey}`);
  await expect(page.locator("[data-refund-status]").first()).toHaveAttribute("data-refund-status", "SUCCEEDED");
  await page.screenshot({ path: test.info().outputPath("late-charge-refunded.png"), fullPage: true });
});

test("an unknown refund is reconciled with the provider's answer, worded for the refund", async ({ page, request }) => {
  const paymentKey = `refunded-${Date.now()}`;
  const paid = await pay(request, paymentKey);
  expect(paid.status()).toBe(201);
  const paymentId = (await paid.json()).paymentId;
  const refundKey = `refund-${Date.now()}`;
  // Test value 2.05: the provider makes the refund and its answer never comes.
  const unknown = await request.post(`/payments/${paymentId}/refunds`, {
    headers: { authorization: `Bearer ${apiKey}`, "idempotency-key": refundKey, "content-type": "application/json" },
    data: JSON.stringify({ amount: "2.05", reference: "rf-e2e" }),
  });
  expect(unknown.status()).toBe(202);
  const refundId = (await unknown.json()).refundId;

  await signIn(page, "operator");
  await page.goto("/recovery");
  await expect(page.getByRole("link", { name: refundKey })).toBeVisible();
  await page.goto(`/records/${tenantId}/create_refund/${refundKey}`);
  await expect(page.getByRole("heading", { name: `Record ${refundKey}` })).toBeVisible();
  await hydrated(page);
  const dialog = page.getByRole("dialog", { name: "Reconcile with the provider" });
  await dialog.getByRole("button", { name: "Preview" }).click();
  await expect(dialog.locator("[data-evidence]")).toContainText("the provider has refund re_");
  await expect(dialog).toContainText(`refund ${refundId} PROCESSING -> SUCCEEDED`);
  await expect(dialog.getByLabel("Mark failed and release the key")).toHaveCount(0);
  await dialog.getByLabel("Reason (goes into the audit log)").fill("the provider made the refund (e2e)");
  await dialog.getByRole("button", { name: "Apply" }).click();
  await expect(page.locator("p[data-result]")).toContainText("applied");
  await expect(page.locator("[data-record-status]")).toHaveAttribute("data-record-status", "COMPLETED");
  await expect(page.locator(`[data-refund="${refundId}"] [data-refund-status]`)).toHaveAttribute(
    "data-refund-status",
    "SUCCEEDED",
  );

  const replay = await request.post(`/payments/${paymentId}/refunds`, {
    headers: { authorization: `Bearer ${apiKey}`, "idempotency-key": refundKey, "content-type": "application/json" },
    data: JSON.stringify({ amount: "2.05", reference: "rf-e2e" }),
  });
  expect(replay.status()).toBe(201);
  expect(replay.headers()["idempotent-replayed"]).toBe("true");

  // The payment's record lists its refund, linked to the refund's record.
  await openRecord(page, paymentKey);
  await expect(page.locator(`[data-payment-refund="${refundId}"]`)).toHaveAttribute("data-refund-status", "SUCCEEDED");
});

test("an override without the provider's evidence waits for a second admin, who applies it", async ({ page, browser, request, baseURL }) => {
  const key = `override-${Date.now()}`;
  await unknownPayment(request, key);

  await signIn(page, "admin");
  await openRecord(page, key);
  const form = page.getByRole("region", { name: "Override without the provider's evidence" });
  await form.getByLabel("The provider charged it").check();
  await form.getByLabel("Provider charge id").fill("ch_e2e_statement");
  await form.getByLabel("Reason (goes into the audit log)").fill("the provider's statement shows it (e2e)");
  await form.getByRole("button", { name: "Ask a second admin" }).click();
  const requested = form.locator("[data-override-requested]");
  await expect(requested).toBeVisible();
  const id = await requested.getAttribute("data-override-requested");

  // The requester cannot approve their own request: the page offers no button.
  await page.goto("/recovery");
  await hydrated(page);
  const own = page.locator(`li[data-override="${id}"]`);
  await expect(own).toHaveAttribute("data-state", "Pending");
  await expect(own.getByRole("button", { name: "Approve and apply" })).toHaveCount(0);

  const second = await browser.newPage({ baseURL });
  await signIn(second, "admin");
  await second.goto("/recovery");
  await hydrated(second);
  const item = second.locator(`li[data-override="${id}"]`);
  await item.getByLabel("Reason (goes into the audit log)").fill("checked the statement too (e2e)");
  await second.screenshot({ path: test.info().outputPath("override-approval.png"), fullPage: true });
  await item.getByRole("button", { name: "Approve and apply" }).click();
  await expect(second.locator(`li[data-override="${id}"]`)).toHaveAttribute("data-state", "Applied", { timeout: 10_000 });
  await second.close();

  await openRecord(page, key);
  await expect(page.locator("[data-record-status]")).toHaveAttribute("data-record-status", "COMPLETED");
  await page.goto("/audit");
  await expect(page.locator('tr[data-action="override.approve"]', { hasText: key })).toHaveCount(1);
});

test("a dead letter is re-driven from the events page, exactly the one previewed", async ({ page, request }) => {
  const key = `dead-${Date.now()}`;
  const paid = await pay(request, key);
  expect(paid.status()).toBe(201);
  const paymentId: string = (await paid.json()).paymentId;
  // Once published, the authorisation is made a dead letter, as if the broker had refused it
  // ten times.
  await expect(() => {
    expect(
      sqlite(
        "update outbox_events set dead_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), published_at = null, " +
          `attempts = 10, last_error = 'broker down (e2e)' where payment_id = '${paymentId}' ` +
          "and event_type = 'PaymentAuthorized' and published_at is not null",
      ),
    ).toBe(1);
  }).toPass({ timeout: 10_000 });

  await signIn(page, "operator");
  await page.goto("/events");
  await hydrated(page);
  await expect(page.locator('[data-gauge="dead_letters"] .gauge-value')).not.toHaveText("0");
  const row = page.locator("tr[data-event]", { hasText: paymentId });
  await expect(row).toContainText("broker down (e2e)");
  const eventId = (await row.getAttribute("data-event")) ?? "";
  await page.getByLabel(`select ${eventId}`).check();
  await page.getByRole("button", { name: "Preview re-drive of 1" }).click();
  const dialog = page.getByRole("dialog", { name: "Re-drive dead letters" });
  await expect(dialog.locator("li")).toHaveCount(1);
  await expect(dialog).toContainText(eventId);
  await dialog.getByLabel("Reason (goes into the audit log)").fill("the broker is back (e2e)");
  await dialog.getByRole("button", { name: "Re-drive" }).click();
  await expect(page.locator('[data-redrive-results="1"] li[data-ok="true"]')).toHaveCount(1);
  await expect(page.locator(`tr[data-event="${eventId}"]`)).toHaveCount(0);
  // The publisher delivers it again; the consumers' inboxes make that harmless.
  await expect(() => {
    expect(sqlite(`select count(*) from outbox_events where id = '${eventId}' and published_at is not null`)).toBe(1);
  }).toPass({ timeout: 10_000 });
});

test.describe("without JavaScript", () => {
  test.use({ javaScriptEnabled: false });

  test("an operator signs in and reads the dashboard, a record and the audit log", async ({ page, request }) => {
    const key = `nojs-${Date.now()}`;
    expect((await pay(request, key)).status()).toBe(201);
    expect((await pay(request, key, "100.00")).status()).toBe(409);

    await signIn(page, "viewer");
    await page.goto(`/?range=1h&tenant=${tenantId}`);
    await expect(page.locator('[data-gauge="unknown"]')).toBeVisible();
    await page.goto(`/records?q=${key}`);
    await page.getByRole("link", { name: key }).first().click();
    await expect(page.getByRole("heading", { name: `Record ${key}` })).toBeVisible();
    await expect(page.locator("pre.command")).toContainText('"amount": "10.00"');
    await page.goto("/audit");
    await expect(page.locator('tr[data-action="sign_in"]').first()).toBeVisible();
  });
});

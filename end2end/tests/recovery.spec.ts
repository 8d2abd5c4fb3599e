import { expect, type APIRequestContext, type Page } from "@playwright/test";
import { hydrated, openRecord, pay, signIn, simUrl, sqlite, tenantForThisFile, test, unknownPayment } from "./support";

// What recovery does past a reconciliation: keys released, late charges refunded, refunds
// reconciled, overrides approved by a second admin, dead letters re-driven.
const tenant = tenantForThisFile("e2e-recovery");

/** A payment the provider (with `fault`) says it did not charge, released by an operator. */
async function payThenRelease(page: Page, request: APIRequestContext, key: string, fault: object) {
  expect((await request.post(`${simUrl}/_sim/faults`, { data: fault })).status()).toBe(201);
  expect((await pay(request, tenant, key)).status()).toBe(202);
  await signIn(page, "operator");
  await openRecord(page, tenant, key);
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
    await openRecord(page, tenant, key);
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

  const retried = await pay(request, tenant, key);
  expect(retried.status()).toBe(201);
  expect(retried.headers()["idempotent-replayed"]).toBeUndefined();
  await openRecord(page, tenant, key);
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
  await page.goto(`/records/${tenant.id}/create_refund/${refundKey}`);
  await expect(page.locator("[data-refund-status]").first()).toHaveAttribute("data-refund-status", "SUCCEEDED");
  await page.screenshot({ path: test.info().outputPath("late-charge-refunded.png"), fullPage: true });
});

test("an unknown refund is reconciled with the provider's answer, worded for the refund", async ({ page, request }) => {
  const paymentKey = `refunded-${Date.now()}`;
  const paid = await pay(request, tenant, paymentKey);
  expect(paid.status()).toBe(201);
  const paymentId = (await paid.json()).paymentId;
  const refundKey = `refund-${Date.now()}`;
  // Test value 2.05: the provider makes the refund and its answer never comes.
  const unknown = await request.post(`/payments/${paymentId}/refunds`, {
    headers: { authorization: `Bearer ${tenant.apiKey}`, "idempotency-key": refundKey, "content-type": "application/json" },
    data: JSON.stringify({ amount: "2.05", reference: "rf-e2e" }),
  });
  expect(unknown.status()).toBe(202);
  const refundId = (await unknown.json()).refundId;

  await signIn(page, "operator");
  // The queue filtered to this file's tenant: a file run before this one on the same server
  // (incident.spec.ts) can leave more unknown records than the queue's first page holds.
  await page.goto(`/recovery?tenant=${tenant.name}`);
  await expect(page.getByRole("link", { name: refundKey })).toBeVisible();
  await page.goto(`/records/${tenant.id}/create_refund/${refundKey}`);
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
    headers: { authorization: `Bearer ${tenant.apiKey}`, "idempotency-key": refundKey, "content-type": "application/json" },
    data: JSON.stringify({ amount: "2.05", reference: "rf-e2e" }),
  });
  expect(replay.status()).toBe(201);
  expect(replay.headers()["idempotent-replayed"]).toBe("true");

  // The payment's record lists its refund, linked to the refund's record.
  await openRecord(page, tenant, paymentKey);
  await expect(page.locator(`[data-payment-refund="${refundId}"]`)).toHaveAttribute("data-refund-status", "SUCCEEDED");
});

test("an override without the provider's evidence waits for a second admin, who applies it", async ({ page, browser, request, baseURL }) => {
  const key = `override-${Date.now()}`;
  await unknownPayment(request, tenant, key);

  await signIn(page, "admin");
  await openRecord(page, tenant, key);
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

  await openRecord(page, tenant, key);
  await expect(page.locator("[data-record-status]")).toHaveAttribute("data-record-status", "COMPLETED");
  await page.goto("/audit");
  await expect(page.locator('tr[data-action="override.approve"]', { hasText: key })).toHaveCount(1);
});

test("a dead letter is re-driven from the events page, exactly the one previewed", async ({ page, request }) => {
  const key = `dead-${Date.now()}`;
  const paid = await pay(request, tenant, key);
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

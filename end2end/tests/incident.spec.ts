import { readFileSync } from "node:fs";
import { expect, type APIRequestContext } from "@playwright/test";
import { hydrated, pay, signIn, simUrl, sqlite, tenantForThisFile, test } from "./support";

// The incident day: the provider took charges and lost their answers, refused others, and
// cannot be asked about some; hundreds of payments end unknown, and an operator clears them
// from the console against the provider's evidence.
const tenant = tenantForThisFile("outage");

async function fault(request: APIRequestContext, data: object) {
  expect((await request.post(`${simUrl}/_sim/faults`, { data })).status()).toBe(201);
}

// Each test counts on the faults it queues alone: what an earlier test left queued goes.
test.beforeEach(async ({ request }) => {
  expect((await request.delete(`${simUrl}/_sim/faults`)).ok()).toBe(true);
});

/**
 * A keyed payment, sent again with the same key after `Retry-After` when the API's rate limit
 * answers 429 (nothing was recorded, and no fault was used up), as a client should.
 */
async function payOnce(request: APIRequestContext, key: string, amount: string, merchantReference: string) {
  for (;;) {
    const answer = await pay(request, tenant, key, amount, merchantReference);
    if (answer.status() !== 429) return answer;
    const wait = Number(answer.headers()["retry-after"] ?? "1");
    await new Promise((resolve) => setTimeout(resolve, wait * 1000));
  }
}

/** `count` payments whose charge call meets the simulator's fault `mode`: each answered 202. */
async function unknownPayments(request: APIRequestContext, prefix: string, count: number, mode: string, amount: string) {
  await fault(request, { mode, count });
  const ids: string[] = [];
  // Ten at a time: as an outage's traffic comes, and quickly.
  for (let start = 0; start < count; start += 10) {
    const batch = Array.from({ length: Math.min(10, count - start) }, (_, offset) => {
      const key = `${prefix}-${start + offset}`;
      return payOnce(request, key, amount, `ref-${key}`);
    });
    for (const answer of await Promise.all(batch)) {
      expect(answer.status()).toBe(202);
      ids.push((await answer.json()).paymentId);
    }
  }
  return ids;
}

function count(sql: string): number {
  return sqlite(sql);
}

test("an outage of 300 unknown outcomes is cleared from the console by filter, group by group", async ({ page, request }) => {
  test.setTimeout(240_000);
  await unknownPayments(request, "charged", 200, "error_after_accept", "12.00");
  await unknownPayments(request, "refused", 60, "fail_before_accept", "7.00");
  const unreachable = await unknownPayments(request, "silent", 40, "error_after_accept", "9.00");
  for (const reference of unreachable) await fault(request, { mode: "lookups_unavailable", reference, rate: 1.0 });

  const operator = await signIn(page, "operator");
  await page.goto("/recovery");
  await hydrated(page);
  // Filter to the tenant, by its name, as an operator thinks of it.
  const filters = page.getByRole("form", { name: "Filter the queue" });
  await filters.getByLabel("Tenant").fill(tenant.name);
  await filters.getByRole("button", { name: "Filter" }).click();
  const summary = page.locator("[data-queue-total]");
  await expect(summary).toHaveAttribute("data-queue-total", "300");
  await expect(summary).toContainText("300 need attention; showing 1-50");
  const firstRow = page.locator("table.queue tbody tr").first();
  await expect(firstRow).toContainText(tenant.name);
  await expect(firstRow).toContainText("12.00 EUR");
  await expect(firstRow).toContainText("ref-charged-");
  await expect(firstRow).toHaveAttribute("data-gave-up", "true");
  await expect(firstRow.locator("[data-cause]")).toHaveAttribute("data-cause", "error_answer");
  await hydrated(page);
  await page.getByRole("link", { name: "Next page" }).click();
  await expect(summary).toContainText("300 need attention; showing 51-100");
  await hydrated(page);

  // Select all 300 on the server: frozen, previewed against the provider, grouped.
  await page.getByRole("button", { name: "Select all 300 matching" }).click();
  const preview = page.getByRole("dialog", { name: "Bulk reconciliation" });
  await expect(preview).toBeVisible({ timeout: 60_000 });
  const group = (evidence: string) => preview.locator(`tr[data-bulk-group="create_payment/${evidence}"]`);
  await expect(group("succeeded")).toHaveAttribute("data-items", "200");
  await expect(group("no_charge")).toHaveAttribute("data-items", "60");
  await expect(group("unreachable")).toHaveAttribute("data-items", "40");
  await expect(group("unreachable")).toContainText("skipped: nothing can be applied");
  await page.screenshot({ path: test.info().outputPath("outage-preview.png"), fullPage: true });

  // Leave the records without a charge out (they are resent after the customer is asked),
  // name the job, give the reason, apply, and watch it run.
  await preview.getByLabel("apply to create_payment/no_charge").selectOption({ label: "Leave out" });
  await expect(preview.locator("[data-kept]")).toHaveAttribute("data-kept", "200");
  await preview.getByLabel("Job name").fill("provider outage 3 Dec");
  await preview.getByLabel("Reason (goes into the audit log)").fill("provider statement for the outage (e2e)");
  await preview.getByRole("button", { name: "Apply to the kept groups" }).click();
  const job = page.locator("[data-bulk-job]");
  await expect(job).toHaveAttribute("data-state", "running");
  await expect(job).toHaveAttribute("data-state", "finished", { timeout: 180_000 });
  await expect(job.locator("[data-bulk-progress]")).toHaveAttribute("data-bulk-progress", "200/200");
  await page.screenshot({ path: test.info().outputPath("outage-finished.png"), fullPage: true });

  // The results, every item, downloaded.
  const download = page.waitForEvent("download");
  await job.locator("[data-results]").click();
  const file = readFileSync(await (await download).path(), "utf8").trim().split("\n");
  expect(file).toHaveLength(301);
  expect(file.filter((line) => line.includes(",applied,COMPLETED,"))).toHaveLength(200);
  expect(file.filter((line) => line.includes(",left out,"))).toHaveLength(60);
  expect(file.filter((line) => line.includes(",nothing to apply,"))).toHaveLength(40);

  // Every record is where its evidence puts it, with one audit entry for each one applied,
  // and the provider charged nothing twice.
  const records = (status: string) =>
    count(`select count(*) from idempotency_records where tenant_id = '${tenant.id}' and status = '${status}'`);
  expect(records("COMPLETED")).toBe(200);
  expect(records("UNKNOWN_REQUIRES_RECOVERY")).toBe(100);
  expect(
    count(
      `select count(*) from audit_log where actor = '${operator}' and action = 'reconcile.apply_provider_result' ` +
        `and result = 'ok' and target like '%${tenant.id}%'`,
    ),
  ).toBe(200);
  const charges = (await (await request.get(`${simUrl}/_sim/charges`)).json()).charges as { createCalls: number }[];
  expect(charges.filter((charge) => charge.createCalls > 1)).toHaveLength(0);

  // The jobs list keeps it.
  await page.goto("/recovery/jobs");
  await expect(page.locator("tr[data-state=finished]", { hasText: "provider outage 3 Dec" })).toHaveCount(1);
});

test("the queue is live while its tab is visible, and a record whose worker gave up says so", async ({ page, request }) => {
  // The page's own clock runs as usual; the test moves it on to the queue's next read.
  await page.clock.install();
  await signIn(page, "viewer");
  await page.goto(`/recovery?tenant=${tenant.name}&search=late-arrival`);
  await hydrated(page);
  await expect(page.locator("[data-live]")).toHaveAttribute("data-live", "true");
  await expect(page.locator("[data-queue-total]")).toHaveAttribute("data-queue-total", "0");
  // A payment ends unknown while the page is open: the queue shows it without a reload.
  await fault(request, { mode: "error_after_accept", count: 1 });
  const answer = await payOnce(request, "late-arrival", "3.00", "late-arrival");
  expect(answer.status()).toBe(202);
  await page.clock.fastForward(5_000);
  await expect(page.locator("[data-queue-total]")).toHaveAttribute("data-queue-total", "1");

  await page.getByRole("link", { name: "late-arrival" }).click();
  const why = page.locator("[data-why-unknown]");
  await expect(why).toContainText("Why the outcome is unknown");
  await expect(why.locator("[data-cause]")).toContainText("answered with a server error");
  await expect(why.locator("[data-last-error]")).toContainText("charge request");
  await expect(why.locator("[data-next-look]")).toHaveAttribute("data-gave-up", "true");
  await expect(why.locator("[data-next-look]")).toContainText("gave up");
  // One timeline: the claim, then the charge request that failed, with how long it took.
  const failure = page.locator('ol.timeline li[data-kind="provider-failure"]');
  await expect(failure).toHaveCount(1);
  await expect(failure).toContainText("charge request, after");
  await expect(failure).toContainText("500 Internal Server Error");
  await expect(page.locator('ol.timeline li[data-kind="step"]').first()).toContainText("IN_PROGRESS");
});

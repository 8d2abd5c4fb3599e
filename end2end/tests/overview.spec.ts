import { expect, test } from "@playwright/test";

const statuses = [
  "IN_PROGRESS",
  "COMPLETED",
  "FAILED_REPLAYABLE",
  "FAILED_RETRYABLE",
  "UNKNOWN_REQUIRES_RECOVERY",
  "EXPIRED",
];

test("the overview renders on the server, hydrates, and refreshes through a server function", async ({ page }) => {
  const browserErrors: string[] = [];
  page.on("pageerror", (error) => browserErrors.push(error.message));
  page.on("console", (message) => {
    if (message.type() === "error") browserErrors.push(message.text());
  });

  await page.goto("/");
  await expect(page).toHaveTitle("Overview · Idem");

  // Data read by the server function: every status, zero on a fresh database.
  for (const status of statuses) {
    await expect(page.locator(`tr[data-status="${status}"] td`)).toHaveText("0");
  }
  await expect(page.locator("[data-total]")).toHaveText("0");

  // Hydration: only the wasm app flips this marker and enables the button.
  const panel = page.locator("section[data-hydrated]");
  await expect(panel).toHaveAttribute("data-hydrated", "true");
  const refresh = page.getByRole("button", { name: "Refresh" });
  await expect(refresh).toBeEnabled();

  // A client-side interaction that calls the server function again from the browser.
  const firstRead = await page.locator("[data-read-at]").textContent();
  const call = page.waitForResponse(
    (response) => response.url().endsWith("/api/console/overview") && response.status() === 200,
  );
  await refresh.click();
  await call;
  await expect(page.locator("[data-total]")).toHaveText("0");
  expect(firstRead).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);

  expect(browserErrors).toEqual([]);
});

test("client-side navigation reaches the sign-in page without a reload", async ({ page }) => {
  await page.goto("/");
  await expect(page.locator("section[data-hydrated]")).toHaveAttribute("data-hydrated", "true");
  await page.evaluate(() => ((window as unknown as { marker: number }).marker = 42));

  await page.getByRole("link", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/sign-in$/);
  await expect(page.getByRole("heading", { name: "Sign in to the Idem console" })).toBeVisible();
  // Still the same document: the router navigated in the browser.
  expect(await page.evaluate(() => (window as unknown as { marker?: number }).marker)).toBe(42);
  await expect(page.getByLabel("E-mail")).toBeDisabled();
});

test("an unknown console path answers 404 with a way back", async ({ page }) => {
  const response = await page.goto("/no-such-page");
  expect(response?.status()).toBe(404);
  await expect(page.getByRole("heading", { name: "Not found" })).toBeVisible();
});

import { expect } from "@playwright/test";
import { createOperator, hydrated, signIn, test } from "./support";

test("the dashboard renders on the server, hydrates, and refreshes through a server function", async ({ page }) => {
  const browserErrors: string[] = [];
  page.on("pageerror", (error) => browserErrors.push(error.message));
  page.on("console", (message) => {
    if (message.type() === "error") browserErrors.push(message.text());
  });

  // The page's own clock: it runs as usual, and the test moves it on to the next refresh
  // instead of waiting 15 s for it.
  await page.clock.install();
  await signIn(page, "viewer");
  await page.goto("/?range=1h");
  await expect(page).toHaveTitle("Dashboard · Idem");
  for (const gauge of ["stale_in_progress", "unknown", "outbox_backlog", "cleanup_backlog"]) {
    await expect(page.locator(`[data-gauge="${gauge}"] .gauge-value`)).toHaveText(/^\d+$/);
  }
  await expect(page.locator("figure.chart")).toHaveCount(8);

  // Hydration: only the wasm app flips this marker and enables the button.
  await hydrated(page, page.locator("section[data-hydrated]"));
  const refresh = page.getByRole("button", { name: "Refresh" });
  await expect(refresh).toBeEnabled();
  const call = page.waitForResponse(
    (response) => response.url().endsWith("/api/console/dashboard") && response.status() === 200,
  );
  await refresh.click();
  await call;
  await expect(page.locator("figure.chart")).toHaveCount(8);
  // The cards read themselves again while the tab is visible, and say so.
  await expect(page.locator(".refresh [data-live]")).toHaveAttribute("data-live", "true");
  await expect(page.locator(".refresh [data-live]")).toContainText("every 15 s");
  const again = page.waitForResponse(
    (response) => response.url().endsWith("/api/console/dashboard") && response.status() === 200,
  );
  await page.clock.fastForward(15_000);
  await again;

  expect(browserErrors).toEqual([]);
});

test("without a session the console sends people to sign in, and back where they were going", async ({ page }) => {
  await page.goto("/");
  await expect(page).toHaveURL(/\/sign-in\?next=\/$/);
  const { username, password } = createOperator("viewer");
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill("not the password");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("alert")).toContainText("do not match");

  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveTitle("Dashboard · Idem");
  await expect(page.locator(`[data-operator="${username}"]`)).toContainText("viewer");

  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/sign-in$/);
  await page.goto("/");
  await expect(page).toHaveURL(/\/sign-in/);
});

test("an unknown console path answers 404 with a way back", async ({ page }) => {
  await signIn(page, "viewer");
  const response = await page.goto("/no-such-page");
  expect(response?.status()).toBe(404);
  await expect(page.getByRole("heading", { name: "Not found" })).toBeVisible();
});

test("theme and time zone are the operator's choice, remembered in this browser", async ({ page }) => {
  await signIn(page, "viewer");
  await page.goto("/?range=15m");
  await hydrated(page);
  const utc = await page.locator("time.ts").first().textContent();
  expect(utc).toMatch(/Z$/);

  await page.getByRole("button", { name: "Theme: system" }).click();
  await page.getByRole("button", { name: "Theme: light" }).click();
  await expect(page.locator("html")).toHaveAttribute("data-theme", "dark");
  await page.getByRole("button", { name: "Times: UTC" }).click();
  await expect(page.locator("time.ts").first()).not.toHaveText(utc ?? "");

  await page.reload();
  await hydrated(page);
  await expect(page.locator("html")).toHaveAttribute("data-theme", "dark");
  await expect(page.getByRole("button", { name: "Times: local" })).toBeVisible();
});

test("the API's docs page renders the OpenAPI document from assets the binary serves", async ({ page }) => {
  const elsewhere: string[] = [];
  page.on("request", (request) => {
    const url = new URL(request.url());
    if (url.protocol !== "data:" && url.hostname !== "127.0.0.1") elsewhere.push(request.url());
  });
  // Its policy is strict: anything it refused would be reported here.
  const refused: string[] = [];
  page.on("console", (message) => {
    if (/Content Security Policy/i.test(message.text())) refused.push(message.text());
  });
  await page.goto("/docs/");
  await expect(page.getByRole("heading", { name: /Idem payments API/ })).toBeVisible();
  await expect(page.locator(".opblock-summary-path", { hasText: "/payments/{id}" })).toBeVisible();
  // Every operation of the API: its ten routes (the two look-ups by key among them).
  await expect(page.locator(".opblock")).toHaveCount(10);
  await page.locator(".opblock-summary", { hasText: "/payments/{id}" }).first().click();
  await expect(page.locator(".opblock-body").first()).toBeVisible();
  expect(elsewhere).toEqual([]);
  expect(refused).toEqual([]);
  await page.screenshot({ path: test.info().outputPath("api-docs.png"), fullPage: true });
});

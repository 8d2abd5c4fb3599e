import { execFileSync } from "node:child_process";
import { test as base, expect, type APIRequestContext, type Locator, type Page } from "@playwright/test";
import { binary, servedBy } from "./servers";

// This worker's servers (global-setup.ts started one pair a worker).
const { port, simPort, dataDir } = servedBy(Number(process.env.TEST_PARALLEL_INDEX ?? 0));
export const simUrl = `http://127.0.0.1:${simPort}`;

/** Playwright's `test`, with pages and requests aimed at this worker's `idem serve`. */
export const test = base.extend({
  baseURL: async ({}, use) => use(`http://127.0.0.1:${port}`),
});

/** Runs an administrative `idem` command on the suite's database; its standard output. */
export function idem(...args: string[]): string {
  return execFileSync(binary, ["--data-dir", dataDir, ...args], {
    env: { ...process.env, DATABASE_URL: "", IDEM_LOG: "warn" },
    encoding: "utf8",
  }).trim();
}

/**
 * Runs one SQL statement on the suite's embedded database (to stage what traffic cannot
 * produce, like a broker refusing an event ten times, or to check what happened after): a
 * query's first value, or the number of rows a change touched.
 */
export function sqlite(sql: string): number {
  const script =
    "import sqlite3, sys\n" +
    "db = sqlite3.connect(sys.argv[1], timeout=10)\n" +
    "cursor = db.execute(sys.argv[2])\n" +
    "row = cursor.fetchone() if cursor.description else None\n" +
    "db.commit()\n" +
    "print(row[0] if row else cursor.rowcount)";
  return Number(execFileSync("python3", ["-c", script, `${dataDir}/idem.db`, sql], { encoding: "utf8" }).trim());
}

export type Role = "viewer" | "operator" | "admin";

/** Creates an operator with a unique name; returns the name and the generated password. */
export function createOperator(role: Role, prefix: string = role): { username: string; password: string } {
  const username = `${prefix}-${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`;
  const password = idem("operator", "create", "--username", username, "--role", role);
  return { username, password };
}

/** Signs in through the form, as a person does, and waits for the console. */
export async function signIn(page: Page, role: Role): Promise<string> {
  const { username, password } = createOperator(role);
  await page.goto("/sign-in");
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.locator(`[data-operator="${username}"]`)).toBeVisible();
  return username;
}

/**
 * Waits until the wasm app has taken over the server-rendered page (clicks work). Each test's
 * browser context compiles the console's debug wasm (23 MB) afresh, which once took more than
 * the default 5 s on a loaded two-core machine (2026-12-06): how long hydration takes is not
 * what these tests check.
 */
export async function hydrated(page: Page, marker: Locator = page.locator("header.topbar")) {
  await expect(marker).toHaveAttribute("data-hydrated", "true", { timeout: 20_000 });
}

/** A tenant of one spec file's own, with one account (acc_1, EUR). */
export interface FileTenant {
  name: string;
  id: string;
  apiKey: string;
}

/**
 * Makes the calling spec file's tenant with the CLI, as an operator of Idem would, before the
 * file's first test: its fields are filled from then on.
 */
export function tenantForThisFile(prefix: string): FileTenant {
  const tenant = { name: `${prefix}-${Date.now().toString(36)}`, id: "", apiKey: "" };
  test.beforeAll(() => {
    tenant.id = idem("tenant", "create", tenant.name);
    tenant.apiKey = idem("api-key", "create", "--tenant", tenant.name);
    idem("account", "create", "--tenant", tenant.name, "--id", "acc_1", "--currency", "EUR", "--balance", "100000.00");
  });
  return tenant;
}

/** One keyed `POST /payments` from the tenant's account. */
export function pay(
  request: APIRequestContext,
  tenant: FileTenant,
  key: string,
  amount = "10.00",
  merchantReference = `${key}-ref`,
) {
  return request.post("/payments", {
    headers: { authorization: `Bearer ${tenant.apiKey}`, "idempotency-key": key, "content-type": "application/json" },
    data: JSON.stringify({ accountId: "acc_1", amount, currency: "EUR", merchantReference }),
  });
}

/** A payment whose provider answer is lost: the record is left UNKNOWN_REQUIRES_RECOVERY. */
export async function unknownPayment(request: APIRequestContext, tenant: FileTenant, key: string) {
  const fault = await request.post(`${simUrl}/_sim/faults`, {
    data: { mode: "drop_response_after_accept", count: 1 },
  });
  expect(fault.status()).toBe(201);
  expect((await pay(request, tenant, key)).status()).toBe(202);
}

/** The record page of the tenant's payment made with `key`, hydrated. */
export async function openRecord(page: Page, tenant: FileTenant, key: string) {
  await page.goto(`/records/${tenant.id}/create_payment/${key}`);
  await expect(page.getByRole("heading", { name: `Record ${key}` })).toBeVisible();
  await hydrated(page);
}

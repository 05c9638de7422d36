// Keys and lifetimes outside the Worker (src/protocol/http/keys.ts; the Worker's side is
// test/workers/auth.test.ts): the tools that start the relay, deploy it and mint its tokens
// refuse a secret shorter than 32 bytes as the Worker does, and `npm run token` refuses a
// lifetime the relay would refuse (TOKEN_MAX_TTL from the environment or wrangler.toml).
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decodeProtectedHeader } from "jose";
import { afterAll, describe, expect, it } from "vitest";
import { MIN_SECRET_BYTES as SCRIPTS_MIN, secretTooShort } from "../../scripts/dev-vars.mjs";
import { DEFAULT_MAX_TTL, keyId, MIN_SECRET_BYTES, maxTtlFrom, secretProblem } from "../../src/protocol/http/keys.js";
import { tsx } from "../support/tsx.js";

const root = join(import.meta.dirname, "..", "..");
const GOOD = "keys-test-secret-0123456789abcdef0123";
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** An empty folder (no .dev.vars, no wrangler.toml unless written), so only the environment given counts. */
function folder(files: Record<string, string> = {}): string {
  const d = mkdtempSync(join(tmpdir(), "episode-relay-keys-"));
  dirs.push(d);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(d, name), text);
  return d;
}

function run(command: string, args: string[], cwd: string, env: Record<string, string | undefined>) {
  const e: NodeJS.ProcessEnv = { ...process.env, ...env, WRANGLER_SEND_METRICS: "false" };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete e[k];
  return spawnSync(command, args, { cwd, env: e, encoding: "utf8", timeout: 60_000 });
}

const token = (args: string[], env: Record<string, string | undefined>, cwd = folder()) =>
  run(...tsx(join(root, "tools", "token.ts"), ...args), cwd, { TOKEN_MAX_TTL: undefined, ...env });

describe("keys", () => {
  it("one rule for a secret's length, in UTF-8 bytes, in the Worker and the scripts", () => {
    expect(SCRIPTS_MIN).toBe(MIN_SECRET_BYTES);
    expect(secretProblem("RELAY_SECRET", "é".repeat(16))).toBeNull();
    expect(secretProblem("RELAY_SECRET", "é".repeat(15))).toMatch(/30 bytes long; it must be at least 32/);
    expect(secretTooShort("é".repeat(16), "x")).toBeNull();
    expect(secretTooShort("é".repeat(15), ".dev.vars")).toMatch(/RELAY_SECRET from \.dev\.vars is 30 bytes long/);
  });

  it("a key id follows from its secret: 16 hex digits, the same each time, another for another secret", async () => {
    const a = await keyId(GOOD);
    expect(a).toMatch(/^[0-9a-f]{16}$/);
    expect(await keyId(GOOD)).toBe(a);
    expect(await keyId(`${GOOD}x`)).not.toBe(a);
    expect(a).not.toContain(GOOD.slice(0, 8));
  });

  it("TOKEN_MAX_TTL: any subset of the roles, the rest at their defaults; anything else throws", () => {
    expect(maxTtlFrom(undefined)).toEqual(DEFAULT_MAX_TTL);
    expect(maxTtlFrom("watcher=1h, admin = 15m")).toEqual({ ...DEFAULT_MAX_TTL, watcher: 3600, admin: 900 });
    for (const bad of ["watcher", "viewer=1h", "watcher=1y", "watcher=0"])
      expect(() => maxTtlFrom(bad), bad).toThrow(/TOKEN_MAX_TTL/);
  });
});

describe("the tools refuse what the relay would", () => {
  it("npm run token: a short secret exits 1 saying why; a good one signs with its key id", async () => {
    const weak = token(["--role", "watcher", "--episode", "*"], { RELAY_SECRET: "short" });
    expect(weak.status, weak.stderr).toBe(1);
    expect(weak.stderr).toMatch(/RELAY_SECRET from the environment is 5 bytes long; it must be at least 32/);
    expect(weak.stdout).toBe("");
    const ok = token(["--role", "watcher", "--episode", "*", "--ttl", "7d"], { RELAY_SECRET: GOOD });
    expect(ok.status, ok.stderr).toBe(0);
    expect(decodeProtectedHeader(ok.stdout.trim())).toMatchObject({ alg: "HS256", kid: await keyId(GOOD) });
  });

  it("npm run token: a lifetime past the role's maximum is a usage error, exit 2 (the defaults, the environment's TOKEN_MAX_TTL, wrangler.toml's)", () => {
    const admin = token(["--role", "admin", "--episode", "*", "--ttl", "2d"], { RELAY_SECRET: GOOD });
    expect(admin.status).toBe(2);
    expect(admin.stderr).toMatch(/--ttl 2d is longer than the relay accepts for a admin \(1d, TOKEN_MAX_TTL\)/);
    const env = token(["--role", "watcher", "--episode", "*", "--ttl", "2h"], {
      RELAY_SECRET: GOOD,
      TOKEN_MAX_TTL: "watcher=1h",
    });
    expect(env.status).toBe(2);
    const toml = folder({ "wrangler.toml": '[vars]\nTOKEN_MAX_TTL = "watcher=1h"\n' });
    const fromToml = token(["--role", "watcher", "--episode", "*", "--ttl", "2h"], { RELAY_SECRET: GOOD }, toml);
    expect(fromToml.status).toBe(2);
    expect(fromToml.stderr).toMatch(/watcher \(1h, TOKEN_MAX_TTL\)/);
    expect(token(["--role", "watcher", "--episode", "*", "--ttl", "1h"], { RELAY_SECRET: GOOD }, toml).status).toBe(0);
  });

  it("npm start with a short secret exits 1 before starting anything", () => {
    const r = run(process.execPath, [join(root, "scripts", "relay.mjs"), "--port", "0"], root, {
      RELAY_SECRET: "0123456789",
    });
    expect(r.status, r.stderr).toBe(1);
    expect(r.stderr).toMatch(
      /\[dev\] RELAY_SECRET from the environment is 10 bytes long; it must be at least 32.*not starting/,
    );
    expect(r.stderr).not.toMatch(/auth ON/);
  });

  it("npm run deploy with a short RELAY_SECRET or RELAY_SECRET_PREVIOUS in the environment stops before building", () => {
    for (const name of ["RELAY_SECRET", "RELAY_SECRET_PREVIOUS"]) {
      const r = run(process.execPath, [join(root, "scripts", "deploy.mjs"), "--dry-run"], root, {
        [name]: "0123456789",
      });
      expect(r.status, r.stderr).toBe(1);
      expect(r.stderr).toMatch(new RegExp(`\\[deploy\\] stopped: ${name} from the environment is 10 bytes long`));
      expect(r.stderr).not.toMatch(/building the dashboard/);
    }
  });
});

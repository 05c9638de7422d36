// Before/after reproduction of issue 39's findings 3-6 against a local relay (Miniflare, auth on;
// two relays share the secrets, the second without RELAY_SECRET_PREVIOUS: the rollover's end).
// ROOT is a checkout to run (default this one); for the release before the fix:
//   git archive 17eaf78 | tar -x -C /tmp/before && ln -s "$PWD/node_modules" /tmp/before/node_modules
//   npx tsx bench/repro/unbounded-inputs.ts /tmp/before
// It prints each answer's status and time; the times are the machine's, for the closing note only.
import { resolve } from "node:path";

const root = resolve(process.argv[2] ?? ".");
const { startRelay } = await import(`${root}/scripts/relay.mjs`);
const { mintToken } = await import(`${root}/src/protocol/http/auth.ts`);
const { openDelta } = await import(`${root}/test/support/deltas.ts`);

const NEW = "repro-current-secret-0123456789abcdef0123";
const OLD = "repro-previous-secret-fedcba9876543210fedc";
const during = await startRelay({
  vars: { RELAY_SECRET: NEW, RELAY_SECRET_PREVIOUS: OLD, AUTH_OFF_ON_LOOPBACK: "false" },
});
const after = await startRelay({ vars: { RELAY_SECRET: NEW, AUTH_OFF_ON_LOOPBACK: "false" } });
const url: string = during.url;
const admin = { authorization: `Bearer ${await mintToken(NEW, { role: "admin", episodes: ["*"], ttl: 3600 })}` };
const json = { ...admin, "content-type": "application/json" };

/** A request's status, milliseconds and the start of its answer (-1: the connection failed). */
async function timed(path: string, init: RequestInit): Promise<string> {
  const t = performance.now();
  try {
    const r = await fetch(`${url}${path}`, init);
    const text = (await r.text()).slice(0, 110);
    return `${r.status} in ${Math.round(performance.now() - t)} ms ${text}`;
  } catch (e) {
    return `-1 in ${Math.round(performance.now() - t)} ms: ${e} (${(e as { cause?: unknown }).cause})`;
  }
}
const claims = (token: string) =>
  JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()) as { exp: number };
const nest = (n: number, leaf: string) => `${"[".repeat(n)}${leaf}${"]".repeat(n)}`;
const stamp = Date.now().toString(36);

// 3: an info of 40,000 (and 10,000) short keys, then small records overwriting one key
const small = JSON.stringify({ trace_id: "t-1", info: { "100": 1 }, branches: [] });
for (const n of [40_000, 10_000]) {
  const ep = `/v1/episodes/repro-${stamp}-${n}:e`;
  const opened = await timed(`${ep}/deltas`, {
    method: "POST",
    body: openDelta(),
    headers: { ...admin, "content-type": "application/msgpack" },
  });
  if (!opened.startsWith("200")) console.log(`3: the episode's first delta: ${opened}`);
  const info = Object.fromEntries(Array.from({ length: n }, (_, i) => [(i + 1296).toString(36), 0]));
  const big = JSON.stringify({ trace_id: "t-1", info });
  console.log(
    `3: ${big.length}-byte info of ${n} keys:`,
    await timed(`${ep}/annotations`, { method: "POST", body: big, headers: json }),
  );
  for (let i = 0; i < 3; i++)
    console.log(
      `3: then a ${small.length}-byte record:`,
      await timed(`${ep}/annotations`, { method: "POST", body: small, headers: json }),
    );
}

// 4: JSON bodies nested 200k, 8k and 30k deep
const deepInfo = `{"trace_id":"t-1","info":{"d":${nest(200_000, "1")}}}`;
console.log(
  "4: annotations 200k deep:",
  await timed(`/v1/episodes/repro-${stamp}-10000:e/annotations`, { method: "POST", body: deepInfo, headers: json }),
);
const deepDispatch = `{"id":"a","x":${nest(8000, "0")}}`;
console.log(
  "4: dispatch 8k deep:",
  await timed(`/v1/episodes/repro-${stamp}-d:e/dispatch`, { method: "POST", body: deepDispatch, headers: json }),
);
const deepRole = `{"rules":[{"id":"a","match":{"pattern":"x","role":${nest(30_000, '"r"')}}}]}`;
console.log(
  "4: rules role 30k deep:",
  await timed(`/v1/runs/repro-${stamp}-x/rules`, { method: "PUT", body: deepRole, headers: json }),
);
console.log("4: health:", await timed("/v1/health", {}));

// 5: rules on a run nobody wrote, and a 10,000-character role
const run = `repro-${stamp}-rules`;
const rules = (role?: string) =>
  JSON.stringify({ rules: [{ id: "a", match: { pattern: "x", ...(role ? { role } : {}) } }] });
console.log(
  "5: rules on a new run:",
  await timed(`/v1/runs/${run}/rules`, { method: "PUT", body: rules(), headers: json }),
);
console.log(
  "5: a 10,000-character role:",
  await timed(`/v1/runs/${run}/rules`, { method: "PUT", body: rules("r".repeat(10_000)), headers: json }),
);
await new Promise((r) => setTimeout(r, 2000)); // the index's alarm, then the directory
const runs = (await (await fetch(`${url}/v1/runs?limit=500`, { headers: admin })).json()) as {
  runs: Array<{ run: string }>;
};
console.log("5: the directory lists it:", JSON.stringify(runs.runs.find((r) => r.run === run) ?? null));

// 6: a 1-day admin token of each key makes a share; the maker and the share after the rollover's end
for (const [name, secret] of [
  ["current key", NEW],
  ["previous key", OLD],
] as const) {
  const maker: string = await mintToken(secret, { role: "admin", episodes: ["*"], ttl: 86_400 });
  const res = await fetch(`${url}/v1/runs/${run}/share`, {
    method: "POST",
    headers: { authorization: `Bearer ${maker}` },
  });
  const share = ((await res.json()) as { token: string }).token;
  const use = async (t: string) =>
    (await fetch(`${after.url}/v1/episodes/${run}:e/status`, { headers: { authorization: `Bearer ${t}` } })).status;
  const days = (claims(share).exp - claims(maker).exp) / 86_400 + 1;
  console.log(
    `6: ${name}: the share lives ${days.toFixed(2)} days (its maker 1); after the rollover the maker gets ${await use(maker)}, the share ${await use(share)}`,
  );
}
await during.stop();
await after.stop();

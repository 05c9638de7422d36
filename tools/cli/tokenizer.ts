// `episode-relay tokenizer --run R FILE URL [--token T]`: keep the model's tokenizer.json (FILE, or a
// folder holding one) for run R, so the dashboard shows the run's token ids as text
// (PUT /v1/runs/{run}/tokenizer, docs/http-api.md). The same bytes again change nothing.
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { segment } from "../../clients/typescript/groups.js";
import { bearer, checkBaseUrl, refusalOf, relayFetch } from "../../clients/typescript/relay-fetch.js";
import { CLI_HINTS } from "./hints.js";

/** The file `path` names: itself, or a folder's tokenizer.json. */
async function tokenizerFile(path: string): Promise<string> {
  const s = await stat(path).catch(() => null);
  if (s === null) throw new Error(`${path}: no such file (a tokenizer.json, or a folder holding one)`);
  return s.isDirectory() ? join(path, "tokenizer.json") : path;
}

export async function putTokenizer(url: string, run: string, path: string, opts: { token?: string }): Promise<number> {
  const base = checkBaseUrl(url);
  const file = await tokenizerFile(path);
  const body = new Uint8Array(await readFile(file));
  const target = new URL(`${base}/v1/runs/${segment(run, "run")}/tokenizer`);
  const res = await relayFetch(target, {
    method: "PUT",
    body,
    headers: { "content-type": "application/json", ...bearer(target, { token: opts.token }) },
  });
  if (res.status >= 400 && res.status < 500) throw await refusalOf(res, `run ${run}'s tokenizer`, base, CLI_HINTS);
  if (!res.ok) throw new Error(`PUT ${target}: ${res.status} ${await res.text()}`);
  const answer = (await res.json()) as { bytes: number; sha256: string; changed: boolean };
  console.log(
    `run ${run}: tokenizer ${file} (${answer.bytes} bytes, sha256 ${answer.sha256.slice(0, 12)}) ${answer.changed ? "kept" : "already kept, unchanged"}`,
  );
  return 0;
}

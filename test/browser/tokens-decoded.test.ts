// Decoded tokens (issue 40): the episode page shows a rollout's token ids as the text pieces of its
// run's tokenizer, the trainer's signal painted behind each piece; a run without a tokenizer says
// so and shows ids; a page showing no tokens asks for neither the tokenizer nor the library. In
// Debian's headless Chromium against the real relay bundle. The tokenizer is made here, a real
// byte-level BPE tokenizer.json (the shape of Qwen's) whose vocabulary spells each node's message
// over that node's recorded ids, so the decoded strip must read as the message. Screenshot:
// test-results/screenshots/tokens-decoded-{desktop,phone}.png.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { chromiumForFile } from "./chromium.js";
import { SHOTS, sharedPage, shootPart } from "./pages.js";
import { type JsonNode, postAnnotations, primeRecords, pushRollout, trainingPlan } from "./training-run.js";

let browser: Browser;
let relay: LocalRelay;
const tag = Date.now().toString(36);
const RUN = `tok-ui-${tag}`;
const BARE = `tok-bare-${tag}`;
const pick = (run: string) => trainingPlan(run, Date.now() / 1000).find((r) => r.id === `${run}:t3-g1-0`)!;
const ROLLOUT = pick(RUN);
const PLAIN = pick(BARE);
/** Each sampled node's pieces, as the tokenizer made here spells them. */
const spelled = new Map<number, string[]>();

const SPECIAL: Record<number, string> = { 151644: "<|im_start|>", 151645: "<|im_end|>" };

/** GPT-2's byte-to-symbol table (byte-level BPE vocabularies are written in it). */
function byteSymbols(): string[] {
  const keep = [...range(33, 126), ...range(161, 172), ...range(174, 255)];
  const out: string[] = [];
  let n = 0;
  for (let b = 0; b < 256; b++) out[b] = String.fromCodePoint(keep.includes(b) ? b : 256 + n++);
  return out;
}
function range(a: number, b: number): number[] {
  return Array.from({ length: b - a + 1 }, (_, i) => a + i);
}

/** `text` cut into `n` pieces at word starts where it can (each non-empty while there is text). */
function cut(text: string, n: number): string[] {
  const words = text.match(/\s*\S+|\s+$/g) ?? [];
  const out: string[] = [];
  if (words.length >= n) {
    const per = words.length / n;
    for (let i = 0; i < n; i++) out.push(words.slice(Math.round(i * per), Math.round((i + 1) * per)).join(""));
    return out;
  }
  // fewer words than ids: split the text into n character runs
  const per = text.length / n;
  for (let i = 0; i < n; i++) out.push(text.slice(Math.round(i * per), Math.round((i + 1) * per)));
  return out;
}

/** A tokenizer.json whose vocabulary gives each node's ids its message's pieces (first use of an id wins). */
function tokenizerFor(nodes: JsonNode[]): string {
  const sym = byteSymbols();
  const enc = new TextEncoder();
  const vocab: Record<string, number> = {};
  /** Each id's text as the vocabulary holds it (a piece spelled twice takes a trailing space: keys are unique). */
  const text = new Map<number, string>();
  const put = (piece: string, id: number) => {
    if (text.has(id)) return;
    let spelledAs = piece;
    while ([...enc.encode(spelledAs)].map((b) => sym[b]).join("") in vocab) spelledAs += " ";
    vocab[[...enc.encode(spelledAs)].map((b) => sym[b]).join("")] = id;
    text.set(id, spelledAs);
  };
  put("\n", 198);
  // the sampled (assistant) nodes spell first, the last one first: where ids repeat, the replies read right
  const order = nodes
    .map((_n, i) => i)
    .sort((a, b) => Number(nodes[b]!.mask.some(Boolean)) - Number(nodes[a]!.mask.some(Boolean)) || b - a);
  for (const i of order) {
    const n = nodes[i]!;
    const content = typeof n.message.content === "string" ? n.message.content : JSON.stringify(n.message.content);
    const inner = n.token_ids.map((id, p) => (SPECIAL[id] === undefined && id !== 198 ? p : -1)).filter((p) => p >= 0);
    const pieces = cut(content, inner.length);
    n.token_ids.forEach((id, p) => {
      if (SPECIAL[id] === undefined) put(pieces[inner.indexOf(p)] ?? "", id);
    });
    const all = n.token_ids.map((id) => SPECIAL[id] ?? text.get(id)!);
    if (n.mask.some(Boolean)) spelled.set(i, all);
  }
  const added = Object.entries(SPECIAL).map(([id, content]) => ({
    id: Number(id),
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }));
  for (const [id, content] of Object.entries(SPECIAL)) vocab[content] = Number(id);
  const level = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  return JSON.stringify({
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: level,
    post_processor: level,
    decoder: level,
    model: { type: "BPE", dropout: null, unk_token: null, fuse_unk: false, byte_fallback: false, vocab, merges: [] },
  });
}

async function episodeNodes(id: string): Promise<{ trace: string; nodes: JsonNode[] }> {
  const res = await fetch(`${relay.url}/v1/episodes/${encodeURIComponent(id)}`, {
    headers: { accept: "application/json" },
  });
  const ep = (await res.json()) as { traces: Array<{ id: string; nodes: JsonNode[] }> };
  return { trace: ep.traces[0]!.id, nodes: ep.traces[0]!.nodes };
}

/** One page for the file's tests, each on its path by a route change (pages.ts sharedPage). */
const shared = sharedPage(
  () => browser,
  () => relay.url,
);
afterAll(() => shared.close());
async function waitFor(page: Page, fn: string, arg?: unknown, timeout = 20_000): Promise<void> {
  await page.waitForFunction(
    new Function("arg", `const document = globalThis.document; return (${fn})(arg);`) as never,
    arg,
    { timeout },
  );
}

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromiumForFile();
  relay = await startRelay();
  for (const r of [ROLLOUT, PLAIN]) {
    await pushRollout(relay.url, r);
    const { trace, nodes } = await episodeNodes(r.id);
    await postAnnotations(relay.url, r.id, primeRecords(trace, nodes, 0.75, 4).records);
  }
  const { nodes } = await episodeNodes(ROLLOUT.id);
  const put = await fetch(`${relay.url}/v1/runs/${RUN}/tokenizer`, { method: "PUT", body: tokenizerFor(nodes) });
  expect(put.status, await put.clone().text()).toBe(200);
}, 240_000);

afterAll(async () => {
  await browser?.close();
  await relay?.stop();
});

describe("decoded tokens", () => {
  it("a page showing no tokens asks for neither the tokenizer nor the library", async () => {
    const { page, errors } = await shared.visit(`/episodes/${encodeURIComponent(ROLLOUT.id)}`);
    const asked: string[] = [];
    page.on("request", (r) => asked.push(r.url()));
    await waitFor(page, "() => document.querySelector('#signal-bar')?.dataset.version === '2'");
    await waitFor(page, "() => document.querySelectorAll('.turn[data-node]').length > 3");
    expect(asked.filter((u) => /tokenizer/i.test(u))).toEqual([]);
    expect(await page.locator(".tok-strip").count()).toBe(0);
    // choosing a signal loads both, once
    await page.selectOption("#token-signal", "advantage");
    await waitFor(page, "() => document.querySelector('.tok-decoded')?.dataset.state === 'ready'");
    expect(asked.filter((u) => u.endsWith(`/v1/runs/${RUN}/tokenizer?optional=1`))).toHaveLength(1);
    expect(asked.filter((u) => /tokenizers.*\.js/.test(u)).length).toBe(1);
    expect(errors).toEqual([]);
  });

  it("shows each sampled token's text piece with the advantage painted behind it, its id in the tooltip", async () => {
    const { page, errors } = await shared.visit(`/episodes/${encodeURIComponent(ROLLOUT.id)}?signal=advantage`);
    await waitFor(page, "() => document.querySelector('.tok-decoded')?.dataset.state === 'ready'");
    await waitFor(page, "() => document.querySelectorAll('.toks.decoded').length > 0");
    expect(await page.locator(".tok-decoded").innerText()).toBe("decoded with the run's tokenizer");
    const { nodes } = await episodeNodes(ROLLOUT.id);
    const drawn = await page.$$eval(".turn[data-node]", (turns) =>
      turns.flatMap((t: any) => {
        const toks = [...t.querySelectorAll(".toks.decoded .tok")];
        if (toks.length === 0) return [];
        return [
          {
            node: Number(t.dataset.node),
            text: toks.map((x: any) => x.textContent),
            titles: toks.map((x: any) => x.title),
            sampledColours: [...t.querySelectorAll(".toks.decoded .tok.s")].map(
              (x: any) => (globalThis as any).getComputedStyle(x).backgroundColor,
            ),
          },
        ];
      }),
    );
    expect(drawn.map((d) => d.node).sort()).toEqual([...spelled.keys()].sort());
    for (const d of drawn) {
      const want = spelled.get(d.node)!.map((p) => (p === "" ? "\u200b" : p.replace(/\n/g, "↵\n")));
      expect(d.text, `node ${d.node}`).toEqual(want);
      // the ids are in the tooltips, in order
      expect(d.titles.map((t) => Number(/ id=(\d+)/.exec(t)![1]))).toEqual(nodes[d.node]!.token_ids);
      expect(d.titles.every((t, p) => t.includes(JSON.stringify(spelled.get(d.node)![p])))).toBe(true);
      // advantage 0.75 on every sampled token: painted, none transparent
      expect(d.sampledColours.length).toBe(nodes[d.node]!.mask.filter(Boolean).length);
      for (const c of d.sampledColours) expect(c).not.toMatch(/rgba\(0, 0, 0, 0\)|transparent/);
    }
    // the screenshot: the reply with the most text
    const last = drawn.reduce((a, b) =>
      String(nodes[b.node]!.message.content).length > String(nodes[a.node]!.message.content).length ? b : a,
    );
    await page.locator(`.turn[data-node="${last.node}"]`).scrollIntoViewIfNeeded();
    await shootPart(page, `.turn[data-node="${last.node}"]`, "tokens-decoded");
    // and the page as a researcher sees it at 1400×900, that reply at the top (the closing note of issue 40)
    await page.setViewportSize({ width: 1400, height: 900 });
    await page.evaluate(`document.querySelector(".topbar")?.style.setProperty("position", "static", "important")`);
    await page.locator(`.turn[data-node="${last.node}"]`).evaluate((el: any) => el.scrollIntoView({ block: "start" }));
    await page.screenshot({ path: join(SHOTS, "c40-tokens.png") });
    expect(errors).toEqual([]);
  });

  it("a run without a tokenizer says so and shows the ids", async () => {
    const { page, errors } = await shared.visit(`/episodes/${encodeURIComponent(PLAIN.id)}?signal=advantage`);
    await waitFor(page, "() => document.querySelector('.tok-decoded')?.dataset.state === 'none'");
    const chip = page.locator(".tok-decoded");
    expect(await chip.innerText()).toBe("token ids");
    expect(await chip.getAttribute("title")).toMatch(/no tokenizer for this run/);
    await waitFor(page, "() => document.querySelectorAll('.toks .tok.s').length > 0");
    expect(await page.locator(".toks.decoded").count()).toBe(0);
    const { nodes } = await episodeNodes(PLAIN.id);
    const sampled = nodes.findIndex((n) => n.mask.some(Boolean));
    const text = await page.$$eval(`.turn[data-node="${sampled}"] .toks .tok`, (xs) => xs.map((x) => x.textContent));
    expect(text).toEqual(nodes[sampled]!.token_ids.map(String));
    // asked as optional: a 204, no 404 for the console to log (trial 9)
    const answers = await page.evaluate(
      (path) =>
        (globalThis as any).performance
          .getEntriesByType("resource")
          .filter((e: any) => e.name.includes(path))
          .map((e: any) => e.responseStatus),
      `/v1/runs/${BARE}/tokenizer`,
    );
    expect(answers).toEqual([204]);
    expect(errors).toEqual([]);
  });
});

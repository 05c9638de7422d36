// Every list's cursor, in one place: the position each list pages by (what a cursor holds), its
// text, and the seal a client sees. The objects answer positions as text and take them back as
// text (over RPC, not sealed); only the Worker seals and opens, so a client can neither read nor
// forge a position. Pure: WebCrypto only.
//
// Why sealed: a position (a row's sort key and id, a run's place, a finished-order number) may name
// a row the token does not cover, or count what it may not count. The relay hands it out encrypted
// and authenticated (AES-GCM), bound to what it was made for (the list, the run, the token's
// patterns), and takes back only what it sealed for the same, and only if it reads as that list's
// position (so a refusal is the Worker's 400, never an error inside an object).
//
// The keys follow from RELAY_SECRET (HKDF), so every isolate and every restart opens what another
// sealed; during a rollover the previous secret's keys still open. With auth off (loopback dev)
// they come from a fixed string: everything is visible there anyway. The nonce is synthetic (an
// HMAC of the binding and the position), so one position seals to one cursor, whichever isolate
// seals it (two answers name the same place the same way), and distinct positions never share a
// nonce. The texts and the binding are those of every earlier release, so a cursor a client holds
// across a deploy still opens (test/node/list-cursors.test.ts holds some sealed before).

import { RelayError } from "../http/errors.js";

/** A page of runs ends here: newest-created first. */
export interface RunPosition {
  created: number;
  run: string;
}

/** A page of a run's episodes ends here: the sort key's value (null: none, e.g. no reward) and the row's id. */
export interface RowPosition {
  key: number | null;
  id: string;
}

/** A page of groups ends here: the sort's key and the group's id. */
export type GroupPosition = [key: number | string, group: string];

/** A page of steps ends here (their order: step, then kind). */
export interface StepPosition {
  step: number;
  kind: string;
}

/** A page of search results ends here: the last episode's best bm25 score (as SQLite ranks it) and its id. */
export interface SearchPosition {
  score: number;
  id: string;
}

/** A page of the list across runs ends here. */
export interface AcrossPosition {
  /** Runs up to this one are done. */
  run: RunPosition | null;
  /** The run being listed, and where in it (its index's own position, as text). */
  current: RunPosition | null;
  inner: string | null;
}

/** Each list's position. */
export interface Positions {
  runs: RunPosition;
  across: AcrossPosition;
  episodes: RowPosition;
  groups: GroupPosition;
  /** The last task's name (tasks come by name). */
  tasks: string;
  steps: StepPosition;
  search: SearchPosition;
  /** The last episode's `finished_seq` (the bulk fetch's order). */
  finished: number;
}

export type ListName = keyof Positions;

export function badCursor(): RelayError {
  return new RelayError("bad_cursor", "cursor is not one this relay handed out", "cursor");
}

// ---- positions as text ----

interface Codec<P> {
  text(at: P): string;
  /** Null when `text` is not such a position. */
  read(text: string): P | null;
}

const isPair = (v: unknown, first: (x: unknown) => boolean): v is [unknown, string] =>
  Array.isArray(v) && v.length === 2 && first(v[0]) && typeof v[1] === "string";

const runOf = (v: unknown): RunPosition | null =>
  isPair(v, Number.isSafeInteger) ? { created: v[0] as number, run: v[1] } : null;

const CODECS: { [L in ListName]: Codec<Positions[L]> } = {
  runs: { text: (p) => base64Json([p.created, p.run]), read: (t) => runOf(fromBase64Json(t)) },
  across: {
    text: (p) => {
      const pos = (r: RunPosition | null) => (r === null ? null : [r.created, r.run]);
      return JSON.stringify({ r: pos(p.run), c: pos(p.current), i: p.inner });
    },
    read: (t) => {
      const v = parseJson(t) as { r?: unknown; c?: unknown; i?: unknown } | undefined;
      if (typeof v !== "object" || v === null) return null;
      const pos = (x: unknown) => (x === null || x === undefined ? null : (runOf(x) ?? undefined));
      const [run, current] = [pos(v.r), pos(v.c)];
      const inner = v.i;
      if (run === undefined || current === undefined) return null;
      if (!(inner === null || (typeof inner === "string" && CODECS.episodes.read(inner) !== null))) return null;
      return { run, current, inner };
    },
  },
  episodes: {
    text: (p) => base64Json([p.key, p.id]),
    read: (t) => {
      const v = fromBase64Json(t);
      return isPair(v, (x) => x === null || typeof x === "number") ? { key: v[0] as number | null, id: v[1] } : null;
    },
  },
  groups: {
    text: (p) => base64Json(p),
    read: (t) => {
      const v = fromBase64Json(t);
      return isPair(v, (x) => typeof x === "number" || typeof x === "string") ? (v as GroupPosition) : null;
    },
  },
  tasks: { text: (p) => p, read: (t) => t },
  steps: {
    text: (p) => base64Json([p.step, p.kind]),
    read: (t) => {
      const v = fromBase64Json(t);
      return isPair(v, Number.isSafeInteger) ? { step: v[0] as number, kind: v[1] } : null;
    },
  },
  search: {
    text: (p) => base64Json([p.score, p.id]),
    read: (t) => {
      const v = fromBase64Json(t);
      return isPair(v, (x) => typeof x === "number") ? { score: v[0] as number, id: v[1] } : null;
    },
  },
  finished: { text: (p) => String(p), read: (t) => (/^\d{1,15}$/.test(t) ? Number(t) : null) },
};

/** A list's position as the text an object answers (and a cursor seals). */
export function positionText<L extends ListName>(list: L, at: Positions[L]): string {
  return CODECS[list].text(at);
}

/** The position `text` holds; throws bad_cursor when it is not one of `list`. */
export function readPosition<L extends ListName>(list: L, text: string): Positions[L] {
  const at = CODECS[list].read(text);
  if (at === null) throw badCursor();
  return at;
}

function base64Json(value: unknown): string {
  return base64url(new TextEncoder().encode(JSON.stringify(value)));
}

/** The JSON a position's text holds (standard base64 is read too, as every earlier release did). */
function fromBase64Json(text: string): unknown {
  let bin: string;
  try {
    bin = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
  } catch {
    return undefined;
  }
  return parseJson(utf8(Uint8Array.from(bin, (c) => c.charCodeAt(0))));
}

function parseJson(text: string | null): unknown {
  try {
    return text === null ? undefined : JSON.parse(text);
  } catch {
    return undefined;
  }
}

function utf8(bytes: Uint8Array): string | null {
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    return null;
  }
}

// ---- the seal ----

/** A Web Crypto key (the runtime's, Node's or a browser's: the type is read off `crypto.subtle`). */
type CryptoKey = Awaited<ReturnType<typeof crypto.subtle.importKey>>;

export interface CursorKeys {
  /** Seals (the current secret's key), with the nonce key beside it. */
  seal: CryptoKey;
  nonce: CryptoKey;
  /** Open, in turn (the current key, then the previous secret's). */
  open: readonly CryptoKey[];
}

/**
 * What a cursor is bound to: the list, what else picks its rows (`detail`: a sort, a kind, a query
 * and filters), the run (or null), and the token's patterns as the Worker passes them on (null:
 * everything). A cursor opens only for the same.
 */
export interface CursorBinding {
  list: ListName;
  detail?: string;
  run: string | null;
  scope: readonly string[] | null;
}

/** Secrets used when auth is off: no secret to derive from. */
const AUTH_OFF = "episode-relay cursor key: auth is off";
const IV_BYTES = 12;

const derived = new Map<string, Promise<{ aead: CryptoKey; nonce: CryptoKey }>>();

function keysOf(secret: string): Promise<{ aead: CryptoKey; nonce: CryptoKey }> {
  let k = derived.get(secret);
  if (!k) {
    const enc = new TextEncoder();
    const salt = enc.encode("episode-relay cursors");
    k = crypto.subtle.importKey("raw", enc.encode(secret), "HKDF", false, ["deriveKey"]).then(async (base) => ({
      aead: await crypto.subtle.deriveKey(
        { name: "HKDF", hash: "SHA-256", salt, info: enc.encode("v1 aead") },
        base,
        { name: "AES-GCM", length: 256 },
        false,
        ["encrypt", "decrypt"],
      ),
      nonce: await crypto.subtle.deriveKey(
        { name: "HKDF", hash: "SHA-256", salt, info: enc.encode("v1 nonce") },
        base,
        { name: "HMAC", hash: "SHA-256", length: 256 },
        false,
        ["sign"],
      ),
    }));
    derived.set(secret, k);
  }
  return k;
}

/** The cursor keys of these secrets (the signing one first); none: auth is off. */
export async function cursorKeys(secrets: readonly string[]): Promise<CursorKeys> {
  const keys = await Promise.all((secrets.length > 0 ? secrets : [AUTH_OFF]).map(keysOf));
  return { seal: keys[0]!.aead, nonce: keys[0]!.nonce, open: keys.map((k) => k.aead) };
}

/** The additional data a cursor is sealed with (the text of every earlier release: `["groups:spread", run, scope]`). */
function boundTo(b: CursorBinding): string {
  const kind = b.detail === undefined ? b.list : `${b.list}:${b.detail}`;
  return JSON.stringify([kind, b.run, b.scope]);
}

/** The cursor a client is handed for a position's text (`positionText`). */
export async function sealCursor(keys: CursorKeys, binding: CursorBinding, text: string): Promise<string> {
  const enc = new TextEncoder();
  const bound = boundTo(binding);
  const iv = new Uint8Array(await crypto.subtle.sign("HMAC", keys.nonce, enc.encode(`${bound}\u0000${text}`))).slice(
    0,
    IV_BYTES,
  );
  const sealed = new Uint8Array(
    await crypto.subtle.encrypt(
      { name: "AES-GCM", iv, additionalData: enc.encode(bound) },
      keys.seal,
      enc.encode(text),
    ),
  );
  const out = new Uint8Array(IV_BYTES + sealed.length);
  out.set(iv);
  out.set(sealed, IV_BYTES);
  return base64url(out);
}

/**
 * The position text a cursor holds; throws bad_cursor for anything this relay did not seal for
 * `binding`, or that does not read as a position of its list.
 */
export async function openCursor(keys: CursorKeys, binding: CursorBinding, cursor: string): Promise<string> {
  const bytes = fromBase64url(cursor);
  if (bytes === null || bytes.length <= IV_BYTES + 16) throw badCursor();
  const iv = bytes.subarray(0, IV_BYTES);
  const data = bytes.subarray(IV_BYTES);
  const additionalData = new TextEncoder().encode(boundTo(binding));
  for (const key of keys.open) {
    let plain: ArrayBuffer;
    try {
      plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv, additionalData }, key, data);
    } catch {
      continue; // not this key's, or not for this binding
    }
    const text = utf8(new Uint8Array(plain));
    if (text === null) break;
    readPosition(binding.list, text);
    return text;
  }
  throw badCursor();
}

function base64url(bytes: Uint8Array): string {
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function fromBase64url(s: string): Uint8Array<ArrayBuffer> | null {
  if (!/^[A-Za-z0-9_-]*$/.test(s)) return null;
  try {
    return Uint8Array.from(atob(s.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}

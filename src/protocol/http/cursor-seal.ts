// Cursors as a client holds them: sealed, so it can neither read nor forge them. A list's position
// (a row's sort key and id, a run's place, a finished-order number) may name a row the token does
// not cover, or count what it may not count: the relay hands out the position encrypted and
// authenticated (AES-GCM), bound to what it was made for (the list, the run, the token's
// patterns), and takes back only what it sealed for the same. Pure: WebCrypto only.
//
// The keys follow from RELAY_SECRET (HKDF), so every isolate and every restart opens what another
// sealed; during a rollover the previous secret's keys still open. With auth off (loopback dev)
// they come from a fixed string: everything is visible there anyway. The nonce is synthetic (an
// HMAC of the binding and the position), so one position seals to one cursor, whichever isolate
// seals it (two answers name the same place the same way), and distinct positions never share a nonce.

import { badCursor } from "../registry/rows.js";

/** A Web Crypto key (the runtime's, Node's or a browser's: the type is read off `crypto.subtle`). */
type CryptoKey = Awaited<ReturnType<typeof crypto.subtle.importKey>>;

export interface CursorKeys {
  /** Seals (the current secret's key), with the nonce key beside it. */
  seal: CryptoKey;
  nonce: CryptoKey;
  /** Open, in turn (the current key, then the previous secret's). */
  open: readonly CryptoKey[];
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

/**
 * What a cursor is bound to: the list (`kind`), the run (or null), and the scope's patterns as the
 * Worker passes them on (null: everything). A cursor opens only for the same three.
 */
export function cursorBinding(kind: string, run: string | null, scope: readonly string[] | null): string {
  return JSON.stringify([kind, run, scope]);
}

export async function sealCursor(keys: CursorKeys, binding: string, raw: string): Promise<string> {
  const enc = new TextEncoder();
  const iv = new Uint8Array(await crypto.subtle.sign("HMAC", keys.nonce, enc.encode(`${binding}\u0000${raw}`))).slice(
    0,
    IV_BYTES,
  );
  const sealed = new Uint8Array(
    await crypto.subtle.encrypt(
      { name: "AES-GCM", iv, additionalData: enc.encode(binding) },
      keys.seal,
      enc.encode(raw),
    ),
  );
  const out = new Uint8Array(IV_BYTES + sealed.length);
  out.set(iv);
  out.set(sealed, IV_BYTES);
  return base64url(out);
}

/** The position a cursor holds; throws bad_cursor for anything this relay did not seal for `binding`. */
export async function openCursor(keys: CursorKeys, binding: string, cursor: string): Promise<string> {
  const bytes = fromBase64url(cursor);
  if (bytes === null || bytes.length <= IV_BYTES + 16) throw badCursor();
  const iv = bytes.subarray(0, IV_BYTES);
  const data = bytes.subarray(IV_BYTES);
  const additionalData = new TextEncoder().encode(binding);
  for (const key of keys.open) {
    try {
      const plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv, additionalData }, key, data);
      return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(plain);
    } catch {
      // not this key's, or not for this binding
    }
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

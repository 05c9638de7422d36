// `URL/ID` on the command line: `http://127.0.0.1:8787/run-1` or `http://host/v1/episodes/run-1`.
import { EPISODE_ID } from "../../src/http/route.js";

export interface Target {
  base: string;
  id: string;
}

export function parseTarget(arg: string): Target {
  let u: URL;
  try {
    u = new URL(arg);
  } catch {
    throw new Error(`expected URL/ID (e.g. http://127.0.0.1:8787/my-episode), got ${JSON.stringify(arg)}`);
  }
  const parts = u.pathname.split("/").filter(Boolean);
  const id = decodeURIComponent(parts.at(-1) ?? "");
  if (!EPISODE_ID.test(id)) throw new Error(`${JSON.stringify(id)} is not an episode id (1-128 of [A-Za-z0-9._:-])`);
  const prefix = parts.slice(0, -1);
  if (prefix.length >= 2 && prefix.at(-1) === "episodes" && prefix.at(-2) === "v1") prefix.splice(-2, 2);
  return { base: `${u.origin}${prefix.length ? `/${prefix.join("/")}` : ""}`, id };
}

/** A relay's base URL on the command line (`http://127.0.0.1:8787`, or with a path prefix), without a trailing `/`. */
export function parseBase(arg: string): string {
  let u: URL;
  try {
    u = new URL(arg);
  } catch {
    throw new Error(`expected the relay's URL (e.g. http://127.0.0.1:8787), got ${JSON.stringify(arg)}`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error(`expected an http(s) URL, got ${JSON.stringify(arg)}`);
  return `${u.origin}${u.pathname.replace(/\/+$/, "")}`;
}

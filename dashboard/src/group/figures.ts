// How the group page writes its numbers: rounded to a few digits, advantages with their sign.
import { fmtNumber } from "../dom.js";

export const num = (v: number | null | undefined, digits = 3) =>
  v === null || v === undefined ? "–" : fmtNumber(Math.round(v * 10 ** digits) / 10 ** digits);

export const signed = (v: number | null | undefined, digits = 3) =>
  v === null || v === undefined ? "–" : `${v > 0 ? "+" : v < 0 ? "−" : "±"}${num(Math.abs(v), digits)}`;

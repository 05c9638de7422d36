// A run index's `steps` table (INDEX_SCHEMA version 6): one row per training step and kind with its
// counters (steps.ts) as JSON, kept inside the caller's transactions by adding a row's or a
// group's part and taking the old one back; a step with nothing left in it goes. Pages are read by
// keyset on the primary key (step, kind), so a page reads a page of rows however large the run.

import { positionText, readPosition } from "../../protocol/registry/list-cursors.js";
import {
  applyStepGroup,
  applyStepRow,
  emptyStep,
  isEmptyStep,
  type StepCounters,
  type StepJson,
  type StepKey,
  type StepRow,
  type StepsPage,
  stepJson,
  stepKeyOf,
} from "../../protocol/registry/steps.js";

export class StepStore {
  /** Steps written since the last `drainTouched` (what the run sockets push next). */
  private readonly touched = new Map<string, StepKey>();

  constructor(private readonly sql: SqlStorage) {}

  /**
   * A row replaced (`old` taken back, `row` added; either may be null): one write when both count in
   * the same step, as nearly every update does (a row without a step counts in none).
   */
  replaceRow(old: StepRow | null, row: StepRow | null): void {
    const was = old ? stepKeyOf(old) : null;
    const now = row ? stepKeyOf(row) : null;
    if (was && now && was.step === now.step && was.kind === now.kind) {
      this.update(now, (c) => {
        applyStepRow(c, old!, -1);
        applyStepRow(c, row!, 1);
      });
      return;
    }
    if (was) this.update(was, (c) => applyStepRow(c, old!, -1));
    if (now) this.update(now, (c) => applyStepRow(c, row!, 1));
  }

  /** Add (1) or take back (-1) one complete group of step `key`. */
  addGroup(key: StepKey | null, zero: boolean, sign: 1 | -1): void {
    if (key) this.update(key, (c) => applyStepGroup(c, zero, sign));
  }

  get(key: StepKey): StepJson | null {
    const c = this.counters(key);
    return c ? stepJson(key, c) : null;
  }

  /** A page of steps by step then kind after `cursor`, of one kind or all (`kind` null). */
  page(kind: string | null, limit: number, cursor: string | null): StepsPage {
    const where: string[] = [];
    const args: SqlStorageValue[] = [];
    if (kind !== null) {
      where.push("kind = ?");
      args.push(kind);
    }
    if (cursor !== null) {
      const after = readPosition("steps", cursor);
      where.push("(step, kind) > (?, ?)");
      args.push(after.step, after.kind);
    }
    const rows = this.sql
      .exec<{ step: number; kind: string; counters: string }>(
        `SELECT step, kind, counters FROM steps ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY step, kind LIMIT ?`,
        ...args,
        limit + 1,
      )
      .toArray();
    const page = rows.slice(0, limit);
    const last = page.at(-1);
    return {
      steps: page.map((r) => stepJson({ step: r.step, kind: r.kind }, JSON.parse(r.counters) as StepCounters)),
      cursor: rows.length > limit && last ? positionText("steps", last) : null,
    };
  }

  /** The steps written since `clearTouched`: as they stand now, and the ones that went (by step, then kind). */
  touchedSteps(): { steps: StepJson[]; gone: Array<Pick<StepJson, "step" | "kind">> } {
    const steps: StepJson[] = [];
    const gone: Array<Pick<StepJson, "step" | "kind">> = [];
    const keys = [...this.touched.values()].sort(
      (a, b) => a.step - b.step || (a.kind < b.kind ? -1 : a.kind > b.kind ? 1 : 0),
    );
    for (const key of keys) {
      const s = this.get(key);
      if (s) steps.push(s);
      else gone.push({ step: key.step, kind: key.kind === "" ? null : key.kind });
    }
    return { steps, gone };
  }

  clearTouched(): void {
    this.touched.clear();
  }

  private counters(key: StepKey): StepCounters | null {
    const r = this.sql
      .exec<{ counters: string }>("SELECT counters FROM steps WHERE step = ? AND kind = ?", key.step, key.kind)
      .toArray()[0];
    return r ? (JSON.parse(r.counters) as StepCounters) : null;
  }

  /** A step's counters changed by `change`: written (or gone) only when they moved, updated in place when held. */
  private update(key: StepKey, change: (c: StepCounters) => void): void {
    const held = this.counters(key);
    const was = held === null ? null : JSON.stringify(held);
    const c = held ?? emptyStep();
    change(c);
    const now = JSON.stringify(c);
    if (isEmptyStep(c)) {
      if (held === null) return;
      this.sql.exec("DELETE FROM steps WHERE step = ? AND kind = ?", key.step, key.kind);
    } else if (now === was) return;
    else
      this.sql.exec(
        "INSERT INTO steps (step, kind, counters) VALUES (?, ?, ?) ON CONFLICT (step, kind) DO UPDATE SET counters = excluded.counters",
        key.step,
        key.kind,
        now,
      );
    this.touched.set(`${key.step}\u0000${key.kind}`, key);
  }
}

import { describe, expect, it } from "vitest";
import { AVOID_FROM, AVOID_TO, alarmTime, armAlarm, EARLY_ARM } from "../../src/objects/storage/alarm-window.js";

const NOW = 1_800_000_000_000;

describe("alarm window (workerd's alarm-vs-eviction crash)", () => {
  it("keeps alarms armed less than AVOID_FROM or at least AVOID_TO ahead", () => {
    for (const ahead of [-5_000, 0, 1, 1_000, 30_000, AVOID_FROM - 1, AVOID_TO, AVOID_TO + 1, 600_000, 86_400_000]) {
      expect(alarmTime(NOW + ahead, NOW)).toBe(NOW + ahead);
    }
  });

  it("arms an alarm that would fall in the window sooner, never later", () => {
    for (const ahead of [AVOID_FROM, 61_000, 90_000, 120_000, AVOID_TO - 1]) {
      const at = alarmTime(NOW + ahead, NOW);
      expect(at).toBe(NOW + EARLY_ARM);
      expect(at - NOW).toBeLessThan(AVOID_FROM);
    }
  });

  it("reaches every deadline in the window by re-arming, each arm outside it", () => {
    for (let ahead = AVOID_FROM; ahead < AVOID_TO; ahead += 1_337) {
      const due = NOW + ahead;
      let now = NOW;
      let wakes = 0;
      for (;;) {
        const at = alarmTime(due, now);
        expect(at - now < AVOID_FROM || at - now >= AVOID_TO).toBe(true);
        expect(at).toBeLessThanOrEqual(due);
        now = at; // the alarm fires; the object arms what is left
        wakes++;
        if (at === due) break;
      }
      expect(wakes).toBeLessThanOrEqual(3);
    }
  });

  it("armAlarm hands the storage the adjusted time", async () => {
    const armed: number[] = [];
    const storage = { setAlarm: async (t: number | Date) => void armed.push(Number(t)) };
    const before = Date.now();
    await armAlarm(storage as never, before + 100_000);
    await armAlarm(storage as never, before + 200_000);
    expect(armed[0]! - before).toBeGreaterThanOrEqual(EARLY_ARM);
    expect(armed[0]! - before).toBeLessThan(AVOID_FROM);
    expect(armed[1]).toBe(before + 200_000);
  });
});

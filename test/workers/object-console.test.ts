// What a Durable Object prints reaches the test run even when the object is reset right after, and
// the run still ends. vitest-pool-workers hands an object's console output to vitest from the
// object's own I/O context; without patches/@cloudflare+vitest-pool-workers+0.15.1.patch it went as
// a subrequest from that object, lost with it if the object was reset (abortAllDurableObjects, a
// crash test), and vitest waits at the end of the run for every call it made: the run never ended.
// test/node/workers-run-end.test.ts runs this file alone and checks that it ends and prints the lines.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { freshId } from "./support.js";

describe("an object's console output", () => {
  it("is printed, the object reset at once after printing it", async () => {
    const stub = env.EPISODES.getByName(freshId("console"));
    const crashed = runInDurableObject(stub, async (_instance, ctx) => {
      console.log("object-console: printed by an object reset right after");
      await Promise.resolve(); // vitest sends what was printed in a microtask
      ctx.abort("object-console: reset after printing");
    });
    await expect(crashed).rejects.toThrow(/reset after printing/);
    // an object that lives on prints too
    const again = await runInDurableObject(env.EPISODES.getByName(freshId("console")), () => {
      console.log("object-console: printed by an object that lives on");
      return "alive";
    });
    expect(again).toBe("alive");
  });
});

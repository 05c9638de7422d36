// The objects' RPC answers are disposed at once (src/objects/rpc-answer.ts): their data stays.
import { describe, expect, it } from "vitest";
import { rpcAnswer } from "../../src/objects/rpc-answer.js";

describe("an RPC answer", () => {
  it("that is an object is disposed once, its data still readable", async () => {
    let disposed = 0;
    const answer = { applied: true, view: { head: 7 }, [Symbol.dispose]: () => disposed++ };
    const got = await rpcAnswer(Promise.resolve(answer));
    expect(disposed).toBe(1);
    expect(got).toBe(answer);
    expect(got.view.head).toBe(7);
  });

  it("that is not an object, or has nothing to dispose, comes as it is; a failed call fails", async () => {
    expect(await rpcAnswer(Promise.resolve(3))).toBe(3);
    expect(await rpcAnswer(Promise.resolve(null))).toBe(null);
    expect(await rpcAnswer(Promise.resolve(undefined))).toBe(undefined);
    expect(await rpcAnswer(Promise.resolve({ plain: 1 }))).toEqual({ plain: 1 });
    await expect(rpcAnswer(Promise.reject(new Error("hub went away")))).rejects.toThrow("hub went away");
  });
});

// Relay mode of the conformance CLI (`npm run conformance -- --relay URL PATH...`): run one
// golden case against a running relay and report the first difference, like `runCaseLocally`.
//
// Not implemented yet. The CLI (tools/conformance.ts) imports this module only when `--relay`
// is given, calls `runCaseOnRelay` once per case, in order, and prints `ok NAME` when it
// resolves to undefined, `FAIL NAME: <string>` otherwise. A rejection with NotImplementedError
// stops the run with exit status 2; any other rejection is a FAIL for that case.

import type { RelayOptions } from "./args";
import type { GoldenCase } from "./cases";

export type { RelayOptions } from "./args";

/** Thrown by a relay-mode feature that does not exist yet; the CLI turns it into exit 2. */
export class NotImplementedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NotImplementedError";
  }
}

/** Undefined when the case passes on the relay, else the first difference as one line. */
export async function runCaseOnRelay(c: GoldenCase, opts: RelayOptions): Promise<string | undefined> {
  void c;
  void opts;
  throw new NotImplementedError("relay mode (--relay) is not implemented yet");
}

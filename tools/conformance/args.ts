// Command line of `npm run conformance -- [options] PATH...` (tools/conformance.ts).
//
// Local mode (the default) runs each case through the project's own assembly. Relay mode
// (`--relay URL`) runs it against a running relay; its options only mean something there.

import { parseOptions, UsageError } from "../parse-options.js";

export { UsageError };

export type IngestMode = "http" | "ws";

/**
 * Where a trainer's dispatch identity rides (tools/conformance/local.ts `WithDispatch`): none, every envelope, or the
 * opening frames' own key.
 */
export type DispatchMode = "none" | "envelope" | "delta";

/** What relay mode needs; handed to `runCaseOnRelay` (tools/conformance/relay.ts) as is. */
export interface RelayOptions {
  /** Base URL of the relay, e.g. `http://127.0.0.1:8787` (no trailing slash). */
  relay: string;
  /** How frames are sent: `POST .../deltas` per frame, or one `GET .../ingest` WebSocket. */
  ingest: IngestMode;
  /** WebSocket watchers that follow each episode while it is ingested (0 = none). */
  watchers: number;
  /** Bearer token for the relay, if it wants one. */
  token?: string;
  /** A trainer's identity with each case's frames (the bytes must not change). */
  dispatch?: DispatchMode;
}

export interface CliOptions {
  help: boolean;
  paths: string[];
  /** Set when `--relay` was given: relay mode. Undefined: local mode. */
  relay?: RelayOptions;
  /** A trainer's identity with each case's frames, in either mode. */
  dispatch: DispatchMode;
}

export const USAGE = `usage: npm run conformance -- [options] PATH...

  PATH              a golden case file (NAME.msgpack) or a directory of them
                    (format: test/fixtures/golden/README.md)

  Local mode (default): each case runs through the project's own assembly, frames wrapped
  in producer envelopes; checkpoints and the finished episode are compared byte for byte.

  --relay URL       run the cases against the relay at URL instead (relay mode)
  --ingest http|ws  relay mode: send frames by POST .../deltas or over the ingest WebSocket
                    (default http)
  --watchers K      relay mode: K WebSocket watchers follow each episode (default 0)
  --token T         relay mode: bearer token sent to the relay
  --dispatch envelope|delta
                    send a trainer's dispatch identity with the frames (prime-rl's shape): on
                    every envelope, or as the top-level key of each frame that opens a trace;
                    the bytes must stay the golden ones and the identity must arrive
  -h, --help        this text

Prints "ok NAME" or "FAIL NAME: <first difference>" per case, then "N passed, N failed".
Exit status: 0 all passed, 1 some case failed, 2 usage error.`;

const VALUE_OPTIONS = ["relay", "ingest", "watchers", "token", "dispatch"] as const;

/** Parse `argv` (without node and the script). Throws UsageError. */
export function parseArgs(argv: readonly string[]): CliOptions {
  const { values, positionals, tokens } = parseOptions({
    args: argv,
    options: {
      help: { type: "boolean", short: "h" },
      relay: { type: "string" },
      ingest: { type: "string" },
      watchers: { type: "string" },
      token: { type: "string" },
      dispatch: { type: "string" },
    },
    allowPositionals: true,
    tokens: true,
  });
  for (const name of VALUE_OPTIONS) {
    if (tokens.filter((t) => t.kind === "option" && t.name === name).length > 1)
      throw new UsageError(`--${name} given twice`);
  }
  const help = values.help ?? false;
  const paths = positionals;
  const dispatch = values.dispatch ?? "none";
  if (dispatch !== "none" && dispatch !== "envelope" && dispatch !== "delta") {
    throw new UsageError(`--dispatch: expected envelope or delta, got ${JSON.stringify(dispatch)}`);
  }
  if (help) return { help, paths, dispatch };

  const relay = values.relay;
  if (relay === undefined) {
    for (const name of ["ingest", "watchers", "token"] as const) {
      if (values[name] !== undefined) throw new UsageError(`--${name} only applies to relay mode (--relay URL)`);
    }
  }
  if (paths.length === 0) throw new UsageError("no PATH given");
  if (relay === undefined) return { help, paths, dispatch };

  let url: URL;
  try {
    url = new URL(relay);
  } catch {
    throw new UsageError(`--relay: not a URL: ${JSON.stringify(relay)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new UsageError(`--relay: expected an http(s) URL, got ${JSON.stringify(relay)}`);
  const ingest = values.ingest ?? "http";
  if (ingest !== "http" && ingest !== "ws")
    throw new UsageError(`--ingest: expected http or ws, got ${JSON.stringify(ingest)}`);
  const watchersText = values.watchers ?? "0";
  if (!/^(0|[1-9][0-9]{0,3})$/.test(watchersText))
    throw new UsageError(`--watchers: expected a whole number 0..9999, got ${JSON.stringify(watchersText)}`);
  const token = values.token;
  if (token !== undefined && token === "") throw new UsageError("--token: empty");
  return {
    help,
    paths,
    dispatch,
    relay: {
      relay: relay.replace(/\/+$/, ""),
      ingest,
      watchers: Number(watchersText),
      dispatch,
      ...(token !== undefined ? { token } : {}),
    },
  };
}

// The run's tokenizer (GET /v1/runs/{run}/tokenizer, kept by its producer), turned into the text
// piece of each token id. Asked only once a token signal is shown: the library
// (@huggingface/tokenizers) is its own chunk, imported then, so pages without tokens load nothing.
import { authHeaders, relayUrl } from "../api.js";
import { piecesOf } from "./pieces.js";

export type DecoderState =
  | { kind: "loading" }
  /** The run has no tokenizer (404), or this token may not read it. */
  | { kind: "none"; why: string }
  | { kind: "ready"; pieces: (ids: readonly number[]) => string[] };

export class RunDecoder {
  state: DecoderState = { kind: "loading" };
  private started = false;

  constructor(
    private readonly run: string,
    private readonly changed: () => void,
  ) {}

  /** The state now; the first call starts the fetch and the library's import. */
  get(): DecoderState {
    if (!this.started) {
      this.started = true;
      void this.load();
    }
    return this.state;
  }

  private async load(): Promise<void> {
    try {
      // optional=1: none is a 204, not a 404 the browser would log as an error
      const path = `/v1/runs/${encodeURIComponent(this.run)}/tokenizer?optional=1`;
      const res = await fetch(new URL(path, relayUrl), {
        headers: { accept: "application/json", ...authHeaders() },
      });
      if (res.status !== 200) {
        await res.body?.cancel();
        this.state = {
          kind: "none",
          why:
            res.status === 204 || res.status === 404
              ? "no tokenizer for this run: its producer sends one with tokenizer= (docs/python.md)"
              : `the tokenizer could not be read (${res.status})`,
        };
        return;
      }
      const [json, lib] = await Promise.all([res.json(), import("@huggingface/tokenizers")]);
      const tokenizer = new lib.Tokenizer(json as object, {});
      const decode = (ids: number[]) => tokenizer.decode(ids, { skip_special_tokens: false });
      const cache = new Map<number, string>();
      this.state = {
        kind: "ready",
        pieces: (ids) => {
          // most ids stand alone: decode each once; the rare partial characters go through piecesOf
          const each = ids.map((id) => {
            let p = cache.get(id);
            if (p === undefined) cache.set(id, (p = decode([id])));
            return p;
          });
          return each.some((p) => p.includes("\uFFFD")) ? piecesOf(decode, ids) : each;
        },
      };
    } catch (e) {
      this.state = {
        kind: "none",
        why: `the tokenizer could not be used: ${e instanceof Error ? e.message : String(e)}`,
      };
    } finally {
      this.changed();
    }
  }
}

// Where a run's tokenizer.json lives in R2 (the ARCHIVE bucket): the Worker keeps and serves it
// (src/worker/run-routes.ts), the run's index deletes it when it frees the run (episode-index.ts).

/** The R2 key of a run's tokenizer.json (run names never hold `/`). */
export function tokenizerKey(run: string): string {
  return `tokenizers/${run}`;
}

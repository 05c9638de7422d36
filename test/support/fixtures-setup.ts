// Global setup of the Node-side test projects: a checkout without its golden fixtures stops here
// with one message, instead of failing every test that reads a case. It also names the run's
// shared Worker bundle (scripts/worker-bundle.mjs), unless `npm test` named one already: the
// first relay a test file starts bundles the Worker, every other file's relay reuses it.
import { shareBundle } from "../../scripts/worker-bundle.mjs";
import { fixturesProblem } from "../../tools/conformance/cases.js";

export default function setup(): () => void {
  const problem = fixturesProblem();
  if (problem) throw new Error(problem);
  return shareBundle();
}

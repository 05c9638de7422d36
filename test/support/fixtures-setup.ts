// Global setup of the Node-side test projects: a checkout without its golden fixtures stops here
// with one message, instead of failing every test that reads a case.
import { fixturesProblem } from "../../tools/conformance/cases.js";

export default function setup(): void {
  const problem = fixturesProblem();
  if (problem) throw new Error(problem);
}

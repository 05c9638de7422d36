// Global setup of the node suite: dashboard/dist built now if an input changed since its last
// build. The suite's files run two at a time, and a build during the run (npm start's prestart,
// a relay that finds no dashboard) would rewrite dashboard/dist while another file's relay
// serves or bundles it. Up to date, this only hashes the inputs.
import { buildDashboard } from "../../scripts/build-dashboard.mjs";

export default async function setup(): Promise<void> {
  await buildDashboard({ ifStale: true });
}

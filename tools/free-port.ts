// A free loopback port for tests and benches: scripts/free-port.mjs (shared with the launcher).
export { freePort } from "../scripts/free-port.mjs";

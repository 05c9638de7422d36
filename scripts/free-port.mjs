// A free TCP port on loopback, for a relay or a page server a test, bench or the launcher starts
// (scripts/relay.mjs; tools/free-port.ts for TypeScript). The port is free when asked; binding 0
// directly is not possible where workerd needs the number first. It is drawn below the kernel's
// ephemeral range (Linux: 32768-60999): a port kept for later (a tier restarted on its port, a
// relay restarted where its clients expect it) is never handed meanwhile to another process's
// outgoing connection or port-0 bind, as an ephemeral one can be when suites run side by side.
import { createServer } from "node:net";

const LOW = 20_000;
const HIGH = 32_767;

/** @returns {Promise<number>} */
export async function freePort() {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = LOW + Math.floor(Math.random() * (HIGH - LOW + 1));
    if ((await listenable("127.0.0.1", port)) === null) return port;
  }
  throw new Error(`no free port on 127.0.0.1 between ${LOW} and ${HIGH} after 100 draws`);
}

/**
 * Null when `port` can be listened on at `host` now (and is let go again), else why not.
 * @param {string} host
 * @param {number} port
 * @returns {Promise<NodeJS.ErrnoException | null>}
 */
export function listenable(host, port) {
  return new Promise((done) => {
    const s = createServer();
    s.once("error", done);
    s.listen(port, host, () => s.close(() => done(null)));
  });
}

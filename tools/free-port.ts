// A free TCP port on loopback, for a relay or a page server a test or bench starts. (The port is
// free when asked; binding 0 directly is not possible where wrangler or workerd need the number first.)
// It is drawn below the kernel's ephemeral range (Linux: 32768-60999): a port a test keeps for later
// (a tier started after its router, a relay restarted where its clients expect it) is never handed
// meanwhile to another process's outgoing connection or port-0 bind, as an ephemeral one can be when
// suites run side by side.

import { createServer } from "node:net";

const LOW = 20_000;
const HIGH = 32_767;

export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = LOW + Math.floor(Math.random() * (HIGH - LOW + 1));
    if (await bindable(port)) return port;
  }
  throw new Error(`no free port on 127.0.0.1 between ${LOW} and ${HIGH} after 100 draws`);
}

/** Whether `port` can be listened on now (and is let go again). */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

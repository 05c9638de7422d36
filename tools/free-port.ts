// A free TCP port on loopback, for a relay or a page server a test or bench starts. (The port is
// free when asked; binding 0 directly is not possible where wrangler or workerd need the number first.)

import { createServer, type AddressInfo } from "node:net";

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

// Runs before each Node-side test file (setupFiles in vitest.node.config.ts). The tests' own fetches
// open a connection per request: a kept-alive connection that the relay closed as idle while this
// process was busy (two test processes and two other suites share 2 cores) failed the next request
// on it with "other side closed" (seen in bulk.test and token.test). The relay's clients retry such
// trouble (clients/typescript, the CLI); a test's bare fetch does not, and it is not what the tests are about.
import { Agent, setGlobalDispatcher } from "undici";

// pipelining 0: no keep-alive (undici's Agent documents it so)
setGlobalDispatcher(new Agent({ pipelining: 0 }));

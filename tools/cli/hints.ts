// How the CLI's own users pass what a refusal asks for (the library says `{ token }`).
import type { Hints } from "../../clients/typescript/relay-fetch.js";

export const CLI_HINTS: Hints = { token: "pass --token T (or set RELAY_TOKEN)" };

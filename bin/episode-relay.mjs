#!/usr/bin/env node
// The `episode-relay` command (package.json "bin"): runs tools/cli/main.ts through tsx.
import { register } from "tsx/esm/api";

register();
await import("../tools/cli/main.ts");

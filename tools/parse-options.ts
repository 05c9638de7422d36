// Command lines of the tools and the bench: node:util `parseArgs` in strict mode, its errors
// turned into a UsageError whose message names the option as it was typed.

import { type ParseArgsConfig, parseArgs } from "node:util";

/** A command line that cannot be run (the caller prints the message and its usage, exits 2). */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** `parseArgs(config)` with `strict: true`. Throws UsageError. */
export function parseOptions<const T extends Omit<ParseArgsConfig, "strict">>(
  config: T,
): ReturnType<typeof parseArgs<T & { strict: true }>> {
  try {
    return parseArgs({ ...config, strict: true as const });
  } catch (e) {
    if (!String((e as { code?: unknown }).code).startsWith("ERR_PARSE_ARGS_")) throw e;
    throw new UsageError(refusal(config) ?? (e as Error).message);
  }
}

/**
 * What strict parsing refused (the first unknown option, missing value, value given to a flag or unwanted argument),
 * naming it as typed.
 */
function refusal(config: Omit<ParseArgsConfig, "strict">): string | undefined {
  const options = config.options ?? {};
  const { tokens } = parseArgs({ ...config, strict: false, allowPositionals: true, tokens: true });
  for (const t of tokens) {
    if (t.kind === "positional" && !config.allowPositionals) return `unexpected argument ${t.value}`;
    if (t.kind !== "option") continue;
    const type = Object.hasOwn(options, t.name) ? options[t.name]!.type : undefined;
    if (type === undefined) return `unknown option ${t.rawName}`;
    if (type === "boolean" && t.value !== undefined) return `${t.rawName} takes no value`;
    if (type === "string" && (t.value === undefined || (!t.inlineValue && t.value.startsWith("--"))))
      return `${t.rawName} needs a value`;
    // strict parseArgs reads `--opt -x` as a forgotten value; `--opt=-x` passes one
    if (type === "string" && !t.inlineValue && t.value!.length > 1 && t.value!.startsWith("-")) {
      return `${t.rawName} needs a value (write ${t.rawName}=${t.value} to pass ${t.value})`;
    }
  }
  return undefined;
}

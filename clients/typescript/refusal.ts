// The error every client call throws when the relay refuses it (shared by watch.ts and bulk.ts).

/**
 * The relay refused the watch (or a request): retrying cannot help, the caller must change
 * something. `status` is the HTTP status, `code` the relay's error code (`unauthorized`,
 * `forbidden`, `not_found`, `bad_episode_id`, `auth_not_configured`, ...), `message` says what to do,
 * `field` the parameter the relay found at fault when it names one (`bad_filter`: `reward`, ...).
 */
export class RelayRefusal extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field?: string,
  ) {
    super(message);
    this.name = "RelayRefusal";
  }
}

/** The relay's error code, message and field from a refused answer's JSON body (or what stands in for them). */
export async function refusalBody(res: Response): Promise<{ code: string; message: string; field?: string }> {
  let code = `http_${res.status}`;
  let message = res.statusText || "not an Episode Relay answer";
  let field: string | undefined;
  try {
    const body = (await res.json()) as { error?: unknown; message?: unknown; field?: unknown };
    if (typeof body.error === "string") code = body.error;
    if (typeof body.message === "string") message = body.message;
    if (typeof body.field === "string") field = body.field;
  } catch {
    // not JSON (e.g. a web page): not the relay's answer
    if (res.ok) message = "the address answered, but not as an Episode Relay";
  }
  return field === undefined ? { code, message } : { code, message, field };
}

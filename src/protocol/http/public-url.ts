// PUBLIC_URL ([vars]): the origin people reach this relay at (a deploy on its own domain, a local
// relay behind a tunnel). Links the relay makes for someone else (share links) start with it;
// unset, they start with the request's own origin, which is right only when whoever asked reached
// the relay at an address others can use too. Pure: no runtime imports.

/**
 * The origin links are made with: PUBLIC_URL's (an http(s) origin, a trailing `/` allowed), else the request's. A
 * PUBLIC_URL that is not one throws: a link to somewhere else would be worse than no link.
 */
export function publicOrigin(value: string | undefined, request: URL): string {
  const raw = (value ?? "").trim();
  if (raw === "") return request.origin;
  let url: URL | null = null;
  try {
    url = new URL(raw);
  } catch {
    // said below
  }
  if (
    !url ||
    (url.protocol !== "https:" && url.protocol !== "http:") ||
    url.username ||
    url.password ||
    url.pathname !== "/" ||
    url.search ||
    url.hash
  ) {
    throw new Error(
      `PUBLIC_URL ${JSON.stringify(raw)} is not an http(s) origin such as https://relay.example.com (no path, query or fragment)`,
    );
  }
  return url.origin;
}

// The run page's "Share read-only link", offered to an admin token: the relay makes a watcher token
// for the run (`POST /v1/runs/{run}/share`), and the link carries it in its fragment
// (`/runs/{run}#token=…`), which browsers never send to a server; whoever opens it sees the run,
// read-only, until the token expires. The relay makes the link itself, on its public origin
// (PUBLIC_URL), so a link made on a local relay behind a tunnel names the tunnel.
import { authHeaders, relayUrl, tokenRole } from "./api.js";
import { h } from "./dom.js";

export function shareLink(run: string): HTMLElement | null {
  if (tokenRole() !== "admin") return null;
  const button = h("button.btn", { type: "button", id: "share-run" }, "Share read-only link");
  const field = h("input.share-url", {
    type: "text",
    id: "share-url",
    readonly: true,
    "aria-label": "read-only link to this run",
    hidden: true,
  });
  const note = h("span.share-note.muted", { id: "share-note", role: "status" });
  button.addEventListener("click", async () => {
    button.disabled = true;
    note.textContent = "";
    try {
      const res = await fetch(new URL(`/v1/runs/${encodeURIComponent(run)}/share`, relayUrl), {
        method: "POST",
        headers: { accept: "application/json", ...authHeaders() },
      });
      const body = (await res.json().catch(() => null)) as {
        token?: string | null;
        expires?: string | null;
        url?: string;
        message?: string;
      } | null;
      if (!res.ok || body === null) throw new Error(body?.message ?? `${res.status} ${res.statusText}`);
      if (!body.url) throw new Error("the relay's answer has no link");
      field.value = body.url;
      field.hidden = false;
      field.select();
      note.textContent = body.expires
        ? `read-only, until ${new Date(body.expires).toLocaleString()}`
        : "auth is off here: the link needs no token";
      await navigator.clipboard?.writeText(field.value).then(
        () => (note.textContent += " · copied"),
        () => {},
      );
    } catch (e) {
      note.textContent = `no link: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      button.disabled = false;
    }
  });
  return h("div.share", { id: "run-share" }, button, field, note);
}

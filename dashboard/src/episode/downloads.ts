// The episode's download buttons: the episode as the relay serves it, msgpack (the wire form) or
// its JSON view. Fetched with the token (a plain link can send neither it nor an Accept header)
// and saved through a Blob URL.
import { authHeaders, relayUrl } from "../api.js";
import { h } from "../dom.js";

type Format = "json" | "msgpack";

export function downloadButtons(id: string): HTMLElement {
  const note = h("span.download-note.muted.small", { id: "download-note", role: "status" });
  const group = h(
    "div.downloads",
    { role: "group", "aria-label": "download the episode" },
    h("span.muted.small", null, "Download"),
    h(
      "button.btn",
      {
        type: "button",
        id: "download-msgpack",
        "data-format": "msgpack",
        title: "GET /v1/episodes/{id} as msgpack (the wire form)",
      },
      "msgpack",
    ),
    h(
      "button.btn",
      { type: "button", id: "download-json", "data-format": "json", title: "GET /v1/episodes/{id} as its JSON view" },
      "JSON",
    ),
    note,
  );
  for (const b of group.querySelectorAll<HTMLButtonElement>("button[data-format]")) {
    b.addEventListener("click", () => void download(id, b, b.dataset.format === "json" ? "json" : "msgpack", note));
  }
  return group;
}

async function download(id: string, button: HTMLButtonElement, format: Format, note: HTMLElement): Promise<void> {
  button.disabled = true;
  note.textContent = "";
  try {
    const res = await fetch(new URL(`/v1/episodes/${encodeURIComponent(id)}`, relayUrl), {
      headers: { accept: format === "json" ? "application/json" : "application/msgpack", ...authHeaders() },
    });
    if (!res.ok) {
      const body = (await res.json().catch(() => null)) as { message?: string } | null;
      throw new Error(body?.message ?? `${res.status} ${res.statusText}`);
    }
    save(await res.blob(), `${id.replace(/[^\w.-]+/g, "_")}.${format}`);
  } catch (e) {
    note.textContent = `Download failed: ${e instanceof Error ? e.message : String(e)}`;
  } finally {
    button.disabled = false;
  }
}

/** Hand a blob to the browser's download through a hidden link (its URL freed a little later). */
function save(blob: Blob, filename: string): void {
  const url = URL.createObjectURL(blob);
  const a = h("a", { href: url, download: filename, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

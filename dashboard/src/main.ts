// The dashboard: `/` lists episodes (live, from the episode index's socket), `/episodes/{id}`
// shows one episode (live, with the TypeScript watcher client). No framework: plain DOM.
import "./style.css";
import { takeTokenFromUrl } from "./api.js";
import { mountEpisode } from "./episode.js";
import { mountList } from "./list.js";
import { shell } from "./shell.js";

let unmount: (() => void) | null = null;

function route(): void {
  unmount?.();
  unmount = null;
  const root = document.getElementById("app")!;
  const s = shell(root, route);
  const m = /^\/episodes\/([^/]+)\/?$/.exec(location.pathname);
  if (m) {
    const id = decodeURIComponent(m[1]!);
    document.title = `${id} · Episode Relay`;
    unmount = mountEpisode(s, id);
  } else {
    document.title = "Episodes · Episode Relay";
    unmount = mountList(s);
  }
}

takeTokenFromUrl();
route();
window.addEventListener("popstate", route);
// in-app links: no full page load
document.addEventListener("click", (e) => {
  const a = (e.target as Element | null)?.closest?.("a[data-nav]") as HTMLAnchorElement | null;
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) return;
  e.preventDefault();
  history.pushState(null, "", a.getAttribute("href")!);
  route();
});
